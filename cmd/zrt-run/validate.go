package main

import (
	"fmt"
	"math"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/cmd/internal/exitcode"
	"github.com/zrtdev/zrt/runtime/validate"
)

func validateCmd() *cobra.Command {
	var ef engineFlags
	var oracle, prompt, layers string
	var steps, slots int
	var tol float64
	c := &cobra.Command{
		Use:   "validate BUNDLE --oracle ORACLE_BUNDLE",
		Short: "Compare a bundle layer by layer with an oracle bundle of the same GGUF (T-CPU's)",
		Long: `validate runs one prompt on BUNDLE and on ORACLE_BUNDLE, two bundles
zrtc built from the same GGUF for different targets (the oracle is
normally the cpu one, run on T-CPU), then --steps decode steps of the
oracle's greedy tokens. With --slots N each decode step is one batch of
N rows, a row per slot (slot s evaluated the prompt's first n − s mod n
tokens), which checks the batched decode variants. Both replays stop after every kernel, so the
residual stream after each layer, the output norm and the logits can be
read and compared. It prints, per step, each point's largest absolute
difference and that difference over the oracle's largest magnitude, and
names the first layer whose relative difference exceeds --tolerance, with
how many of the step's rows do: a wrong weight or kernel moves every row,
while a rounding difference moves only the rows where a near tie (an
activation on a Q8 rounding boundary, two attention scores) amplifies it.

It exits 0 when every point is within the tolerance and 1 otherwise. The
default tolerance, 0.1, is above what a correct T-CUDA build measures
against T-CPU (F16 attention and reordered sums: the difference grows
layer by layer, to about 0.03 at the logits of the shared models and 0.065
at gemma2's output norm, whose soft-capping amplifies it), and far below
what a wrong kernel or weight gives.
Points compared: embd (the scaled embedding), layer 0…N-1 (the residual
stream after each layer), output norm, logits (the last row's).
BUNDLE runs on --tier (default: its own); the oracle on its own target's
tier. Stopping between kernels makes this slow: it is a diagnostic.

` + envHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case oracle == "":
				return exitcode.Usagef("--oracle is required: a bundle of the same GGUF to compare with (e.g. its cpu build)")
			case steps < 0 || steps > 1<<16:
				return exitcode.Usagef("--steps %d out of range [0, 65536]", steps)
			case slots < 1 || slots > 1024:
				return exitcode.Usagef("--slots %d out of range [1, 1024]", slots)
			case !(tol >= 0) || math.IsInf(tol, 0):
				return exitcode.Usagef("--tolerance %v: want a finite number ≥ 0", tol)
			}
			pick, err := validate.ParseLayers(layers)
			if err != nil {
				return exitcode.Usagef("--layers %q: %v", layers, err)
			}
			opt, err := ef.options()
			if err != nil {
				return err
			}
			got, err := ef.program(cmd.Context(), args[0], opt)
			if err != nil {
				return err
			}
			defer got.Close()
			oopt := opt
			oopt.Tier = "auto"
			ref, err := ef.program(cmd.Context(), oracle, oopt)
			if err != nil {
				return fmt.Errorf("oracle: %w", err)
			}
			defer ref.Close()
			toks := got.Tok.Encode(prompt, true, false)
			rep, err := validate.Run(cmd.Context(), got, ref, toks, steps, slots)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "validate: %s (%s, tier %s) against %s (%s, tier %s): %d prompt tokens, %d decode steps of %d slots\n",
				args[0], got.Bundle.Graph.Ident.Target, got.TierName(), oracle, ref.Bundle.Graph.Ident.Target, ref.TierName(), rep.Prompt, steps, rep.Slots)
			return rep.Write(cmd.OutOrStdout(), tol, pick)
		},
	}
	ef.add(c)
	c.Flags().StringVar(&oracle, "oracle", "", "the bundle to compare with: the same GGUF built for another target (normally cpu)")
	c.Flags().StringVar(&prompt, "prompt", "Once upon a time", "prompt text")
	c.Flags().StringVar(&layers, "layers", "all", "layers to show and check: all, or a list such as 0,3,8-11")
	c.Flags().IntVar(&steps, "steps", 1, "decode steps after the prompt, feeding both the oracle's greedy token")
	c.Flags().IntVar(&slots, "slots", 1, "slots each decode step batches (the decode variant that fits them)")
	c.Flags().Float64Var(&tol, "tolerance", 0.1, "largest relative difference (max|Δ| / max|oracle|) allowed at any point")
	return c
}
