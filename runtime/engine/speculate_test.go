package engine

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/decode"
)

// TestSpecPolicy checks the engine's choice of draft lengths from
// acceptance and step costs: where a step's rows are nearly free (a
// memory-bound GPU at low batch) likely drafts are verified; where every
// row costs what a request's share of the step costs (a compute-bound
// CPU, or a GPU at high batch) nothing is; nothing is drafted before a
// step was measured, except a one-token probe after specProbe steps.
func TestSpecPolicy(t *testing.T) {
	req := func(alpha float64, n int) *request {
		s := &speculating{tried: 20, accepted: alpha*22 - 1}
		for range n {
			s.draft = append(s.draft, 5)
		}
		return &request{spec: s}
	}
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	gpu := func(rows int) time.Duration { return ms(10 + 0.5*float64(max(rows-32, 0))) } // flat to 32 rows, then 0.5 ms a row
	cpu := func(rows int) time.Duration { return ms(float64(rows)) }                      // every row a millisecond
	policy := func(cost func(int) time.Duration, rows ...int) *specPolicy {
		var p specPolicy
		for _, r := range rows {
			p.observe(r, cost(r))
		}
		return &p
	}
	for _, tc := range []struct {
		name  string
		p     *specPolicy
		base  int
		alpha float64
		want  int // draft tokens of the first request
	}{
		{"gpu, batch 1, likely drafts", policy(gpu, 1, 8, 32, 64), 1, 0.8, 4},
		{"gpu, batch 1, unlikely drafts still nearly free", policy(gpu, 1, 8, 32, 64), 1, 0.1, 4},
		{"gpu, batch 64", policy(gpu, 1, 8, 32, 64, 96), 64, 0.8, 0},
		{"cpu, batch 1", policy(cpu, 1, 2, 4), 1, 0.9, 0},
		{"cpu, batch 8", policy(cpu, 1, 4, 8, 16), 8, 0.9, 0},
		{"unmeasured", policy(cpu), 1, 0.9, 0},
		{"one step measured: proportional", policy(gpu, 1), 1, 0.9, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reqs := []*request{req(tc.alpha, 4)}
			for range tc.base - 1 {
				reqs = append(reqs, req(tc.alpha, 4))
			}
			got := tc.p.choose(tc.base, 100, reqs)[reqs[0]]
			if got != tc.want {
				t.Fatalf("α %.1f at batch %d: %d draft tokens, want %d", tc.alpha, tc.base, got, tc.want)
			}
		})
	}
	// A probe after specProbe steps without a draft, the next after
	// twice as many.
	p := policy(cpu, 1, 2)
	r := req(0.9, 4)
	for i := 1; i <= 3*specProbe; i++ {
		got := p.choose(1, 100, []*request{r})[r]
		if want := map[bool]int{true: 1, false: 0}[i == specProbe || i == 3*specProbe]; got != want {
			t.Fatalf("step %d without drafts: %d draft tokens, want %d", i, got, want)
		}
	}
}

// timedModel is the scripted model on a clock that each step moves on
// by the step's cost by rows.
type timedModel struct {
	*scripted
	clock *time.Time
	cost  func(rows int) time.Duration
}

func (m *timedModel) Step(ctx context.Context, b runtime.Batch) error {
	*m.clock = m.clock.Add(m.cost(len(b.Rows)))
	return m.scripted.Step(ctx, b)
}

// TestSpeculationNeverALoss serves the same greedy requests with and
// without speculation (drafts right with probability 0.7) on a model
// whose steps take the time a cost function of their rows gives, and
// compares the time to finish them all: where rows are nearly free the
// speculative engine is faster, and where they cost their share of the
// step (compute-bound, one or many requests) it turns speculation off by
// itself and is no slower than 0.98× of it off.
func TestSpeculationNeverALoss(t *testing.T) {
	memory := func(rows int) time.Duration { return 10*time.Millisecond + time.Duration(rows)*100*time.Microsecond }
	compute := func(rows int) time.Duration { return time.Duration(rows) * time.Millisecond }
	for _, tc := range []struct {
		name    string
		cost    func(int) time.Duration
		clients int
		faster  bool
	}{
		{"memory-bound, 1 client", memory, 1, true},
		{"memory-bound, 8 clients", memory, 8, true},
		{"compute-bound, 1 client", compute, 1, false},
		{"compute-bound, 8 clients", compute, 8, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := func(sp Speculation) (time.Duration, Stats) {
				clock := time.Unix(1_700_000_000, 0)
				start := clock
				m := &timedModel{scripted: &scripted{t: t, slots: 16, maxPages: 32, kvPages: 400, last: map[int]int32{}}, clock: &clock, cost: tc.cost}
				cfg := Config{Slots: 8, ChunkCap: 64, Now: func() time.Time { return clock }, Speculative: sp,
					Drafter: &simDrafter{rng: rand.New(rand.NewPCG(3, 4)), accept: 0.7}}
				e, err := New(m, simTokenizer(t), cfg)
				if err != nil {
					t.Fatal(err)
				}
				var streams []<-chan Event
				for i := range tc.clients {
					ev, err := e.Submit(context.Background(), Request{Tenant: "t", Prompt: []int32{1, int32(5 + i), 9},
						Decode: decode.Params{MaxTokens: 300, IgnoreEOS: true}})
					if err != nil {
						t.Fatal(err)
					}
					streams = append(streams, ev)
				}
				for open := len(streams); open > 0; {
					if _, err := e.Step(context.Background()); err != nil {
						t.Fatal(err)
					}
					for i, ch := range streams {
						for ch != nil && len(ch) > 0 {
							if _, ok := <-ch; !ok {
								streams[i], ch = nil, nil
								open--
							}
						}
						if ch != nil {
							select {
							case _, ok := <-ch:
								if !ok {
									streams[i] = nil
									open--
								}
							default:
							}
						}
					}
				}
				return clock.Sub(start), e.Stats()
			}
			off, _ := run(Speculation{})
			on, st := run(Speculation{Kind: "ngram", K: 4})
			speedup := off.Seconds() / on.Seconds()
			t.Logf("off %v, on %v: %.2f× (%d drafts, %d tokens, %d accepted)", off, on, speedup, st.SpecDrafts, st.SpecDraftTokens, st.SpecAccepted)
			switch {
			case tc.faster && speedup < 1.2:
				t.Errorf("%.2f× with drafts accepted with probability 0.7 on nearly free rows: want faster", speedup)
			case !tc.faster && speedup < 0.98:
				t.Errorf("%.2f×: speculation cost more than 2%% where it cannot pay", speedup)
			}
		})
	}
}
