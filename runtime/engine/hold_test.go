package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/zrtdev/zrt/runtime/decode"
)

// TestPrefillHold: a prompt that arrives while another request decodes
// waits up to PrefillHold steps for more prompts to share its prefill
// step, and no longer; prompts that fill the step with the decoding rows
// go at once, as does any prompt when nothing decodes; with the hold off
// a prompt goes the next step.
func TestPrefillHold(t *testing.T) {
	prompt := func(n int) []int32 {
		p := make([]int32, n)
		for i := range p {
			p[i] = int32(3 + i%50)
		}
		return p
	}
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
			e, err := New(m, simTokenizer(t), Config{Slots: 4, ChunkCap: 64, PrefillHold: c.hold})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			submit := func(n int) {
				if _, err := e.Submit(ctx, Request{Prompt: prompt(n), Decode: decode.Params{MaxTokens: 100, IgnoreEOS: true}}); err != nil {
					t.Fatal(err)
				}
			}
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

// TestPrefillHoldRest: prompts that overfill a step are computed as far
// as the budget goes, and the rest of the last one, which alone would
// make a short prefill step, waits with newer prompts until together
// they fill one (or the bound runs out): every step of the prefill
// variant but the bound's is full.
func TestPrefillHoldRest(t *testing.T) {
	m := &scripted{t: t, slots: 8, maxPages: 16, kvPages: 200, last: map[int]int32{}}
	e, err := New(m, simTokenizer(t), Config{Slots: 8, ChunkCap: 64, PrefillHold: 3})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	submit := func(n int) {
		p := make([]int32, n)
		for i := range p {
			p[i] = int32(3 + i%50)
		}
		if _, err := e.Submit(ctx, Request{Prompt: p, Decode: decode.Params{MaxTokens: 100, IgnoreEOS: true}}); err != nil {
			t.Fatal(err)
		}
	}
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
