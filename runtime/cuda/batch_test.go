package cuda_test

import (
	"context"
	"math"
	"testing"

	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
	"github.com/zrtdev/zrt/runtime/sequence"
)

// batchTolerance is how far T-CUDA's logits of a sequence decoded beside
// others may move from the same sequence decoded alone, relative to the
// largest |logit| of the step (at least 1). T-CUDA is not batch
// invariant bit for bit: one row runs the matrix-vector kernels, more the
// dp4a or tensor-core tiles, which sum the same integer block products in
// another float order (measured on an H100: 0 at 2 rows, 2.7e-7 at 16,
// 63 and 64); a float difference of an ulp could also round an activation to
// another Q8 quant. A real error shows as a difference of order 1e-2 or
// more.
const batchTolerance = 1e-3

// TestDecodeBatchNearSingle decodes sequences of a Q4_K qwen3 (per-head
// Q/K norms, GQA; its matrices take the integer kernels) alone and then
// 2, 16, 63 and 64 at a time in one step (the matrix-vector kernels, then
// the dp4a tiles with lm_head on tensor cores; 63 rows leave one of the
// 64-row variant's rows padding, 64 fill it), and holds each batched
// sequence's logits to its own alone within batchTolerance.
func TestDecodeBatchNearSingle(t *testing.T) {
	if _, err := driver.Probe(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	out := compileSynth(t, synth.Shape{Arch: "qwen3", Layers: 2, Embd: 256, Heads: 4, HeadsKV: 2, HeadDim: 64, FF: 512, Vocab: 320,
		Context: 128, Type: ggml.Q4_K, Seed: 9}, "cuda:sm_90", "max_slots = 64\ndecode_slots = [1, 2, 16, 64]\nkv_pages = 600\n")
	e, err := sequence.Open(out, runtime.Options{Tier: "cuda"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	prompt := func(i int) []int32 { // distinct prompts of 3 to 9 tokens
		p := []int32{1}
		for j := 0; j < 2+i%7; j++ {
			p = append(p, int32(2+(i*37+j*11)%300))
		}
		return p
	}
	next := func(i int) int32 { return int32(3 + (i*13)%300) }
	prefilled := func(i int) *sequence.Sequence { // sequence i, its prompt evaluated
		s, err := e.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Prefill(ctx, prompt(i)); err != nil {
			t.Fatal(err)
		}
		return s
	}
	alone := make([][]float32, 64)
	for i := range alone {
		s := prefilled(i)
		l, err := s.Decode(ctx, next(i))
		if err != nil {
			t.Fatal(err)
		}
		alone[i] = append([]float32(nil), l...)
		s.Release()
	}
	for _, n := range []int{2, 16, 63, 64} {
		var seqs []*sequence.Sequence
		var toks []int32
		for i := range n {
			seqs, toks = append(seqs, prefilled(i)), append(toks, next(i))
		}
		if err := e.DecodeBatch(ctx, seqs, toks); err != nil {
			t.Fatal(err)
		}
		worst := 0.0
		for i, s := range seqs {
			got, want := s.Logits(), alone[i]
			scale := 1.0
			for _, v := range want {
				scale = math.Max(scale, math.Abs(float64(v)))
			}
			for j := range want {
				d := math.Abs(float64(got[j])-float64(want[j])) / scale
				if !(d <= batchTolerance) { // NaN fails too
					t.Fatalf("%d at once: sequence %d logit %d: %v batched, %v alone", n, i, j, got[j], want[j])
				}
				worst = math.Max(worst, d)
			}
			s.Release()
		}
		t.Logf("%d at once: worst difference %.2e of the largest logit", n, worst)
	}
}
