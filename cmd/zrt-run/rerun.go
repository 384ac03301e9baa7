package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/runtime/engine"
)

func rerunCmd() *cobra.Command {
	var ef engineFlags
	c := &cobra.Command{
		Use:   "rerun BUNDLE LOG [DRAFT]",
		Short: "Re-run a serving engine's step log on a fresh engine, failing on the first step whose tokens differ",
		Long: `rerun replays a step log that zrt-run serve --step-log wrote (a JSON line per engine step:
arrivals with their prompts and sampling parameters, cancellations, the plan, rows and sampled
tokens) on a fresh engine over BUNDLE (the bundle that served it, or one built from the same GGUF
and config; DRAFT: the draft model it served with, which sampled drafts need) and exits non-zero at
the first step whose tokens, then plan, differ, naming it and the request. T-CPU computes a
request's tokens the same whatever its batch, so rerun runs there unless --tier says not.

` + envHelp,
		Args: cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			opt, err := ef.options()
			if err != nil {
				return err
			}
			if opt.Tier == "" || opt.Tier == "auto" {
				opt.Tier = "cpu"
			}
			p, err := ef.program(cmd.Context(), args[0], opt)
			if err != nil {
				return err
			}
			defer p.Close()
			f, err := os.Open(args[1])
			if err != nil {
				return err
			}
			defer f.Close()
			var dm engine.Model
			if opt.Beside = p; len(args) == 3 { // (on T-CPU the draft shares the target's workers)
				dp, err := ef.program(cmd.Context(), args[2], opt)
				if err != nil {
					return fmt.Errorf("draft model %s: %w", args[2], err)
				}
				defer dp.Close()
				dm = dp
			}
			n, err := engine.RerunDraft(cmd.Context(), p, dm, p.Tok, f)
			if err != nil {
				return fmt.Errorf("%s: %w", args[1], err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "rerun: %d steps of %s on tier %s: every sampled token and plan matches\n", n, args[1], p.TierName())
			return nil
		},
	}
	ef.add(c)
	return c
}
