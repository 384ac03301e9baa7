// Command zrtc compiles a GGUF model and an optional TOML config into a
// zrt bundle, and inspects every stage on the way.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/cmd/internal/stdout"
	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/config"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/format/vocab"
	"github.com/zrtdev/zrt/passes"
	"github.com/zrtdev/zrt/runtime/sysmem"
	"github.com/zrtdev/zrt/runtime/tokenizer"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := &cobra.Command{
		Use:   "zrtc",
		Short: "Compile GGUF models into zrt bundles",
		Long: `zrtc lowers a GGUF model plus an optional TOML model config through named
IR passes into a bundle: .zrt kernel blobs, a flat graph file and a weights
pack, for one target (` + strings.Join(compiler.Targets(), ", ") + `).

A model zrtc cannot build yet (its architecture, a tensor type on the
target, a config feature) is refused with "unsupported ...", distinct from
a file that breaks the GGUF format ("malformed"); zrtc inspect shows both.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       compiler.Version,
	}
	root.AddCommand(buildCmd(), inspectCmd(), configCmd(), passesCmd(), withArtifactDumps(dumpCmd()), verifyCmd(), synthCmd(), tokCmd(false), tokCmd(true))
	out := stdout.New(os.Stdout)
	root.SetOut(out)
	err := root.ExecuteContext(ctx)
	if err == nil {
		err = out.Err()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "zrtc:", err)
		os.Exit(1)
	}
}

func buildCmd() *cobra.Command {
	var cfg, target, out string
	var quiet, verifyEach, noFuse bool
	var budget byteSize
	var phases phaseFlags
	c := &cobra.Command{
		Use:   "build MODEL.gguf [IR.zir] -o OUT",
		Short: "Compile a model into a bundle directory (written atomically)",
		Long: `build compiles a model into a bundle directory, written atomically.

Environment: ZRT_PTX_DIR, when set, supplies T-CUDA's PTX from a directory
(kernels/cuda/build_ptx.sh DIR writes one) instead of the PTX built into
zrtc, for trying new kernels without rebuilding zrtc.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opt := compiler.Options{ConfigPath: cfg, Target: target, VerifyEach: verifyEach, NoFuse: noFuse,
				PTXDir: os.Getenv("ZRT_PTX_DIR")}
			if err := phases.apply(args, out, &opt); err != nil {
				return err
			}
			if !quiet {
				opt.Progress = func(f string, a ...any) { fmt.Fprintf(cmd.ErrOrStderr(), "zrtc: "+f+"\n", a...) }
			}
			opt.Warn = func(f string, a ...any) { fmt.Fprintf(cmd.ErrOrStderr(), "zrtc: warning: "+f+"\n", a...) }
			if opt.MemoryBudget = int64(budget); budget == 0 {
				opt.MemoryBudget, _ = sysmem.Available()
			}
			if opt.CompileTo != "" && out == "" {
				return compiler.CompileIR(cmd.Context(), args[0], cmd.OutOrStdout(), opt)
			}
			if err := compiler.Compile(cmd.Context(), args[0], out, opt); err != nil {
				return err
			}
			if !quiet {
				fmt.Fprintf(cmd.ErrOrStderr(), "zrtc: wrote %s\n", out)
			}
			return nil
		},
	}
	c.Flags().StringVar(&cfg, "config", "", "TOML model config overriding the GGUF defaults")
	c.Flags().StringVar(&target, "target", "", "compile target: "+strings.Join(compiler.Targets(), ", ")+" (default: the config's)")
	c.Flags().StringVarP(&out, "out", "o", "", "output bundle directory")
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "print nothing on success but warnings")
	c.Flags().Var(&budget, "memory-budget", "warn when the plan keeps more than this resident, e.g. 16GiB (default: this machine's available memory)")
	c.Flags().BoolVar(&verifyEach, "verify-each", false, "re-verify the IR after every pass")
	c.Flags().BoolVar(&noFuse, "no-fuse", false, "skip the fuse pass (for bisecting a numerical difference)")
	phases.register(c)
	return c
}

func configCmd() *cobra.Command {
	var cfg string
	c := &cobra.Command{
		Use:   "config MODEL.gguf",
		Short: "Print the effective model config as TOML (GGUF defaults, then --config overrides)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := gguf.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			c, err := config.Load(f, cfg)
			if err != nil {
				return err
			}
			_, err = io.WriteString(cmd.OutOrStdout(), c.TOML())
			return err
		},
	}
	c.Flags().StringVar(&cfg, "config", "", "TOML model config overriding the GGUF defaults")
	return c
}

func passesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "passes",
		Short: "Print the pass pipeline and its ordering constraints",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			w := cmd.OutOrStdout()
			for i, p := range passes.Pipeline {
				fmt.Fprintf(w, "%2d  %-10s %s\n", i+1, p.Name, p.Doc)
			}
			fmt.Fprintln(w, "\nconstraints:")
			for _, c := range passes.Constraints {
				fmt.Fprintf(w, "  %s before %s: %s\n", c.Before, c.After, c.Why)
			}
		},
	}
}

func tokCmd(reverse bool) *cobra.Command {
	var bos, special bool
	use, short := "tokenize MODEL.gguf", "Read text on stdin, print token ids separated by spaces"
	if reverse {
		use, short = "detokenize MODEL.gguf", "Read token ids on stdin, print the text"
	}
	c := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := gguf.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			v, err := vocab.FromGGUF(f)
			if err != nil {
				return err
			}
			t, err := tokenizer.New(v)
			if err != nil {
				return err
			}
			in, err := io.ReadAll(cmd.InOrStdin())
			if err != nil {
				return err
			}
			if reverse {
				ids, err := t.ParseIDs(string(in))
				if err != nil {
					return err
				}
				_, err = io.WriteString(cmd.OutOrStdout(), t.Decode(ids))
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), tokenizer.FormatIDs(t.Encode(string(in), bos, special)))
			return err
		},
	}
	if !reverse {
		c.Flags().BoolVar(&bos, "bos", false, "add BOS (and EOS) as the model's vocabulary says")
		c.Flags().BoolVar(&special, "parse-special", false, "turn special-token text such as <|im_start|> into its id")
	}
	return c
}
