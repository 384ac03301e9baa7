package main

import (
	"fmt"
	"os"
	goruntime "runtime"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
)

func probeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "probe",
		Short: "Say which execution tiers can run here, and why not",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "cpu    available  %d CPUs, %s/%s\n", goruntime.NumCPU(), goruntime.GOOS, goruntime.GOARCH)
			for _, t := range []struct{ name, node string }{{"t1", "/dev/kfd"}, {"t2", "/dev/dri/renderD128"}} {
				if _, err := os.Stat(t.node); err != nil {
					fmt.Fprintf(w, "%-6s missing    no device node %s\n", t.name, t.node)
				} else {
					fmt.Fprintf(w, "%-6s missing    %s exists, but this build has no AMD tier\n", t.name, t.node)
				}
			}
			if info, err := driver.Probe(); err != nil {
				fmt.Fprintf(w, "cuda   missing    %v\n", err)
			} else {
				fmt.Fprintf(w, "cuda   available  %s, %d device(s)\n", info, info.Devices)
			}
			if goruntime.GOOS == "darwin" {
				fmt.Fprintln(w, "metal  missing    this build has no Metal tier")
			} else {
				fmt.Fprintf(w, "metal  missing    not macOS (%s)\n", goruntime.GOOS)
			}
			fmt.Fprintln(w, "\nbundle targets and the tier that runs them:")
			for _, t := range kernels.Targets() {
				fmt.Fprintf(w, "  %-12s %s\n", t.Name, t.Tier)
			}
			return nil
		},
	}
}
