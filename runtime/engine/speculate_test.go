package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/decode"
	"github.com/zrtdev/zrt/runtime/sample"
	"github.com/zrtdev/zrt/runtime/sequence"
	"github.com/zrtdev/zrt/runtime/spec"
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
	cpu := func(rows int) time.Duration { return ms(float64(rows)) }                     // every row a millisecond
	policy := func(cost func(int) time.Duration, rows ...int) *specPolicy {
		var p specPolicy
		for range specTrust {
			for _, r := range rows {
				p.observe(r, cost(r))
			}
		}
		return &p
	}
	// drafting is a GPU's policy with a draft replay of 4 ms that makes
	// rows requests' tokens of a position.
	drafting := func(rows int) *specPolicy {
		p := policy(gpu, 1, 8, 32, 64)
		p.observeDraft(ms(4))
		p.draftRows = rows
		return p
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
		{"cpu, batch 8, a 9-row step measured as fast as 8", func() *specPolicy {
			p := policy(cpu, 1, 4, 8)
			for range specTrust {
				p.observe(9, cpu(8))
			}
			return p
		}(), 8, 0.9, 0},
		{"cpu, batch 8 alone measured, one lucky 9-row step", func() *specPolicy {
			p := policy(cpu, 8)
			p.observe(9, cpu(8))
			return p
		}(), 8, 0.9, 0},
		// A draft replay of 4 ms (a model's first layers over a 10 ms
		// step) at batch 8: one replay a request's token costs more than
		// the tokens it brings; one replay a position, every request's
		// token in it, pays for three positions (a fourth's rows would
		// pass the 32 a step takes for the price of one).
		{"gpu, batch 8, a draft replay a token", drafting(1), 8, 0.9, 0},
		{"gpu, batch 8, a draft replay a position", drafting(16), 8, 0.9, 3},
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
	// A probe that cost more than spec.ProbeShare of the time so far (a
	// draft model's catch-up) holds the next until the steps after it
	// have made it that small a share again.
	p = policy(cpu, 1, 2)
	steps := 0
	for p.choose(1, 100, []*request{r})[r] == 0 {
		p.observe(1, ms(1))
		steps++
	}
	p.observeDraft(ms(200)) // the probe's draft: a catch-up of many tokens
	p.observe(2, ms(2))
	for steps = 0; p.choose(1, 100, []*request{r})[r] == 0 && steps < specProbeMax*20; steps++ {
		p.observe(1, ms(1))
	}
	if spent := p.budget.Share(); steps < 2*specProbe || spent > spec.ProbeShare {
		t.Errorf("the next probe after %d steps, the probes %.1f%% of the time: want it held to %.0f%%", steps, 100*spent, 100*spec.ProbeShare)
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

// probModel is the scripted model with logits that make a real
// distribution over four tokens (3 … 6): after token x the logit of
// token 3+i is table[(x-3) mod 4][i] (probLogits when table is nil),
// every other token's -Inf.
type probModel struct {
	*scripted
	tok   map[int]int32 // slot → token of its newest logits row
	table *[4][4]float32
}

var probLogits = [4][4]float32{{0.5, 1.5, 0, -1}, {1, 0.2, 0.8, 0.1}, {-0.5, 0, 1.2, 0.4}, {0.3, 0.9, 0.1, 1}}

func (m *probModel) Step(ctx context.Context, b runtime.Batch) error {
	for _, r := range b.Rows {
		if r.Logits {
			m.tok[r.Slot] = r.Token
		}
	}
	return m.scripted.Step(ctx, b)
}

func (m *probModel) Logits(slot int, dst []float32) []float32 {
	dst = append(dst[:0], make([]float32, simVocab)...)
	for i := range dst {
		dst[i] = float32(math.Inf(-1))
	}
	table := &probLogits
	if m.table != nil {
		table = m.table
	}
	row := table[((m.tok[slot]-3)%4+4)%4]
	copy(dst[3:7], row[:])
	return dst
}

func (m *probModel) Greedy(slot int) int32 {
	l := m.Logits(slot, nil)
	return int32(3 + slices.Index(l[3:7], slices.Max(l[3:7])))
}

// probOf is a table's probability of token 3+i after token x, at
// temperature 1.
func probOf(table *[4][4]float32, x int32, i int) float64 {
	row := table[((x-3)%4+4)%4]
	sum := 0.0
	for _, l := range row {
		sum += math.Exp(float64(l))
	}
	return math.Exp(float64(row[i])) / sum
}

// probTarget is the target's probability of token 3+i after token x.
func probTarget(x int32, i int) float64 { return probOf(&probLogits, x, i) }

// fixedDrafter proposes the same tokens whatever the history.
type fixedDrafter []int32

func (d fixedDrafter) Draft(history []int32, k int) []int32 { return d[:min(k, len(d))] }

// sampledSequences submits requests requests with distinct seeds, each
// sampling four tokens (temperature 1) after the prompt 1 3, eight at a
// time, steps e until all have ended, and counts the sequences.
func sampledSequences(t *testing.T, e *Engine, requests int) map[[4]int32]int {
	t.Helper()
	counts := map[[4]int32]int{}
	ctx := context.Background()
	next := 0
	var streams []<-chan Event
	var got [][]int32
	for done := 0; done < requests; {
		for next < requests && len(streams) < 8 {
			ev, err := e.Submit(ctx, Request{Tenant: "t", Prompt: []int32{1, 3},
				Decode: decode.Params{MaxTokens: 4, Sampling: sample.Params{Temperature: 1, Seed: uint64(next + 1)}}})
			if err != nil {
				t.Fatal(err)
			}
			streams, got = append(streams, ev), append(got, nil)
			next++
		}
		if _, err := e.Step(ctx); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(streams); i++ {
			for closed := false; !closed && len(streams[i]) > 0; {
				ev := <-streams[i]
				if ev.Token >= 0 {
					got[i] = append(got[i], ev.Token)
				}
				if ev.Finish != "" {
					if len(got[i]) != 4 {
						t.Fatalf("a request of 4 tokens ended with %v (%s)", got[i], ev.Finish)
					}
					counts[[4]int32(got[i])]++
					streams, got = slices.Delete(streams, i, i+1), slices.Delete(got, i, i+1)
					i--
					closed = true
					done++
				}
			}
		}
	}
	return counts
}

// chiTarget is the χ² statistic of counts of n sequences of four tokens
// after token 3 against the target's probabilities of the 256 sequences.
func chiTarget(counts map[[4]int32]int, n int) float64 {
	x := 0.0
	for a := range 4 {
		for b := range 4 {
			for c := range 4 {
				for d := range 4 {
					seq := [4]int32{int32(3 + a), int32(3 + b), int32(3 + c), int32(3 + d)}
					p := probTarget(3, a) * probTarget(seq[0], b) * probTarget(seq[1], c) * probTarget(seq[2], d)
					want := p * float64(n)
					diff := float64(counts[seq]) - want
					x += diff * diff / want
				}
			}
		}
	}
	return x
}

// chiCritical is the 0.1% critical value of χ² with 255 degrees of
// freedom (256 sequences of four tokens).
const chiCritical = 330.5

// TestSampledDistribution is the statistical test of speculative
// sampling: 24 000 requests with distinct seeds each sample four tokens
// (temperature 1) from a model whose next-token distribution over four
// tokens is known, through an engine that verifies a two-token draft at
// every step; a chi-square test over the 256 sequences of four tokens
// must not tell their counts from the target's probabilities (the
// statistic under the 0.1% critical value of 255 degrees of freedom,
// 330.5). The seeds are fixed, so the test cannot flake; a verify row
// read for the wrong position, or a token taken past a rejected draft,
// skews the counts far past it (see the control below).
func TestSampledDistribution(t *testing.T) {
	const requests = 24000
	m := &probModel{scripted: &scripted{t: t, slots: 32, maxPages: 4, kvPages: 64, last: map[int]int32{}}, tok: map[int]int32{}}
	e, err := New(m, simTokenizer(t), Config{Slots: 8, ChunkCap: 64, EventBuffer: 16,
		Speculative: Speculation{Kind: "ngram", K: 2, Fixed: true}, Drafter: fixedDrafter{4, 5}})
	if err != nil {
		t.Fatal(err)
	}
	counts := sampledSequences(t, e, requests)
	st := e.Stats()
	if st.SpecAccepted < requests/4 {
		t.Fatalf("%d draft tokens accepted in %d requests: too few tokens come from draft rows for the test to mean much", st.SpecAccepted, requests)
	}
	x := chiTarget(counts, requests)
	t.Logf("χ² = %.1f over 256 cells (255 degrees of freedom; 0.1%% critical value 330.5); %d drafts, %d draft tokens, %d accepted",
		x, st.SpecDrafts, st.SpecDraftTokens, st.SpecAccepted)
	if x > chiCritical {
		t.Errorf("χ² = %.1f: the sampled sequences do not follow the target's distribution", x)
	}
	// The control: the same counts with the last token taken after the
	// wrong position (as reading the row before it would) are rejected.
	skewed := map[[4]int32]int{}
	for seq, n := range counts {
		seq[3] = 3 + (seq[3]-3+1)%4
		skewed[seq] += n
	}
	if x := chiTarget(skewed, requests); x <= chiCritical {
		t.Errorf("χ² = %.1f for a skewed sample: the test cannot tell", x)
	}
}

// probDraftLogits are the draft model's logits in
// TestDraftModelSampledDistribution: another distribution over the same
// four tokens, which overlaps the target's by about three quarters.
var probDraftLogits = [4][4]float32{{1.2, 0.8, -0.5, 0}, {0.3, 0.9, 0.2, 0.6}, {0.4, -0.6, 0.2, 1.1}, {0.9, 0.2, 0.6, 0.4}}

// TestDraftModelSampledDistribution is TestSampledDistribution with a
// draft model (another known distribution over the four tokens) that
// draws each sampled request's two draft tokens from its own
// distribution, which the engine verifies by speculative sampling's
// rule: the 24 000 sequences must follow the target's distribution
// (χ² under the 0.1% critical value), with many draft tokens kept. The
// control runs the same requests under a rule with the classic mistake —
// a rejected draft replaced by a draw from the target's distribution
// instead of the residual max(p − q, 0) — and requires χ² far past the
// critical value: the test tells a wrong rule.
func TestDraftModelSampledDistribution(t *testing.T) {
	const requests = 24000
	run := func(rule func(d *decode.Decoder, src decode.Source, history []int32, pos int, draft int32, q sample.Dist) decode.Step) (float64, Stats) {
		m := &probModel{scripted: &scripted{t: t, slots: 32, maxPages: 4, kvPages: 64, last: map[int]int32{}}, tok: map[int]int32{}}
		dm := &probModel{scripted: &scripted{t: t, slots: 32, maxPages: 4, kvPages: 64, last: map[int]int32{}}, tok: map[int]int32{}, table: &probDraftLogits}
		e, err := New(m, simTokenizer(t), Config{Slots: 8, ChunkCap: 64, EventBuffer: 16,
			Speculative: Speculation{Kind: "draft", K: 2, Fixed: true}, DraftModel: dm})
		if err != nil {
			t.Fatal(err)
		}
		if rule != nil {
			e.resolve = rule
		}
		counts := sampledSequences(t, e, requests)
		return chiTarget(counts, requests), e.Stats()
	}
	x, st := run(nil)
	t.Logf("χ² = %.1f over 256 cells (0.1%% critical value %.1f); %d drafts, %d draft tokens, %d accepted (%.3f)",
		x, chiCritical, st.SpecDrafts, st.SpecDraftTokens, st.SpecAccepted, float64(st.SpecAccepted)/float64(st.SpecDraftTokens))
	if st.SpecAccepted < requests/2 || st.SpecAccepted == st.SpecDraftTokens {
		t.Fatalf("%d of %d draft tokens accepted in %d requests: the test wants many kept and some rejected", st.SpecAccepted, st.SpecDraftTokens, requests)
	}
	if x > chiCritical {
		t.Errorf("χ² = %.1f: the sampled sequences do not follow the target's distribution", x)
	}

	// The wrong rule: keep the draft with probability min(1, p/q), else
	// draw from p itself, which over-weights the draft's favourites.
	rng := rand.New(rand.NewPCG(9, 9))
	wrong := func(d *decode.Decoder, src decode.Source, history []int32, pos int, draft int32, q sample.Dist) decode.Step {
		logits := slices.Clone(src.Logits())
		p := math.Exp(float64(logits[draft]-slices.Max(logits))) / sumExp(logits)
		if rng.Float64()*q[draft] < p {
			only := make(decode.Logits, len(logits))
			for i := range only {
				only[i] = float32(math.Inf(-1))
			}
			only[draft] = 0
			return d.NextFrom(only, history, pos) // the draft, certainly
		}
		return d.NextFrom(decode.Logits(logits), history, pos)
	}
	bad, bst := run(wrong)
	t.Logf("the wrong rule: χ² = %.1f; %d of %d draft tokens kept", bad, bst.SpecAccepted, bst.SpecDraftTokens)
	if bad <= 2*chiCritical {
		t.Errorf("χ² = %.1f under a rule that draws a rejected draft's token from p: the test cannot tell it", bad)
	}
}

// sumExp is Σ exp(l − max l) over logits.
func sumExp(logits []float32) float64 {
	mx := slices.Max(logits)
	s := 0.0
	for _, l := range logits {
		s += math.Exp(float64(l - mx))
	}
	return s
}

// allowAll is a constraint that allows every token and is never done.
type allowAll struct{}

func (allowAll) Mask(allowed []uint64) {
	for i := range allowed {
		allowed[i] = ^uint64(0)
	}
}
func (allowAll) Accept(int32) error { return nil }
func (allowAll) Done() bool         { return false }

// TestConstrainedRowsDoNotSpeculate: a request under a constraint (a
// grammar's matcher advances a token at a time) gets no draft rows; an
// unconstrained one beside the same engine does; both streams are the
// model's greedy chain.
func TestConstrainedRowsDoNotSpeculate(t *testing.T) {
	for _, constrained := range []bool{true, false} {
		m := &scripted{t: t, slots: 8, maxPages: 16, kvPages: 100, last: map[int]int32{}}
		e, err := New(m, simTokenizer(t), Config{Slots: 2, ChunkCap: 64, Speculative: Speculation{Kind: "ngram", K: 3, Fixed: true},
			Drafter: &simDrafter{rng: rand.New(rand.NewPCG(1, 1)), accept: 1}})
		if err != nil {
			t.Fatal(err)
		}
		p := decode.Params{MaxTokens: 40, IgnoreEOS: true}
		if constrained {
			p.Constraint = allowAll{}
		}
		prompt := []int32{1, 7, 9}
		ev, err := e.Submit(context.Background(), Request{Tenant: "t", Prompt: prompt, Decode: p})
		if err != nil {
			t.Fatal(err)
		}
		var got []int32
		for done := false; !done; {
			if _, err := e.Step(context.Background()); err != nil {
				t.Fatal(err)
			}
			for len(ev) > 0 {
				x := <-ev
				if x.Token >= 0 {
					got = append(got, x.Token)
				}
				done = done || x.Finish != ""
			}
		}
		prev, pos := prompt[2], 2
		for i, tok := range got {
			want := simNext(prev, pos)
			if want == 2 {
				want = 3 + (prev*7+int32(pos))%(simVocab-3)
			}
			if tok != want {
				t.Fatalf("constrained %v: token %d is %d, want %d", constrained, i, tok, want)
			}
			prev, pos = tok, pos+1
		}
		st := e.Stats()
		if constrained != (st.SpecDraftTokens == 0) {
			t.Errorf("constrained %v: %d draft tokens verified", constrained, st.SpecDraftTokens)
		}
	}
}

// TestSpeculationRefused: a model with per-slot state cannot roll back
// (sequence.ErrSlotState), self needs a draft variant, and K is bounded.
func TestSpeculationRefused(t *testing.T) {
	for _, tc := range []struct {
		sp        Speculation
		slotState bool
		want      string
	}{
		{Speculation{Kind: "ngram", K: 4}, true, "per-slot state"},
		{Speculation{Kind: "self", K: 4}, false, "draft_layers"},
		{Speculation{Kind: "ngram", K: 99}, false, "outside [1, 32]"},
		{Speculation{Kind: "eagle", K: 4}, false, "nothing to draft with"},
	} {
		m := &scripted{t: t, slots: 8, maxPages: 16, kvPages: 100, last: map[int]int32{}, slotState: tc.slotState}
		_, err := New(m, simTokenizer(t), Config{Slots: 2, ChunkCap: 64, Speculative: tc.sp})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s (slot state %v): %v, want an error saying %q", tc.sp, tc.slotState, err, tc.want)
		}
		if tc.slotState && !errors.Is(err, sequence.ErrSlotState) {
			t.Errorf("%s on a model with slot state: %v is not sequence.ErrSlotState", tc.sp, err)
		}
	}
}

// TestRerunSampledDrafts: a step log of requests greedy and sampled
// served with a draft model reruns with the draft model (which makes
// every draft again, a sampled request's from its position's own stream
// of the request's seed), and without it refuses at the first step with
// a sampled draft, saying that it needs the draft model; a draft token
// changed in the log fails the rerun at that step, naming the request.
func TestRerunSampledDrafts(t *testing.T) {
	models := func() (*probModel, *probModel) {
		return &probModel{scripted: &scripted{t: t, slots: 16, maxPages: 4, kvPages: 64, last: map[int]int32{}}, tok: map[int]int32{}},
			&probModel{scripted: &scripted{t: t, slots: 16, maxPages: 4, kvPages: 64, last: map[int]int32{}}, tok: map[int]int32{}, table: &probDraftLogits}
	}
	m, dm := models()
	var log bytes.Buffer
	e, err := New(m, simTokenizer(t), Config{Slots: 4, ChunkCap: 64, StepLog: &log, Speculative: Speculation{Kind: "draft", K: 3, Fixed: true}, DraftModel: dm})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var streams []<-chan Event
	for i := range 6 {
		sp := sample.Params{Temperature: 1, Seed: uint64(i + 1)}
		if i%3 == 0 {
			sp = sample.Params{}
		}
		ev, err := e.Submit(ctx, Request{Tenant: "t", Prompt: []int32{1, int32(3 + i%4)}, Decode: decode.Params{MaxTokens: 40, Sampling: sp}})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, ev)
	}
	for open, steps := len(streams), 0; open > 0; steps++ {
		if steps > 2000 {
			t.Fatal("the engine did not finish")
		}
		if _, err := e.Step(ctx); err != nil {
			t.Fatal(err)
		}
		open -= drainAll(streams)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	st := e.Stats()
	if st.SpecAccepted == 0 || st.SpecAccepted == st.SpecDraftTokens {
		t.Fatalf("%d of %d draft tokens accepted: the test wants some kept and some rejected", st.SpecAccepted, st.SpecDraftTokens)
	}
	m2, dm2 := models()
	n, err := RerunDraft(ctx, m2, dm2, simTokenizer(t), bytes.NewReader(log.Bytes()))
	if err != nil || n == 0 {
		t.Fatalf("rerun with the draft model: %d steps, %v", n, err)
	}
	t.Logf("reran %d steps; %d of %d draft tokens accepted", n, st.SpecAccepted, st.SpecDraftTokens)
	m3, _ := models()
	_, err = Rerun(ctx, m3, simTokenizer(t), bytes.NewReader(log.Bytes()))
	var re *RerunError
	if !errors.As(err, &re) || !strings.Contains(re.Msg, "rerun BUNDLE LOG DRAFT") {
		t.Errorf("rerun without the draft model: %v, want it refused for the sampled drafts", err)
	}

	// Change one sampled draft token, halfway through the log.
	lines := bytes.Split(bytes.TrimSuffix(log.Bytes(), []byte("\n")), []byte("\n"))
	var wantStep int
	var wantID uint64
	for i := len(lines) / 2; i < len(lines) && wantStep == 0; i++ {
		var rec StepRecord
		if err := json.Unmarshal(lines[i], &rec); err != nil {
			t.Fatal(err)
		}
		for j, d := range rec.Drafts {
			if d.Sampled && len(d.Tokens) > 0 {
				rec.Drafts[j].Tokens[0] = 3 + (d.Tokens[0]-3+1)%4
				wantStep, wantID = rec.Step, d.ID
				break
			}
		}
		if wantStep != 0 {
			if lines[i], err = json.Marshal(rec); err != nil {
				t.Fatal(err)
			}
		}
	}
	if wantStep == 0 {
		t.Fatal("no step with a sampled draft in the second half of the log")
	}
	m4, dm4 := models()
	_, err = RerunDraft(ctx, m4, dm4, simTokenizer(t), bytes.NewReader(bytes.Join(lines, []byte("\n"))))
	if !errors.As(err, &re) || re.Step != wantStep || re.Request != wantID || !strings.Contains(re.Msg, "drafted") {
		t.Fatalf("rerun of a log with a changed draft token at step %d, request %d: %v", wantStep, wantID, err)
	}
	t.Logf("changed log: %v", err)
}

// drainAll reads every event waiting on the streams, setting each one
// that closed to nil, and returns how many closed.
func drainAll(streams []<-chan Event) int {
	closed := 0
	for i, ch := range streams {
		for drained := false; ch != nil && !drained; {
			select {
			case _, ok := <-ch:
				if !ok {
					streams[i], ch = nil, nil
					closed++
				}
			default:
				drained = true
			}
		}
	}
	return closed
}

// TestDraftsBatched serves 24 greedy requests through 8 slots with and
// without speculation by a model draft right with probability 0.9, on
// models whose steps take a GPU's times by variant (the llama 7B shape's
// on an H200: 2.6, 3.5, 4.6 and 11.3 ms for its 1-, 4-, 16- and 64-row
// decode variants; a draft step a tenth of the target's), after a
// request served alone (so the policy has timed a one-row step, as a
// server's first client has it do). The engine drafts every request's
// token of a position in one replay (a draft model's last tokens before
// the pending one too), so that speculating pays at 8 clients:
// self-speculation 1.60×, where with only the one-row draft variant, a
// replay a request's token, it drafts little (1.05×), and a draft model
// 1.47×.
func TestDraftsBatched(t *testing.T) {
	if testHookSpeculative != nil {
		t.Skip("compares speculation with none; -speculative turns it on in both")
	}
	ladder := []int{1, 4, 16, 64}
	step := []time.Duration{2600 * time.Microsecond, 3500 * time.Microsecond, 4600 * time.Microsecond, 11300 * time.Microsecond}
	byVariant := func(scale float64) func(runtime.ShapeKey) time.Duration {
		return func(k runtime.ShapeKey) time.Duration {
			i, f := min(sort.SearchInts(ladder, k.Rows), len(ladder)-1), scale
			switch k.Stage {
			case runtime.Prefill:
				i = len(ladder) - 1
			case runtime.Draft: // the model's first layers
				f /= 10
			}
			return time.Duration(f * float64(step[i]))
		}
	}
	for _, tc := range []struct {
		name    string
		sp      Speculation
		drafts  []int // the target's draft variants (self)
		model   bool  // a draft model
		least   float64
		batched bool
	}{
		{"self, a one-row draft variant", Speculation{Kind: "self", K: 3}, []int{1}, false, 0.98, false},
		{"self, a draft variant for each decode variant", Speculation{Kind: "self", K: 3}, ladder, false, 1.3, true},
		{"a draft model", Speculation{Kind: "draft", K: 3}, nil, true, 1.3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := func(sp Speculation) (time.Duration, Stats, int) {
				clock := time.Unix(1_700_000_000, 0)
				start := clock
				m := &scripted{t: t, slots: 64, maxPages: 32, kvPages: 1200, last: map[int]int32{}, clock: &clock, cost: byVariant(1), decodeRows: ladder}
				replays := 0
				cfg := Config{Slots: 8, ChunkCap: 64, Now: func() time.Time { return clock }, Speculative: sp}
				var model Model = m
				switch {
				case !sp.On():
				case tc.model:
					dm := &scripted{t: t, slots: 64, maxPages: 32, kvPages: 1200, last: map[int]int32{}, clock: &clock, cost: byVariant(0.1), decodeRows: ladder}
					cfg.DraftModel = &countSteps{&noisyDraft{dm, rand.New(rand.NewPCG(7, 8)), 0.9}, runtime.Decode, &replays}
				default:
					m.draftAccept, m.draftRng, m.draftRows = 0.9, rand.New(rand.NewPCG(5, 6)), tc.drafts
					model = &countSteps{m, runtime.Draft, &replays}
				}
				e, err := New(model, simTokenizer(t), cfg)
				if err != nil {
					t.Fatal(err)
				}
				serve := func(n int, tokens func(i int) int) {
					var streams []<-chan Event
					for i := range n {
						ev, err := e.Submit(context.Background(), Request{Tenant: "t", Prompt: []int32{1, int32(5 + i), 9},
							Decode: decode.Params{MaxTokens: tokens(i), IgnoreEOS: true}})
						if err != nil {
							t.Fatal(err)
						}
						streams = append(streams, ev)
					}
					for open := len(streams); open > 0; open -= drainAll(streams) {
						if _, err := e.Step(context.Background()); err != nil {
							t.Fatal(err)
						}
					}
				}
				serve(1, func(int) int { return 40 })
				serve(24, func(i int) int { return 60 + 37*i%140 })
				return clock.Sub(start), e.Stats(), replays
			}
			off, _, _ := run(Speculation{})
			on, st, replays := run(tc.sp)
			speedup := off.Seconds() / on.Seconds()
			t.Logf("off %v, on %v: %.2f× (%d drafts, %d tokens, %d accepted, %d draft replays)", off, on, speedup, st.SpecDrafts, st.SpecDraftTokens, st.SpecAccepted, replays)
			if speedup < tc.least {
				t.Errorf("%.2f× at 8 clients with drafts right 9 times in 10: want %.2f× at least", speedup, tc.least)
			}
			if tc.batched && replays*2 > int(st.SpecDraftTokens) {
				t.Errorf("%d draft replays for %d draft tokens of 8 requests: the drafts were not batched", replays, st.SpecDraftTokens)
			}
		})
	}
}

// countSteps counts a model's steps of one stage in n.
type countSteps struct {
	Model
	stage runtime.Stage
	n     *int
}

func (m *countSteps) Step(ctx context.Context, b runtime.Batch) error {
	if b.Key.Stage == m.stage {
		*m.n++
	}
	return m.Model.Step(ctx, b)
}
