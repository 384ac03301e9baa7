package validate_test

import (
	"context"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/internal/testmodel"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
	"github.com/zrtdev/zrt/runtime/validate"
)

// build compiles stories260K for target with the config text.
func build(t *testing.T, target, config string) string {
	t.Helper()
	return testmodel.CompileShared(t, "stories260K.gguf", config, compiler.Options{Target: target, PTXDir: os.Getenv("ZRT_PTX_DIR")})
}

func open(t *testing.T, dir, tier string) *runtime.Program {
	t.Helper()
	p, err := runtime.Open(dir, runtime.Options{Tier: tier, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

var prompt = []int32{1, 403, 407, 261, 378, 68, 28, 314} // stories260K has 512 tokens

// TestSameTierIsExact compares two T-CPU bundles whose variants differ
// (other prefill and decode row counts): T-CPU's arithmetic does not
// depend on the variant, so every point is equal bit for bit.
func TestSameTierIsExact(t *testing.T) {
	a := open(t, build(t, "cpu", ""), "cpu")
	b := open(t, build(t, "cpu", "prefill_rows = [16, 64]\ndecode_slots = [1, 2]\n"), "cpu")
	rep, err := validate.Run(context.Background(), a, b, prompt, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Steps) != 4 || len(rep.Steps[0].Points) != 5+3 || len(rep.Tokens) != 3 {
		t.Fatalf("report of %d steps, %d points, %d tokens", len(rep.Steps), len(rep.Steps[0].Points), len(rep.Tokens))
	}
	if s, p, bad := rep.First(0, nil); bad {
		t.Fatalf("%s: %s differs by %g", s.Name, p.Name, p.MaxAbs)
	}
	for _, p := range rep.Steps[0].Points {
		if p.MaxRef == 0 {
			t.Errorf("%s: the oracle's values are all zero: nothing was read", p.Name)
		}
	}
}

// TestBatchedDecodeIsExactOnCPU batches 5 slots a decode step (the
// 8-row variant, 3 rows of padding) against an oracle that has only
// that variant too: T-CPU gives each row the bits it gives it alone, so
// every point of every slot matches, and each slot followed its own
// greedy tokens (the rows differ).
func TestBatchedDecodeIsExactOnCPU(t *testing.T) {
	cfg := "max_slots = 8\ndecode_slots = [1, 8]\n"
	a := open(t, build(t, "cpu", cfg), "cpu")
	b := open(t, build(t, "cpu", cfg+"prefill_rows = [4]\n"), "cpu")
	rep, err := validate.Run(context.Background(), a, b, prompt, 2, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Steps) != 2+2 || rep.Slots != 5 || rep.Steps[2].Rows != 5 { // the prompt in two chunks of 4, then 2 decode steps
		t.Fatalf("report of %d steps, %d slots, %d rows a decode step", len(rep.Steps), rep.Slots, rep.Steps[2].Rows)
	}
	if s, p, bad := rep.First(0, nil); bad {
		t.Fatalf("%s: %s differs by %g at row %d", s.Name, p.Name, p.MaxAbs, p.Row)
	}
}

// TestNamesTheBrokenLayer corrupts one row of layer 2's FFN down weights
// in a copy of the bundle: layers 0 and 1 still match exactly, and layer
// 2 is the first point past the tolerance, at the prefill, in every row.
func TestNamesTheBrokenLayer(t *testing.T) {
	oracle := build(t, "cpu", "")
	broken := build(t, "cpu", "")
	corrupt(t, broken, "blk.2.ffn_down.weight")
	rep, err := validate.Run(context.Background(), open(t, broken, "cpu"), open(t, oracle, "cpu"), prompt, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	s, p, bad := rep.First(0.06, nil)
	if !bad || p.Name != "layer 2" || s.Name != "prefill" {
		t.Fatalf("first past tolerance: %v %q at %q, want layer 2 at prefill", bad, p.Name, s.Name)
	}
	// A wrong weight moves every row.
	if len(p.RowAbs) != s.Rows || p.RowsPast(0.06) != s.Rows || p.RowsPast(math.Inf(1)) != 0 {
		t.Errorf("rows past: %d of %d (%d rows in the step)", p.RowsPast(0.06), len(p.RowAbs), s.Rows)
	}
	for _, p := range rep.Steps[0].Points[:3] {
		if p.MaxAbs != 0 {
			t.Errorf("%s before the corrupted layer differs by %g", p.Name, p.MaxAbs)
		}
	}
}

// corrupt writes large values over the first 64 floats of an F32 tensor
// in the bundle's weights pack (which a load without --verify-weights
// trusts).
func corrupt(t *testing.T, dir, tensor string) {
	t.Helper()
	b, err := bundle.Open(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	var off int64 = -1
	for _, w := range b.Graph.Weights {
		if w.Tensor == tensor {
			reg := b.Weights[b.Graph.Regions[w.Region].Name]
			off = int64(uintptr(unsafe.Pointer(&reg[0]))-uintptr(unsafe.Pointer(&b.Pack[0]))) + w.Offset
		}
	}
	b.Close()
	if off < 0 {
		t.Fatalf("no tensor %s", tensor)
	}
	f, err := os.OpenFile(filepath.Join(dir, bundle.WeightsFile), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4*64)
	for i := range 64 {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(10))
	}
	if _, err := f.WriteAt(buf, off); err != nil {
		t.Fatal(err)
	}
}

// TestCUDAWithinTolerance compares T-CUDA's build with T-CPU's (skipped
// without a GPU): one slot, then decode steps batching 63 and 64 slots
// in the 64-row variant.
func TestCUDAWithinTolerance(t *testing.T) {
	if _, err := driver.Probe(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	cfg := "max_slots = 64\ndecode_slots = [1, 64]\n"
	got, oracle := open(t, build(t, "cuda:sm_90", cfg), "cuda"), open(t, build(t, "cpu", cfg), "cpu")
	for _, slots := range []int{1, 63, 64} {
		rep, err := validate.Run(context.Background(), got, oracle, prompt, 4, slots)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range rep.Steps {
			for _, p := range s.Points {
				t.Logf("%d slots: %s %s: max|Δ| %.3g rel %.3g (row %d)", slots, s.Name, p.Name, p.MaxAbs, p.Rel(), p.Row)
			}
		}
		if s, p, bad := rep.First(0.06, nil); bad {
			t.Errorf("%d slots: %s: %s rel %g at row %d", slots, s.Name, p.Name, p.Rel(), p.Row)
		}
	}
}

// TestRefusesOtherModels refuses bundles of different GGUF files.
func TestRefusesOtherModels(t *testing.T) {
	dir := testmodel.CompileShared(t, "TinyStories-656K.Q8_0.gguf", "", compiler.Options{Target: "cpu"})
	_, err := validate.Run(context.Background(), open(t, build(t, "cpu", ""), "cpu"), open(t, dir, "cpu"), prompt, 1, 1)
	if err == nil || !strings.Contains(err.Error(), "different GGUF files") {
		t.Fatalf("got %v, want a refusal naming different GGUF files", err)
	}
}
