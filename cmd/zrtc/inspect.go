package main

import (
	"github.com/zrtdev/zrt/compiler/dump"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/format/zrtp"
)

func inspectCmd() *cobra.Command {
	var cfg, target string
	c := &cobra.Command{
		Use:   "inspect MODEL.gguf",
		Short: "List a GGUF's metadata and tensors, marking what a build would refuse",
		Long: `inspect lists every metadata key and tensor of a GGUF file, whatever its
architecture and tensor types, then says whether zrtc can build it for the
target: tensors whose type the target's kernels cannot compute with are
marked "unsupported", and the last line is the build's verdict. A file that
breaks the GGUF format is refused as malformed instead. Given a pack
(.zrtp), inspect lists its index without decompressing anything.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if zrtp.Is(args[0]) {
				return dump.Pack(cmd.OutOrStdout(), args[0])
			}
			return dump.Inspect(cmd.OutOrStdout(), args[0], cfg, target)
		},
	}
	c.Flags().StringVar(&cfg, "config", "", "TOML model config overriding the GGUF defaults")
	c.Flags().StringVar(&target, "target", "", "target whose support to mark (default: the config's)")
	return c
}
