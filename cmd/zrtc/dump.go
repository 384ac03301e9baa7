package main

import (
	"fmt"
	"github.com/zrtdev/zrt/compiler/dump"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/cmd/internal/exitcode"
	"github.com/zrtdev/zrt/passes"
)

func dumpCmd() *cobra.Command {
	var cfg, after string
	var tp passes.TP
	c := &cobra.Command{
		Use:   "dump liveness|memplan|ir MODEL.gguf",
		Short: "Compile a model in memory and print one stage's result",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case args[0] != "ir" && args[0] != "memplan" && args[0] != "liveness":
				return exitcode.Usagef("dump: unknown stage %q: want liveness, memplan or ir", args[0])
			case after != "" && args[0] != "ir":
				return exitcode.Usagef("dump: --after applies to dump ir only")
			case after != "":
				if err := passes.CheckPass(after); err != nil {
					return &exitcode.UsageError{Err: fmt.Errorf("--after: %w", err)}
				}
			}
			if tp.Ranks < 0 || tp.Ranks > 64 || tp.Rank < 0 || tp.Rank >= max(tp.Ranks, 1) {
				return exitcode.Usagef("dump: --tp-rank %d of --tp %d", tp.Rank, tp.Ranks)
			}
			return dump.Stage(cmd.Context(), cmd.OutOrStdout(), args[0], args[1], cfg, after, tp)
		},
	}
	c.Flags().StringVar(&cfg, "config", "", "TOML model config overriding the GGUF defaults")
	c.Flags().StringVar(&after, "after", "", "dump ir: print the IR after this pass instead of as built")
	c.Flags().IntVar(&tp.Ranks, "tp", 0, "compile one rank of a tensor-parallel set of this many ranks (see zrtc build --tp)")
	c.Flags().IntVar(&tp.Rank, "tp-rank", 0, "with --tp: the rank to compile")
	return c
}
