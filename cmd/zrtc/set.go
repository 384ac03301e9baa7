package main

import (
	"github.com/zrtdev/zrt/compiler/dump"

	"github.com/spf13/cobra"
)

func dumpSetCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "set SET|MODEL.zrtp",
		Short: "Print a bundle set's index: the model, and each bundle's target, directory, requirements and key (of a pack: its index)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return dump.Index(cmd.OutOrStdout(), args[0])
		},
	}
}
