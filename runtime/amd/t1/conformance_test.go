package t1_test

import (
	"testing"

	"github.com/zrtdev/zrt/internal/conformance"
	"github.com/zrtdev/zrt/runtime"
)

// TestConformance runs the tiers' conformance suite on T1 over the
// simulated KFD (ZRT_TIER=t1 ZRT_KFD=sim), as every tier runs it: each
// shared reference teacher-forced through an amd:gfx1201 bundle and a
// T-CPU bundle of the same model. The simulator runs T-CPU kernels, with
// the oracle's worker count, so the logits must be identical.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	conformance.Run(t, conformance.Tier{
		Target:        "amd:gfx1201",
		Options:       runtime.Options{Tier: "t1", KFD: "sim", Threads: 2},
		OracleThreads: 2,
	})
}
