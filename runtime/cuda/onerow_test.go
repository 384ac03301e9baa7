package cuda_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
)

// TestVerifyOneRowBits: a speculative verify step — K+1 rows of one
// sequence in one replay of a decode variant, row i in a slot of its own
// mapping the sequence's pages (sequence.Verify, the engine's verify
// chunks) — run with runtime.Batch.OneRowBits gives every row the logits
// and greedy token, bit for bit, that one-row decode steps of the same
// tokens give: so greedy output does not change with speculation on
// T-CUDA (issue 42). Without the flag the step's matrices take the
// tensor-core tiles past 2 rows and its attention other warps a block,
// whose sums differ in the last bits (logged, not required). Q8_0, Q4_K_M
// and F16 weights; K from 1 to 32 (the 4-, 16- and 64-row variants); a
// GQA qwen3 whose rows see more than FA_SPLIT_MIN keys (the one-row
// attention splits them over blocks, kept for the verify rows), and a
// shape with the llama 7B's attention (32 heads of their own KV head),
// whose verify variants of 16 and 64 rows are past the split's counters.
func TestVerifyOneRowBits(t *testing.T) {
	// T-CPU, batch invariant, passes without the flag: the test's own
	// check, run everywhere.
	t.Run("cpu", func(t *testing.T) {
		verifyOneRowBits(t, "cpu", "cpu", synth.Shape{Arch: "qwen3", Layers: 1, Embd: 256, Heads: 4, HeadsKV: 2, HeadDim: 64, FF: 512, Vocab: 320,
			Context: 2048, Type: ggml.Q8_0, Seed: 34}, 1100)
	})
	if _, err := driver.Probe(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	for _, c := range []struct {
		name   string
		shape  synth.Shape
		prompt int
	}{
		{"q8_0", synth.Shape{Arch: "llama", Layers: 2, Embd: 512, Heads: 8, HeadsKV: 8, FF: 1024, Vocab: 512, Context: 256, Type: ggml.Q8_0, Seed: 31}, 9},
		{"q4_k_m", synth.Shape{Arch: "llama", Layers: 4, Embd: 512, Heads: 8, HeadsKV: 8, FF: 1024, Vocab: 512, Context: 256, Type: ggml.Q4_K, Mix: "Q4_K_M", Seed: 32}, 9},
		{"f16", synth.Shape{Arch: "llama", Layers: 2, Embd: 512, Heads: 8, HeadsKV: 8, FF: 1024, Vocab: 512, Context: 256, Type: ggml.F16, Seed: 33}, 9},
		{"qwen3-long", synth.Shape{Arch: "qwen3", Layers: 2, Embd: 256, Heads: 4, HeadsKV: 2, HeadDim: 64, FF: 512, Vocab: 320, Context: 2048, Type: ggml.Q8_0, Seed: 34}, 1100},
		{"7b-heads", synth.Shape{Arch: "llama", Layers: 1, Embd: 2048, Heads: 32, HeadsKV: 32, FF: 2048, Vocab: 512, Context: 256, Type: ggml.Q8_0, Seed: 35}, 20},
	} {
		t.Run(c.name, func(t *testing.T) { verifyOneRowBits(t, "cuda:sm_90", "cuda", c.shape, c.prompt) })
	}
}

// verifyOneRowBits compiles shape for target and runs the test on tier.
func verifyOneRowBits(t *testing.T, target, tier string, shape synth.Shape, promptLen int) {
	const maxK = 32
	pages := (promptLen + maxK + 1 + kernels.KVPageTokens - 1) / kernels.KVPageTokens
	out := compileSynth(t, shape, target, fmt.Sprintf("context_length = %d\nmax_slots = 64\ndecode_slots = [1, 4, 16, 64]\nkv_pages = %d\n", shape.Context, pages+4))
	p, err := runtime.Open(out, runtime.Options{Tier: tier})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	table := make([]uint32, pages)
	for i := range table {
		table[i] = uint32(i)
	}
	tok := func(i int) int32 { return int32(3 + (i*37+11)%(shape.Vocab-3)) }
	step := func(b runtime.Batch) {
		t.Helper()
		if err := p.Step(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	// The prompt, in chunks of the largest prefill variant, in slot 0.
	pre, _ := p.Largest(runtime.Prefill)
	for from := 0; from < promptLen; from += pre.Rows {
		n := min(pre.Rows, promptLen-from)
		key, _ := p.Key(runtime.Prefill, n)
		b := runtime.Batch{Key: key, Pages: []runtime.SlotPages{{Slot: 0, Pages: table}}}
		for i := range n {
			b.Rows = append(b.Rows, runtime.Row{Slot: 0, Pos: from + i, Token: tok(from + i), Logits: from+i == promptLen-1, Prompt: promptLen})
		}
		step(b)
	}
	// The next maxK+1 tokens one at a time: the logits and greedy token
	// after each, as decoding without speculation takes them.
	next := func(i int) int32 { return tok(promptLen + i) }
	one, _ := p.Key(runtime.Decode, 1)
	var alone [][]float32
	var greedy []int32
	for i := range maxK + 1 {
		step(runtime.Batch{Key: one, Rows: []runtime.Row{{Slot: 0, Pos: promptLen + i, Token: next(i), Logits: true}},
			Pages: []runtime.SlotPages{{Slot: 0, Pages: table}}})
		alone, greedy = append(alone, p.Logits(0, nil)), append(greedy, p.Greedy(0))
	}
	// verify runs the K+1 tokens as one step of K+1 rows, row i in slot
	// i at position promptLen+i (it writes its K and V there again), and
	// returns the rows whose logits or greedy token differ from alone's
	// and the largest difference relative to the largest |logit|.
	verify := func(k int, oneRow bool) (differ []int, worst float64) {
		key, ok := p.Key(runtime.Decode, k+1)
		if !ok {
			t.Fatalf("no decode variant of %d rows in %v", k+1, p.Keys())
		}
		b := runtime.Batch{Key: key, OneRowBits: oneRow}
		for i := range k + 1 {
			b.Rows = append(b.Rows, runtime.Row{Slot: i, Pos: promptLen + i, Token: next(i), Logits: true})
			b.Pages = append(b.Pages, runtime.SlotPages{Slot: i, Pages: table})
		}
		step(b)
		for i := range k + 1 {
			got, want := p.Logits(i, nil), alone[i]
			scale, d, same := 1.0, 0.0, p.Greedy(i) == greedy[i]
			for j := range want {
				scale = math.Max(scale, math.Abs(float64(want[j])))
			}
			for j := range want {
				if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
					same = false
					d = math.Max(d, math.Abs(float64(got[j])-float64(want[j]))/scale)
				}
			}
			if !same {
				differ = append(differ, i)
				worst = math.Max(worst, d)
			}
		}
		return differ, worst
	}
	for _, k := range []int{1, 2, 3, 4, 7, 8, 15, 32} {
		plain, pw := verify(k, false)
		differ, worst := verify(k, true)
		t.Logf("K = %d: without one-row bits rows %v differ (by up to %.2e); with them %v", k, plain, pw, differ)
		if len(differ) > 0 {
			t.Errorf("K = %d: verify rows %v differ from one-row decode steps (by up to %.2e of the largest logit)", k, differ, worst)
		}
		if math.IsNaN(worst) || math.IsNaN(pw) {
			t.Errorf("K = %d: NaN logits", k)
		}
	}
}
