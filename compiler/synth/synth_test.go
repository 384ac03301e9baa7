package synth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/arch"
	"github.com/zrtdev/zrt/compiler/config"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/format/lebin"
	"github.com/zrtdev/zrt/kernels/quant"
)

// TestEncodersDecode checks each weight encoder against the reference
// decoder: the values come back within half a quantization step.
func TestEncodersDecode(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, 4*256)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 0.05)
	}
	for _, c := range []struct {
		t   ggml.Type
		tol float64 // relative to max|x|
	}{{ggml.Q4_K, 0.08}, {ggml.Q5_K, 0.04}, {ggml.Q6_K, 0.02}, {ggml.IQ4_XS, 0.12}, {ggml.Q8_0, 0.01}, {ggml.F16, 1e-3}} {
		b, err := encode(c.t, x)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := c.t.RowBytes(int64(len(x))); int64(len(b)) != n {
			t.Fatalf("%s: %d bytes, want %d", c.t, len(b), n)
		}
		y := make([]float32, len(x))
		if err := quant.Dequantize(c.t, b, y); err != nil {
			t.Fatal(err)
		}
		amax, worst := 0.0, 0.0
		for i := range x {
			amax = math.Max(amax, math.Abs(float64(x[i])))
			worst = math.Max(worst, math.Abs(float64(x[i]-y[i])))
		}
		if worst > c.tol*amax {
			t.Errorf("%s: worst error %.4g, more than %.2g of max %.4g", c.t, worst, c.tol, amax)
		}
	}
}

func TestMixAndShapes(t *testing.T) {
	s := Tiny
	s.Embd, s.Heads, s.HeadsKV, s.FF, s.Vocab, s.Type, s.Mix = 256, 4, 2, 512, 512, ggml.Q4_K, "Q4_K_M"
	f := parsed(t, s)
	want := map[string]ggml.Type{"token_embd.weight": ggml.Q4_K, "output.weight": ggml.Q6_K,
		"blk.0.attn_v.weight": ggml.Q4_K, "blk.1.attn_v.weight": ggml.Q6_K, "blk.0.attn_q.weight": ggml.Q4_K, "blk.1.ffn_down.weight": ggml.Q6_K}
	for name, typ := range want {
		ti, ok := f.Tensor(name)
		if !ok || ti.Type != typ {
			t.Errorf("%s: %v, want %s", name, ti, typ)
		}
	}
	s.Embd = 96 // not a multiple of 256
	if _, err := Write(s); err == nil {
		t.Error("Q4_K with rows of 96 accepted")
	}
}

// TestMixes checks the types each of llama-quantize's mixes gives, and
// that ParseArgs reads --type as the mix or as one weight type.
func TestMixes(t *testing.T) {
	for _, c := range []struct {
		args           []string
		q, v1, out, up ggml.Type
	}{
		{[]string{"--type", "Q5_K_M"}, ggml.Q5_K, ggml.Q6_K, ggml.Q6_K, ggml.Q5_K},
		{[]string{"--type", "IQ4_XS"}, ggml.IQ4_XS, ggml.IQ4_XS, ggml.Q6_K, ggml.IQ4_XS},
		{[]string{"--type", "Q5_K"}, ggml.Q5_K, ggml.Q5_K, ggml.Q5_K, ggml.Q5_K},
	} {
		args := append([]string{"--embd", "256", "--heads", "4", "--heads-kv", "2", "--ffn", "512", "--vocab", "512"}, c.args...)
		s, err := ParseArgs(args)
		if err != nil {
			t.Fatal(err)
		}
		f := parsed(t, s)
		for name, typ := range map[string]ggml.Type{"blk.0.attn_q.weight": c.q, "blk.1.attn_v.weight": c.v1,
			"output.weight": c.out, "blk.0.ffn_up.weight": c.up} {
			if ti, ok := f.Tensor(name); !ok || ti.Type != typ {
				t.Errorf("%v: %s: %v, want %s", c.args, name, ti, typ)
			}
		}
	}
	for _, args := range [][]string{{"--type", "Q5_K_X"}, {"--layers", "0"}, {"--nope"}, {"extra"}} {
		var argErr *ArgError
		if _, err := ParseArgs(args); !errors.As(err, &argErr) {
			t.Errorf("%v: %v, want an ArgError", args, err)
		}
	}
}

// parsed writes s and parses it back.
func parsed(t *testing.T, s Shape) *gguf.File {
	t.Helper()
	b, err := Write(s)
	if err != nil {
		t.Fatalf("%+v: %v", s, err)
	}
	f, err := gguf.Parse(b)
	if err != nil {
		t.Fatalf("%+v: %v", s, err)
	}
	return f
}

// TestFamilies writes a model of each family and has its graph builder
// build it: the tensors and metadata Write gives each are those the
// family reads.
func TestFamilies(t *testing.T) {
	for _, s := range []Shape{
		{Arch: "phi3", Layers: 2, Embd: 256, Heads: 4, HeadsKV: 2, FF: 256, Vocab: 300, Context: 64, Type: ggml.Q6_K, Seed: 3},
		{Arch: "phi3", Layers: 1, Embd: 64, Heads: 2, HeadsKV: 1, FF: 64, Vocab: 300, Context: 64, Type: ggml.F16, LongRoPE: true},
		{Arch: "qwen2moe", Layers: 2, Embd: 256, Heads: 4, HeadsKV: 4, FF: 512, Vocab: 300, Context: 64, Mix: "Q4_K_M", Seed: 4},
		{Arch: "qwen3", Layers: 1, Embd: 64, Heads: 2, HeadsKV: 1, FF: 64, Vocab: 300, Context: 64, Type: ggml.F32, Seed: 5},
	} {
		f := parsed(t, s)
		c, err := config.Load(f, "", config.Overrides{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := arch.Build(f, c); err != nil {
			t.Errorf("%s: %v", s.Arch, err)
		}
	}
	bad := Shape{Arch: "phi3", Layers: 1, Embd: 64, Heads: 2, HeadsKV: 1, HeadDim: 16, FF: 64, Vocab: 300, Context: 64, Type: ggml.F32}
	if err := bad.Check(); err == nil {
		t.Error("phi3 with heads × head width != embd accepted")
	}
}

// TestSameSeedSameFile pins the bytes of the families Write produced
// before gemma2, gemma3, mistral3 and gpt-oss were added: adding a family
// adds keys and tensors to its own files only.
func TestSameSeedSameFile(t *testing.T) {
	for _, c := range []struct {
		s    Shape
		sum  string
		size int
	}{
		{Tiny, "3e6432078326fa7a8bdd0bb0620cc67c5f1b9a5b1f3b4f4bf368812308798058", 469056},
		{Shape{Arch: "llama", Layers: 2, Embd: 256, Heads: 4, HeadsKV: 2, FF: 512, Vocab: 512, Context: 256, Type: ggml.Q4_K, Mix: "Q4_K_M", Seed: 1},
			"4f99edfd8dbfee9f8c5d62d546fcd720bb8e513eb8176a496987af3222ab1ba8", 905216},
		{Shape{Arch: "qwen2", Layers: 2, Embd: 64, Heads: 4, HeadsKV: 2, FF: 128, Vocab: 320, Context: 256, Type: ggml.Q8_0, Seed: 2},
			"779de1a82486262ed20c502628e2ef6e092be21db10e7a5aa59b6777bd63961e", 133472},
		{Shape{Arch: "qwen3", Layers: 1, Embd: 64, Heads: 2, HeadsKV: 1, FF: 64, Vocab: 300, Context: 64, Type: ggml.F32, Seed: 5},
			"cd1a316b93b35e5390cd6c138446f1dbe786c175c7b8e0e6038e8663ddc907d0", 261120},
		{Shape{Arch: "phi3", Layers: 2, Embd: 256, Heads: 4, HeadsKV: 2, FF: 256, Vocab: 300, Context: 64, Type: ggml.Q6_K, Seed: 3},
			"b6aafc8b5a9f2d44fafa8abcf7f7a128feb82b34ebf2ca287fd9a3635058e109", 784512},
		{Shape{Arch: "phi3", Layers: 1, Embd: 64, Heads: 2, HeadsKV: 1, FF: 64, Vocab: 300, Context: 64, Type: ggml.F16, LongRoPE: true},
			"c7197644a4c7908439b35eb89cef1eddbc146a8b861eea81dda8a18da07cf16b", 134976},
		{Shape{Arch: "qwen2moe", Layers: 2, Embd: 256, Heads: 4, HeadsKV: 4, FF: 512, Vocab: 300, Context: 64, Mix: "Q4_K_M", Seed: 4},
			"9a0660df18fafa84ecbe5d0b849edf5e3e598bbae84ff27f13c70002f8a9414f", 1877856},
		{Shape{Arch: "qwen2moe", Layers: 1, Embd: 64, Heads: 4, HeadsKV: 2, FF: 128, Vocab: 300, Context: 64, Type: ggml.F16, Experts: 3, ExpertsUsed: 1, ExpertFF: 32, Seed: 6},
			"6b8ec9fc29b90a474687a1a6dbc88af2b1c415c29ed52c6ce038e41cdfdc0512", 198528},
	} {
		b, err := Write(c.s)
		if err != nil {
			t.Fatal(err)
		}
		if sum := fmt.Sprintf("%x", sha256.Sum256(b)); sum != c.sum || len(b) != c.size {
			t.Errorf("%s (seed %d): %d bytes, sha256 %s; want %d bytes, %s", c.s.Arch, c.s.Seed, len(b), sum, c.size, c.sum)
		}
	}
}

// TestNewFamilies writes a tiny model of each newer family, checks the keys and tensors llama.cpp's converter writes for the
// released checkpoints are there, and compiles each into a bundle.
func TestNewFamilies(t *testing.T) {
	for _, c := range []struct {
		s       Shape
		keys    map[string]string // key: value as Value.String prints it
		tensors map[string]ggml.Type
		absent  []string
	}{
		{
			s: Shape{Arch: "gemma2", Layers: 2, Embd: 64, Heads: 4, HeadsKV: 2, HeadDim: 32, FF: 128, Vocab: 300, Context: 64, Type: ggml.Q8_0, Window: 8, Seed: 7},
			keys: map[string]string{"gemma2.attn_logit_softcapping": "50", "gemma2.final_logit_softcapping": "30",
				"gemma2.attention.sliding_window": "8", "gemma2.attention.key_length": "32", "gemma2.attention.value_length": "32"},
			tensors: map[string]ggml.Type{"blk.1.post_attention_norm.weight": ggml.F32, "blk.1.post_ffw_norm.weight": ggml.F32, "token_embd.weight": ggml.Q8_0},
			absent:  []string{"output.weight", "blk.0.attn_q_norm.weight"},
		},
		{
			s: Shape{Arch: "gemma3", Layers: 7, Embd: 256, Heads: 4, HeadsKV: 1, HeadDim: 64, FF: 256, Vocab: 300, Context: 64, Mix: "Q4_K_M", Window: 8, Seed: 8},
			keys: map[string]string{"gemma3.rope.freq_base_swa": "10000", "gemma3.rope.scaling.type": "linear", "gemma3.rope.scaling.factor": "8",
				"gemma3.attention.sliding_window": "8", "gemma3.attention.key_length": "64"},
			tensors: map[string]ggml.Type{"blk.0.attn_q_norm.weight": ggml.F32, "blk.6.attn_k_norm.weight": ggml.F32,
				"blk.3.post_ffw_norm.weight": ggml.F32, "token_embd.weight": ggml.Q6_K, "blk.0.attn_q.weight": ggml.Q4_K},
			absent: []string{"output.weight", "gemma3.attn_logit_softcapping", "gemma3.final_logit_softcapping"},
		},
		{
			s: Shape{Arch: "mistral3", Layers: 2, Embd: 64, Heads: 4, HeadsKV: 2, FF: 128, Vocab: 300, Context: 16, Type: ggml.F16, Seed: 9},
			keys: map[string]string{"mistral3.rope.scaling.type": "yarn", "mistral3.rope.scaling.factor": "16", "mistral3.context_length": "256",
				"mistral3.rope.scaling.original_context_length": "16", "mistral3.rope.scaling.yarn_beta_fast": "32",
				"mistral3.rope.scaling.yarn_beta_slow": "1", "mistral3.rope.dimension_count": "16", "mistral3.attention.temperature_scale": "0.1"},
			tensors: map[string]ggml.Type{"output.weight": ggml.F16, "blk.1.ffn_gate.weight": ggml.F16},
		},
		{
			s: Shape{Arch: "gpt-oss", Layers: 2, Embd: 64, Heads: 4, HeadsKV: 2, HeadDim: 16, FF: 64, Vocab: 300, Context: 64, Type: ggml.MXFP4,
				Experts: 4, ExpertsUsed: 2, Window: 8, Seed: 10},
			keys: map[string]string{"gpt-oss.rope.scaling.type": "yarn", "gpt-oss.rope.scaling.factor": "32", "gpt-oss.rope.freq_base": "150000",
				"gpt-oss.rope.scaling.original_context_length": "64", "gpt-oss.attention.sliding_window": "8", "gpt-oss.expert_count": "4",
				"gpt-oss.expert_used_count": "2", "gpt-oss.expert_feed_forward_length": "64", "gpt-oss.attention.key_length": "16"},
			tensors: map[string]ggml.Type{"token_embd.weight": ggml.Q8_0, "output.weight": ggml.Q8_0, "blk.0.attn_q.weight": ggml.Q8_0,
				"blk.0.attn_q.bias": ggml.F32, "blk.0.attn_output.bias": ggml.F32, "blk.1.attn_sinks.weight": ggml.F32,
				"blk.1.post_attention_norm.weight": ggml.F32, "blk.1.ffn_gate_inp.weight": ggml.F32, "blk.1.ffn_gate_inp.bias": ggml.F32,
				"blk.1.ffn_gate_exps.weight": ggml.MXFP4, "blk.1.ffn_up_exps.weight": ggml.MXFP4, "blk.1.ffn_down_exps.weight": ggml.MXFP4,
				"blk.1.ffn_gate_exps.bias": ggml.F32, "blk.1.ffn_down_exps.bias": ggml.F32},
			absent: []string{"blk.0.ffn_norm.weight", "gpt-oss.expert_shared_feed_forward_length"},
		},
		{
			// Gemma 4 26B-A4B's layout: experts beside every dense FFN.
			s: Shape{Arch: "gemma4", Layers: 5, Embd: 64, Heads: 4, HeadsKV: 1, HeadDim: 16, FF: 128, Vocab: 300, Context: 64, Type: ggml.Q8_0,
				Window: 8, PerLayer: 32, Experts: 8, ExpertsUsed: 2, ExpertFF: 64, Seed: 16},
			keys: map[string]string{"gemma4.expert_count": "8", "gemma4.expert_used_count": "2", "gemma4.expert_feed_forward_length": "64"},
			tensors: map[string]ggml.Type{"blk.0.ffn_gate_up_exps.weight": ggml.Q8_0, "blk.0.ffn_down_exps.weight": ggml.Q8_0,
				"blk.0.ffn_gate_inp.weight": ggml.F32, "blk.0.ffn_gate_inp.scale": ggml.F32, "blk.4.ffn_down_exps.scale": ggml.F32,
				"blk.4.pre_ffw_norm_2.weight": ggml.F32, "blk.4.post_ffw_norm_1.weight": ggml.F32, "blk.4.post_ffw_norm_2.weight": ggml.F32,
				"blk.4.ffn_gate.weight": ggml.Q8_0},
			absent: []string{"gemma4.expert_shared_feed_forward_length", "blk.0.ffn_gate_exps.weight"},
		},
		{
			s: Shape{Arch: "qwen35moe", Layers: 4, Embd: 64, Heads: 4, HeadsKV: 2, HeadDim: 32, FF: 128, Vocab: 300, Context: 64, Type: ggml.Q8_0,
				Experts: 8, ExpertsUsed: 2, ExpertFF: 64, SSMState: 32, SSMGroups: 2, SSMHeads: 4, Seed: 14},
			keys: map[string]string{"qwen35moe.expert_count": "8", "qwen35moe.expert_used_count": "2", "qwen35moe.expert_feed_forward_length": "64",
				"qwen35moe.expert_shared_feed_forward_length": "128", "qwen35moe.full_attention_interval": "4", "qwen35moe.ssm.inner_size": "128"},
			tensors: map[string]ggml.Type{"blk.0.ssm_beta.weight": ggml.Q8_0, "blk.0.ffn_gate_exps.weight": ggml.Q8_0, "blk.0.ffn_gate_inp.weight": ggml.F32,
				"blk.3.ffn_up_shexp.weight": ggml.Q8_0, "blk.3.ffn_gate_inp_shexp.weight": ggml.F32, "blk.3.attn_q_norm.weight": ggml.F32},
			absent: []string{"qwen35moe.feed_forward_length", "blk.0.ssm_ba.weight", "blk.0.ffn_gate.weight"},
		},
		{
			s: Shape{Arch: "qwen3next", Layers: 4, Embd: 64, Heads: 4, HeadsKV: 1, HeadDim: 32, FF: 128, Vocab: 300, Context: 64, Type: ggml.Q8_0,
				Experts: 6, ExpertsUsed: 2, ExpertFF: 64, SSMState: 32, SSMGroups: 2, SSMHeads: 4, Seed: 15},
			keys:    map[string]string{"qwen3next.expert_count": "6", "qwen3next.feed_forward_length": "128", "qwen3next.rope.dimension_count": "8"},
			tensors: map[string]ggml.Type{"blk.0.ssm_ba.weight": ggml.Q8_0, "blk.1.ffn_down_exps.weight": ggml.Q8_0, "blk.3.attn_v.weight": ggml.Q8_0},
			absent:  []string{"qwen3next.rope.dimension_sections", "blk.0.ssm_beta.weight", "blk.0.ssm_alpha.weight"},
		},
		{
			// Layers 4 and 9 are global; the last five share layers 3's
			// and 4's caches and have FFNs twice as wide.
			s: Shape{Arch: "gemma4", Layers: 10, Embd: 64, Heads: 4, HeadsKV: 1, HeadDim: 16, FF: 128, Vocab: 300, Context: 64, Type: ggml.Q8_0,
				Window: 8, PerLayer: 32, SharedKV: 5, Seed: 12},
			keys: map[string]string{"gemma4.attention.key_length": "32", "gemma4.attention.key_length_swa": "16", "gemma4.rope.dimension_count": "32",
				"gemma4.rope.dimension_count_swa": "16", "gemma4.attention.shared_kv_layers": "5", "gemma4.embedding_length_per_layer_input": "32",
				"gemma4.attention.sliding_window": "8", "gemma4.final_logit_softcapping": "30", "gemma4.rope.freq_base_swa": "10000"},
			tensors: map[string]ggml.Type{"per_layer_token_embd.weight": ggml.Q8_0, "per_layer_model_proj.weight": ggml.F16, "rope_freqs.weight": ggml.F32,
				"blk.3.attn_v.weight": ggml.Q8_0, "blk.9.inp_gate.weight": ggml.Q8_0, "blk.9.layer_output_scale.weight": ggml.F32},
			absent: []string{"output.weight", "blk.4.attn_v.weight", "blk.9.attn_v.weight"},
		},
		{
			s: Shape{Arch: "qwen35", Layers: 4, Embd: 64, Heads: 4, HeadsKV: 2, HeadDim: 32, FF: 128, Vocab: 300, Context: 64, Type: ggml.Q8_0,
				SSMState: 32, SSMGroups: 2, SSMHeads: 4, Seed: 11},
			keys: map[string]string{"qwen35.ssm.state_size": "32", "qwen35.ssm.group_count": "2", "qwen35.ssm.time_step_rank": "4",
				"qwen35.ssm.inner_size": "128", "qwen35.full_attention_interval": "4", "qwen35.rope.dimension_count": "8"},
			tensors: map[string]ggml.Type{"blk.0.attn_qkv.weight": ggml.Q8_0, "blk.0.ssm_a": ggml.F32, "blk.0.ssm_conv1d.weight": ggml.F32,
				"blk.2.ssm_out.weight": ggml.Q8_0, "blk.3.attn_q.weight": ggml.Q8_0, "blk.3.attn_q_norm.weight": ggml.F32,
				"blk.3.post_attention_norm.weight": ggml.F32},
			absent: []string{"blk.3.attn_qkv.weight", "blk.0.attn_q.weight", "blk.0.ffn_norm.weight"},
		},
	} {
		s := c.s
		b, err := Write(s)
		if err != nil {
			t.Fatalf("%s: %v", s.Arch, err)
		}
		f, err := gguf.Parse(b)
		if err != nil {
			t.Fatalf("%s: %v", s.Arch, err)
		}
		for k, want := range c.keys {
			v, ok := f.Lookup(k)
			if !ok {
				t.Errorf("%s: no %s", s.Arch, k)
			} else if got := v.String(); got != want && got != `"`+want+`"` {
				t.Errorf("%s: %s = %s, want %s", s.Arch, k, got, want)
			}
		}
		for name, typ := range c.tensors {
			if ti, ok := f.Tensor(name); !ok || ti.Type != typ {
				t.Errorf("%s: %s: %v, want %s", s.Arch, name, ti, typ)
			}
		}
		for _, name := range c.absent {
			_, tok := f.Tensor(name)
			_, kok := f.Lookup(name)
			if tok || kok {
				t.Errorf("%s: has %s", s.Arch, name)
			}
		}
		if s.Arch == "gpt-oss" {
			for name, dims := range map[string][]int64{"blk.0.attn_sinks.weight": {4}, "blk.0.ffn_gate_inp.weight": {64, 4},
				"blk.0.ffn_gate_inp.bias": {4}, "blk.0.ffn_up_exps.bias": {64, 4}, "blk.0.ffn_down_exps.bias": {64, 4},
				"blk.0.ffn_down_exps.weight": {64, 64, 4}, "blk.0.attn_output.weight": {64, 64}} {
				if ti, _ := f.Tensor(name); fmt.Sprint(ti.Dims) != fmt.Sprint(dims) {
					t.Errorf("gpt-oss: %s has shape %v, want %v", name, ti.Dims, dims)
				}
			}
		}
		if s.Arch == "gemma4" && s.SharedKV > 0 { // the dense case's layout
			for k, want := range map[string]string{"gemma4.feed_forward_length": "[128 128 128 128 128 256 256 256 256 256]",
				"gemma4.attention.head_count_kv":          "[1 1 1 1 1 1 1 1 1 1]",
				"gemma4.attention.sliding_window_pattern": "[true true true true false true true true true false]"} {
				if v, _ := f.Lookup(k); fmt.Sprint(v.Raw()) != want {
					t.Errorf("gemma4: %s = %v, want %s", k, v.Raw(), want)
				}
			}
			for name, dims := range map[string][]int64{"blk.0.attn_q.weight": {64, 64}, "blk.4.attn_q.weight": {64, 128},
				"blk.4.attn_k.weight": {64, 32}, "blk.9.ffn_down.weight": {256, 64}, "per_layer_token_embd.weight": {320, 300},
				"per_layer_model_proj.weight": {64, 320}, "blk.0.proj.weight": {32, 64}, "rope_freqs.weight": {16}} {
				if ti, _ := f.Tensor(name); fmt.Sprint(ti.Dims) != fmt.Sprint(dims) {
					t.Errorf("gemma4: %s has shape %v, want %v", name, ti.Dims, dims)
				}
			}
		}
		cfg, err := config.Load(f, "", config.Overrides{})
		if err != nil {
			t.Fatalf("%s: %v", s.Arch, err)
		}
		if _, err := arch.Build(f, cfg); err != nil {
			t.Errorf("%s: %v", s.Arch, err)
			continue
		}
		p := filepath.Join(t.TempDir(), "m.gguf")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := compiler.Compile(context.Background(), p, filepath.Join(t.TempDir(), "b"), compiler.Options{}); err != nil {
			t.Errorf("%s: compile: %v", s.Arch, err)
		}
	}
	for _, c := range []struct {
		s    Shape
		want string
	}{
		{Shape{Arch: "llama", Layers: 1, Embd: 64, Heads: 2, HeadsKV: 1, FF: 64, Vocab: 300, Context: 64, Type: ggml.MXFP4}, "MXFP4 is for gpt-oss"},
		{Shape{Arch: "gpt-oss", Layers: 1, Embd: 64, Heads: 2, HeadsKV: 1, FF: 64, ExpertFF: 48, Vocab: 300, Context: 64, Type: ggml.F32}, "MXFP4's block"},
		{Shape{Arch: "gemma2", Layers: 1, Embd: 64, Heads: 2, HeadsKV: 1, FF: 64, Vocab: 300, Context: 64, Window: -1}, "--window -1"},
		{Shape{Arch: "mistral3", Layers: 1, Embd: 64, Heads: 2, HeadsKV: 1, FF: 64, Vocab: 300, Context: maxCtx, Type: ggml.F32}, "YaRN"},
	} {
		if err := c.s.Check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.s.Arch, err, c.want)
		}
	}
}

// TestMXFP4InParallel: the MXFP4 encoder split among the CPUs writes the
// bytes one call writes.
func TestMXFP4InParallel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	x := make([]float32, 32*4096*8+32*3)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 0.05)
	}
	got, err := encode(ggml.MXFP4, x)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, len(got))
	if err := quant.QuantizeMXFP4(x, want); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("MXFP4 encoded in parallel differs from one call's")
	}
}

// TestWriteProgress: WriteProgress reports every tensor, its count
// growing to the tensors' bytes, writes what Write writes, and FileBytes
// estimates the file within a tenth.
func TestWriteProgress(t *testing.T) {
	s := Tiny
	s.Layers = 4
	var names []string
	var last int64
	b, err := WriteProgress(s, func(tensor string, n int64) {
		if n <= last {
			t.Errorf("%s: %d bytes after %d", tensor, n, last)
		}
		names, last = append(names, tensor), n
	})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := Write(s)
	if err != nil || !bytes.Equal(b, plain) {
		t.Fatalf("WriteProgress and Write differ (%v)", err)
	}
	f, err := gguf.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, ti := range f.Tensors {
		sum += ti.Size
	}
	if len(names) != len(f.Tensors) || last != sum {
		t.Errorf("%d reports ending at %d bytes; the file has %d tensors of %d bytes", len(names), last, len(f.Tensors), sum)
	}
	if est := s.FileBytes(); est < len64(b)*9/10 || est > len64(b)*11/10 {
		t.Errorf("FileBytes %d for a %d-byte file", est, len(b))
	}
}

func len64(b []byte) int64 { return int64(len(b)) }

// TestBranchStd holds --branch-std to what it says: with it, the residual
// branches' output projections are drawn with that deviation and every
// other tensor is the same bytes as without it (the same draws, in file
// order), so a file's shape and the rest of its weights do not move.
func TestBranchStd(t *testing.T) {
	base := Shape{Arch: "llama", Layers: 2, Embd: 256, Heads: 4, HeadsKV: 2, FF: 512, Vocab: 300, Context: 64, Type: ggml.F32, Seed: 7}
	small := base
	small.BranchStd = 0.001
	a, b := parsed(t, base), parsed(t, small)
	for _, ti := range a.Tensors {
		tb, ok := b.Tensor(ti.Name)
		if !ok {
			t.Fatalf("%s: missing with --branch-std", ti.Name)
		}
		x, y := a.TensorData(&ti), b.TensorData(tb)
		branch := strings.HasSuffix(ti.Name, ".attn_output.weight") || strings.HasSuffix(ti.Name, ".ffn_down.weight")
		if !branch {
			if !bytes.Equal(x, y) {
				t.Errorf("%s changed with --branch-std", ti.Name)
			}
			continue
		}
		if got, want := rms(y), 0.001; math.Abs(got-want) > 0.05*want {
			t.Errorf("%s: deviation %.3g with --branch-std 0.001", ti.Name, got)
		}
		if got := rms(x); math.Abs(got-0.05) > 0.05*0.05 {
			t.Errorf("%s: deviation %.3g without --branch-std, want 0.05", ti.Name, got)
		}
	}
	for _, bad := range []float64{-1, 2, math.NaN()} {
		s := base
		s.BranchStd = bad
		if err := s.Check(); err == nil {
			t.Errorf("--branch-std %v: accepted", bad)
		}
	}
}

// rms is the root mean square of an F32 tensor's bytes.
func rms(b []byte) float64 {
	var s float64
	x := lebin.Float32s(b)
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return math.Sqrt(s / float64(len(x)))
}
