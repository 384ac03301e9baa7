package decode

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/zrtdev/zrt/runtime/grammar"
	"github.com/zrtdev/zrt/runtime/sample"
)

// matcher compiles a GBNF grammar for the tiny vocabulary.
func matcher(t *testing.T, gbnf string) *grammar.Matcher {
	t.Helper()
	g, err := grammar.NewCompiler(tiny(t), grammar.Limits{}).Compile(context.Background(), grammar.Spec{GBNF: gbnf})
	if err != nil {
		t.Fatal(err)
	}
	return g.NewMatcher()
}

// prefer returns logits that rank the tokens in the given order, most
// likely first, and the others below them.
func prefer(ids ...int32) []float32 {
	l := make([]float32, 9)
	for i, id := range ids {
		l[id] = float32(20 - i)
	}
	return l
}

// TestConstraintGreedy: a constrained greedy request never takes the
// model's own choice, takes the most likely allowed token instead, and
// stops (EOG) as soon as the grammar is done, showing the last token.
func TestConstraintGreedy(t *testing.T) {
	d := New(tiny(t), Params{MaxTokens: 9, ContextLength: 100, Constraint: matcher(t, `root ::= " hello" " world"? "!"`)})
	// The model wants "▁STOP" (5) then "▁hello" again; the grammar allows
	// " hello" first, then " world" or "!".
	src := &source{greedy: 5, logits: prefer(5, 4, 3)}
	st := d.NextFrom(src, nil, 0)
	if st.Token != 3 || st.Finish != Running || src.fetched != 1 {
		t.Fatalf("step 1 = %+v (fetched %d), want token 3 from the logits", st, src.fetched)
	}
	src = &source{greedy: 3, logits: prefer(3, 8, 4)}
	if st = d.NextFrom(src, []int32{3}, 1); st.Token != 8 || st.Finish != EOG || st.Text != "!" {
		t.Fatalf("step 2 = %+v, want token 8 '!' finishing with EOG", st)
	}
}

// viewSource is a source that also shows its logits in place.
type viewSource struct {
	source
	viewed int
}

func (s *viewSource) LogitsView() []float32 {
	s.viewed++
	return s.logits
}

// TestConstraintViewLogits: a constrained greedy request reads a source's
// logits through its view, without a copy and without changing them, and
// takes the same tokens as from a copy.
func TestConstraintViewLogits(t *testing.T) {
	d := New(tiny(t), Params{MaxTokens: 9, ContextLength: 100, Constraint: matcher(t, `root ::= " hello" " world"? "!"`)})
	src := &viewSource{source: source{greedy: 5, logits: prefer(5, 4, 3)}}
	want := slices.Clone(src.logits)
	st := d.NextFrom(src, nil, 0)
	if st.Token != 3 || st.Finish != Running || src.fetched != 0 || src.viewed != 1 {
		t.Fatalf("step 1 = %+v (copied %d, viewed %d), want token 3 through the view", st, src.fetched, src.viewed)
	}
	if !slices.Equal(src.logits, want) {
		t.Errorf("the view's logits changed: %v, were %v", src.logits, want)
	}
	src = &viewSource{source: source{greedy: 3, logits: prefer(3, 8, 4)}}
	if st = d.NextFrom(src, []int32{3}, 1); st.Token != 8 || st.Finish != EOG || src.fetched != 0 {
		t.Fatalf("step 2 = %+v (copied %d), want token 8 finishing with EOG", st, src.fetched)
	}
}

// TestConstraintDeviceMask: after DeviceMask, a constrained greedy request
// takes the step's greedy choice (the device's, under that mask) without
// reading the logits; the mask is the grammar's once MaskReady returned;
// a sampled request or one without a constraint gets none.
func TestConstraintDeviceMask(t *testing.T) {
	d := New(tiny(t), Params{MaxTokens: 9, ContextLength: 100, Constraint: matcher(t, `root ::= " hello" " world"? "!"`)})
	m := d.DeviceMask()
	d.MaskReady()
	for id := range int32(9) {
		if got, want := m[0]>>id&1 == 1, id == 3; got != want {
			t.Errorf("mask bit of token %d = %v, want %v", id, got, want)
		}
	}
	src := &source{greedy: 3, logits: prefer(5, 4, 3)}
	if st := d.NextFrom(src, nil, 0); st.Token != 3 || src.fetched != 0 {
		t.Fatalf("step 1 = %+v (fetched %d), want the device's token 3 and no logits read", st, src.fetched)
	}
	// Without DeviceMask, the next step reads the logits again.
	src = &source{greedy: 5, logits: prefer(5, 8, 4)}
	if st := d.NextFrom(src, []int32{3}, 1); st.Token != 8 || src.fetched != 1 {
		t.Fatalf("step 2 = %+v (fetched %d), want token 8 from the logits", st, src.fetched)
	}
	if m := New(tiny(t), Params{MaxTokens: 9, ContextLength: 100}).DeviceMask(); m != nil {
		t.Errorf("an unconstrained request's mask: %v", m)
	}
	sampled := Params{MaxTokens: 9, ContextLength: 100, Sampling: sample.Params{Temperature: 1}, Constraint: matcher(t, `root ::= "!"`)}
	if m := New(tiny(t), sampled).DeviceMask(); m != nil {
		t.Errorf("a sampled request's mask: %v", m)
	}
}

// TestConstraintEOG: the end-of-generation token is masked until the
// output is complete, and taken once it is and the model picks it.
func TestConstraintEOG(t *testing.T) {
	d := New(tiny(t), Params{MaxTokens: 9, ContextLength: 100, Constraint: matcher(t, `root ::= " hello" "!"*`)})
	if st := d.Next(prefer(2, 3), nil, 0); st.Token != 3 || st.Finish != Running {
		t.Fatalf("step 1 = %+v, want token 3: EOG is not allowed before a complete match", st)
	}
	if st := d.Next(prefer(8, 2), []int32{3}, 1); st.Token != 8 || st.Finish != Running {
		t.Fatalf("step 2 = %+v, want token 8", st)
	}
	if st := d.Next(prefer(2, 8), []int32{3, 8}, 2); st.Token != -1 || st.Finish != EOG {
		t.Fatalf("step 3 = %+v, want EOG", st)
	}
}

// TestConstraintSampled: sampling at a high temperature only ever yields
// allowed tokens, and logprobs give the masked tokens no mass.
func TestConstraintSampled(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		p := Params{MaxTokens: 20, ContextLength: 100, Logprobs: true, TopLogprobs: 5,
			Sampling:   sample.Params{Temperature: 5, Seed: seed},
			Constraint: matcher(t, `root ::= ( " hello" | " world" ) "!"{1,2}`)}
		d := New(tiny(t), p)
		var fed []int32
		text := ""
		for i := 0; ; i++ {
			st := d.Next(make([]float32, 9), fed, i) // uniform logits
			text += st.Text
			if st.Logprobs != nil {
				for _, lp := range st.Logprobs.Top {
					if math.IsInf(lp.Logprob, -1) {
						continue
					}
					if i == 0 && lp.Token != 3 && lp.Token != 4 {
						t.Errorf("seed %d: top logprob for masked token %d: %v", seed, lp.Token, lp.Logprob)
					}
				}
				if i == 0 && math.Abs(st.Logprobs.Logprob-math.Log(0.5)) > 1e-6 {
					t.Errorf("seed %d: first token logprob %v, want log(1/2) over the two allowed", seed, st.Logprobs.Logprob)
				}
			}
			if st.Finish != Running {
				if st.Finish != EOG {
					t.Fatalf("seed %d: finished with %q after %q", seed, st.Finish, text)
				}
				break
			}
			fed = append(fed, st.Token)
		}
		if text != " hello!" && text != " world!" && text != " hello!!" && text != " world!!" {
			t.Errorf("seed %d: output %q is outside the grammar", seed, text)
		}
	}
}

// TestConstraintLength: max tokens still ends a constrained request.
func TestConstraintLength(t *testing.T) {
	d := New(tiny(t), Params{MaxTokens: 1, ContextLength: 100, Constraint: matcher(t, `root ::= " hello" " world"`)})
	if st := d.Next(prefer(3), nil, 0); st.Token != 3 || st.Finish != Length {
		t.Fatalf("got %+v, want token 3 finishing with length", st)
	}
}

// countingConstraint counts its Accept calls.
type countingConstraint struct {
	Constraint
	accepts int
}

func (c *countingConstraint) Accept(tok int32) error {
	c.accepts++
	return c.Constraint.Accept(tok)
}

// countingEnder is a countingConstraint that says which tokens end it
// (the matcher's Ends): Advance leaves its Accept to MaskNext.
type countingEnder struct {
	*countingConstraint
}

func (c countingEnder) Ends(tok int32) bool {
	return c.Constraint.(Ender).Ends(tok)
}

// TestConstraintAdvance: Advance accepts the device's choice ahead of
// NextFrom, which then takes the same step without accepting it again
// (the next mask computed by MaskNext, before NextFrom or while it runs,
// when Advance says it is due); a choice the mask does not allow is left
// to NextFrom, which ends the request as it would have; without a device
// mask Advance does nothing.
func TestConstraintAdvance(t *testing.T) {
	const (
		plain = iota
		ahead
		concurrent // MaskNext on another goroutine while NextFrom runs
		deferred   // an Ender: MaskNext accepts, concurrently
	)
	run := func(mode int) ([]Step, int) {
		c := &countingConstraint{Constraint: matcher(t, `root ::= " hello" " world"? "!"`)}
		var cons Constraint = c
		if mode == deferred {
			cons = countingEnder{c}
		}
		d := New(tiny(t), Params{MaxTokens: 9, ContextLength: 100, Constraint: cons})
		var steps []Step
		for i, g := range []int32{3, 4, 8} {
			if d.DeviceMask() == nil {
				t.Fatalf("step %d: no device mask", i)
			}
			d.MaskReady()
			src := &source{greedy: g, logits: prefer(5)}
			due := mode != plain && d.Advance(src)
			if due && i == 2 {
				t.Errorf("step %d: Advance says a mask is due after the last token", i)
			}
			if due && mode == ahead {
				d.MaskNext()
			}
			if due && (mode == concurrent || mode == deferred) {
				go d.MaskNext()
			}
			st := d.NextFrom(src, nil, i)
			if src.fetched != 0 {
				t.Errorf("step %d read the logits", i)
			}
			steps = append(steps, st)
			if st.Finish != Running {
				break
			}
		}
		return steps, c.accepts
	}
	want, n := run(plain)
	if len(want) != 3 || want[2].Finish != EOG || want[2].Text != "!" {
		t.Fatalf("steps %+v, want hello, world, then ! finishing", want)
	}
	for _, mode := range []int{ahead, concurrent, deferred} {
		got, m := run(mode)
		// " hello" and "!" are forced: the constraint takes each when the
		// mask that allows it alone is computed (lookahead), in every
		// mode; " world" once, by Advance, MaskNext or NextFrom.
		if len(got) != len(want) || m != n || n != 3 {
			t.Fatalf("mode %d: with Advance: %+v after %d accepts; without: %+v after %d", mode, got, m, want, n)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("mode %d step %d: %+v with Advance, %+v without", mode, i, got[i], want[i])
			}
		}
	}
	// A choice outside the mask (5: STOP) is not accepted ahead; NextFrom
	// refuses it and ends the request.
	c := &countingConstraint{Constraint: matcher(t, `root ::= " hello" "!"`)}
	d := New(tiny(t), Params{MaxTokens: 9, ContextLength: 100, Constraint: c})
	d.DeviceMask()
	d.MaskReady()
	src := &source{greedy: 5, logits: prefer(5)}
	before := c.accepts // (the forced " hello" and "!", taken ahead)
	d.Advance(src)
	if c.accepts != before {
		t.Errorf("Advance accepted a token the mask refuses")
	}
	if st := d.NextFrom(src, nil, 0); st.Token != -1 || st.Finish != EOG {
		t.Errorf("a refused device choice: %+v, want the request ended", st)
	}
	// No device mask: nothing to do.
	c = &countingConstraint{Constraint: matcher(t, `root ::= " hello" | "!"`)}
	d = New(tiny(t), Params{MaxTokens: 9, ContextLength: 100, Constraint: c})
	d.MaskReady()
	d.Advance(&source{greedy: 3})
	if c.accepts != 0 {
		t.Errorf("Advance without a device mask accepted a token")
	}
}

// slowConstraint's masks wait for gate; Release reports on released.
type slowConstraint struct {
	Constraint
	gate     chan struct{}
	released chan struct{}
}

func (c *slowConstraint) Mask(allowed []uint64) {
	<-c.gate
	c.Constraint.Mask(allowed)
}

func (c *slowConstraint) Release() { close(c.released) }

// TestConstraintRelease: Release gives the constraint back at once when
// no mask is being computed, and after the mask in flight otherwise,
// without waiting for it.
func TestConstraintRelease(t *testing.T) {
	c := &slowConstraint{Constraint: matcher(t, `root ::= " hello"`), gate: make(chan struct{}), released: make(chan struct{})}
	d := New(tiny(t), Params{MaxTokens: 9, ContextLength: 100, Constraint: c}) // its first mask waits for the gate
	d.Release()
	select {
	case <-c.released:
		t.Fatal("released while its mask was being computed")
	default:
	}
	close(c.gate)
	<-c.released // after the mask: the test times out otherwise

	c = &slowConstraint{Constraint: matcher(t, `root ::= " hello"`), gate: make(chan struct{}), released: make(chan struct{})}
	close(c.gate)
	d = New(tiny(t), Params{MaxTokens: 9, ContextLength: 100, Constraint: c})
	d.MaskReady()
	d.Release()
	select {
	case <-c.released:
	default:
		t.Fatal("no mask in flight, yet not released at once")
	}
}

// refusingEnder allows what its matcher allows but refuses every Accept
// after the first: a constraint whose mask and Accept disagree.
type refusingEnder struct {
	Constraint
	accepts int
}

func (c *refusingEnder) Accept(tok int32) error {
	if c.accepts++; c.accepts > 1 {
		return errors.New("refused")
	}
	return c.Constraint.Accept(tok)
}

func (c *refusingEnder) Ends(tok int32) bool { return c.Constraint.(Ender).Ends(tok) }

// TestConstraintDeferredRefused: a token Advance took from an Ender that
// MaskNext's Accept then refuses is shown (the step was decided), and the
// next step ends the request, as a dead end of the grammar does.
func TestConstraintDeferredRefused(t *testing.T) {
	c := &refusingEnder{Constraint: matcher(t, `root ::= " hello" " world" "!"`)}
	d := New(tiny(t), Params{MaxTokens: 9, ContextLength: 100, Constraint: c})
	var steps []Step
	for i, g := range []int32{3, 4, 8} {
		if d.DeviceMask() == nil {
			t.Fatalf("step %d: no device mask", i)
		}
		d.MaskReady()
		src := &source{greedy: g, logits: prefer(g)}
		if d.Advance(src) {
			d.MaskNext()
		}
		st := d.NextFrom(src, nil, i)
		steps = append(steps, st)
		if st.Finish != Running {
			break
		}
	}
	if len(steps) != 3 || steps[1].Token != 4 || steps[2].Token != -1 || steps[2].Finish != EOG {
		t.Fatalf("steps %+v: want hello, world (refused after), then the end", steps)
	}
}

// TestNextForced: where the grammar allows one token alone NextForced
// takes it without logits (and may end the request with it); where it
// allows several, or only the end of generation, or the request wants
// logprobs or has no tokens left, it takes nothing.
func TestNextForced(t *testing.T) {
	g := `root ::= " hello" " world" ( "!" | " STOP" ) "!"`
	d := New(tiny(t), Params{MaxTokens: 9, ContextLength: 100, Constraint: matcher(t, g)})
	for i, want := range []int32{3, 4} {
		st, ok := d.NextForced(i)
		if !ok || st.Token != want || st.Finish != Running {
			t.Fatalf("forced token %d = %+v, %v; want %d", i, st, ok, want)
		}
	}
	if st, ok := d.NextForced(2); ok {
		t.Fatalf("\"!\" and \" STOP\" allowed, yet forced %+v", st)
	}
	if st := d.Next(prefer(5, 8), []int32{3, 4}, 2); st.Token != 5 {
		t.Fatalf("step 3 = %+v, want the model's \" STOP\"", st)
	}
	if st, ok := d.NextForced(3); !ok || st.Token != 8 || st.Finish != EOG || st.Text != "!" {
		t.Fatalf("the last token = %+v, %v; want \"!\" forced, ending the output", st, ok)
	}
	if _, ok := d.NextForced(4); ok {
		t.Fatal("a token forced after the end")
	}

	// Only the end of generation left: the model's step takes it.
	d = New(tiny(t), Params{MaxTokens: 9, ContextLength: 100, Constraint: matcher(t, `root ::= " hello" "!"?`)})
	if _, ok := d.NextForced(0); !ok {
		t.Fatal("\" hello\" not forced")
	}
	if st := d.Next(prefer(2), []int32{3}, 1); st.Finish != EOG {
		t.Fatalf("after \" hello\" = %+v, want EOG", st)
	}
	for _, p := range []Params{
		{MaxTokens: 9, ContextLength: 100, Logprobs: true},
		{MaxTokens: 0, ContextLength: 100},
	} {
		p.Constraint = matcher(t, g)
		if st, ok := New(tiny(t), p).NextForced(0); ok {
			t.Errorf("%+v: forced %+v", p, st)
		}
	}
	if _, ok := New(tiny(t), Params{MaxTokens: 9, ContextLength: 100}).NextForced(0); ok {
		t.Error("an unconstrained request forced a token")
	}
}

// TestForcedNoDraw: a sampled request takes a token its constraint allows
// alone without a draw, so its stream is the same whether the engine took
// that token ahead of the model (NextForced) or from the step's logits.
func TestForcedNoDraw(t *testing.T) {
	g := `root ::= ( " hello" | " world" ) " world" ( " hello" | " world" | "!" ){3}`
	for seed := uint64(0); seed < 10; seed++ {
		var streams [2][]int32
		for k, forced := range []bool{false, true} {
			d := New(tiny(t), Params{MaxTokens: 9, ContextLength: 100, Sampling: sample.Params{Temperature: 2, Seed: seed}, Constraint: matcher(t, g)})
			for i := 0; ; i++ {
				st, ok := Step{}, false
				if forced {
					st, ok = d.NextForced(i)
				}
				if !ok {
					st = d.Next(make([]float32, 9), streams[k], i)
				}
				if st.Token >= 0 {
					streams[k] = append(streams[k], st.Token)
				}
				if st.Finish != Running {
					break
				}
			}
		}
		if !slices.Equal(streams[0], streams[1]) || len(streams[0]) != 5 || streams[0][1] != 4 {
			t.Errorf("seed %d: %v from the logits, %v with the forced token taken ahead", seed, streams[0], streams[1])
		}
	}
}
