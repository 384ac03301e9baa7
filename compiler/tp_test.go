package compiler_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/ir"
	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/support"
	"github.com/zrtdev/zrt/internal/testmodel"
	"github.com/zrtdev/zrt/passes"
)

// TestShardSplitsEveryRank compiles each rank of a 2-rank split of a
// small model and checks what the shard pass promises: the collectives
// (a sum after each layer's attention output and FFN down projection, a
// gather after the LM head; in the draft variants, for their layers), the ranks' weight slices adding up to the
// whole tensors, and a rank's KV page holding its half of the heads.
func TestShardSplitsEveryRank(t *testing.T) {
	s := synth.Shape{Arch: "llama", Layers: 2, Embd: 128, Heads: 4, HeadsKV: 2, FF: 256, Vocab: 321, Context: 256, Type: ggml.Q8_0, Seed: 2}
	model := testmodel.Write(t, t.TempDir(), "m.gguf", s)
	ctx := context.Background()
	load := func(tp passes.TP) *compiler.Frontend {
		fe, err := compiler.Load(model, compiler.Options{TP: tp, NoFuse: true}) // unfused: each weight by its own name
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fe.Close() })
		if _, err := passes.RunWith(ctx, fe.Unit, passes.RunOptions{VerifyEach: true}); err != nil {
			t.Fatalf("tp %+v: %v", tp, err)
		}
		return fe
	}
	whole := load(passes.TP{})
	wholeBytes := map[string]int64{}
	for _, p := range whole.Unit.Plan.Weights {
		wholeBytes[p.Buffer] = p.Bytes
	}
	rankBytes := map[string]int64{}
	for r := range 2 {
		fe := load(passes.TP{Rank: r, Ranks: 2})
		if st := fe.Unit.State; st.KVPageBytes*2 != whole.Unit.State.KVPageBytes {
			t.Errorf("rank %d: KV page of %d bytes, the whole model's is %d", r, st.KVPageBytes, whole.Unit.State.KVPageBytes)
		}
		for _, g := range fe.Unit.Graphs {
			count := map[ir.Op]int{}
			for _, in := range g.Insts {
				count[in.Op]++
			}
			layers := s.Layers
			if g.Key.Stage == ir.Draft { // a default build's draft: its first layers
				layers = fe.Config.Draft()
			}
			if count[ir.ALL_REDUCE_SUM] != 2*layers || count[ir.ALL_GATHER] != 1 {
				t.Errorf("rank %d %s: %d ALL_REDUCE_SUM and %d ALL_GATHER, want %d and 1", r, g.Key, count[ir.ALL_REDUCE_SUM], count[ir.ALL_GATHER], 2*layers)
			}
		}
		for _, p := range fe.Unit.Plan.Weights {
			name, _, split := strings.Cut(p.Buffer, "/tp")
			if split {
				rankBytes[name] += p.Bytes
			} else if wholeBytes[p.Buffer] != p.Bytes {
				t.Errorf("rank %d: replicated %s of %d bytes, whole %d", r, p.Buffer, p.Bytes, wholeBytes[p.Buffer])
			}
		}
	}
	if len(rankBytes) == 0 {
		t.Fatal("no weight was split")
	}
	for name, n := range rankBytes {
		if n != wholeBytes[name] {
			t.Errorf("%s: the ranks hold %d bytes, the whole tensor is %d", name, n, wholeBytes[name])
		}
	}
	// A target without collectives (the AMD targets') refuses a split,
	// typed.
	_, err := compiler.Load(model, compiler.Options{Target: "amd:gfx1201", TP: passes.TP{Ranks: 2}})
	if err == nil {
		fe, _ := compiler.Load(model, compiler.Options{Target: "amd:gfx1201", TP: passes.TP{Ranks: 2}})
		_, err = passes.RunWith(ctx, fe.Unit, passes.RunOptions{})
		fe.Close()
	}
	if !errors.Is(err, support.ErrUnsupported) || !strings.Contains(err.Error(), "collectives") {
		t.Errorf("amd:gfx1201 at 2 ranks: %v, want the typed unsupported error naming the collectives", err)
	}
}
