// Command zrt-run loads a bundle built by zrtc and runs it: one-shot
// generation, teacher-forced evaluation, tokenization and a tier probe.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	root := &cobra.Command{
		Use:   "zrt-run",
		Short: "Run compiled zrt bundles",
		Long: `zrt-run mmaps a bundle written by 'zrtc build', validates it, picks an
execution tier and replays it.

` + envHelp,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(generateCmd(), serveCmd(), loadtestCmd(), evalCmd(), tokenizeCmd(false), tokenizeCmd(true), probeCmd(), benchCmd())
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "zrt-run:", err)
		os.Exit(1)
	}
}
