package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/cmd/internal/exitcode"
	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/runtime/sysmem"
)

func synthCmd() *cobra.Command {
	var sf *synth.Flags
	var out string
	var quiet bool
	c := &cobra.Command{
		Use:   "synth -o MODEL.gguf",
		Short: "Write a synthetic random-weight GGUF model of a given shape",
		Long: `synth writes a random-weight GGUF model of the shape the flags give, with
the metadata keys and tensors llama.cpp's converter writes for the
architecture's released checkpoints, and a small byte-fallback vocabulary
(or, with --vocab-from, the tokenizer and chat template of another GGUF,
such as llama.cpp's vocab files). The same flags and seed give the same
file.

Per architecture:
  llama, qwen2, qwen3, phi3   dense; phi3 needs --heads × head width = --embd
  qwen2moe                    --experts, --experts-used, --expert-ffn routed
                              experts beside a shared expert of width --ffn
  gemma2, gemma3              output tied to the embeddings; --window is the
                              local layers' sliding window (default 4096, 1024)
  gemma4                      Gemma 4 E2B's layout: every fifth layer global
                              (heads twice as wide, half the KV heads, V = K),
                              --window (default 512), --per-layer input width
                              (default 256), --shared-kv last layers reading
                              an earlier layer's cache, their FFNs twice as wide
  mistral3                    YaRN ×16 over --ctx (the original context)
  gpt-oss                     MXFP4 experts (--experts, --experts-used,
                              --expert-ffn, default --ffn), YaRN ×32 over --ctx
                              (default 4096), --window (default 128); --type
                              (default Q8_0) is the other matrices'
  qwen35                      3 gated DeltaNet layers (--ssm-state,
                              --ssm-groups, --ssm-heads) to 1 gated attention
                              layer
  qwen35moe, qwen3next        qwen35 with routed experts (--experts,
                              --experts-used, --expert-ffn) beside a gated
                              shared expert of width --ffn; qwen3next's
                              DeltaNet projects beta and alpha as one ssm_ba`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return usagef("synth: -o MODEL.gguf is required")
			}
			s, err := sf.Shape()
			var argErr *synth.ArgError
			if errors.As(err, &argErr) {
				return &exitcode.UsageError{Err: err} // a flag out of its range
			} else if err != nil {
				return err
			}
			if err := sysmem.Check("this shape", s.PeakBytes()); err != nil {
				return fmt.Errorf("synth: %w", err)
			}
			say := func(f string, a ...any) { cmd.PrintErrf("zrtc: "+f+"\n", a...) }
			if quiet {
				say = nil
			}
			return synth.WriteFile(s, out, say)
		},
	}
	f := c.Flags()
	f.StringVarP(&out, "out", "o", "", "output GGUF path")
	f.BoolVarP(&quiet, "quiet", "q", false, "print nothing on stderr on success")
	sf = synth.NewFlags(f)
	return c
}
