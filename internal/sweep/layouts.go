package sweep

import (
	"fmt"
	"slices"
	"strings"

	"github.com/zrtdev/zrt/compiler/synth"
)

// QuantTypes are the weight types the sweep spreads over its layouts:
// `zrtc synth --type` values, the last three llama-quantize's mixes.
var QuantTypes = []string{"F16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "IQ4_XS"}

// Prompts are the sweep's prompts: a short one, evaluated by ggml's
// one-chunk flash attention, and one of more than 64 tokens, evaluated by
// its tiled path (kernels/cpu/fattn.go), alternating over the layouts.
var Prompts = []string{
	"The quick brown fox jumps over the lazy dog.",
	"Once upon a time, in a small village by the sea, there lived an old fisherman who told stories to the children every evening.",
}

// Layout is one synthetic model of the sweep.
type Layout struct {
	Family string
	Name   string   // what it varies, short
	Args   []string // `zrtc synth` flags, --type included
	Prompt string
}

// Label is the layout's family, name and weight type.
func (l Layout) Label() string {
	return fmt.Sprintf("%s/%s/%s", l.Family, l.Name, l.Args[len(l.Args)-1])
}

// variant is a family's option setting: its name and flags over the
// family's base.
type variant struct {
	name string
	args string
}

// family is a family's base shape and the options the sweep varies.
type family struct {
	arch     string
	base     string
	variants []variant
}

// dense are the options of the dense llama-lineage families: head widths,
// multi-head, grouped and multi-query attention, query width unlike the
// embedding width, depth, FFN width.
var dense = []variant{
	{"mha-64", "--heads 4 --heads-kv 4"},
	{"gqa-64", "--heads 4 --heads-kv 2"},
	{"mqa-32", "--heads 8 --heads-kv 1"},
	{"mha-128", "--heads 2 --heads-kv 2"},
	{"gqa-256", "--heads 2 --heads-kv 1 --head-dim 256"},
	{"gqa-16", "--heads 16 --heads-kv 4"},
	{"q512-128", "--heads 4 --heads-kv 2 --head-dim 128"},
	{"1-layer", "--layers 1 --heads 4 --heads-kv 2"},
	{"ffn-768", "--heads 4 --heads-kv 4 --ffn 768"},
	{"embd-512", "--embd 512 --heads 8 --heads-kv 2"},
	{"hd-96", "--heads 4 --heads-kv 2 --head-dim 96 --ffn 768"},
	{"deep-mqa", "--layers 6 --heads 4 --heads-kv 1 --head-dim 128"},
}

// families are the sweep's families: every architecture zrtc synth
// writes, each at its released checkpoints' kinds of option at reduced
// size.
var families = []family{
	{"llama", "--layers 3 --embd 256 --ffn 512", dense},
	// llama.cpp's qwen2 takes the head width as embd/heads whatever
	// key_length says, so its layouts keep Q as wide as the embedding.
	{"qwen2", "--layers 3 --embd 256 --ffn 512", []variant{
		{"mha-64", "--heads 4 --heads-kv 4"},
		{"gqa-64", "--heads 4 --heads-kv 2"},
		{"mqa-32", "--heads 8 --heads-kv 1"},
		{"mha-128", "--heads 2 --heads-kv 2"},
		{"mqa-256", "--heads 1 --heads-kv 1"},
		{"gqa-16", "--heads 16 --heads-kv 4"},
		{"mha-32", "--heads 8 --heads-kv 8"},
		{"1-layer", "--layers 1 --heads 4 --heads-kv 2"},
		{"ffn-768", "--heads 4 --heads-kv 4 --ffn 768"},
		{"embd-512", "--embd 512 --heads 8 --heads-kv 2"},
		{"embd-512-128", "--embd 512 --heads 4 --heads-kv 1"},
		{"deep-mqa", "--layers 6 --heads 4 --heads-kv 1"},
	}},
	{"qwen3", "--layers 3 --embd 256 --ffn 512", dense},
	{"mistral3", "--layers 3 --embd 256 --ffn 512", dense},
	{"phi3", "--layers 3 --embd 256 --ffn 512", []variant{
		{"mha-64", "--heads 4 --heads-kv 4"},
		{"gqa-64", "--heads 4 --heads-kv 2"},
		{"mqa-64", "--heads 4 --heads-kv 1"},
		{"mha-128", "--heads 2 --heads-kv 2"},
		{"gqa-32", "--heads 8 --heads-kv 2"},
		{"gqa-16", "--heads 16 --heads-kv 4"},
		{"hd-256", "--heads 1 --heads-kv 1"},
		{"1-layer", "--layers 1 --heads 4 --heads-kv 2"},
		{"ffn-768", "--heads 4 --heads-kv 4 --ffn 768"},
		{"embd-512", "--embd 512 --heads 8 --heads-kv 2"},
		{"embd-512-128", "--embd 512 --heads 4 --heads-kv 1"},
		{"deep", "--layers 6 --heads 4 --heads-kv 2"},
	}},
	{"qwen2moe", "--layers 2 --embd 256 --ffn 512 --heads 4 --heads-kv 2", []variant{
		{"4x2", "--experts 4 --experts-used 2"},
		{"8x2", "--experts 8 --experts-used 2"},
		{"8x4", "--experts 8 --experts-used 4"},
		{"16x1", "--experts 16 --experts-used 1"},
		{"4x4", "--experts 4 --experts-used 4"},
		{"eff-512", "--experts 4 --experts-used 2 --expert-ffn 512"},
		{"mha", "--experts 4 --experts-used 2 --heads-kv 4"},
		{"mqa-128", "--experts 4 --experts-used 2 --heads 2 --heads-kv 1"},
		{"mqa-32", "--experts 8 --experts-used 2 --heads 8 --heads-kv 1"}, // llama.cpp's qwen2moe, like qwen2, ignores key_length
		{"1-layer", "--layers 1 --experts 8 --experts-used 2"},
		{"deep", "--layers 4 --experts 4 --experts-used 2"},
		{"embd-512", "--embd 512 --experts 4 --experts-used 2"},
	}},
	{"gemma2", "--layers 4 --embd 256 --ffn 512 --window 16", []variant{
		{"mha-64", "--heads 4 --heads-kv 4"},
		{"gqa-64", "--heads 4 --heads-kv 2"},
		{"mqa-64", "--heads 4 --heads-kv 1"},
		{"mha-128", "--heads 2 --heads-kv 2"},
		{"gqa-256", "--heads 2 --heads-kv 1 --head-dim 256"},
		{"mha-128w", "--heads 4 --heads-kv 4 --head-dim 128"},
		{"gqa-32", "--heads 8 --heads-kv 2"},
		{"win-4096", "--heads 4 --heads-kv 2 --window 4096"},
		{"win-8", "--heads 4 --heads-kv 2 --window 8"},
		{"2-layers", "--layers 2 --heads 4 --heads-kv 2"}, // llama.cpp aborts on a model with no global layer
		{"deep", "--layers 6 --heads 4 --heads-kv 2"},
		{"ffn-768", "--heads 4 --heads-kv 4 --ffn 768"},
	}},
	{"gemma3", "--layers 6 --embd 256 --ffn 512 --window 16", []variant{
		{"mha-64", "--heads 4 --heads-kv 4"},
		{"gqa-64", "--heads 4 --heads-kv 2"},
		{"mqa-64", "--heads 4 --heads-kv 1"},
		{"mha-128", "--heads 2 --heads-kv 2"},
		{"gqa-256", "--heads 2 --heads-kv 1 --head-dim 256"},
		{"mha-128w", "--heads 4 --heads-kv 4 --head-dim 128"},
		{"gqa-32", "--heads 8 --heads-kv 2"},
		{"win-1024", "--heads 4 --heads-kv 2 --window 1024"},
		{"win-8", "--heads 4 --heads-kv 2 --window 8"},
		{"7-layers", "--layers 7 --heads 4 --heads-kv 2"},
		{"mqa-128", "--heads 2 --heads-kv 1"},
		{"ffn-768", "--heads 4 --heads-kv 4 --ffn 768"},
	}},
	{"gemma4", "--layers 6 --embd 256 --ffn 512 --window 16 --per-layer 256", []variant{
		{"mha-128", "--heads 4 --heads-kv 4 --head-dim 128"}, // issue 45's layout
		{"mha-64", "--heads 4 --heads-kv 4 --head-dim 64"},
		{"gqa-64", "--heads 4 --heads-kv 2 --head-dim 64"},
		{"gqa-128", "--heads 4 --heads-kv 2 --head-dim 128"},
		{"mqa-256", "--heads 2 --heads-kv 1 --head-dim 256"},
		{"mha-32", "--heads 8 --heads-kv 8 --head-dim 32"},
		{"shared-kv", "--layers 7 --shared-kv 2 --heads 4 --heads-kv 2 --head-dim 64"},
		{"shared-mha", "--layers 6 --shared-kv 1 --heads 4 --heads-kv 4 --head-dim 128"},
		{"win-512", "--heads 4 --heads-kv 2 --head-dim 64 --window 512"},
		{"moe", "--heads 4 --heads-kv 2 --head-dim 64 --experts 4 --experts-used 2"},
		{"moe-mha", "--heads 4 --heads-kv 4 --head-dim 128 --experts 8 --experts-used 2"},
		{"pl-512", "--heads 4 --heads-kv 2 --head-dim 64 --per-layer 512 --layers 5"},
	}},
	{"gpt-oss", "--layers 2 --embd 256 --ffn 256 --heads 4 --heads-kv 2 --head-dim 64 --window 16", []variant{
		{"4x2", "--experts 4 --experts-used 2"},
		{"8x4", "--experts 8 --experts-used 4"},
		{"16x2", "--experts 16 --experts-used 2"},
		{"4x1", "--experts 4 --experts-used 1"},
		{"mha", "--experts 4 --experts-used 2 --heads-kv 4"},
		{"mqa-128", "--experts 4 --experts-used 2 --heads 2 --heads-kv 1 --head-dim 128"},
		{"gqa-32", "--experts 4 --experts-used 2 --heads 8 --heads-kv 2 --head-dim 32"},
		{"win-128", "--experts 4 --experts-used 2 --window 128"},
		{"win-8", "--experts 4 --experts-used 2 --window 8"},
		{"ffn-512", "--experts 4 --experts-used 2 --ffn 512"},
		{"deep", "--layers 4 --experts 4 --experts-used 2"},
		{"3-layers", "--layers 3 --experts 4 --experts-used 2"}, // llama.cpp aborts on a model with no global layer
	}},
	{"qwen35", "--layers 4 --embd 256 --ffn 512 --heads 4 --heads-kv 2 --head-dim 64", hybrid},
	{"qwen35moe", "--layers 4 --embd 256 --ffn 256 --heads 4 --heads-kv 2 --head-dim 64 --experts 4 --experts-used 2", hybrid},
	{"qwen3next", "--layers 4 --embd 256 --ffn 256 --heads 4 --heads-kv 1 --head-dim 64 --experts 8 --experts-used 2", hybrid},
}

// hybrid are the Qwen3.5 / Qwen3-Next options: DeltaNet heads, groups and
// state width, the attention layers' heads, depth.
var hybrid = []variant{
	{"base", ""},
	{"ssm-g1", "--ssm-groups 1 --ssm-heads 2"},
	{"ssm-g4", "--ssm-groups 4 --ssm-heads 8"},
	{"ssm-h-eq-g", "--ssm-groups 2 --ssm-heads 2"},
	{"ssm-128", "--ssm-state 128"},
	{"ssm-32", "--ssm-state 32 --ssm-groups 2 --ssm-heads 8"},
	{"attn-mha", "--heads-kv 4"},
	{"attn-128", "--heads 2 --heads-kv 1 --head-dim 128"},
	{"attn-256", "--heads 2 --heads-kv 2 --head-dim 256"},
	{"8-layers", "--layers 8"},
	{"4-groups-mha", "--ssm-groups 4 --ssm-heads 4 --heads-kv 4"},
	{"embd-512", "--embd 512"},
}

// Layouts are the sweep's models: every family's options, each at one
// weight type, the types taken in turn (a type a layout's widths cannot
// hold passes its turn to the next).
func Layouts() ([]Layout, error) {
	var out []Layout
	for fi, f := range families {
		for vi, v := range f.variants {
			args := strings.Fields("--arch " + f.arch + " " + f.base + " " + v.args + " --vocab 512 --ctx 4096 --seed " + fmt.Sprint(vi+1))
			var chosen []string
			for k := range QuantTypes {
				t := QuantTypes[(fi+vi+k)%len(QuantTypes)]
				a := append(slices.Clone(args), "--type", t)
				if _, err := synth.ParseArgs(a); err == nil {
					chosen = a
					break
				}
			}
			if chosen == nil {
				return nil, fmt.Errorf("sweep: %s/%s fits no weight type: %v", f.arch, v.name, args)
			}
			out = append(out, Layout{Family: f.arch, Name: v.name, Args: chosen, Prompt: Prompts[vi%len(Prompts)]})
		}
	}
	return out, nil
}
