package cpu_test

import (
	"context"
	"math"
	"testing"
)

// TestWeightsPlacement runs one prompt and a few decode steps with the
// weights copied into huge-page memory and with them left in the mapped
// pack: the logits are the same bits.
func TestWeightsPlacement(t *testing.T) {
	dir, refs := compileStories260K(t)
	run := func(mapped bool) [][]float32 {
		seq, done := openSequence(t, dir, mapped)
		defer done()
		ctx := context.Background()
		l, err := seq.Prefill(ctx, refs[0].PromptTokens)
		if err != nil {
			t.Fatal(err)
		}
		out := [][]float32{append([]float32(nil), l...)}
		for range 4 {
			if l, err = seq.Decode(ctx, seq.Greedy()); err != nil {
				t.Fatal(err)
			}
			out = append(out, append([]float32(nil), l...))
		}
		return out
	}
	copied, mapped := run(false), run(true)
	for s := range copied {
		for i := range copied[s] {
			if math.Float32bits(copied[s][i]) != math.Float32bits(mapped[s][i]) {
				t.Fatalf("step %d logit %d: %v copied, %v mapped", s, i, copied[s][i], mapped[s][i])
			}
		}
	}
}
