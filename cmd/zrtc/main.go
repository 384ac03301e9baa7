// Command zrtc compiles a GGUF model and an optional TOML config into a
// zrt bundle, and inspects every stage on the way.
package main

import (
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/cmd/internal/exitcode"
	"github.com/zrtdev/zrt/cmd/internal/tokcmd"
	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/config"
	"github.com/zrtdev/zrt/internal/optflag"
	"github.com/zrtdev/zrt/passes"
	"github.com/zrtdev/zrt/runtime/tokenizer"
)

func main() {
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
	}
	setVersion(root)
	root.AddCommand(buildCmd(), keyCmd(), cacheCmd(), packCmd(), unpackCmd(), inspectCmd(), configCmd(), passesCmd(), withArtifactDumps(dumpCmd()), verifyCmd(), synthCmd(), tokCmd(false), tokCmd(true))
	exitcode.Main(root, nil)
}

func configCmd() *cobra.Command {
	var cfg, target string
	var sizes sizeFlags
	c := &cobra.Command{
		Use:   "config MODEL.gguf",
		Short: "Print the effective model config as TOML (GGUF defaults, then --config overrides)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opt := compiler.Options{Target: target, ConfigPath: cfg}
			if err := sizes.apply(&opt); err != nil {
				return err
			}
			c, err := compiler.LoadConfig(args[0], opt)
			if err != nil {
				return err
			}
			_, err = io.WriteString(cmd.OutOrStdout(), c.TOML())
			return err
		},
	}
	c.Flags().StringVar(&cfg, "config", "", "TOML model config overriding the GGUF defaults")
	c.Flags().StringVar(&target, "target", "", "the target whose defaults to resolve (default: the config's)")
	sizes.register(c)
	return c
}

func passesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "passes",
		Short: "Print the pass pipeline and its ordering constraints",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return passes.Describe(cmd.OutOrStdout()) },
	}
}

func tokCmd(reverse bool) *cobra.Command {
	return tokcmd.New(reverse, "MODEL.gguf", func(_ *cobra.Command, path string) (*tokenizer.Tokenizer, func() error, error) {
		t, err := tokenizer.FromGGUF(path)
		return t, func() error { return nil }, err
	})
}

// sizeFlags are the config settings build, key and config take as flags,
// so the common ones need no config file: the fields of compiler.Options
// they set, which apply checks and copies.
type sizeFlags struct{ compiler.Options }

func (s *sizeFlags) register(c *cobra.Command) {
	c.Flags().IntVar(&s.ContextLength, "ctx-size", 0, "context length, overriding the config's context_length (default: the GGUF's trained context)")
	c.Flags().IntVar(&s.Slots, "slots", 0, "requests served at once: max_slots, and decode variants up to it (default: 16 on cpu, 64 on cuda)")
	c.Flags().Var(optflag.Int{P: &s.DraftLayers}, "draft-layers", "self-speculation draft variants (one for each decode variant) of the first N layers and the model's head, overriding the config's draft_layers; 0: none (default: a quarter of the layers, at least 1, where the model can draft)")
}

func (s *sizeFlags) apply(opt *compiler.Options) error {
	switch {
	case s.ContextLength < 0 || s.ContextLength > config.MaxContext:
		return exitcode.Usagef("--ctx-size %d out of range [1, %d]", s.ContextLength, config.MaxContext)
	case s.Slots < 0 || s.Slots > 1024:
		return exitcode.Usagef("--slots %d out of range [1, 1024]", s.Slots)
	}
	opt.ContextLength, opt.Slots, opt.DraftLayers = s.ContextLength, s.Slots, s.DraftLayers
	return nil
}

// setVersion makes --version print the toolchain: zrtc's version and the
// artifact format versions its bundles carry (cobra's default template
// would say "zrtc version zrtc 0.1.0").
func setVersion(root *cobra.Command) {
	root.Version = compiler.Toolchain()
	root.SetVersionTemplate("{{.Version}}\n")
}
