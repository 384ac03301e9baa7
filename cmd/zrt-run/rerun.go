package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/runtime/engine"
)

func rerunCmd() *cobra.Command {
	var ef engineFlags
	var draft string
	c := &cobra.Command{
		Use:   "rerun BUNDLE LOG",
		Short: "Re-run a serving engine's step log on a fresh engine, failing on the first step whose tokens differ",
		Long: `rerun reads a step log that zrt-run serve --step-log wrote (a JSON line per
engine step: its arrivals with their prompt tokens and sampling parameters,
cancellations, the scheduler's plan and slot table, the query rows and the
sampled tokens), runs the same steps on a fresh engine over BUNDLE, and
compares each step's sampled tokens, then its plan, with the log's. It
exits non-zero at the first difference, naming the step and the request.

T-CPU computes a request's tokens bit for bit the same whatever its batch,
so a log from T-CPU reruns exactly; rerun runs on T-CPU unless --tier says
otherwise. BUNDLE must be the one (or built from the same GGUF and config
as the one) that served the log. A log served with a draft model
(--speculative draft) holds its draft tokens: rerun takes them from the log,
except those it drew for sampled requests, which verifying them needs the
draft model's distribution for: give the draft model with --draft, and
rerun makes every draft again and compares it with the log's.

` + envHelp,
		Args: cobra.ExactArgs(2),
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
			if draft != "" {
				dopt := opt
				dopt.Beside = p // (on T-CPU it shares the target's workers)
				dp, err := ef.program(cmd.Context(), draft, dopt)
				if err != nil {
					return fmt.Errorf("--draft %s: %w", draft, err)
				}
				defer dp.Close()
				if err := engine.CheckDraft(p, dp); err != nil {
					return fmt.Errorf("--draft %s: %w", draft, err)
				}
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
	c.Flags().StringVar(&draft, "draft", "", "the draft model the log was served with (--speculative draft), a bundle or GGUF: needed for the drafts of sampled requests")
	return c
}
