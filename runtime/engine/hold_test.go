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
