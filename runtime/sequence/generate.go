package sequence

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/zrtdev/zrt/runtime/chat"
	"github.com/zrtdev/zrt/runtime/decode"
)

// Metrics is the one-line JSON summary of a Generate run (seed 004).
type Metrics struct {
	PromptTokens    int     `json:"prompt_tokens"`
	GeneratedTokens int     `json:"generated_tokens"`
	TTFTms          float64 `json:"ttft_ms"`
	PrefillTokS     float64 `json:"prefill_tok_s"`
	DecodeTokS      float64 `json:"decode_tok_s"`
	P50ms           float64 `json:"p50_token_ms"`
	P95ms           float64 `json:"p95_token_ms"`
	PeakRSSMiB      float64 `json:"peak_rss_mib"`
	Tier            string  `json:"tier"`
	Threads         int     `json:"threads,omitempty"`
	Variant         string  `json:"variant"`
	StopReason      string  `json:"stop_reason"`
	// Speculative decoding (omitted when off): the mode, the verify
	// steps that carried a draft and the plain ones, the draft tokens
	// verified and accepted, the acceptance rate α, and the tokens each
	// verify step produced. They depend on the text, tok/s on both.
	Speculative   string  `json:"speculative,omitempty"`
	VerifySteps   int     `json:"verify_steps,omitempty"`
	PlainSteps    int     `json:"plain_steps,omitempty"`
	DraftTokens   int     `json:"draft_tokens,omitempty"`
	Accepted      int     `json:"accepted_tokens,omitempty"`
	Acceptance    float64 `json:"acceptance_rate,omitempty"`
	TokensPerStep float64 `json:"tokens_per_verify_step,omitempty"`
}

// Speculator decodes several tokens a step (runtime/spec's Decoding):
// Step feeds the pending token and returns the decoder's steps for the
// tokens its verification accepted; Report adds its figures to a run's
// metrics.
type Speculator interface {
	Step(ctx context.Context, pending int32) ([]decode.Step, error)
	Report(m *Metrics)
}

// GenerateOptions say what Generate prompts with and how it decodes.
type GenerateOptions struct {
	// The prompt is Tokens when set; else Messages formatted with the
	// model's chat template (ChatML without one) when Chat is set or
	// there are Messages, System and Prompt making the conversation
	// without Messages; else Prompt's text, which Echo writes first.
	Prompt, System string
	Tokens         []int32
	Messages       []chat.Message
	Chat, Echo     bool
	Params         decode.Params
	// Out receives the text; Warn what the run should be told of (no chat
	// template; the context cut generation short).
	Out  io.Writer
	Warn func(format string, a ...any)
	// Speculate, when set, makes the decoding after the prompt
	// speculative: it returns the Speculator of the run's sequence and
	// decoder.
	Speculate func(seq *Sequence, d *decode.Decoder) (Speculator, error)
}

// Generate decodes after opt's prompt on a sequence of its own, writing
// the text to opt.Out as it comes and a newline after it, and returns
// the run's metrics.
func (pool *Pool) Generate(ctx context.Context, opt GenerateOptions) (Metrics, error) {
	if opt.Warn == nil {
		opt.Warn = func(string, ...any) {}
	}
	ids, err := pool.prompt(opt)
	if err != nil {
		return Metrics{}, err
	}
	if opt.Echo && opt.Tokens == nil && !opt.Chat && opt.Messages == nil {
		fmt.Fprint(opt.Out, opt.Prompt)
	}
	p, out := opt.Params, opt.Out
	seq, err := pool.NewSequence()
	if err != nil {
		return Metrics{}, err
	}
	defer seq.Release()
	p.ContextLength = pool.Hparams.ContextLength
	d := decode.New(pool.Tok, p)
	var sp Speculator
	if opt.Speculate != nil {
		if sp, err = opt.Speculate(seq, d); err != nil {
			return Metrics{}, err
		}
	}
	t0 := time.Now()
	logits, err := seq.Prefill(ctx, ids)
	if err != nil {
		return Metrics{}, err
	}
	ttft := time.Since(t0)
	// lat holds each fed token's share of its step's time: a verify step
	// of several accepted tokens counts as that many tokens.
	var lat []time.Duration
	tDecode := time.Now()
	st := d.Next(logits, seq.Tokens, seq.Pos())
	fmt.Fprint(out, st.Text)
	for st.Finish == decode.Running {
		ts := time.Now()
		if sp == nil {
			if err = seq.Advance(ctx, st.Token); err != nil {
				return Metrics{}, err
			}
			lat = append(lat, time.Since(ts))
			// The sequence as the decoder's source: a greedy decoder
			// takes the step's argmax, and only a sampled one fetches
			// the logits.
			st = d.NextFrom(seq, seq.Tokens, seq.Pos())
			fmt.Fprint(out, st.Text)
			continue
		}
		steps, err := sp.Step(ctx, st.Token)
		if err != nil {
			return Metrics{}, err
		}
		per := time.Since(ts) / time.Duration(len(steps))
		for _, s := range steps {
			lat = append(lat, per)
			fmt.Fprint(out, s.Text)
		}
		st = steps[len(steps)-1]
	}
	fmt.Fprintln(out)
	decodeDur := time.Since(tDecode)
	if d.Finish() == decode.Context {
		// Otherwise a run that asked for more just stops, looking like
		// the maximum was honoured.
		opt.Warn("stopped at the bundle's context of %d tokens (%d prompt + %d generated), short of -n %d; "+
			"rebuild with a larger context_length to generate more", p.ContextLength, len(ids), d.Generated(), p.MaxTokens)
	}
	m := Metrics{PromptTokens: len(ids), GeneratedTokens: d.Generated(), TTFTms: ms(ttft),
		PrefillTokS: float64(len(ids)) / ttft.Seconds(), Tier: pool.TierName(), Variant: pool.Variants(),
		PeakRSSMiB: peakRSSMiB(), StopReason: string(d.Finish())}
	if len(lat) > 0 {
		m.DecodeTokS = float64(len(lat)) / decodeDur.Seconds()
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		m.P50ms, m.P95ms = ms(lat[len(lat)/2]), ms(lat[min(len(lat)-1, len(lat)*95/100)])
	}
	if sp != nil {
		sp.Report(&m)
	}
	return m, nil
}

// prompt is opt's prompt as token ids.
func (pool *Pool) prompt(opt GenerateOptions) ([]int32, error) {
	var ids []int32
	switch {
	case opt.Tokens != nil:
		ids = opt.Tokens
	case opt.Chat || opt.Messages != nil:
		msgs := opt.Messages
		if msgs == nil {
			if opt.System != "" {
				msgs = append(msgs, chat.Message{Role: "system", Content: opt.System})
			}
			msgs = append(msgs, chat.Message{Role: "user", Content: opt.Prompt})
		}
		var fallback bool
		var err error
		if ids, fallback, err = chat.Prompt(pool.Tok, msgs); err != nil {
			return nil, fmt.Errorf("chat template: %w", err)
		}
		if fallback {
			opt.Warn("the model has no chat template; using ChatML")
		}
	default:
		ids = pool.Tok.Encode(opt.Prompt, true, false)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("empty prompt: give --prompt or --tokens")
	}
	if ctx := pool.Hparams.ContextLength; len(ids) >= ctx {
		return nil, fmt.Errorf("the prompt is %d tokens; the bundle's context holds %d (rebuild with a larger context_length, or --ctx-size given a GGUF)", len(ids), ctx)
	}
	return ids, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// peakRSSMiB reads VmHWM from /proc/self/status (0 where unavailable).
func peakRSSMiB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// EvalStep is one scored position: the K largest logits as [id, logit].
type EvalStep struct {
	Top [][2]float64 `json:"top"`
}

// EvalResult is a teacher-forced scoring, shaped like llama.cpp's
// reference files (internal/reference).
type EvalResult struct {
	NVocab int        `json:"n_vocab"`
	Steps  []EvalStep `json:"steps"`
	Logits []float32  `json:"logits,omitempty"`
}

// Eval feeds ids on a sequence of its own: the first from as one
// prefill, the rest one decode step at a time. Step i lists the top
// largest logits after token index from-1+i; with logits, step 0's whole
// vector is kept too.
func (pool *Pool) Eval(ctx context.Context, ids []int32, from, top int, logits bool) (*EvalResult, error) {
	if from < 1 || from > len(ids) {
		return nil, fmt.Errorf("eval: a prefill of %d of %d tokens", from, len(ids))
	}
	seq, err := pool.NewSequence()
	if err != nil {
		return nil, err
	}
	defer seq.Release()
	res := &EvalResult{NVocab: pool.Hparams.NVocab}
	l, err := seq.Prefill(ctx, ids[:from])
	if err != nil {
		return nil, err
	}
	if logits {
		res.Logits = slices.Clone(l)
	}
	for i := from; ; i++ {
		res.Steps = append(res.Steps, EvalStep{Top: topK(l, top)})
		if i == len(ids) {
			return res, nil
		}
		if l, err = seq.Decode(ctx, ids[i]); err != nil {
			return nil, err
		}
	}
}

func topK(l []float32, k int) [][2]float64 {
	idx := make([]int, len(l))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return l[idx[a]] > l[idx[b]] })
	out := make([][2]float64, 0, k)
	for _, i := range idx[:min(k, len(idx))] {
		out = append(out, [2]float64{float64(i), float64(l[i])})
	}
	return out
}
