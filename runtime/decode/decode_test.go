package decode

import (
	"errors"
	"math"
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
	ok := Params{MaxTokens: 16, TopLogprobs: 20, Sampling: sample.Params{Temperature: 0.8, TopP: 0.95, TopK: 40, MinP: 0.05, RepeatPenalty: 1, RepeatLastN: 64,
		PresencePenalty: -2, FrequencyPenalty: 2, LogitBias: map[int32]float64{1: -100, 2: 100}}}
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
		{func(p *Params) { p.Sampling.Temperature = math.NaN() }, "temperature NaN out of range [0, 2]"},
		{func(p *Params) { p.Sampling.PresencePenalty = 2.5 }, "presence_penalty 2.5 out of range [-2, 2]"},
		{func(p *Params) { p.Sampling.FrequencyPenalty = -3 }, "frequency_penalty -3 out of range [-2, 2]"},
		{func(p *Params) { p.Sampling.LogitBias = map[int32]float64{7: 5, 9: -101, 8: 100.5} }, "logit_bias 100.5 out of range [-100, 100]"},
		{func(p *Params) { p.TopLogprobs = 21 }, "top_logprobs 21 out of range [0, 20]"},
	} {
		p := ok
		c.edit(&p)
		var re *RangeError
		if err := p.Validate(); !errors.As(err, &re) || err.Error() != c.want {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
}

// source is a Source whose greedy choice may disagree with its logits, so
// a test can tell which one the decoder read, and which counts the
// logits fetched.
type source struct {
	greedy  int32
	logits  []float32
	fetched int
}

func (s *source) Greedy() int32 { return s.greedy }

func (s *source) Logits() []float32 {
	s.fetched++
	return slices.Clone(s.logits)
}

// TestGreedyNeedsLogits: a plain greedy request takes the model's own
// choice without fetching the logits; a greedy request with a logit bias,
// a penalty or logprobs must read the logits, and gets the token they
// give after the bias and penalties, never the model's raw argmax.
func TestGreedyNeedsLogits(t *testing.T) {
	logits := onehot(3)
	logits[4] = 9.5
	history := []int32{1, 3}
	for _, c := range []struct {
		name string
		p    Params
		want int32 // 3 is the raw argmax
	}{
		{"plain", Params{}, 3},
		{"logit bias forces a token", Params{Sampling: sample.Params{LogitBias: map[int32]float64{8: 100}}}, 8},
		{"logit bias bans the argmax", Params{Sampling: sample.Params{LogitBias: map[int32]float64{3: -100}}}, 4},
		{"presence penalty", Params{Sampling: sample.Params{PresencePenalty: 1}}, 4},
		{"frequency penalty", Params{Sampling: sample.Params{FrequencyPenalty: 0.6}}, 4},
		{"logprobs", Params{Logprobs: true}, 3},
	} {
		c.p.MaxTokens, c.p.ContextLength = 4, 100
		src := &source{greedy: 3, logits: logits}
		st := New(tiny(t), c.p).NextFrom(src, history, len(history))
		wantFetched := 1
		if c.name == "plain" {
			wantFetched = 0
		}
		if st.Token != c.want || src.fetched != wantFetched {
			t.Errorf("%s: token %d, logits fetched %d times; want %d, %d", c.name, st.Token, src.fetched, c.want, wantFetched)
		}
	}
	// The fast path really is the source's choice: a source whose
	// greedy token disagrees with its logits is believed when nothing
	// needs the logits.
	src := &source{greedy: 5, logits: logits}
	if st := New(tiny(t), Params{MaxTokens: 4, ContextLength: 100}).NextFrom(src, nil, 0); st.Token != 5 || src.fetched != 0 {
		t.Errorf("plain greedy took %d, fetched %d", st.Token, src.fetched)
	}
}

// TestLogprobSteps: with Logprobs each taken token's step carries its
// log-probability and alternatives, and an end-of-generation token, never
// shown, has none.
func TestLogprobSteps(t *testing.T) {
	p := Params{MaxTokens: 5, ContextLength: 100, Logprobs: true, TopLogprobs: 2}
	d := New(tiny(t), p)
	var steps []Step
	for i, id := range []int32{3, 4, 2} {
		steps = append(steps, d.Next(onehot(id), nil, i))
	}
	// onehot: the chosen token at 10, eight others at 0.
	want := 10 - math.Log(math.Exp(10)+8)
	for i, st := range steps[:2] {
		l := st.Logprobs
		if l == nil || l.Token != st.Token || math.Abs(l.Logprob-want) > 1e-9 || len(l.Top) != 2 || l.Top[0].Token != st.Token || l.Top[1].Token != 0 {
			t.Fatalf("step %d: %+v", i, l)
		}
	}
	if steps[2].Finish != EOG || steps[2].Logprobs != nil {
		t.Errorf("end of generation: %+v", steps[2])
	}
	// Without Logprobs, none.
	if st := New(tiny(t), Params{MaxTokens: 5, ContextLength: 100}).Next(onehot(3), nil, 0); st.Logprobs != nil {
		t.Errorf("logprobs nobody asked for: %+v", st.Logprobs)
	}
}

// sequence is a Constraint that allows exactly the tokens of want, in
// order, then the end token (2) or, when done, nothing.
type sequence struct {
	want  []int32
	at    int
	final bool // Done once want is matched, instead of allowing the end token
}

func (s *sequence) Mask(allowed []uint64) {
	clear(allowed)
	if s.at < len(s.want) {
		allowed[0] |= 1 << s.want[s.at]
	} else if !s.final {
		allowed[0] |= 1 << 2
	}
}

func (s *sequence) Accept(tok int32) error {
	if s.at < len(s.want) && tok == s.want[s.at] {
		s.at++
		return nil
	}
	if s.at == len(s.want) && tok == 2 {
		return nil
	}
	return errors.New("not allowed")
}

func (s *sequence) Done() bool { return s.final && s.at == len(s.want) }

// TestConstraint decodes under a constraint whose tokens the model
// would never pick (greedy logits always favour "!"): the masked logits
// give the constraint's tokens, sampled or greedy, and the request ends
// with EOG when the end token is all that is allowed, or as soon as the
// constraint is done; a max_tokens cut still says Length.
func TestConstraint(t *testing.T) {
	for _, temp := range []float64{0, 0.8} {
		for _, final := range []bool{false, true} {
			c := &sequence{want: []int32{3, 4, 5}, final: final}
			text, fed, fin := run(t, Params{MaxTokens: 10, ContextLength: 100, Sampling: sample.Params{Temperature: temp, Seed: 3}, Constraint: c}, []int32{8, 8, 8, 8, 8}, 0)
			// Done ends the request on STOP's step, which is then not fed.
			wantFed := []int32{3, 4, 5}
			if final {
				wantFed = wantFed[:2]
			}
			if text != " hello world STOP" || !slices.Equal(fed, wantFed) || fin != EOG {
				t.Errorf("temperature %v, final %v: %q %v %q", temp, final, text, fed, fin)
			}
		}
	}
	c := &sequence{want: []int32{3, 4, 5}}
	if text, _, fin := run(t, Params{MaxTokens: 2, ContextLength: 100, Constraint: c}, []int32{8, 8, 8}, 0); text != " hello world" || fin != Length {
		t.Errorf("cut by max tokens: %q %q", text, fin)
	}
}

// TestKeep shows a control token's text only when Params.Keep names it.
func TestKeep(t *testing.T) {
	tok := tiny(t)
	for _, keep := range []bool{false, true} {
		p := Params{MaxTokens: 3, ContextLength: 100}
		want := " hello world"
		if keep {
			p.Keep, want = []int32{1}, " hello<s> world"
		}
		d := New(tok, p)
		var text string
		for _, id := range []int32{3, 1, 4} {
			text += d.Next(onehot(id), nil, 0).Text
		}
		if text != want {
			t.Errorf("keep %v: %q, want %q", keep, text, want)
		}
	}
}
