package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/cmd/internal/exitcode"
	"github.com/zrtdev/zrt/runtime/chat"
	"github.com/zrtdev/zrt/runtime/decode"
	"github.com/zrtdev/zrt/runtime/sample"
	"github.com/zrtdev/zrt/runtime/sequence"
	"github.com/zrtdev/zrt/runtime/spec"
)

// traceDispatch prints the first values of each dispatch's output to
// stderr (ZRT_TRACE=1), for comparing layer by layer with llama.cpp's
// llama-eval-callback.
func traceDispatch(i int, kernel string, out []byte) {
	n := min(len(out)/4, 8)
	fmt.Fprintf(os.Stderr, "trace %4d %-18s", i, kernel)
	for j := 0; j < n; j++ {
		fmt.Fprintf(os.Stderr, " %11.6f", math.Float32frombits(binary.LittleEndian.Uint32(out[4*j:])))
	}
	fmt.Fprintln(os.Stderr)
}

func parseTokens(s string) ([]int32, error) {
	var out []int32
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		v, err := strconv.ParseInt(f, 10, 32)
		if err != nil {
			return nil, exitcode.Usagef("--tokens: %q is not a token id", f)
		}
		out = append(out, int32(v))
	}
	return out, nil
}

func generateCmd() *cobra.Command {
	var ef engineFlags
	var prompt, tokens, system, messages, speculative string
	var n int
	var useChat, asJSON, noEcho bool
	var stops []string
	var sp sample.Params
	c := &cobra.Command{
		Use:   "generate BUNDLE|MODEL.gguf",
		Short: "Generate text from a prompt, streaming it to stdout",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := flagError(decode.Params{MaxTokens: n, Sampling: sp}.Validate()); err != nil {
				return err
			}
			mode, err := spec.ParseMode(speculative)
			if err != nil {
				return exitcode.Usagef("--speculative: %v", err)
			}
			e, err := ef.open(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			defer e.Close()
			if mode.On() {
				if err := spec.Check(e, mode); err != nil {
					return fmt.Errorf("--speculative %s: %w", mode, err)
				}
			}
			var ids []int32
			switch {
			case tokens != "":
				if ids, err = parseTokens(tokens); err != nil {
					return err
				}
			case useChat || messages != "":
				var msgs []chat.Message
				if messages != "" {
					if msgs, err = readMessages(messages); err != nil {
						return err
					}
				} else {
					if system != "" {
						msgs = append(msgs, chat.Message{Role: "system", Content: system})
					}
					msgs = append(msgs, chat.Message{Role: "user", Content: prompt})
				}
				var fallback bool
				if ids, fallback, err = chat.Prompt(e.Tok, msgs); err != nil {
					return fmt.Errorf("chat template: %w", err)
				}
				if fallback {
					fmt.Fprintln(os.Stderr, "zrt-run: the model has no chat template; using ChatML")
				}
			default:
				ids = e.Tok.Encode(prompt, true, false)
			}
			if len(ids) == 0 {
				return fmt.Errorf("empty prompt: give --prompt or --tokens")
			}
			if ctx := e.Hparams.ContextLength; len(ids) >= ctx {
				return fmt.Errorf("the prompt is %d tokens; the bundle's context holds %d (rebuild with a larger context_length, or --ctx-size given a GGUF)", len(ids), ctx)
			}
			if tokens == "" && !useChat && messages == "" && !noEcho {
				fmt.Fprint(cmd.OutOrStdout(), prompt)
			}
			return generate(cmd, e, ids, n, sp, stops, mode, asJSON)
		},
	}
	ef.add(c)
	ef.build.addSlots(c)
	ef.build.addDraftLayers(c)
	c.Flags().StringVarP(&prompt, "prompt", "p", "", "prompt text")
	c.Flags().StringVar(&tokens, "tokens", "", "prompt as token ids (comma or space separated), instead of --prompt")
	c.Flags().BoolVar(&useChat, "chat", false, "format the prompt with the model's chat template")
	c.Flags().StringVar(&system, "system", "", "system message for --chat")
	c.Flags().StringVar(&messages, "messages", "", "JSON file of [{\"role\":…,\"content\":…}] to format with the chat template (implies --chat)")
	c.Flags().IntVarP(&n, "n", "n", 128, "tokens to generate at most")
	c.Flags().Float64Var(&sp.Temperature, "temp", 0, "sampling temperature (0: greedy)")
	c.Flags().IntVar(&sp.TopK, "top-k", 40, "keep the K most likely tokens (0: all)")
	c.Flags().Float64Var(&sp.TopP, "top-p", 0.95, "nucleus sampling threshold (1: off)")
	c.Flags().Float64Var(&sp.MinP, "min-p", 0.05, "drop tokens below this fraction of the best one's probability (0: off)")
	c.Flags().Float64Var(&sp.RepeatPenalty, "repeat-penalty", 1, "repetition penalty (1: off)")
	c.Flags().IntVar(&sp.RepeatLastN, "repeat-last-n", 64, "tokens the repetition penalty looks back over")
	c.Flags().Uint64Var(&sp.Seed, "seed", 0, "random seed for sampling")
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON metrics line to stderr after the text")
	c.Flags().BoolVar(&noEcho, "no-echo", false, "do not print the prompt before the generated text")
	c.Flags().StringArrayVar(&stops, "stop", nil, "stop when the output contains this text (repeatable); it is not printed")
	c.Flags().StringVar(&speculative, "speculative", "off", "speculative decoding: off, ngram[:K[:fixed]] (drafts looked up in the prompt and output) or self[:K[:fixed]] (drafted by the bundle's draft variant, see --draft-layers): up to K tokens (default 4) verified in one step, as many as pay for their cost by the measured acceptance and step times (all of them with :fixed); the output is the same")
	return c
}

// Metrics is the one-line JSON summary of a run (seed 004).
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

func generate(cmd *cobra.Command, e *sequence.Pool, ids []int32, n int, sp sample.Params, stops []string, mode spec.Mode, asJSON bool) error {
	ctx := cmd.Context()
	seq, err := e.NewSequence()
	if err != nil {
		return err
	}
	defer seq.Release()
	out := cmd.OutOrStdout()
	d := decode.New(e.Tok, decode.Params{MaxTokens: n, Sampling: sp, Stops: stops, ContextLength: e.Hparams.ContextLength})
	var sd *spec.Decoding
	if mode.On() {
		if sd, err = spec.New(e, seq, d, mode, n); err != nil {
			return fmt.Errorf("--speculative %s: %w", mode, err)
		}
		if rows := e.VerifyRows(); rows <= mode.K {
			fmt.Fprintf(cmd.ErrOrStderr(), "zrt-run: --speculative %s: verify steps of this bundle hold %d rows (a free slot each, within the largest decode variant); drafts are cut to %d tokens\n", mode, rows, rows-1)
		}
	}
	t0 := time.Now()
	logits, err := seq.Prefill(ctx, ids)
	if err != nil {
		return err
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
		if sd == nil {
			if logits, err = seq.Decode(ctx, st.Token); err != nil {
				return err
			}
			lat = append(lat, time.Since(ts))
			st = d.Next(logits, seq.Tokens, seq.Pos())
			fmt.Fprint(out, st.Text)
			continue
		}
		steps, err := sd.Step(ctx, st.Token)
		if err != nil {
			return err
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
		// -n was honoured.
		fmt.Fprintf(cmd.ErrOrStderr(), "zrt-run: stopped at the bundle's context of %d tokens (%d prompt + %d generated), short of -n %d; "+
			"rebuild with a larger context_length to generate more\n", e.Hparams.ContextLength, len(ids), d.Generated(), n)
	}
	if !asJSON {
		return nil
	}
	m := Metrics{PromptTokens: len(ids), GeneratedTokens: d.Generated(), TTFTms: ms(ttft),
		PrefillTokS: float64(len(ids)) / ttft.Seconds(), Tier: e.TierName(), Variant: e.Variants(),
		PeakRSSMiB: peakRSSMiB(), StopReason: string(d.Finish())}
	if len(lat) > 0 {
		m.DecodeTokS = float64(len(lat)) / decodeDur.Seconds()
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		m.P50ms, m.P95ms = ms(lat[len(lat)/2]), ms(lat[min(len(lat)-1, len(lat)*95/100)])
	}
	if sd != nil {
		s := sd.Stats
		m.Speculative, m.VerifySteps, m.PlainSteps, m.DraftTokens, m.Accepted = mode.String(), s.Steps, s.Plain, s.Drafted, s.Accepted
		m.Acceptance, m.TokensPerStep = s.Acceptance(), s.TokensPerStep()
	}
	b, _ := json.Marshal(m)
	fmt.Fprintln(cmd.ErrOrStderr(), string(b))
	return nil
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

// readMessages loads a conversation: a JSON array of {role, content}.
func readMessages(path string) ([]chat.Message, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var raw []struct{ Role, Content string }
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("%s: no messages", path)
	}
	msgs := make([]chat.Message, len(raw))
	for i, m := range raw {
		if m.Role == "" {
			return nil, fmt.Errorf("%s: message %d has no role", path, i)
		}
		msgs[i] = chat.Message{Role: m.Role, Content: m.Content}
	}
	return msgs, nil
}
