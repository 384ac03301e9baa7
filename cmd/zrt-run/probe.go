package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/runtime/tiers"
)

func probeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "probe",
		Short: "Say which execution tiers can run here, and why not",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()
			rows := tiers.Table()
			for _, row := range rows {
				for _, r := range row.Probe() {
					state := "missing"
					if r.Available {
						state = "available"
					}
					fmt.Fprintf(w, "%-6s %-9s  %s\n", r.Name, state, r.Detail)
				}
			}
			fmt.Fprintln(w, "\nbundle targets and the tier that runs them:")
			for _, t := range kernels.Targets() {
				// The tiers as ZRT_TIER spells them: the AMD kind's run on T1 and T2 alike.
				fmt.Fprintf(w, "  %-12s %s\n", t.Name, strings.Join(tiers.OfKind(rows, t.Tier), ","))
			}
			return nil
		},
	}
}
