package main

import (
	"fmt"
	goruntime "runtime"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/runtime/amd/t1"
	"github.com/zrtdev/zrt/runtime/amd/t2"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
)

// tiersOf names the tiers (as ZRT_TIER spells them) that run a tier
// kind's bundles: the AMD kind's run on T1 and T2 alike.
func tiersOf(k kernels.TierKind) string {
	if k == kernels.TierAMD {
		return "t1,t2"
	}
	return string(k)
}

func probeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "probe",
		Short: "Say which execution tiers can run here, and why not",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "cpu    available  %d CPUs, %s/%s\n", goruntime.NumCPU(), goruntime.GOOS, goruntime.GOARCH)
			if info, err := t1.Probe(); err != nil {
				fmt.Fprintf(w, "t1     missing    %v\n", err)
			} else {
				fmt.Fprintf(w, "t1     available  %s, KFD interface %d.%d (a bundle runs when built for its gfx target)\n", info.Name, info.Major, info.Minor)
			}
			fmt.Fprintln(w, "t1sim  available  ZRT_TIER=t1 ZRT_KFD=sim: the T1 path on a simulated KFD that runs T-CPU kernels")
			if info, err := t2.Probe(); err != nil {
				fmt.Fprintf(w, "t2     missing    %v\n", err)
			} else {
				fmt.Fprintf(w, "t2     available  %s, amdgpu DRM %d.%d (a bundle runs when built for its gfx target)\n", info.Name, info.Major, info.Minor)
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
				fmt.Fprintf(w, "  %-12s %s\n", t.Name, tiersOf(t.Tier))
			}
			return nil
		},
	}
}
