package main

import (
	"github.com/zrtdev/zrt/compiler/dump"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/format/bundleset"
	"github.com/zrtdev/zrt/format/zrtp"
)

func dumpSetCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "set SET|MODEL.zrtp",
		Short: "Print a bundle set's index: the model, and each bundle's target, directory, requirements and key (of a pack: its index)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if zrtp.Is(args[0]) {
				return dump.Pack(cmd.OutOrStdout(), args[0])
			}
			x, err := bundleset.Read(args[0])
			if err != nil {
				return err
			}
			return dump.Set(cmd.OutOrStdout(), args[0], x)
		},
	}
}
