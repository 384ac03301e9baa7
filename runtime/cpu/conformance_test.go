package cpu_test

import (
	"testing"

	"github.com/zrtdev/zrt/internal/conformance"
	"github.com/zrtdev/zrt/runtime"
)

// TestConformance runs the tiers' conformance suite on T-CPU itself, with
// bundles of several variants, a small page pool and one worker: the
// variant a step runs on, the pages a sequence gets and the thread count
// must not change a single logit.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Tier{
		Target:  "cpu",
		Options: runtime.Options{Tier: "cpu", Threads: 1},
		Config:  "decode_slots = [1, 2, 4]\nprefill_rows = [8, 32, 128]\nkv_pages = 64\n",
	})
}
