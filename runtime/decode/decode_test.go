package decode

import (
	"errors"
	"slices"
	"testing"

	"github.com/zrtdev/zrt/format/vocab"
	"github.com/zrtdev/zrt/runtime/sample"
	"github.com/zrtdev/zrt/runtime/tokenizer"
)

// tiny is an SPM vocabulary whose tokens spell words, with byte tokens so
// that a multi-byte character can arrive split across two tokens.
func tiny(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.New(&vocab.Vocab{Model: "llama",
		Tokens: []string{"<unk>", "<s>", "</s>", "▁hello", "▁world", "▁STOP", "<0xC3>", "<0xA9>", "!"},
		Types:  []int32{2, 3, 3, 1, 1, 1, 6, 6, 1},
		BOS:    1, EOS: 2, EOT: -1, UNK: 0, PAD: -1, SEP: -1, NL: -1, EOM: -1, MASK: -1,
		FIMPre: -1, FIMSuf: -1, FIMMid: -1, FIMPad: -1, FIMRep: -1, FIMSep: -1})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// onehot returns greedy logits that pick id.
func onehot(id int32) []float32 {
	l := make([]float32, 9)
	l[id] = 10
	return l
}

// run feeds the scripted tokens (as greedy picks) until the decoder
// finishes, returning the text, the tokens it asked to feed, and why.
func run(t *testing.T, p Params, script []int32, pos int) (string, []int32, Finish) {
	t.Helper()
	d := New(tiny(t), p)
	var text string
	var fed []int32
	for i := 0; ; i++ {
		if i > len(script) {
			t.Fatalf("decoder did not finish after %d steps", i)
		}
		id := int32(0)
		if i < len(script) {
			id = script[i]
		}
		st := d.Next(onehot(id), fed, pos+i)
		text += st.Text
		if st.Finish != Running {
			if d.Finish() != st.Finish {
				t.Errorf("Finish() = %q, step said %q", d.Finish(), st.Finish)
			}
			if again := d.Next(onehot(id), fed, pos+i); again.Finish != st.Finish || again.Text != "" || again.Token != -1 {
				t.Errorf("a finished decoder went on: %+v", again)
			}
			return text, fed, st.Finish
		}
		fed = append(fed, st.Token)
	}
}

func TestFinishReasons(t *testing.T) {
	cases := []struct {
		name   string
		p      Params
		script []int32
		pos    int
		text   string
		fed    int
		why    Finish
	}{
		{"length", Params{MaxTokens: 2, ContextLength: 100}, []int32{3, 4, 4}, 0, " hello world", 1, Length},
		{"no tokens", Params{MaxTokens: 0, ContextLength: 100}, []int32{3}, 0, "", 0, Length},
		{"eog", Params{MaxTokens: 9, ContextLength: 100}, []int32{3, 2}, 0, " hello", 1, EOG},
		// The token sampled when the sequence is full is shown, not fed.
		{"context", Params{MaxTokens: 9, ContextLength: 5}, []int32{3, 4, 4}, 3, " hello world world", 2, Context},
		// The stop string arrives across tokens and is never shown, nor is
		// anything after it in the same token.
		{"stop string", Params{MaxTokens: 9, ContextLength: 100, Stops: []string{"world!"}}, []int32{3, 4, 8, 3}, 0, " hello ", 2, StopString},
		// A held-back prefix of a stop string that never completes is shown
		// at the end.
		{"held prefix flushed", Params{MaxTokens: 3, ContextLength: 100, Stops: []string{"world?"}}, []int32{3, 4, 4}, 0, " hello world world", 2, Length},
		// Half of a two-byte character is held until its second byte.
		{"split character", Params{MaxTokens: 3, ContextLength: 100}, []int32{6, 7, 2}, 0, "é", 2, EOG},
	}
	for _, c := range cases {
		text, fed, why := run(t, c.p, c.script, c.pos)
		if text != c.text || len(fed) != c.fed || why != c.why {
			t.Errorf("%s: text %q, fed %d tokens, finish %q; want %q, %d, %q", c.name, text, len(fed), why, c.text, c.fed, c.why)
		}
	}
}

// TestGeneratedCount: an end-of-generation token is not a generated token.
func TestGeneratedCount(t *testing.T) {
	d := New(tiny(t), Params{MaxTokens: 5, ContextLength: 100})
	d.Next(onehot(3), nil, 0)
	d.Next(onehot(4), []int32{3}, 1)
	if st := d.Next(onehot(2), []int32{3, 4}, 2); st.Finish != EOG {
		t.Fatalf("finish %q", st.Finish)
	}
	if d.Generated() != 2 {
		t.Errorf("Generated() = %d, want 2", d.Generated())
	}
}

// TestIgnoreEOS: with IgnoreEOS the end-of-generation token is never taken,
// even when it is the most likely, and generation runs to MaxTokens.
func TestIgnoreEOS(t *testing.T) {
	_, fed, why := run(t, Params{MaxTokens: 3, ContextLength: 100, IgnoreEOS: true}, []int32{2, 2, 2}, 0)
	if why != Length || len(fed) != 2 || slices.Contains(fed, 2) {
		t.Errorf("fed %v, finish %q", fed, why)
	}
}

func TestLimits(t *testing.T) {
	ok := Params{MaxTokens: 16, Sampling: sample.Params{Temperature: 0.8, TopP: 0.95, TopK: 40, MinP: 0.05, RepeatPenalty: 1, RepeatLastN: 64}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		edit func(*Params)
		want string
	}{
		{func(p *Params) { p.MaxTokens = -5 }, "max_tokens -5 out of range [0, 1048576]"},
		{func(p *Params) { p.Sampling.Temperature = -1 }, "temperature -1 out of range [0, 2]"},
		{func(p *Params) { p.Sampling.TopP = 7 }, "top_p 7 out of range (0, 1]"},
		{func(p *Params) { p.Sampling.TopP = 0 }, "top_p 0 out of range (0, 1]"},
		{func(p *Params) { p.Sampling.RepeatPenalty = -2 }, "repeat_penalty -2 out of range [0, 10]"},
	} {
		p := ok
		c.edit(&p)
		var re *RangeError
		if err := p.Validate(); !errors.As(err, &re) || err.Error() != c.want {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
}
