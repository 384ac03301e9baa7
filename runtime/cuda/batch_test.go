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

// T-CUDA is not batch invariant bit for bit: one row runs the
// matrix-vector kernels, more rows the tensor-core tiles, which sum the
// same integer block products in another float order. Measured on an H100
// (logit differences relative to the step's largest |logit|, at least 1):
// 0 at 2 rows, 2.7e-7 at 16. Such a difference of an ulp in an activation
// can also round it to the next Q8 quant before the next product, which
// moves that sequence's logits by far more: 3 of the 63 sequences at 63
// and 64 rows moved by 2.1e-6, 2.1e-3 and 9.5e-3. So each sequence's
// logits must stay within flipTolerance of its own alone, and at most one
// in eight may move by more than noiseTolerance: an error in a kernel
// moves most rows, by more.
const (
	noiseTolerance = 1e-5
	flipTolerance  = 3e-2
)

// TestDecodeBatchNearSingle decodes sequences of a Q4_K qwen3 (per-head
// Q/K norms, GQA; its matrices take the integer kernels) alone and then
// 2, 4, 16, 63 and 64 at a time in one step (the matrix-vector kernels,
// then the tensor-core tiles, whose 16-row tile takes 4 rows with 12 of
// padding; 63 rows leave one of the 64-row variant's rows padding, 64
// fill it), and holds each batched sequence's logits to its
// own alone (see noiseTolerance). So too a llama of Q4_K_M's mix, whose
// Q6_K V layers' Q, K and V products share one stage launch.
func TestDecodeBatchNearSingle(t *testing.T) {
	if _, err := driver.Probe(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	for _, s := range []synth.Shape{
		{Arch: "qwen3", Layers: 2, Embd: 256, Heads: 4, HeadsKV: 2, HeadDim: 64, FF: 512, Vocab: 320, Context: 128, Type: ggml.Q4_K, Seed: 9},
		{Arch: "llama", Layers: 8, Embd: 256, Heads: 4, HeadsKV: 4, FF: 512, Vocab: 320, Context: 128, Type: ggml.Q4_K, Mix: "Q4_K_M", Seed: 10},
	} {
		t.Run(s.Arch+s.Mix, func(t *testing.T) { decodeBatchNearSingle(t, s) })
	}
}

func decodeBatchNearSingle(t *testing.T, shape synth.Shape) {
	out := compileSynth(t, shape, "cuda:sm_90", "max_slots = 64\ndecode_slots = [1, 2, 4, 16, 64]\nkv_pages = 600\n")
	e := openPool(t, out, runtime.Options{Tier: "cuda"})
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
	for _, n := range []int{2, 4, 16, 63, 64} {
		var seqs []*sequence.Sequence
		var toks []int32
		for i := range n {
			seqs, toks = append(seqs, prefilled(i)), append(toks, next(i))
		}
		if err := e.DecodeBatch(ctx, seqs, toks); err != nil {
			t.Fatal(err)
		}
		worst, moved := 0.0, 0
		for i, s := range seqs {
			got, want := s.Logits(), alone[i]
			scale := 1.0
			for _, v := range want {
				scale = math.Max(scale, math.Abs(float64(v)))
			}
			d := 0.0
			for j := range want {
				dj := math.Abs(float64(got[j])-float64(want[j])) / scale
				if !(dj <= flipTolerance) { // NaN fails too
					t.Fatalf("%d at once: sequence %d logit %d: %v batched, %v alone", n, i, j, got[j], want[j])
				}
				d = math.Max(d, dj)
			}
			if d > noiseTolerance {
				moved++
				t.Logf("%d at once: sequence %d moved by %.2e", n, i, d)
			}
			worst = math.Max(worst, d)
			s.Release()
		}
		t.Logf("%d at once: worst difference %.2e of the largest logit", n, worst)
		if moved > n/8 {
			t.Errorf("%d at once: %d sequences moved by more than %g", n, moved, noiseTolerance)
		}
	}
}
