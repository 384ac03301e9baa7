package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/cmd/internal/exitcode"
	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/runtime/sysmem"
)

func synthCmd() *cobra.Command {
	s := synth.Tiny
	var out, typ string
	c := &cobra.Command{
		Use:   "synth -o MODEL.gguf",
		Short: "Write a synthetic random-weight GGUF model of a given shape",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return fmt.Errorf("synth: -o MODEL.gguf is required")
			}
			if typ == "Q4_K_M" {
				s.Mix = typ
			} else {
				t, ok := ggml.ParseType(typ)
				if !ok {
					return exitcode.Usagef("synth: unknown weight type %q", typ)
				}
				s.Type = t
			}
			if err := s.Check(); err != nil {
				return &exitcode.UsageError{Err: err} // a flag out of its range
			}
			if err := sysmem.Check("this shape", s.PeakBytes()); err != nil {
				return fmt.Errorf("synth: %w", err)
			}
			b, err := synth.Write(s)
			if err != nil {
				return err
			}
			return gguf.WriteFileAtomic(out, b)
		},
	}
	f := c.Flags()
	f.StringVarP(&out, "out", "o", "", "output GGUF path")
	f.StringVar(&s.Arch, "arch", s.Arch, "architecture: "+strings.Join(synth.Archs, ", "))
	f.IntVar(&s.Layers, "layers", s.Layers, "layers")
	f.IntVar(&s.Embd, "embd", s.Embd, "embedding width")
	f.IntVar(&s.Heads, "heads", s.Heads, "attention heads")
	f.IntVar(&s.HeadsKV, "heads-kv", s.HeadsKV, "KV heads")
	f.IntVar(&s.HeadDim, "head-dim", 0, "head width (default embd/heads)")
	f.IntVar(&s.FF, "ffn", s.FF, "feed-forward width")
	f.IntVar(&s.Vocab, "vocab", s.Vocab, "vocabulary size (≥ 259)")
	f.IntVar(&s.Context, "ctx", s.Context, "context length")
	f.StringVar(&typ, "type", "F32", "matrix weight type: F32, F16, Q8_0, Q4_K, Q6_K, or the mix Q4_K_M")
	f.Uint64Var(&s.Seed, "seed", s.Seed, "random seed")
	return c
}
