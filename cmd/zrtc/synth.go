package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/cmd/internal/exitcode"
	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/runtime/sysmem"
)

func synthCmd() *cobra.Command {
	s := synth.Tiny
	var out, typ, vocabFrom string
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
			flags := cmd.Flags()
			if s.Arch == "gpt-oss" { // the released checkpoints' defaults
				if !flags.Changed("type") {
					typ = "Q8_0"
				}
				if !flags.Changed("ctx") {
					s.Context = 4096
				}
			}
			if err := s.SetType(typ); err != nil {
				return err
			}
			if vocabFrom != "" {
				if err := s.TokenizerFromFile(vocabFrom); err != nil {
					return err
				}
			}
			if err := s.Check(); err != nil {
				return &exitcode.UsageError{Err: err} // a flag out of its range
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
	f.StringVar(&s.Arch, "arch", s.Arch, "architecture: "+strings.Join(synth.Archs, ", "))
	f.IntVar(&s.Layers, "layers", s.Layers, "layers")
	f.IntVar(&s.Embd, "embd", s.Embd, "embedding width")
	f.IntVar(&s.Heads, "heads", s.Heads, "attention heads")
	f.IntVar(&s.HeadsKV, "heads-kv", s.HeadsKV, "KV heads")
	f.IntVar(&s.HeadDim, "head-dim", 0, "head width (default embd/heads)")
	f.IntVar(&s.FF, "ffn", s.FF, "feed-forward width")
	f.IntVar(&s.Vocab, "vocab", s.Vocab, "vocabulary size (≥ 259)")
	f.StringVar(&vocabFrom, "vocab-from", "", "GGUF whose tokenizer (tokenizer.* keys, chat template included) the model takes; sets the vocabulary size")
	f.IntVar(&s.Context, "ctx", s.Context, "context length (for mistral3 and gpt-oss, the original context YaRN extends)")
	f.IntVar(&s.Experts, "experts", 0, "routed experts, for qwen2moe, gpt-oss, qwen35moe and qwen3next (default 4)")
	f.IntVar(&s.ExpertsUsed, "experts-used", 0, "experts used per token (default min(2, --experts))")
	f.IntVar(&s.ExpertFF, "expert-ffn", 0, "expert feed-forward width (default ffn/2; gpt-oss: ffn)")
	f.IntVar(&s.Window, "window", 0, "sliding window of gemma2, gemma3, gemma4, gpt-oss (default 4096, 1024, 512, 128)")
	f.IntVar(&s.PerLayer, "per-layer", 0, "gemma4: per-layer input width (default 256)")
	f.IntVar(&s.SharedKV, "shared-kv", 0, "gemma4: last layers that share an earlier layer's KV cache")
	f.IntVar(&s.SSMState, "ssm-state", 0, "qwen35, qwen35moe, qwen3next: DeltaNet head width (default the head width)")
	f.IntVar(&s.SSMGroups, "ssm-groups", 0, "qwen35, qwen35moe, qwen3next: DeltaNet key heads (default 2)")
	f.IntVar(&s.SSMHeads, "ssm-heads", 0, "qwen35, qwen35moe, qwen3next: DeltaNet value heads (default 2 × ssm-groups)")
	f.StringVar(&typ, "type", "F32", "matrix weight type: F32, F16, Q8_0, Q4_K, Q6_K, or the mix Q4_K_M; gpt-oss: default Q8_0, and MXFP4 means Q8_0 beside the MXFP4 experts")
	f.Uint64Var(&s.Seed, "seed", s.Seed, "random seed")
	// Hidden spellings: --expert-ff for --expert-ffn, --sliding-window for --window.
	f.IntVar(&s.ExpertFF, "expert-ff", 0, "")
	f.IntVar(&s.Window, "sliding-window", 0, "")
	f.MarkHidden("expert-ff")
	f.MarkHidden("sliding-window")
	return c
}
