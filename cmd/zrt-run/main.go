// Command zrt-run loads a bundle built by zrtc and runs it: one-shot
// generation, teacher-forced evaluation, tokenization and a tier probe.
package main

import (
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/cmd/internal/exitcode"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/zrt"
	"github.com/zrtdev/zrt/version"
)

func main() {
	root := &cobra.Command{
		Use:   "zrt-run",
		Short: "Run compiled zrt bundles",
		Long: `zrt-run mmaps a bundle written by 'zrtc build', validates it, picks an
execution tier and replays it. Wherever it takes a bundle it also takes a
bundle set (it runs the member that fits this machine) and a pack
(zrtc pack): it unpacks that member once under --unpack-dir and reuses it.

It also takes a GGUF model: the first time, it builds it with zrtc (found
beside zrt-run, else on $PATH) into the build cache (--cache, else
$ZRTC_CACHE, else the user cache directory's zrt), printing zrtc's
progress and the defaults it chose; later runs with the same model, zrtc
and flags reuse that build and say so. --ctx-size, --slots and --target
stand in for a model config.

` + envHelp,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	setVersion(root)
	var cpuProfile string
	root.PersistentFlags().StringVar(&cpuProfile, "cpuprofile", "", "write a Go CPU profile of the whole run to this file (go tool pprof), for finding where the host's time goes")
	root.PersistentPreRunE = func(*cobra.Command, []string) error { return startProfile(cpuProfile) }
	root.AddCommand(generateCmd(), serveCmd(), loadtestCmd(), evalCmd(), tokenizeCmd(false), tokenizeCmd(true), probeCmd(), benchCmd(), rerunCmd(), validateCmd())
	exitcode.Main(root, pprof.StopCPUProfile) // a no-op without --cpuprofile
}

// startProfile starts the CPU profile --cpuprofile asks for; main stops
// it (a no-op without one) when the command returns.
func startProfile(path string) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return exitcode.Usagef("--cpuprofile: %v", err)
	}
	return pprof.StartCPUProfile(f)
}

// setVersion gives zrt-run a --version: its release and the artifact
// format versions it runs, to set beside a bundle's (zrtc inspect) when
// one will not load.
func setVersion(root *cobra.Command) {
	root.Version = fmt.Sprintf("zrt-run %s; kernel ABI %d; graph format %d.%d; weights pack %d",
		version.Release, zrt.ABIVersion, bundle.VersionMajor, bundle.VersionMinor, bundle.PackVersion)
	root.SetVersionTemplate("{{.Version}}\n")
}
