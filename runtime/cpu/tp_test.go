package cpu_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/build"
	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/bundleset"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/support"
	"github.com/zrtdev/zrt/internal/reference"
	"github.com/zrtdev/zrt/internal/testmodel"
	"github.com/zrtdev/zrt/runtime"
)

// Tensor-parallel tolerances: a set against its unsplit bundle, on
// step 0's logits, absolute; later steps (teacher-forced) must pick the
// same greedy token unless the unsplit bundle's two best are within the
// tolerance, as TestParityWithLlamaCpp holds a bundle to llama.cpp.
//
// A rank's part of every split is whole quantization blocks of the
// weights and so of the activations' Q8 blocks, which the ranks quantize
// exactly as the unsplit bundle does; RMS norms, RoPE, attention of a
// head and the LM head's dot products are the same arithmetic. What
// differs is the order of the row-parallel projections' sums: each rank
// sums its part of the inner dimension, and ALL_REDUCE_SUM adds the
// parts in rank order, where one matmul adds every block in its own
// order. Those float32 ulps are amplified where the next op rounds its
// input: a prompt's rows go through the F16 GEMM (tinyBLAS's arithmetic)
// even for F32 and F16 weights, and quantized weights requantize every
// input to 8 bits, so an ulp that crosses a rounding boundary moves a
// value by a whole step. Measured: at most 6.8e-3 for the float models
// (TinyStories-656K F16), 0.07 for the quantized ones over every
// teacher-forced step, where a MoE router whose two best experts are an
// ulp apart may route differently (syn-gpt-oss-mxfp4 then moves by 0.5
// at a later step). The tolerances are the ones against llama.cpp
// (parity_test.go), whose arithmetic differs from T-CPU's by the same
// kind of reordering.
const (
	tpToleranceFloat     = toleranceFloat
	tpToleranceQuantized = toleranceQuantized
)

// buildSet builds model for T-CPU as a tensor-parallel set of ranks
// (zrtc build --tp) at dir and returns the path runtime.Open takes: its
// rank 0's bundle.
func buildSet(t *testing.T, model, dir string, ranks int, opt compiler.Options) (string, error) {
	t.Helper()
	_, err := build.Run(context.Background(), build.Options{Model: model, Targets: []string{"cpu"}, TP: ranks, Compiler: opt, Out: dir})
	if err != nil {
		return "", err
	}
	x, err := bundleset.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if x.TPRanks != ranks || len(x.Ranks("cpu")) != ranks {
		t.Fatalf("%s: set.json has tp_ranks %d and %d members of cpu, want %d", dir, x.TPRanks, len(x.Ranks("cpu")), ranks)
	}
	m, _ := x.Member("cpu")
	return m.Path(dir), nil
}

// forcedLogits teacher-forces prompt, then each of forced, through the
// bundle at dir and returns the logits after the prompt and after each
// forced token.
func forcedLogits(t *testing.T, dir string, prompt, forced []int32) [][]float32 {
	t.Helper()
	seq, done := openSequence(t, dir, true)
	defer done()
	ctx := context.Background()
	logits, err := seq.Prefill(ctx, prompt)
	if err != nil {
		t.Fatalf("%s: prefill: %v", dir, err)
	}
	out := [][]float32{append([]float32(nil), logits...)}
	for i, tok := range forced {
		if logits, err = seq.Decode(ctx, tok); err != nil {
			t.Fatalf("%s: decode %d: %v", dir, i, err)
		}
		out = append(out, append([]float32(nil), logits...))
	}
	return out
}

// compareForced holds a set's teacher-forced logits (got) to the
// unsplit bundle's (want): step 0 within tol, every step's greedy token
// the same unless want's two best are within tol. It returns step 0's
// largest difference and every step's.
func compareForced(t *testing.T, label string, want, got [][]float32, tol float64) (step0, all float64) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("%s: %d steps against %d", label, len(got), len(want))
	}
	for i := range want {
		if len(want[i]) != len(got[i]) {
			t.Fatalf("%s: step %d: %d logits against %d", label, i, len(got[i]), len(want[i]))
		}
		d := 0.0
		best, second, gotBest := 0, -1, 0
		for j := range want[i] {
			d = math.Max(d, math.Abs(float64(want[i][j])-float64(got[i][j])))
			if got[i][j] > got[i][gotBest] {
				gotBest = j
			}
			switch {
			case want[i][j] > want[i][best]:
				best, second = j, best
			case j != best && (second < 0 || want[i][j] > want[i][second]):
				second = j
			}
		}
		if i == 0 {
			step0 = d
			if d > tol {
				t.Errorf("%s: step 0 logits differ from the unsplit bundle's by up to %.3g (tolerance %g)", label, d, tol)
			}
		}
		all = math.Max(all, d)
		if gotBest != best && (second < 0 || float64(want[i][best]-want[i][second]) > tol) {
			t.Errorf("%s: step %d: greedy token %d, the unsplit bundle's %d (ahead by %.4f)", label, i, gotBest, best, want[i][best]-want[i][second])
		}
	}
	return step0, all
}

// tpTolerance is the set-against-unsplit tolerance for model's weights.
func tpTolerance(t *testing.T, model string) float64 {
	if toleranceFor(t, model) == toleranceFloat {
		return tpToleranceFloat
	}
	return tpToleranceQuantized
}

// TestTensorParallelParity builds every shared model with references as
// sets of 2 and 4 ranks, and holds each set to its unsplit bundle within
// the tensor-parallel tolerance and to llama.cpp's reference (prompt p0)
// as TestParityWithLlamaCpp holds the unsplit bundle. A model whose heads
// do not divide over the ranks is skipped with the typed error, which it
// must be; the split refuses no model for anything else.
func TestTensorParallelParity(t *testing.T) {
	if testing.Short() {
		t.Skip("builds three bundles of every shared model")
	}
	shared := reference.SharedDir()
	// One prompt per model (p0; TestParityWithLlamaCpp runs every prompt
	// on the unsplit bundles): each model is built three times over, and
	// CI's time matters more than a second and third prompt here.
	refs := reference.Shared(t, "*.p0.json")
	byModel := map[string][]*reference.File{}
	for _, ref := range refs {
		if reference.Model(shared, ref) != "" {
			byModel[reference.Model(shared, ref)] = append(byModel[reference.Model(shared, ref)], ref)
		}
	}
	var models []string
	for m := range byModel {
		models = append(models, m)
	}
	sort.Strings(models)
	opt := compiler.Options{ContextLength: referenceContext}
	ran := 0
	for _, model := range models {
		name := strings.TrimSuffix(filepath.Base(model), ".gguf")
		t.Run(name, func(t *testing.T) {
			tmp := t.TempDir()
			whole := filepath.Join(tmp, "whole")
			if err := compiler.Compile(context.Background(), model, whole, opt); support.Is(err) {
				t.Skipf("unsplit: %v", err)
			} else if err != nil {
				t.Fatal(err)
			}
			// The unsplit bundle's logits, by reference, computed once.
			wholeLogits := map[string][][]float32{}
			for _, n := range []int{2, 4} {
				dir, err := buildSet(t, model, filepath.Join(tmp, fmt.Sprintf("tp%d", n)), n, opt)
				if err != nil {
					if !support.Is(err) {
						t.Fatalf("tp %d: %v (want a typed unsupported error if any)", n, err)
					}
					// Only heads that do not divide over the ranks may
					// keep a model from splitting.
					if !strings.Contains(err.Error(), "heads must") {
						t.Errorf("tp %d: refused for other than its heads: %v", n, err)
					}
					t.Logf("tp %d: refused: %v", n, err)
					continue
				}
				ran++
				worst0, worst, worstRef := 0.0, 0.0, 0.0
				for _, ref := range byModel[model] {
					var forced []int32
					for _, st := range ref.Steps[:len(ref.Steps)-1] {
						forced = append(forced, st.Token)
					}
					label := fmt.Sprintf("%s tp %d", ref.Name, n)
					want, ok := wholeLogits[ref.Name]
					if !ok {
						want = forcedLogits(t, whole, ref.PromptTokens, forced)
						wholeLogits[ref.Name] = want
					}
					d0, d := compareForced(t, label, want, forcedLogits(t, dir, ref.PromptTokens, forced), tpTolerance(t, model))
					worst0, worst = math.Max(worst0, d0), math.Max(worst, d)
					worstRef = math.Max(worstRef, checkReference(t, dir, ref, label, toleranceFor(t, model)))
				}
				t.Logf("tp %d: largest |Δlogit| against the unsplit bundle %.2e at step 0 (%.2e at any step), against llama.cpp at step 0 %.2e", n, worst0, worst, worstRef)
			}
		})
	}
	if ran == 0 {
		t.Error("no model was split")
	}
}

// TestTensorParallelShapes builds synthetic shapes whose splits do not
// fall on quantization blocks — an FFN of 3 Q4_K blocks (ranks get 2 and
// 1 at 2 ranks; 4 ranks replicate it) and heads whose outputs at 2 ranks
// are half a Q4_K block (the ranks gather them and project them whole) —
// and KV heads fewer than the ranks (replicated), and a Q|K|V and a
// gate|up projection of one tensor each (phi3's, with fewer KV heads, so
// a rank's Q, K and V rows are three slices of it), and holds each set to
// its unsplit bundle; and a head count that does not divide, which must
// be refused with the typed unsupported error.
func TestTensorParallelShapes(t *testing.T) {
	cases := []struct {
		name  string
		shape synth.Shape
		ranks []int
	}{
		{"ffn-3-blocks", synth.Shape{Arch: "llama", Layers: 2, Embd: 256, Heads: 4, HeadsKV: 2, FF: 768, Vocab: 320, Context: 256, Type: ggml.Q4_K, Seed: 3}, []int{2, 4}},
		{"kv-heads-replicated", synth.Shape{Arch: "qwen3", Layers: 2, Embd: 128, Heads: 8, HeadsKV: 2, HeadDim: 32, FF: 256, Vocab: 320, Context: 256, Type: ggml.Q8_0, Seed: 4}, []int{4}},
		{"moe", synth.Shape{Arch: "qwen2moe", Layers: 2, Embd: 128, Heads: 4, HeadsKV: 2, HeadDim: 32, FF: 256, Experts: 4, ExpertsUsed: 2, ExpertFF: 64, Vocab: 320, Context: 256, Type: ggml.Q8_0, Seed: 5}, []int{2, 4}},
		{"fused-qkv-gate-up", synth.Shape{Arch: "phi3", Layers: 2, Embd: 256, Heads: 8, HeadsKV: 2, FF: 512, Vocab: 320, Context: 256, Type: ggml.Q8_0, Seed: 7}, []int{2, 4}},
	}
	ctx := context.Background()
	prompt, forced := []int32{1, 17, 42, 99, 7, 250, 3, 64}, []int32{5, 200, 31}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tmp := t.TempDir()
			model := testmodel.Write(t, tmp, "model.gguf", c.shape)
			whole := filepath.Join(tmp, "whole")
			if err := compiler.Compile(ctx, model, whole, compiler.Options{}); err != nil {
				t.Fatal(err)
			}
			want := forcedLogits(t, whole, prompt, forced)
			for _, n := range c.ranks {
				dir, err := buildSet(t, model, filepath.Join(tmp, fmt.Sprintf("tp%d", n)), n, compiler.Options{})
				if err != nil {
					t.Fatalf("tp %d: %v", n, err)
				}
				d0, d := compareForced(t, fmt.Sprintf("tp %d", n), want, forcedLogits(t, dir, prompt, forced), tpTolerance(t, model))
				t.Logf("tp %d: largest |Δlogit| %.2e at step 0, %.2e at any step", n, d0, d)
			}
		})
	}
	t.Run("heads-not-dividing", func(t *testing.T) {
		tmp := t.TempDir()
		model := testmodel.Write(t, tmp, "model.gguf", synth.Shape{Arch: "llama", Layers: 1, Embd: 96, Heads: 3, HeadsKV: 3, FF: 128, Vocab: 320, Context: 256, Type: ggml.F32, Seed: 6})
		_, err := buildSet(t, model, filepath.Join(tmp, "tp2"), 2, compiler.Options{})
		var se *support.Error
		if !errors.As(err, &se) || !strings.Contains(err.Error(), "3 attention heads") {
			t.Fatalf("3 heads over 2 ranks: %v, want the typed unsupported error naming the heads", err)
		}
	})
}

// TestTensorParallelNeedsEveryRank opens a rank bundle alone and a set
// with a rank missing: both are refused, saying why.
func TestTensorParallelNeedsEveryRank(t *testing.T) {
	tmp := t.TempDir()
	model := testmodel.Write(t, tmp, "model.gguf", synth.Tiny)
	set := filepath.Join(tmp, "tp2")
	dir, err := buildSet(t, model, set, 2, compiler.Options{})
	if err != nil {
		t.Fatal(err)
	}
	x, _ := bundleset.Read(set)
	r1, _ := x.Rank("cpu", 1)
	if _, err := runtime.Open(r1.Path(set), runtime.Options{Tier: "cpu"}); err == nil || !strings.Contains(err.Error(), "rank 1 of a tensor-parallel set of 2") {
		t.Errorf("rank 1 alone: %v", err)
	}
	if err := os.RemoveAll(r1.Path(set)); err != nil {
		t.Fatal(err)
	}
	if _, err := runtime.Open(dir, runtime.Options{Tier: "cpu"}); err == nil {
		t.Error("a set without its rank 1 opened")
	}
}
