package main

import (
	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/runtime/tiers"
)

func probeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "probe",
		Short: "Say which execution tiers can run here, and why not",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return tiers.WriteProbe(cmd.OutOrStdout(), tiers.Table())
		},
	}
}
