package synth

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/gguf"
)

// Flags is `zrtc synth`'s command line for a shape, bound to a FlagSet, so
// that the command and whatever replays a recorded synth command line (the
// fidelity sweep's cases) read the same flags the same way.
type Flags struct {
	s              Shape
	typ, vocabFrom string
	set            *pflag.FlagSet
}

// ArgError is a flag value Flags.Shape refuses: a usage error, not a
// failure to write.
type ArgError struct{ Err error }

func (e *ArgError) Error() string { return e.Err.Error() }
func (e *ArgError) Unwrap() error { return e.Err }

// NewFlags defines the shape's flags (--arch, --layers, --type …) on fs,
// with Tiny's values as defaults.
func NewFlags(fs *pflag.FlagSet) *Flags {
	f := &Flags{s: Tiny, set: fs}
	s := &f.s
	fs.StringVar(&s.Arch, "arch", s.Arch, "architecture: "+strings.Join(Archs, ", "))
	fs.IntVar(&s.Layers, "layers", s.Layers, "layers")
	fs.IntVar(&s.Embd, "embd", s.Embd, "embedding width")
	fs.IntVar(&s.Heads, "heads", s.Heads, "attention heads")
	fs.IntVar(&s.HeadsKV, "heads-kv", s.HeadsKV, "KV heads")
	fs.IntVar(&s.HeadDim, "head-dim", 0, "head width (default embd/heads)")
	fs.IntVar(&s.FF, "ffn", s.FF, "feed-forward width")
	fs.IntVar(&s.Vocab, "vocab", s.Vocab, "vocabulary size (≥ 259)")
	fs.StringVar(&f.vocabFrom, "vocab-from", "", "GGUF whose tokenizer (tokenizer.* keys, chat template included) the model takes; sets the vocabulary size")
	fs.IntVar(&s.Context, "ctx", s.Context, "context length (for mistral3 and gpt-oss, the original context YaRN extends)")
	fs.IntVar(&s.Experts, "experts", 0, "routed experts, for qwen2moe, gpt-oss, qwen35moe and qwen3next (default 4)")
	fs.IntVar(&s.ExpertsUsed, "experts-used", 0, "experts used per token (default min(2, --experts))")
	fs.IntVar(&s.ExpertFF, "expert-ffn", 0, "expert feed-forward width (default ffn/2; gpt-oss: ffn)")
	fs.IntVar(&s.Window, "window", 0, "sliding window of gemma2, gemma3, gemma4, gpt-oss (default 4096, 1024, 512, 128)")
	fs.IntVar(&s.PerLayer, "per-layer", 0, "gemma4: per-layer input width (default 256)")
	fs.IntVar(&s.SharedKV, "shared-kv", 0, "gemma4: last layers that share an earlier layer's KV cache")
	fs.IntVar(&s.SSMState, "ssm-state", 0, "qwen35, qwen35moe, qwen3next: DeltaNet head width (default the head width)")
	fs.IntVar(&s.SSMGroups, "ssm-groups", 0, "qwen35, qwen35moe, qwen3next: DeltaNet key heads (default 2)")
	fs.IntVar(&s.SSMHeads, "ssm-heads", 0, "qwen35, qwen35moe, qwen3next: DeltaNet value heads (default 2 × ssm-groups)")
	fs.StringVar(&f.typ, "type", "F32", "matrix weight type: F32, F16, Q8_0, Q4_K, Q5_K, Q6_K, or one of llama-quantize's mixes "+
		strings.Join(Mixes, ", ")+"; gpt-oss: default Q8_0, and MXFP4 means Q8_0 beside the MXFP4 experts")
	fs.Uint64Var(&s.Seed, "seed", s.Seed, "random seed")
	fs.Float64Var(&s.BranchStd, "branch-std", 0, "standard deviation of the residual branches' output projections (attn_output, ffn_down, …; default 0.05, as every matrix): smaller values make each layer change the residual stream less, so that a draft of the first layers or a lower-precision copy agrees with the model")
	// Hidden spellings: --expert-ff for --expert-ffn, --sliding-window for --window.
	fs.IntVar(&s.ExpertFF, "expert-ff", 0, "")
	fs.IntVar(&s.Window, "sliding-window", 0, "")
	fs.MarkHidden("expert-ff")
	fs.MarkHidden("sliding-window")
	return f
}

// Shape is the shape the parsed flags give: --type as a weight type or a
// mix, gpt-oss's released defaults (--type Q8_0, --ctx 4096) where those
// flags were not given, and --vocab-from's tokenizer. A flag out of its
// range is an *ArgError.
func (f *Flags) Shape() (Shape, error) {
	s := f.s
	typ := f.typ
	if s.Arch == "gpt-oss" { // the released checkpoints' defaults
		if !f.set.Changed("type") {
			typ = "Q8_0"
		}
		if !f.set.Changed("ctx") {
			s.Context = 4096
		}
	}
	if slices.Contains(Mixes, typ) {
		s.Mix = typ
	} else {
		t, ok := ggml.ParseType(typ)
		if !ok {
			return s, &ArgError{fmt.Errorf("synth: unknown weight type %q", typ)}
		}
		s.Type = t
	}
	if f.vocabFrom != "" {
		vf, err := gguf.Open(f.vocabFrom)
		if err != nil {
			return s, fmt.Errorf("synth: --vocab-from: %w", err)
		}
		err = s.TokenizerFrom(vf)
		vf.Close()
		if err != nil {
			return s, fmt.Errorf("synth: --vocab-from %s: %w", f.vocabFrom, err)
		}
	}
	if err := s.Check(); err != nil {
		return s, &ArgError{err}
	}
	return s, nil
}

// ParseArgs reads a `zrtc synth` command line's shape flags (no -o, no
// positional arguments) into a shape, as the command would.
func ParseArgs(args []string) (Shape, error) {
	fs := pflag.NewFlagSet("synth", pflag.ContinueOnError)
	fs.SetOutput(discard{})
	f := NewFlags(fs)
	if err := fs.Parse(args); err != nil {
		return Shape{}, &ArgError{fmt.Errorf("synth: %w", err)}
	}
	if fs.NArg() > 0 {
		return Shape{}, &ArgError{fmt.Errorf("synth: unexpected argument %q", fs.Arg(0))}
	}
	return f.Shape()
}

// discard swallows pflag's own usage printing: the error says it.
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
