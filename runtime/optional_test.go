package runtime_test

import (
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/cpu"
	"github.com/zrtdev/zrt/runtime/cuda"
	"github.com/zrtdev/zrt/runtime/tp"
)

// The program finds a tier's optional powers by type assertion, so a
// signature that drifts from the interface turns the power off without
// a word (a tensor-parallel set's masks went to the host that way):
// these hold the tiers that have them to the interfaces at compile time.
var (
	_ runtime.Masker       = (*tp.Tier)(nil)
	_ runtime.Fetcher      = (*tp.Tier)(nil)
	_ runtime.Inspector    = (*tp.Tier)(nil)
	_ runtime.Masker       = (*cuda.Tier)(nil)
	_ runtime.Fetcher      = (*cuda.Tier)(nil)
	_ runtime.Inspector    = (*cuda.Tier)(nil)
	_ runtime.RegionCopier = (*cuda.Tier)(nil)
	_ runtime.RegionCopier = (*cpu.Tier)(nil)
	_ runtime.RegionMover  = (*cuda.Tier)(nil)
	_ runtime.RegionMover  = (*cpu.Tier)(nil)
	_ runtime.RegionStager = (*cuda.Tier)(nil)
	_ runtime.Inspector    = (*cpu.Tier)(nil)
)
