package main

import (
	"bufio"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/config"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/format/support"
	"github.com/zrtdev/zrt/format/zrtp"
)

func inspectCmd() *cobra.Command {
	var cfg, target string
	c := &cobra.Command{
		Use:   "inspect MODEL.gguf",
		Short: "List a GGUF's metadata and tensors, marking what a build would refuse",
		Long: `inspect lists every metadata key and tensor of a GGUF file, whatever its
architecture and tensor types, then says whether zrtc can build it for the
target: tensors whose type the target's kernels cannot compute with are
marked "unsupported", and the last line is the build's verdict. A file that
breaks the GGUF format is refused as malformed instead. Given a pack
(.zrtp), inspect lists its index without decompressing anything.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if zrtp.Is(args[0]) {
				return listPack(cmd.OutOrStdout(), args[0])
			}
			f, err := gguf.OpenModel(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			if target == "" {
				target = config.DefaultTarget
				if c, err := config.Load(f, cfg, config.Overrides{}); err == nil {
					target = c.Target
				}
			}
			w := bufio.NewWriter(cmd.OutOrStdout())
			inspect(w, f, target)
			verdict(w, args[0], compiler.Options{ConfigPath: cfg, Target: target})
			return w.Flush()
		},
	}
	c.Flags().StringVar(&cfg, "config", "", "TOML model config overriding the GGUF defaults")
	c.Flags().StringVar(&target, "target", "", "target whose support to mark (default: the config's)")
	return c
}

// inspect writes the file's header, metadata and tensor table.
func inspect(w io.Writer, f *gguf.File, target string) {
	fmt.Fprintf(w, "GGUF v%d, %d metadata keys, %d tensors, alignment %d, data at byte %d\n\n",
		f.Version, len(f.KV), len(f.Tensors), f.Alignment, f.DataOffset)
	fmt.Fprintln(w, "metadata:")
	for _, kv := range f.KV {
		fmt.Fprintf(w, "  %-48s %s\n", kv.Key, kv.Value)
	}
	fmt.Fprintf(w, "\ntensors (support for target %s):\n", target)
	byType := map[ggml.Type]int64{}
	var order []ggml.Type
	for i := range f.Tensors {
		t := &f.Tensors[i]
		mark := ""
		if compiler.RefusesWeightType(target, t.Type) {
			mark = "  unsupported"
		}
		fmt.Fprintf(w, "  %-40s %-8s %-22s %12d B%s\n", t.Name, t.Type, fmt.Sprint(t.Dims), t.Size, mark)
		if _, seen := byType[t.Type]; !seen {
			order = append(order, t.Type)
		}
		byType[t.Type] += t.Size
	}
	fmt.Fprintln(w, "\ntensor bytes by type:")
	for _, t := range order {
		note := ""
		if compiler.RefusesWeightType(target, t) {
			note = "  unsupported on " + target
			if ti, _ := t.Info(); ti.Removed != "" {
				note += " (removed from ggml: " + ti.Removed + ")"
			}
		}
		fmt.Fprintf(w, "  %-16s %14d B%s\n", t.Describe(), byType[t], note)
	}
}

// verdict runs the build's front end (no passes, nothing written) and says
// whether it would succeed.
func verdict(w io.Writer, path string, opt compiler.Options) {
	fe, err := compiler.Load(path, opt)
	switch {
	case err == nil:
		fe.Close()
		fmt.Fprintf(w, "\nbuild for %s: supported\n", opt.Target)
	case support.Is(err):
		fmt.Fprintf(w, "\nbuild for %s: refused: %v\n", opt.Target, err)
	default:
		fmt.Fprintf(w, "\nbuild for %s: fails: %v\n", opt.Target, err)
	}
}
