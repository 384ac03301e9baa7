// Package tokcmd is the tokenize and detokenize commands that zrtc (on a
// GGUF) and zrt-run (on a bundle) both have: one filter from stdin to
// stdout, the binaries differing only in where the tokenizer comes from.
package tokcmd

import (
	"github.com/spf13/cobra"

	"github.com/zrtdev/zrt/runtime/tokenizer"
)

// Command returns tokenize, or detokenize when reverse, over the file arg
// names (MODEL.gguf, BUNDLE). open reads the tokenizer of the file given
// and returns what to call once the filter is done.
func Command(arg string, reverse bool, open func(cmd *cobra.Command, path string) (*tokenizer.Tokenizer, func(), error)) *cobra.Command {
	var bos, special bool
	use, short := "tokenize "+arg, "Read text on stdin, print token ids separated by spaces"
	if reverse {
		use, short = "detokenize "+arg, "Read token ids on stdin, print the text"
	}
	c := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, done, err := open(cmd, args[0])
			if err != nil {
				return err
			}
			defer done()
			return t.Filter(cmd.InOrStdin(), cmd.OutOrStdout(), reverse, bos, special)
		},
	}
	if !reverse {
		c.Flags().BoolVar(&bos, "bos", false, "add BOS (and EOS) as the model's vocabulary says")
		c.Flags().BoolVar(&special, "parse-special", false, "turn special-token text such as <|im_start|> into its id")
	}
	return c
}
