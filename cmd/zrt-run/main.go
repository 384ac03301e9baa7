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
	"github.com/zrtdev/zrt/cmd/internal/exitcode"
	"github.com/zrtdev/zrt/cmd/internal/stdout"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/zrt"
	"github.com/zrtdev/zrt/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := &cobra.Command{
		Use:   "zrt-run",
		Short: "Run compiled zrt bundles",
		Long: `zrt-run mmaps a bundle written by 'zrtc build', validates it, picks an
execution tier and replays it. Wherever it takes a bundle it also takes a
bundle set (it runs the member that fits this machine) and a pack
(zrtc pack): it unpacks that member once under --unpack-dir and reuses it.

` + envHelp,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	setVersion(root)
	root.AddCommand(generateCmd(), serveCmd(), loadtestCmd(), evalCmd(), tokenizeCmd(false), tokenizeCmd(true), probeCmd(), benchCmd(), rerunCmd(), validateCmd())
	exitcode.Wire(root)
	out := stdout.New(os.Stdout)
	root.SetOut(out)
	err := exitcode.Classify(root.ExecuteContext(ctx))
	if err == nil {
		err = out.Err()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "zrt-run:", err)
		os.Exit(exitcode.Code(err))
	}
}

// setVersion gives zrt-run a --version: its release and the artifact
// format versions it runs, to set beside a bundle's (zrtc inspect) when
// one will not load.
func setVersion(root *cobra.Command) {
	root.Version = fmt.Sprintf("zrt-run %s; kernel ABI %d; graph format %d.%d; weights pack %d",
		version.Release, zrt.ABIVersion, bundle.VersionMajor, bundle.VersionMinor, bundle.PackVersion)
	root.SetVersionTemplate("{{.Version}}\n")
}
