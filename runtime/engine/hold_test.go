package engine

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/decode"
)

// stillClock is a clock that stands still, as a simulation's does
// within a step: the engine measures no step's time, and holds prompts
// by its rule for unmeasured variants (planPrefill).
func stillClock() time.Time { return time.Unix(1, 0) }

// submitPrompt submits to e a request of an n-token prompt (ids 3 to 52
// over and over) that generates 100 tokens, whatever it samples.
func submitPrompt(ctx context.Context, t *testing.T, e *Engine, n int) {
	t.Helper()
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(3 + i%50)
	}
	if _, err := e.Submit(ctx, Request{Prompt: p, Decode: decode.Params{MaxTokens: 100, IgnoreEOS: true}}); err != nil {
		t.Fatal(err)
	}
}

// TestPrefillHold: with the variants' times unmeasured, a prompt that arrives while another request decodes
// waits up to PrefillHold steps for more prompts to share its prefill
// step, and no longer; prompts that fill the step with the decoding rows
// go at once, as does any prompt when nothing decodes; with the hold off
// a prompt goes the next step.
func TestPrefillHold(t *testing.T) {
	for _, c := range []struct {
		name      string
		hold      int
		prompts   []int // the prompts that arrive after the first request decodes
		wantSteps int   // decode-only steps before their prefill
	}{
		{"held to the bound", 3, []int{8}, 3},
		{"default bound", 0, []int{8}, 4},
		{"off", -1, []int{8}, 0},
		{"filling the step", 3, []int{40, 30}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := &scripted{t: t, slots: 4, maxPages: 16, kvPages: 200, last: map[int]int32{}}
			e, err := New(m, simTokenizer(t), Config{Slots: 4, ChunkCap: 64, PrefillHold: c.hold, Now: stillClock})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			submit := func(n int) { submitPrompt(ctx, t, e, n) }
			// Nothing decodes: the first prompt is not held.
			submit(8)
			if _, err := e.Step(ctx); err != nil {
				t.Fatal(err)
			}
			if st := e.Stats(); st.Mixed.Steps != 1 || len(m.batch.Rows) != 8 {
				t.Fatalf("first step: %d mixed steps of %d rows; want the prompt at once", st.Mixed.Steps, len(m.batch.Rows))
			}
			for _, n := range c.prompts {
				submit(n)
			}
			decodeSteps := 0
			for range 10 {
				if _, err := e.Step(ctx); err != nil {
					t.Fatal(err)
				}
				if e.Stats().Mixed.Steps > 1 {
					break
				}
				decodeSteps++
			}
			if decodeSteps != c.wantSteps {
				t.Errorf("%d decode-only steps before the new prompts' prefill, want %d", decodeSteps, c.wantSteps)
			}
			if len(m.batch.Rows) < 1+c.prompts[0] {
				t.Errorf("the prefill step has %d rows", len(m.batch.Rows))
			}
		})
	}
}

// TestPrefillHoldRest: with the variants' times unmeasured, prompts that overfill a step are computed as far
// as the budget goes, and the rest of the last one, which alone would
// make a short prefill step, waits with newer prompts until together
// they fill one (or the bound runs out): every step of the prefill
// variant but the bound's is full.
func TestPrefillHoldRest(t *testing.T) {
	m := &scripted{t: t, slots: 8, maxPages: 16, kvPages: 200, last: map[int]int32{}}
	e, err := New(m, simTokenizer(t), Config{Slots: 8, ChunkCap: 64, PrefillHold: 3, Now: stillClock})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	submit := func(n int) { submitPrompt(ctx, t, e, n) }
	step := func() (decoding, prompt int) {
		t.Helper()
		before := e.Stats().Mixed.Steps
		if _, err := e.Step(ctx); err != nil {
			t.Fatal(err)
		}
		// A request's rows are in its slot; draft rows (go test -args
		// -speculative MODE) in slots no request holds are not counted.
		held := 0
		for _, r := range m.batch.Rows {
			if r.Slot < len(e.slots) && e.slots[r.Slot] != nil {
				held++
			}
		}
		if e.Stats().Mixed.Steps == before {
			return held, 0
		}
		for _, r := range m.batch.Rows {
			if r.Prompt > 0 {
				prompt++
			}
		}
		return held - prompt, prompt
	}
	// wantStep runs a step and fails unless it has the rows given:
	// decoding ones (any number when decoding < 0) and prompt ones.
	wantStep := func(what string, decoding, prompt int) {
		t.Helper()
		if d, p := step(); (decoding >= 0 && d != decoding) || p != prompt {
			t.Fatalf("%s: %d decode and %d prompt rows, want %d and %d", what, d, p, decoding, prompt)
		}
	}
	submit(8)
	wantStep("first step (the whole prompt of 8)", -1, 8)
	// 1 decoding row and 70 prompt rows: the step takes 63 of them; the
	// 7 left wait.
	submit(40)
	submit(30)
	wantStep("the prompts' step", 1, 63)
	for i := range 3 {
		wantStep(fmt.Sprintf("held step %d", i), 2, 0)
	}
	wantStep("after the bound (the 7 left)", -1, 7)
	// The rest of a prompt goes as soon as newer prompts fill the step
	// with it: 3 decoding rows, then 60+40 prompt rows.
	submit(60)
	submit(40)
	wantStep("the next prompts' step", 3, 61)
	submit(30)
	wantStep("the rest with a newer prompt (39 + 21)", 4, 60)
}

// TestPrefillSized: once the variants' times are measured, a step's
// prompt rows fill the variant that adds the least time per prompt row
// to the decoding rows' step — here the small one, which adds 1 ms for
// 12 rows against the large one's 30 ms for 60 — a chunk a step, until a
// prompt has waited PrefillHold steps: then its rest goes whole. Prompts
// that would fill too little of the best variant wait for more, up to
// the same bound. A variant not yet timed is tried first (its first
// step is not timed), and a rerun of the step log plans the same steps
// without timing any.
func TestPrefillSized(t *testing.T) {
	if testHookSpeculative != nil {
		t.Skip("the steps' rows here are exact, and speculation adds draft rows (the simulation's seeds 9 and 12 size the prefill while speculating)")
	}
	clock := time.Unix(1, 0)
	m := &scripted{t: t, slots: 8, maxPages: 16, kvPages: 200, last: map[int]int32{}, clock: &clock,
		cost: func(k runtime.ShapeKey) time.Duration {
			switch {
			case k.Stage == runtime.Decode:
				return 10 * time.Millisecond
			case k.Rows == 16:
				return 11 * time.Millisecond
			}
			return 40 * time.Millisecond
		}}
	var log bytes.Buffer
	e, err := New(m, simTokenizer(t), Config{Slots: 8, ChunkCap: 64, PrefillHold: 4, Now: func() time.Time { return clock }, StepLog: &log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	submit := func(n int) { submitPrompt(ctx, t, e, n) }
	// wantStep runs a step and fails unless it ran the variant of rows
	// rows with prompt prompt rows in it.
	wantStep := func(what string, rows, prompt int) {
		t.Helper()
		if _, err := e.Step(ctx); err != nil {
			t.Fatal(err)
		}
		p := 0
		for _, r := range m.batch.Rows {
			if r.Prompt > 0 {
				p++
			}
		}
		if m.batch.Key.Rows != rows || p != prompt {
			t.Fatalf("%s: %d prompt rows on %s, want %d on %d rows", what, p, m.batch.Key, prompt, rows)
		}
	}
	steps := func(what string, n, rows, prompt int) {
		t.Helper()
		for i := range n {
			wantStep(fmt.Sprintf("%s %d", what, i), rows, prompt)
		}
	}
	// The first step of each variant is not timed: until the small one
	// is, prompts are held by the rule for unmeasured variants.
	submit(8)
	wantStep("the first prompt (nothing decodes)", 16, 8)
	steps("decode", 2, 1, 0)
	submit(8)
	steps("held, unmeasured", 4, 1, 0)
	wantStep("due", 16, 8)
	submit(40)
	wantStep("the large variant, untimed, is tried", 64, 40)
	submit(40)
	wantStep("and again, its first step not timed", 64, 40)
	submit(100)
	steps("chunk", 4, 16, 12)
	wantStep("the rest, due", 64, 52)
	wantStep("decode", 8, 0)
	// A short prompt would fill a third of the small variant: it waits
	// for more, up to the bound.
	submit(4)
	steps("held", 4, 8, 0)
	wantStep("the short prompt, due", 16, 4)
	if n, err := Rerun(ctx, &scripted{t: t, slots: 8, maxPages: 16, kvPages: 200, last: map[int]int32{}}, simTokenizer(t), &log); err != nil || n != 21 {
		t.Fatalf("rerun: %d steps, %v", n, err)
	}
}

// TestVariantCosts: a variant's first step is not counted, later ones
// fit a line in their rows, and one slow step counts as at most twice
// the line's time.
func TestVariantCosts(t *testing.T) {
	k := runtime.ShapeKey{Stage: runtime.Prefill, Slots: 8, Rows: 64}
	c := variantCosts{}
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	c.observe(k, 64, ms(500)) // first: instantiation
	if _, ok := c.near(k, 64, 0); ok {
		t.Fatal("timed by its first step")
	}
	for i := range 40 {
		n := 16 + 16*(i%4) // 2 ms + 0.1 ms a row
		c.observe(k, n, ms(2+0.1*float64(n)))
	}
	for _, n := range []int{16, 40, 64} {
		got, _ := c.near(k, n, 0)
		if want := 2 + 0.1*float64(n); got*1e3 < want-0.01 || got*1e3 > want+0.01 {
			t.Errorf("%d rows: %.3f ms, want %.3f", n, got*1e3, want)
		}
	}
	c.observe(k, 64, ms(1000))
	if got, _ := c.near(k, 64, 0); got*1e3 > 8.4*1.2 {
		t.Errorf("after one slow step: %.3f ms for 64 rows", got*1e3)
	}
}
