package runtime

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/internal/testmodel"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/runtime/tiers"
)

// TestT1SimMatchesCPU opens one bundle twice — on T1 over the simulated
// KFD (Options{Tier: "t1", KFD: "sim"}) and on T-CPU — and wants the same
// logits, bit for bit, and so the same greedy tokens. The bundle is built
// for amd:gfx1201 where this zrtc knows that target; before it does, a cpu
// bundle is routed to the T1 loader instead (the simulated device runs
// T-CPU kernels either way, so what is tested is the T1 path).
func TestT1SimMatchesCPU(t *testing.T) {
	target := "amd:gfx1201"
	_, amd := kernels.LookupTarget(target)
	if !amd {
		target = "cpu"
		t.Logf("no target amd:gfx1201 yet: running a cpu bundle through the T1 loader")
	}
	model := testmodel.Tiny(t)
	out := filepath.Join(filepath.Dir(model), "bundle")
	err := compiler.Compile(context.Background(), model, out, compiler.Options{Target: target})
	if err != nil && amd {
		// The AMD kernels are someone else's test; this one is about T1.
		t.Logf("zrtc build --target %s: %v; running a cpu bundle through the T1 loader instead", target, err)
		target, amd = "cpu", false
		err = compiler.Compile(context.Background(), model, out, compiler.Options{Target: target})
	}
	if err != nil {
		t.Fatal(err)
	}
	open := func(kind kernels.TierKind, tier string) *Program {
		t.Helper()
		tt, _ := kernels.LookupTarget(target)
		p, err := Open(out, Options{Tier: tier, KFD: "sim", Threads: 2, Table: standIn(t, kind, tt.Tier)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	sim, ref := open(kernels.TierAMD, "auto"), open(kernels.TierCPU, "auto")
	if amd {
		sim = open(kernels.TierAMD, "t1")
	}
	if sim.TierName() != "t1" || ref.TierName() != "cpu" {
		t.Fatalf("tiers %s and %s", sim.TierName(), ref.TierName())
	}
	ctx := context.Background()
	prompt := []int32{1, 300, 301, 302, 9}
	pages := []SlotPages{{Slot: 0, Pages: []uint32{0, 1}}}
	var toks []int32
	step := func(stage Stage, rows []Row) {
		t.Helper()
		var want []float32
		for i, p := range []*Program{ref, sim} {
			key, ok := p.Key(stage, len(rows))
			if !ok {
				t.Fatalf("no %s variant for %d rows", stage, len(rows))
			}
			if err := p.Step(ctx, Batch{Key: key, Rows: rows, Pages: pages}); err != nil {
				t.Fatalf("%s: %v", p.TierName(), err)
			}
			l := p.Logits(0, nil)
			if i == 0 {
				want = l
			} else if !slices.Equal(want, l) {
				t.Fatalf("after %d tokens: T1 on kfdsim and T-CPU logits differ", len(toks))
			} else if ref.Greedy(0) != sim.Greedy(0) {
				t.Fatalf("greedy tokens %d and %d", ref.Greedy(0), sim.Greedy(0))
			}
		}
		toks = append(toks, sim.Greedy(0))
	}
	var rows []Row
	for i, tok := range prompt {
		rows = append(rows, Row{Slot: 0, Pos: i, Token: tok, Logits: i == len(prompt)-1})
	}
	step(Prefill, rows)
	for i := 0; i < 8; i++ {
		step(Decode, []Row{{Slot: 0, Pos: len(prompt) + i, Token: toks[len(toks)-1], Logits: true}})
	}
	t.Logf("%s bundle, T1 on kfdsim and T-CPU agree: %v", target, toks)
}

// TestT1Reasons: ZRT_TIER=t1 on a bundle of another tier, and an unknown
// KFD device, fail with the reason.
func TestT1Reasons(t *testing.T) {
	_, out := testmodel.Bundle(t, "", compiler.Options{})
	if _, err := Open(out, Options{Tier: "t1", KFD: "sim"}); err == nil {
		t.Fatal("t1 opened a cpu bundle")
	} else {
		t.Log(err)
	}
	amd := standIn(t, kernels.TierAMD, kernels.TierCPU)
	if _, err := Open(out, Options{KFD: "bogus", Table: amd}); err == nil {
		t.Fatal("KFD device bogus accepted")
	}
	if _, err := os.Stat("/dev/kfd"); err != nil {
		_, err := Open(out, Options{Table: amd})
		if err == nil {
			t.Fatal("T1 opened without /dev/kfd")
		}
		t.Log(err)
	}
}

// standIn is a one-row tier table in which the first tier of kind loads
// the bundles of kind as: T1 running a cpu bundle, which the simulated
// KFD's T-CPU kernels can.
func standIn(t *testing.T, kind, as kernels.TierKind) []tiers.Row {
	t.Helper()
	row, ok := tiers.Lookup(tiers.Table(), string(kind))
	if !ok {
		t.Fatalf("no tier of kind %s", kind)
	}
	row.Kind = as
	return []tiers.Row{row}
}
