package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/cmd/internal/exitcode"
	"github.com/zrtdev/zrt/runtime/chat"
	"github.com/zrtdev/zrt/runtime/decode"
	"github.com/zrtdev/zrt/runtime/sample"
	"github.com/zrtdev/zrt/runtime/sequence"
	"github.com/zrtdev/zrt/runtime/spec"
)

// parseTokens reads --tokens: ids separated by commas or spaces, never
// nil, so that given empty it is still the prompt.
func parseTokens(s string) ([]int32, error) {
	out := []int32{}
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
	var prompt, tokens, system, messages, speculative, draft string
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
			opt := sequence.GenerateOptions{Prompt: prompt, System: system, Chat: useChat, Echo: !noEcho, Out: cmd.OutOrStdout(),
				Params: decode.Params{MaxTokens: n, Sampling: sp, Stops: stops}, Warn: func(f string, a ...any) { cmd.PrintErrf("zrt-run: "+f+"\n", a...) }}
			if tokens != "" {
				if opt.Tokens, err = parseTokens(tokens); err != nil {
					return err
				}
			} else if messages != "" {
				if opt.Messages, err = chat.ReadMessages(messages); err != nil {
					return err
				}
			}
			if mode.On() || draft != "" {
				var dm *sequence.Pool
				if ef.beside = e.Program; draft != "" {
					if dm, err = ef.open(cmd.Context(), draft); err != nil {
						return fmt.Errorf("--draft %s: %w", draft, err)
					}
					defer dm.Close()
				}
				if opt.Speculate, err = spec.Speculator(e, dm, mode, n, opt.Warn); err != nil {
					return err
				}
			}
			m, err := e.Generate(cmd.Context(), opt)
			if err != nil {
				return err
			}
			if !asJSON {
				return nil
			}
			b, _ := json.Marshal(m)
			cmd.PrintErrln(string(b))
			return nil
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
	c.Flags().StringVar(&speculative, "speculative", "off", "speculative decoding: off, ngram[:K[:fixed]] (drafts looked up in the prompt and output) self[:K[:fixed]] (drafted by the bundle's draft variant, see --draft-layers) or draft[:K[:fixed]] (by --draft's model): up to K tokens (default 4) verified in one step, as many as pay for their cost by the measured acceptance and step times (all of them with :fixed); greedy output is the same, sampled output follows the same distribution (a draft model's drafts are kept by speculative sampling)")
	c.Flags().StringVar(&draft, "draft", "", "--speculative draft: the draft model, a bundle or GGUF with the target's vocabulary (alone: --speculative draft)")
	return c
}
