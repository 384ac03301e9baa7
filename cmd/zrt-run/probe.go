package main

import (
	"fmt"
	"math"
	"os"
	goruntime "runtime"
	"sort"
	"time"

	"github.com/spf13/cobra"
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
			fmt.Fprintln(w, "metal  missing    not macOS")
			return nil
		},
	}
}

func benchCmd() *cobra.Command {
	var ef engineFlags
	var pp, tg, reps int
	c := &cobra.Command{
		Use:   "bench BUNDLE",
		Short: "Measure prompt processing and generation speed (llama-bench style table)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := ef.open(args[0])
			if err != nil {
				return err
			}
			defer e.Close()
			ctx := cmd.Context()
			nv := int32(e.Hparams.NVocab)
			run := func(prompt, gen int) (float64, error) {
				seq, err := e.NewSequence()
				if err != nil {
					return 0, err
				}
				defer seq.Release()
				toks := make([]int32, max(prompt, 1))
				for i := range toks {
					toks[i] = int32(i*7919) % nv
				}
				t0 := time.Now()
				if _, err := seq.Prefill(ctx, toks); err != nil {
					return 0, err
				}
				if gen == 0 {
					return float64(prompt) / time.Since(t0).Seconds(), nil
				}
				t0 = time.Now()
				for i := 0; i < gen; i++ {
					if _, err := seq.Decode(ctx, seq.Greedy()); err != nil {
						return 0, err
					}
				}
				return float64(gen) / time.Since(t0).Seconds(), nil
			}
			w := cmd.OutOrStdout()
			fmt.Fprintln(w, "| model | backend | threads | test | t/s |")
			fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: |")
			for _, test := range []struct {
				name string
				p, g int
			}{{fmt.Sprintf("pp%d", pp), pp, 0}, {fmt.Sprintf("tg%d", tg), 1, tg}} {
				if (test.g == 0 && pp == 0) || (test.g > 0 && tg == 0) {
					continue
				}
				var rs []float64
				for r := 0; r < reps; r++ {
					v, err := run(test.p, test.g)
					if err != nil {
						return err
					}
					rs = append(rs, v)
				}
				mean, sd := meanSD(rs)
				fmt.Fprintf(w, "| %s | %s | %d | %s | %.2f ± %.2f |\n", e.Hparams.Arch, e.TierName(), ef.threadsOr(), test.name, mean, sd)
			}
			return nil
		},
	}
	ef.add(c)
	c.Flags().IntVarP(&pp, "p", "p", 512, "prompt tokens for the pp test (0: skip)")
	c.Flags().IntVarP(&tg, "n", "n", 128, "generated tokens for the tg test (0: skip)")
	c.Flags().IntVarP(&reps, "r", "r", 3, "repetitions")
	return c
}

func (f *engineFlags) threadsOr() int {
	if f.threads > 0 {
		return f.threads
	}
	return goruntime.NumCPU()
}

func meanSD(xs []float64) (float64, float64) {
	sort.Float64s(xs)
	m := 0.0
	for _, x := range xs {
		m += x
	}
	m /= float64(len(xs))
	v := 0.0
	for _, x := range xs {
		v += (x - m) * (x - m)
	}
	if len(xs) > 1 {
		v /= float64(len(xs) - 1)
	}
	return m, math.Sqrt(v)
}
