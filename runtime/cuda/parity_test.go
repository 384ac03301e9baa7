package cuda_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/internal/conformance"
	"github.com/zrtdev/zrt/kernels"
	kcuda "github.com/zrtdev/zrt/kernels/cuda"
	"github.com/zrtdev/zrt/kernels/cuda/ptx"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
)

// Tolerance of T-CUDA against T-CPU, in logit units, relative to the
// largest |logit| of the step (at least 1). Both tiers decode weights
// bit-identically and round activations to the same Q8/F16 blocks before
// each product (the integer block sums are the same too). What differs:
// float summation order (per-lane partial sums and a warp tree), and
// attention, which T-CUDA computes in F32 (flash decoding split over warps)
// where T-CPU follows ggml's CPU paths with their F16 accumulator. An
// activation that lands within an ulp of a Q8 rounding boundary can round
// the other way; on the TinyStories models the tiers agree to ~1e-2
// relative, and in the random-weight synthetic models, whose top logits
// are close, step-0 logits move by up to ~5e-2 relative (measured on an
// H200: 5.12e-2 worst, syn-gemma2-q8_0 p0, whose soft-capped attention
// and logits amplify the F16/F32 accumulator difference; 4.7e-2 on
// syn-gpt-oss-mxfp4). Real arithmetic errors show up as differences of
// order one. Models with routed experts may also route a near-tied token
// to another expert (conformance.Tier.RoutedSpikes): at most 2 of a
// prompt's 32 steps (measured: 2 on syn-gpt-oss-mxfp4 p1).
const relTolerance = 6e-2

// TestParityWithCPU runs the conformance suite on T-CUDA: every shared
// model compiled for cuda:sm_90, teacher-forced against T-CPU within
// relTolerance.
func TestParityWithCPU(t *testing.T) {
	info, err := driver.Probe()
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	t.Logf("device: %s", info)
	conformance.Run(t, conformance.Tier{Target: "cuda:sm_90", Options: runtime.Options{Tier: "cuda"}, OracleThreads: 8, RelTolerance: relTolerance,
		RoutedSpikes: 2})
}

// TestParityAmpereWithCPU runs the same suite on bundles compiled for
// cuda:sm_80: compute_80 PTX, which the driver compiles for whatever GPU
// runs the test, so on a Hopper card it proves the Ampere kernels (no
// programmatic dependent launch, no sm_90-only instructions) end to end.
// The tolerance is T-CUDA's: the families share their arithmetic across
// targets, only the launch path differs.
func TestParityAmpereWithCPU(t *testing.T) {
	info, err := driver.Probe()
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	if info.Major < 8 {
		t.Skipf("%s: cuda:sm_80 needs compute capability 8.0 or later", info)
	}
	t.Logf("device: %s", info)
	conformance.Run(t, conformance.Tier{Target: "cuda:sm_80", Options: runtime.Options{Tier: "cuda"}, OracleThreads: 8, RelTolerance: relTolerance,
		RoutedSpikes: 2})
}

// TestParityAdaWithCPU runs the suite on bundles compiled for cuda:sm_89,
// which carry the same compute_80 PTX as cuda:sm_80 and require compute
// capability 8.9: on a Hopper card it proves that the Ada target builds,
// loads and runs end to end like the Ampere one. (cuda:sm_86 differs
// from it only in the capability its bundles require.)
func TestParityAdaWithCPU(t *testing.T) {
	info, err := driver.Probe()
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	if info.Major < 8 || info.Major == 8 && info.Minor < 9 {
		t.Skipf("%s: cuda:sm_89 needs compute capability 8.9 or later", info)
	}
	t.Logf("device: %s", info)
	conformance.Run(t, conformance.Tier{Target: "cuda:sm_89", Options: runtime.Options{Tier: "cuda"}, OracleThreads: 8, RelTolerance: relTolerance,
		RoutedSpikes: 2})
}

// q8KVConfig is the model config of a q8_0 KV cache (llama.cpp's -ctk
// q8_0 -ctv q8_0).
const q8KVConfig = "cache_type_k = \"q8_0\"\ncache_type_v = \"q8_0\"\n"

// TestParityQ8KVWithCPU runs the conformance suite on T-CUDA with a q8_0
// KV cache: every shared model compiled for cuda:sm_90 with q8KVConfig,
// teacher-forced against T-CPU compiled with the same config (its own
// q8_0 cache, held to llama.cpp by runtime/cpu's TestParityQ8KV), within
// relTolerance. The two tiers write the same cache bytes from the same K
// and V rows (TestKernelQ8KVWrite) and attend over it with the same
// quantized query and integer block sums (TestKernelQ8KVAttention); the
// matrix products differ as in TestParityWithCPU, so the tolerance is
// that test's. Models zrtc refuses a q8_0 cache for (heads that are no
// whole Q8_0 blocks) are skipped, naming why; a PTX archive without the
// q8_0 instances fails here rather than skipping every model.
func TestParityQ8KVWithCPU(t *testing.T) {
	info, err := driver.Probe()
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	t.Logf("device: %s", info)
	requireQ8KVPTX(t, "sm_90")
	conformance.Run(t, conformance.Tier{Target: "cuda:sm_90", Options: runtime.Options{Tier: "cuda"}, OracleThreads: 8, RelTolerance: relTolerance,
		RoutedSpikes: 2, Config: q8KVConfig, OracleConfig: q8KVConfig})
}

// requireQ8KVPTX fails the test unless arch's PTX for every q8_0 cache
// layout is at hand: in $ZRT_PTX_DIR where set, else in the embedded
// archive.
func requireQ8KVPTX(t *testing.T, arch string) {
	t.Helper()
	var q8 []kernels.KVTypes // the q8_0 layouts (KVLayouts also has the FP8 cache's)
	for _, kv := range kcuda.KVLayouts() {
		if kv.K == ggml.Q8_0 {
			q8 = append(q8, kv)
		}
	}
	if dir := os.Getenv("ZRT_PTX_DIR"); dir != "" {
		for _, kv := range q8 {
			name := kernels.KVInstanceName(mustLookup(t, "flash_attn"), kv)
			if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(ptx.File(arch, name)))); err != nil {
				t.Fatalf("ZRT_PTX_DIR lacks the q8_0 cache's kernels: %v (run kernels/cuda/build_ptx.sh after make generate)", err)
			}
		}
		return
	}
	have := 0
	for _, kv := range ptx.KVLayouts(arch) {
		if slices.Contains(q8, kv) {
			have++
		}
	}
	if want := len(q8); have != want {
		t.Fatalf("the embedded PTX archive has %s kernels for %d of T-CUDA's %d q8_0 cache layouts: rebuild it (kernels/cuda/build_ptx.sh, then go run ./kernels/cuda/gen -pack) or set ZRT_PTX_DIR", arch, have, want)
	}
}
