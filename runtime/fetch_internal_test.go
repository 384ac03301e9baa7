package runtime

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/internal/testmodel"
)

// fetchFails is a tier whose logits live elsewhere and cannot be fetched
// (a T-CUDA whose device went away, say).
type fetchFails struct{ Tier }

func (fetchFails) Fetch(int, int64, int64) error { return errors.New("device lost") }

// A tier that fetches logits on demand and fails: Logits cannot return the
// error, so it gives NaN, and the next Step (and every one after) reports
// it instead of running on.
func TestLogitsFetchFailure(t *testing.T) {
	_, out := testmodel.Bundle(t, "", compiler.Options{})
	p, err := Open(out, Options{Tier: "cpu", Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	key, _ := p.Key(Decode, 1)
	b := Batch{Key: key, Rows: []Row{{Slot: 0, Pos: 0, Token: 1, Logits: true}}, Pages: []SlotPages{{Slot: 0, Pages: []uint32{0}}}}
	ctx := context.Background()
	if err := p.Step(ctx, b); err != nil {
		t.Fatal(err)
	}
	l := p.Logits(0, nil)
	if math.IsNaN(float64(l[0])) {
		t.Fatal("T-CPU logits are NaN")
	}
	// T-CPU keeps them on the host: the view is what Logits copies.
	v := p.LogitsView(0)
	if len(v) != len(l) {
		t.Fatalf("a view of %d logits, Logits gives %d", len(v), len(l))
	}
	for i := range l {
		if math.Float32bits(v[i]) != math.Float32bits(l[i]) {
			t.Fatalf("logit %d: view %v, Logits %v", i, v[i], l[i])
		}
	}
	p.tier = fetchFails{p.tier}
	if v := p.LogitsView(0); v != nil {
		t.Error("a tier that fetches its logits gave a view of them")
	}
	for _, v := range p.Logits(0, nil) {
		if !math.IsNaN(float64(v)) {
			t.Fatalf("a failed fetch gave logit %v, want NaN", v)
		}
	}
	for range 2 {
		if err := p.Step(ctx, b); err == nil || !strings.Contains(err.Error(), "device lost") {
			t.Fatalf("Step after a failed fetch: %v", err)
		}
	}
}
