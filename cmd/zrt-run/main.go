// Command zrt-run loads a bundle built by zrtc and runs it: one-shot
// generation, teacher-forced evaluation, tokenization and a tier probe.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/cmd/internal/stdout"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
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
	root.AddCommand(generateCmd(), serveCmd(), loadtestCmd(), evalCmd(), tokenizeCmd(false), tokenizeCmd(true), probeCmd(), benchCmd(), rerunCmd())
	out := stdout.New(os.Stdout)
	root.SetOut(out)
	err := root.ExecuteContext(ctx)
	if err == nil {
		err = out.Err()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "zrt-run:", err)
		os.Exit(1)
	}
}
