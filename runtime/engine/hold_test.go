package engine

import (
	"context"
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
	submit(8)
	if _, p := step(); p != 8 {
		t.Fatalf("first step: %d prompt rows, want the whole prompt of 8", p)
	}
	// 1 decoding row and 70 prompt rows: the step takes 63 of them; the
	// 7 left wait.
	submit(40)
	submit(30)
	if d, p := step(); d != 1 || p != 63 {
		t.Fatalf("the prompts' step has %d decode and %d prompt rows, want 1 and 63", d, p)
	}
	for i := range 3 {
		if d, p := step(); d != 2 || p != 0 {
			t.Fatalf("held step %d: %d decode and %d prompt rows, want 2 and 0", i, d, p)
		}
	}
	if _, p := step(); p != 7 {
		t.Fatalf("after the bound: %d prompt rows, want the 7 left", p)
	}
	// The rest of a prompt goes as soon as newer prompts fill the step
	// with it: 3 decoding rows, then 60+40 prompt rows.
	submit(60)
	submit(40)
	if d, p := step(); d != 3 || p != 61 {
		t.Fatalf("the next prompts' step: %d decode and %d prompt rows, want 3 and 61", d, p)
	}
	submit(30)
	if d, p := step(); d != 4 || p != 60 {
		t.Fatalf("the rest with a newer prompt: %d decode and %d prompt rows, want 4 and 60 (39 + 21)", d, p)
	}
}
