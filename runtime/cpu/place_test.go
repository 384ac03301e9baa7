package cpu_test

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/internal/reference"
	"github.com/zrtdev/zrt/runtime/sequence"
)

// TestWeightsPlacement runs one prompt and a few decode steps with the
// weights copied into huge-page memory and with them left in the mapped
// pack: the logits are the same bits.
func TestWeightsPlacement(t *testing.T) {
	shared := reference.SharedDir()
	refs, err := reference.Load(shared, "stories260K.p*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) == 0 || reference.Model(shared, refs[0]) == "" {
		t.Skip("stories260K or its references not present")
	}
	dir := filepath.Join(t.TempDir(), "s260")
	if err := compiler.Compile(context.Background(), reference.Model(shared, refs[0]), dir, compiler.Options{}); err != nil {
		t.Fatal(err)
	}
	run := func(mapped bool) [][]float32 {
		e, err := sequence.Open(dir, runtime.Options{Tier: "cpu", Threads: 2, MapWeights: mapped})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		seq, err := e.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		defer seq.Release()
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
