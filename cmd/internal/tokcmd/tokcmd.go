// Package tokcmd is the tokenize and detokenize commands of both zrtc (over
// a GGUF) and zrt-run (over a bundle), defined once so they cannot drift.
package tokcmd

import (
	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/runtime/tokenizer"
)

// New returns tokenize (detokenize when reverse) over the model that model
// names in its usage line; open gives its tokenizer and a release function.
func New(reverse bool, model string, open func(cmd *cobra.Command, path string) (*tokenizer.Tokenizer, func() error, error)) *cobra.Command {
	var bos, special bool
	c := &cobra.Command{Use: "tokenize " + model, Short: "Read text on stdin, print token ids separated by spaces", Args: cobra.ExactArgs(1)}
	if reverse {
		c.Use, c.Short = "detokenize "+model, "Read token ids on stdin, print the text"
	}
	c.RunE = func(cmd *cobra.Command, args []string) error {
		t, release, err := open(cmd, args[0])
		if err != nil {
			return err
		}
		defer release()
		return t.Filter(cmd.InOrStdin(), cmd.OutOrStdout(), reverse, bos, special)
	}
	if !reverse {
		c.Flags().BoolVar(&bos, "bos", false, "add BOS (and EOS) as the model's vocabulary says")
		c.Flags().BoolVar(&special, "parse-special", false, "turn special-token text such as <|im_start|> into its id")
	}
	return c
}
