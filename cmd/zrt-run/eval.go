package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/cmd/internal/exitcode"
	"github.com/zrtdev/zrt/cmd/internal/tokcmd"
	"github.com/zrtdev/zrt/runtime/tokenizer"
)

func evalCmd() *cobra.Command {
	var ef engineFlags
	var tokens string
	var from, top int
	var withLogits bool
	c := &cobra.Command{
		Use:   "eval BUNDLE --tokens IDS --from N",
		Short: "Teacher-forced scoring: logits after each token from index N-1 on, as JSON",
		Long: `eval feeds the whole token list: the first N tokens as one prefill, the
rest one decode step at a time. Step i holds the logits after token index
N-1+i, so step 0 predicts the token at index N. --logits adds step 0's
full logit vector.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := parseTokens(tokens)
			if err != nil {
				return err
			}
			if from < 1 || from > len(ids) {
				return fmt.Errorf("--from %d must be in [1, %d] (the number of tokens)", from, len(ids))
			}
			if top < 0 || top > 1<<20 {
				return exitcode.Usagef("--top %d out of range [0, 1048576]", top)
			}
			e, err := ef.open(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			defer e.Close()
			res, err := e.Eval(cmd.Context(), ids, from, top, withLogits)
			if err != nil {
				return err
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(res) // float32 logits print with enough digits to round-trip
		},
	}
	ef.add(c)
	c.Flags().StringVar(&tokens, "tokens", "", "token ids, comma or space separated (required)")
	c.Flags().IntVar(&from, "from", 1, "number of tokens in the prefill; scoring starts after them")
	c.Flags().IntVar(&top, "top", 8, "how many of the largest logits to list per step")
	c.Flags().BoolVar(&withLogits, "logits", false, "include step 0's full logit vector")
	c.MarkFlagRequired("tokens")
	return c
}

func tokenizeCmd(reverse bool) *cobra.Command {
	var ef engineFlags
	c := tokcmd.New(reverse, "BUNDLE", func(cmd *cobra.Command, path string) (*tokenizer.Tokenizer, func() error, error) {
		e, err := ef.open(cmd.Context(), path)
		if err != nil {
			return nil, nil, err
		}
		return e.Tok, e.Close, nil
	})
	ef.add(c)
	return c
}
