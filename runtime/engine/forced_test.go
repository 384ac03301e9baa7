package engine

import (
	"context"
	"slices"
	"testing"

	"github.com/zrtdev/zrt/runtime/decode"
)

// TestFastForward: requests under a constraint that forces a third of
// their tokens (chainForcer) give the same streams, the model's greedy
// chain, with fast-forward and without it; with it the engine takes
// those tokens ahead of the model and computes them in the slots no
// request holds, so the requests finish in fewer steps; with one spare
// slot it takes a token a step (a request's forced tokens beyond the
// step's spare rows wait for later ones), and with none, none.
func TestFastForward(t *testing.T) {
	prompts := [][]int32{{5, 9, 11}, {7, 7, 7, 30}, {12}, {40, 41}}
	run := func(off bool, slots int) ([][]int32, Stats) {
		t.Helper()
		m := &scripted{t: t, slots: slots, maxPages: 16, kvPages: 100, last: map[int]int32{}}
		e, err := New(m, simTokenizer(t), Config{Slots: slots, ChunkCap: 64, NoFastForward: off})
		if err != nil {
			t.Fatal(err)
		}
		var evs []<-chan Event
		for _, p := range prompts {
			ev, err := e.Submit(context.Background(), Request{Tenant: "t", Prompt: p, Decode: decode.Params{MaxTokens: 40, IgnoreEOS: true,
				Constraint: &chainForcer{prev: p[len(p)-1], pos: len(p) - 1}}})
			if err != nil {
				t.Fatal(err)
			}
			evs = append(evs, ev)
		}
		out := make([][]int32, len(prompts))
		for ended := 0; ended < len(prompts); {
			if _, err := e.Step(context.Background()); err != nil {
				t.Fatal(err)
			}
			for i, ev := range evs {
				for len(ev) > 0 {
					x := <-ev
					if x.Token >= 0 {
						out[i] = append(out[i], x.Token)
					}
					if x.Finish != "" {
						if x.CompletionTokens != len(out[i]) {
							t.Fatalf("request %d: %d tokens, usage says %d", i, len(out[i]), x.CompletionTokens)
						}
						ended++
					}
				}
			}
		}
		return out, e.Stats()
	}
	plain, ps := run(true, 8)
	for i, p := range prompts {
		prev, pos := p[len(p)-1], len(p)-1
		for j, tok := range plain[i] {
			if want := simNext(prev, pos); tok != want && !(want == 2 && tok == 3+(prev*7+int32(pos))%(simVocab-3)) {
				t.Fatalf("request %d without fast-forward: token %d is %d, want %d", i, j, tok, want)
			}
			prev, pos = tok, pos+1
		}
	}
	if ps.ForcedTokens != 0 {
		t.Fatalf("fast-forward off: %d tokens forced", ps.ForcedTokens)
	}
	for _, slots := range []int{8, 5, 4} {
		got, st := run(false, slots)
		for i := range prompts {
			if !slices.Equal(got[i], plain[i]) {
				t.Errorf("%d slots: request %d with fast-forward: %v, without: %v", slots, i, got[i], plain[i])
			}
		}
		steps := st.Decode.Steps + st.Mixed.Steps
		t.Logf("%d slots: %d steps with fast-forward (%d tokens forced), %d without", slots, steps, st.ForcedTokens, ps.Decode.Steps+ps.Mixed.Steps)
		spare := slots - len(prompts)
		switch {
		case spare == 0 && (st.ForcedTokens != 0 || steps != ps.Decode.Steps+ps.Mixed.Steps):
			t.Errorf("no spare slot: %d tokens forced, %d steps (%d without)", st.ForcedTokens, steps, ps.Decode.Steps+ps.Mixed.Steps)
		case spare > 0 && st.ForcedTokens < 4*40/6:
			t.Errorf("%d spare slots: %d tokens forced of %d", spare, st.ForcedTokens, 4*40)
		case spare > 0 && steps >= ps.Decode.Steps+ps.Mixed.Steps-uint64(2*spare):
			t.Errorf("%d spare slots: %d steps with fast-forward, %d without", spare, steps, ps.Decode.Steps+ps.Mixed.Steps)
		}
	}
}
