// Package synth writes synthetic GGUF models: random weights of a chosen
// llama-lineage shape (llama, qwen2/3, phi3, qwen2moe, gemma2/3, mistral3,
// gpt-oss, qwen35), with the metadata keys and tensors llama.cpp's converter
// writes for the family's real checkpoints, and a small byte-fallback
// SentencePiece vocabulary.
// The demo falls back to one when no real model is at hand, tests build
// malformed variants from it, and benchmarks use it for model shapes
// nobody ships. The same seed gives the same file.
package synth

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/zrtdev/zrt/format/bytesize"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/internal/usage"
	"github.com/zrtdev/zrt/kernels/quant"
)

// Shape is a llama-family model shape.
type Shape struct {
	// Arch is llama, qwen2, qwen3, phi3 (fused attn_qkv and gate/up
	// ffn_up; Heads × head width must be Embd), qwen2moe (routed
	// experts and a sigmoid-gated shared expert of width FF), gemma2
	// (output tied to the embeddings, post-attention and post-FFN norms,
	// attention and final logit soft-capping, sliding-window layers),
	// gemma3 (gemma2 without soft-capping, with per-head Q/K norms, a
	// local RoPE base and linear RoPE scaling), mistral3 (llama with YaRN
	// and attention temperature scaling) or gpt-oss (biased attention
	// with sinks, sliding-window layers, YaRN, and biased routed experts
	// in MXFP4), qwen35 (every fourth layer gated attention with
	// per-head Q/K norms and partial RoPE, the others gated DeltaNet
	// layers shaped by the SSM fields), qwen35moe and qwen3next (qwen35
	// with routed experts beside a gated shared expert of width FF;
	// qwen3next's DeltaNet projects beta and alpha jointly) or gemma4
	// (see PerLayer).
	Arch    string
	Layers  int
	Embd    int
	Heads   int
	HeadsKV int
	HeadDim int // 0: Embd/Heads
	FF      int
	Vocab   int // at least 259 (3 specials + 256 bytes)
	// Tokenizer, when set, is the tokenizer.* metadata of another GGUF
	// (a vocab file such as llama.cpp's ggml-vocab-qwen2.gguf), written
	// instead of the synthetic vocabulary, so a model of any shape can
	// carry a real tokenizer and chat template; Vocab must then be its
	// token count (TokenizerFrom sets both).
	Tokenizer []gguf.KV
	// Context is the training context; for the YaRN families (mistral3,
	// gpt-oss) and LongRoPE, the original one, which the file's
	// context_length extends by the scaling factor (16, 32 and 32).
	Context int
	// Type is F32, F16, Q8_0, Q4_K, Q5_K, Q6_K or IQ4_XS for the matrices; for gpt-oss
	// also MXFP4, which (as in the released files) only the experts are,
	// the other matrices then being Q8_0. gpt-oss experts are MXFP4
	// whatever Type is.
	Type ggml.Type
	// Mix names one of llama-quantize's mixes (Mixes), which then decides
	// every matrix's type and Type is ignored: "Q4_K_M" and "Q5_K_M" make
	// attn_v and ffn_down (in llama-quantize's layers) and the output
	// matrix Q6_K and the rest Q4_K or Q5_K, "IQ4_XS" makes the output
	// Q6_K and the rest IQ4_XS, as llama-quantize's mixes of those names
	// do. Empty: every matrix is Type.
	Mix  string
	Seed uint64
	// Experts, ExpertsUsed and ExpertFF shape a MoE model's routed
	// experts (defaults 4, 2 and FF/2; for gpt-oss FF,
	// and its feed_forward_length is ExpertFF, as in the released files).
	Experts, ExpertsUsed, ExpertFF int
	// Window is the sliding window of gemma2, gemma3 and gpt-oss's local
	// layers (0: the released models', 4096, 1024 and 128).
	Window int
	// SSMState, SSMGroups and SSMHeads shape a qwen35 model's gated
	// DeltaNet layers: the key heads' width, the key heads and the value
	// heads (defaults the head width, 2 and 2 × SSMGroups).
	SSMState, SSMGroups, SSMHeads int
	// LongRoPE gives a phi3 model what the 128k checkpoints have: short
	// and long RoPE frequency factors and an attention factor, for a
	// training context 32 times the original Context.
	LongRoPE bool
	// PerLayer is a gemma4 model's per-layer input width (default 256, as
	// in the released E2B and E4B) and SharedKV how many of its last
	// layers share an earlier layer's KV cache (default 0).
	PerLayer, SharedKV int
	// BranchStd, when not 0, is the standard deviation of each residual
	// branch's output projection (branchOutputs) in place of the 0.05 of
	// every other matrix. Random weights make every layer rewrite the
	// residual stream, so a draft of the first layers, or a
	// lower-precision copy, agrees with the model on almost no token;
	// smaller branches change the stream less a layer, as trained models'
	// later layers do, which is what speculative decoding's measurements
	// need of a synthetic model.
	BranchStd float64
}

// branchOutputs are the matrices that write a layer's branches back into
// the residual stream (BranchStd).
var branchOutputs = []string{"attn_output.weight", "ffn_down.weight", "ffn_down_exps.weight", "ffn_down_shexp.weight", "ssm_out.weight"}

// moe reports whether s has routed experts.
func (s Shape) moe() bool {
	return s.Arch == "qwen2moe" || s.Arch == "gpt-oss" || s.Arch == "qwen35moe" || s.Arch == "qwen3next" ||
		(s.Arch == "gemma4" && s.Experts > 0)
}

// hybrid reports whether s is of the Qwen3.5/Qwen3-Next family: gated
// DeltaNet layers between gated attention ones.
func (s Shape) hybrid() bool {
	return s.Arch == "qwen35" || s.Arch == "qwen35moe" || s.Arch == "qwen3next"
}

// sharedExpert reports whether s's routed experts sit beside a
// sigmoid-gated shared expert of width FF.
func (s Shape) sharedExpert() bool {
	return s.Arch == "qwen2moe" || s.Arch == "qwen35moe" || s.Arch == "qwen3next"
}

// windows are the sliding windows of the released models of the families
// with sliding-window layers.
var windows = map[string]int{"gemma2": 4096, "gemma3": 1024, "gemma4": 512, "gpt-oss": 128}

// yarnFactor is the YaRN context extension of a family that has it, 0
// for the others: the released checkpoints' (Ministral 3, gpt-oss).
func (s Shape) yarnFactor() int {
	switch s.Arch {
	case "mistral3":
		return 16
	case "gpt-oss":
		return 32
	}
	return 0
}

// withDefaults fills the expert fields a MoE shape leaves zero, and the
// sliding window a windowed family's leaves zero.
func (s Shape) withDefaults() Shape {
	if w, ok := windows[s.Arch]; ok && s.Window == 0 {
		s.Window = w
	}
	if s.Arch == "gemma4" && s.PerLayer == 0 {
		s.PerLayer = 256
	}
	if s.hybrid() {
		if s.SSMState == 0 {
			s.SSMState = s.headDim()
		}
		if s.SSMGroups == 0 {
			s.SSMGroups = 2
		}
		if s.SSMHeads == 0 {
			s.SSMHeads = 2 * s.SSMGroups
		}
	}
	if !s.moe() {
		return s
	}
	if s.Experts == 0 {
		s.Experts = 4
	}
	if s.ExpertsUsed == 0 {
		s.ExpertsUsed = min(2, s.Experts)
	}
	if s.ExpertFF == 0 {
		s.ExpertFF = s.FF / 2
		if s.Arch == "gpt-oss" {
			s.ExpertFF = s.FF
		}
	}
	return s
}

// mix is one of llama-quantize's mixes: the type of most matrices, and
// whether attn_v and ffn_down get Q6_K in llama-quantize's layers. The
// output matrix (or the tied embeddings) is Q6_K in all of them.
type mix struct {
	base     ggml.Type
	moreBits bool
}

var mixes = map[string]mix{
	"Q4_K_M": {ggml.Q4_K, true},
	"Q5_K_M": {ggml.Q5_K, true},
	"IQ4_XS": {ggml.IQ4_XS, false},
}

// Mixes are the names Shape.Mix takes.
var Mixes = []string{"Q4_K_M", "Q5_K_M", "IQ4_XS"}

// Tiny is a shape that compiles and runs in milliseconds.
var Tiny = Shape{Arch: "llama", Layers: 2, Embd: 64, Heads: 4, HeadsKV: 2, FF: 128, Vocab: 320, Context: 256, Type: ggml.F32, Seed: 1}

// Write returns the GGUF bytes of a model of shape s.
func Write(s Shape) ([]byte, error) { return WriteProgress(s, nil) }

// WriteProgress is Write that calls progress (when not nil) after each
// tensor with its name and the tensor bytes made so far, for a caller
// that shows progress on a large shape (Shape.FileBytes estimates the
// total).
func WriteProgress(s Shape, progress func(tensor string, bytes int64)) ([]byte, error) {
	s = s.withDefaults()
	if err := s.Check(); err != nil {
		return nil, err
	}
	s.HeadDim = s.headDim()
	switch s.Type {
	case ggml.F32, ggml.F16, ggml.Q8_0, ggml.Q4_K, ggml.Q5_K, ggml.Q6_K, ggml.IQ4_XS:
	case ggml.MXFP4:
		if s.Arch != "gpt-oss" {
			return nil, fmt.Errorf("synth: weight type MXFP4 is for gpt-oss's experts")
		}
		s.Type = ggml.Q8_0 // the matrices beside the experts
	default:
		return nil, fmt.Errorf("synth: weight type %s unsupported (F32, F16, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_XS; MXFP4 for gpt-oss)", s.Type)
	}
	if s.Mix != "" {
		m, ok := mixes[s.Mix]
		if !ok {
			return nil, fmt.Errorf("synth: mix %q unsupported (%s)", s.Mix, strings.Join(Mixes, ", "))
		}
		s.Type = m.base
	}
	rng := rand.New(rand.NewPCG(s.Seed, 0x5EED))
	w := gguf.NewWriter()
	a := s.Arch
	w.Set("general.architecture", gguf.Str(a))
	w.Set("general.name", gguf.Str("zrt synthetic "+a))
	w.Set(a+".block_count", gguf.U32(uint32(s.Layers)))
	ctx := s.Context
	if s.LongRoPE {
		ctx *= 32
	}
	yarn := s.yarnFactor()
	if yarn > 0 {
		ctx *= yarn
	}
	ff := s.FF
	if a == "gpt-oss" {
		ff = s.ExpertFF
	}
	eps, base := float32(1e-5), float32(10000)
	g4 := s.gemma4()
	switch a {
	case "gemma2", "gemma3", "gemma4":
		eps = 1e-6
		if a != "gemma2" {
			base = 1e6
		}
	case "mistral3":
		base = 1e6
	case "gpt-oss":
		base = 150000
	case "qwen35", "qwen35moe", "qwen3next":
		eps, base = 1e-6, 1e7
	}
	ffv, kvv, keyLen := gguf.U32(uint32(ff)), gguf.U32(uint32(s.HeadsKV)), s.HeadDim
	if a == "gemma4" { // per-layer widths and KV heads; the global layers' head width
		ffv, kvv, keyLen = gguf.I32s(g4.ff), gguf.I32s(g4.headsKV), g4.globalDim
	}
	w.Set(a+".context_length", gguf.U32(uint32(ctx)))
	w.Set(a+".embedding_length", gguf.U32(uint32(s.Embd)))
	if a != "qwen35moe" { // its converter writes only the experts' widths
		w.Set(a+".feed_forward_length", ffv)
	}
	w.Set(a+".attention.head_count", gguf.U32(uint32(s.Heads)))
	w.Set(a+".attention.head_count_kv", kvv)
	w.Set(a+".attention.key_length", gguf.U32(uint32(keyLen)))
	w.Set(a+".attention.value_length", gguf.U32(uint32(keyLen)))
	w.Set(a+".attention.layer_norm_rms_epsilon", gguf.F32(eps))
	if a != "gemma2" { // its converter leaves the base at llama.cpp's default
		w.Set(a+".rope.freq_base", gguf.F32(base))
	}
	if s.LongRoPE {
		w.Set(a+".rope.scaling.original_context_length", gguf.U32(uint32(s.Context)))
		w.Set(a+".rope.scaling.attn_factor", gguf.F32(float32(math.Sqrt(1+math.Log(32)/math.Log(float64(s.Context))))))
	}
	if yarn > 0 {
		w.Set(a+".rope.scaling.type", gguf.Str("yarn"))
		w.Set(a+".rope.scaling.factor", gguf.F32(float32(yarn)))
		w.Set(a+".rope.scaling.original_context_length", gguf.U32(uint32(s.Context)))
		w.Set(a+".rope.scaling.yarn_beta_fast", gguf.F32(32))
		w.Set(a+".rope.scaling.yarn_beta_slow", gguf.F32(1))
	}
	switch a {
	case "gemma2": // Gemma 2's caps
		w.Set(a+".attn_logit_softcapping", gguf.F32(50))
		w.Set(a+".final_logit_softcapping", gguf.F32(30))
		w.Set(a+".attention.sliding_window", gguf.U32(uint32(s.Window)))
	case "gemma3": // Gemma 3 4B and up: global layers' RoPE scaled 8×
		w.Set(a+".rope.freq_base_swa", gguf.F32(10000))
		w.Set(a+".rope.scaling.type", gguf.Str("linear"))
		w.Set(a+".rope.scaling.factor", gguf.F32(8))
		w.Set(a+".attention.sliding_window", gguf.U32(uint32(s.Window)))
	case "gemma4": // Gemma 4 E2B's layout: local and global layer shapes, shared KV, per-layer inputs
		w.Set(a+".rope.freq_base_swa", gguf.F32(10000))
		w.Set(a+".final_logit_softcapping", gguf.F32(30))
		w.Set(a+".attention.sliding_window", gguf.U32(uint32(s.Window)))
		w.Set(a+".attention.shared_kv_layers", gguf.U32(uint32(s.SharedKV)))
		w.Set(a+".embedding_length_per_layer_input", gguf.U32(uint32(s.PerLayer)))
		w.Set(a+".attention.sliding_window_pattern", gguf.Bools(g4.local))
		w.Set(a+".attention.key_length_swa", gguf.U32(uint32(s.HeadDim)))
		w.Set(a+".attention.value_length_swa", gguf.U32(uint32(s.HeadDim)))
		w.Set(a+".rope.dimension_count", gguf.U32(uint32(g4.globalDim)))
		w.Set(a+".rope.dimension_count_swa", gguf.U32(uint32(s.HeadDim)))
		if s.moe() { // Gemma 4 26B-A4B: experts beside every layer's dense FFN
			w.Set(a+".expert_count", gguf.U32(uint32(s.Experts)))
			w.Set(a+".expert_used_count", gguf.U32(uint32(s.ExpertsUsed)))
			w.Set(a+".expert_feed_forward_length", gguf.U32(uint32(s.ExpertFF)))
		}
	case "mistral3": // Ministral 3's YaRN attention scaling and Llama 4 temperature
		w.Set(a+".vocab_size", gguf.U32(uint32(s.Vocab)))
		w.Set(a+".rope.dimension_count", gguf.U32(uint32(s.HeadDim)))
		w.Set(a+".rope.scaling.yarn_log_multiplier", gguf.F32(1))
		w.Set(a+".attention.temperature_scale", gguf.F32(0.1))
	case "gpt-oss":
		w.Set(a+".attention.sliding_window", gguf.U32(uint32(s.Window)))
		w.Set(a+".expert_count", gguf.U32(uint32(s.Experts)))
		w.Set(a+".expert_used_count", gguf.U32(uint32(s.ExpertsUsed)))
		w.Set(a+".expert_feed_forward_length", gguf.U32(uint32(s.ExpertFF)))
	}
	if s.hybrid() { // Qwen3.5/Qwen3-Next: partial RoPE (in sections for 3.5), 3 DeltaNet layers to 1 attention
		nRot := s.HeadDim / 4
		w.Set(a+".rope.dimension_count", gguf.U32(uint32(nRot)))
		if a != "qwen3next" {
			sections := []int32{int32(nRot * 3 / 16), int32(nRot * 3 / 16), int32(nRot/2 - 2*(nRot*3/16)), 0}
			w.Set(a+".rope.dimension_sections", gguf.I32s(sections))
		}
		w.Set(a+".ssm.conv_kernel", gguf.U32(4))
		w.Set(a+".ssm.state_size", gguf.U32(uint32(s.SSMState)))
		w.Set(a+".ssm.group_count", gguf.U32(uint32(s.SSMGroups)))
		w.Set(a+".ssm.time_step_rank", gguf.U32(uint32(s.SSMHeads)))
		w.Set(a+".ssm.inner_size", gguf.U32(uint32(s.SSMHeads*s.SSMState)))
		w.Set(a+".full_attention_interval", gguf.U32(qwen35Interval))
	}
	if s.sharedExpert() {
		w.Set(a+".expert_count", gguf.U32(uint32(s.Experts)))
		w.Set(a+".expert_used_count", gguf.U32(uint32(s.ExpertsUsed)))
		w.Set(a+".expert_feed_forward_length", gguf.U32(uint32(s.ExpertFF)))
		w.Set(a+".expert_shared_feed_forward_length", gguf.U32(uint32(s.FF)))
	}
	if len(s.Tokenizer) > 0 {
		for _, kv := range s.Tokenizer {
			w.Set(kv.Key, kv.Value)
		}
	} else {
		setVocab(w, s.Vocab, a == "phi3")
	}
	// gemma ties the output to the embeddings; llama-quantize then
	// quantizes the embeddings as it would the output.
	tied := a == "gemma2" || a == "gemma3" || a == "gemma4"
	if tied {
		w.Set("tokenizer.ggml.add_space_prefix", gguf.Bool(false))
	}

	normal := func(n int, std float64) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * std)
		}
		return x
	}
	ones := func(n int) []float32 {
		x := normal(n, 0.02)
		for i := range x {
			x[i] += 1
		}
		return x
	}
	var made int64
	add := func(name string, t ggml.Type, dims []int64, x []float32) error {
		b, err := encode(t, x)
		if err != nil {
			return err
		}
		if err := w.AddTensor(name, t, dims, b); err != nil {
			return err
		}
		if made += int64(len(b)); progress != nil {
			progress(name, made)
		}
		return nil
	}
	E, F, V, Q, KV := int64(s.Embd), int64(s.FF), int64(s.Vocab), int64(s.Heads*s.HeadDim), int64(s.HeadsKV*s.HeadDim)
	mat := s.Type
	// moreBits is llama-quantize's rule for which layers' attn_v and
	// ffn_down get Q6_K in a Q4_K_M mix: the first and last eighth, and
	// every third layer between.
	moreBits := func(l int) ggml.Type {
		n := s.Layers
		if mixes[s.Mix].moreBits && (l < n/8 || l >= 7*n/8 || (l-n/8)%3 == 2) {
			return ggml.Q6_K
		}
		return mat
	}
	emb := mat
	if tied && s.Mix != "" {
		emb = ggml.Q6_K
	}
	if err := add("token_embd.weight", emb, []int64{E, V}, normal(int(E*V), 0.5)); err != nil {
		return nil, err
	}
	if s.LongRoPE {
		// Factors shaped like Phi-3.5's: the short ones near 1, the long
		// ones growing to 32 over the slowest pairs.
		short, long := make([]float32, s.HeadDim/2), make([]float32, s.HeadDim/2)
		for i := range short {
			f := float64(i) / float64(len(short))
			short[i], long[i] = float32(1+0.1*f), float32(math.Pow(32, f))
		}
		if err := add("rope_factors_short.weight", ggml.F32, []int64{int64(len(short))}, short); err != nil {
			return nil, err
		}
		if err := add("rope_factors_long.weight", ggml.F32, []int64{int64(len(long))}, long); err != nil {
			return nil, err
		}
	}
	if a == "gemma4" {
		if err := g4.modelTensors(s, mat, add, normal, ones); err != nil {
			return nil, err
		}
	}
	// A tensor's values are drawn when it is added, in file order, so
	// that a seed gives the files it always gave.
	X, FX := int64(s.Experts), int64(s.ExpertFF)
	for l := 0; l < s.Layers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		attn := []tensor{
			{"attn_q.weight", mat, []int64{E, Q}, 0.05},
			{"attn_k.weight", mat, []int64{E, KV}, 0.05},
			{"attn_v.weight", moreBits(l), []int64{E, KV}, 0.05},
		}
		ffn := []tensor{
			{"ffn_gate.weight", mat, []int64{E, F}, 0.05},
			{"ffn_up.weight", mat, []int64{E, F}, 0.05},
			{"ffn_down.weight", moreBits(l), []int64{F, E}, 0.05},
		}
		switch a {
		case "phi3": // Q|K|V and gate|up in one tensor each
			attn = []tensor{{"attn_qkv.weight", mat, []int64{E, Q + 2*KV}, 0.05}}
			ffn = []tensor{{"ffn_up.weight", mat, []int64{E, 2 * F}, 0.05}, ffn[2]}
		case "qwen2moe", "qwen35moe", "qwen3next": // routed experts beside a gated shared one
			ffn = []tensor{
				{"ffn_gate_inp.weight", ggml.F32, []int64{E, X}, 0.5},
				{"ffn_gate_exps.weight", mat, []int64{E, FX, X}, 0.05},
				{"ffn_up_exps.weight", mat, []int64{E, FX, X}, 0.05},
				{"ffn_down_exps.weight", moreBits(l), []int64{FX, E, X}, 0.05},
				{"ffn_gate_inp_shexp.weight", ggml.F32, []int64{E}, 0.5},
				{"ffn_gate_shexp.weight", mat, []int64{E, F}, 0.05},
				{"ffn_up_shexp.weight", mat, []int64{E, F}, 0.05},
				{"ffn_down_shexp.weight", moreBits(l), []int64{F, E}, 0.05},
			}
		}
		layer := append([]tensor{{"attn_norm.weight", ggml.F32, []int64{E}, 0}}, attn...)
		layer = append(layer, tensor{"attn_output.weight", mat, []int64{Q, E}, 0.05}, tensor{"ffn_norm.weight", ggml.F32, []int64{E}, 0})
		layer = append(layer, ffn...)
		switch a {
		case "gemma2", "gemma3": // norms of the attention's and the FFN's outputs too
			layer = append([]tensor{{"attn_norm.weight", ggml.F32, []int64{E}, 0}}, attn...)
			if a == "gemma3" {
				hd := int64(s.HeadDim)
				layer = append(layer, tensor{"attn_q_norm.weight", ggml.F32, []int64{hd}, 0}, tensor{"attn_k_norm.weight", ggml.F32, []int64{hd}, 0})
			}
			layer = append(layer, tensor{"attn_output.weight", mat, []int64{Q, E}, 0.05},
				tensor{"post_attention_norm.weight", ggml.F32, []int64{E}, 0},
				tensor{"ffn_norm.weight", ggml.F32, []int64{E}, 0})
			layer = append(layer, ffn...)
			layer = append(layer, tensor{"post_ffw_norm.weight", ggml.F32, []int64{E}, 0})
		case "qwen35", "qwen35moe", "qwen3next":
			layer = qwen35Layer(s, l, mat, ffn)
		case "gemma4":
			layer = g4.layer(s, l, mat)
		case "gpt-oss": // biased attention with sinks; biased MXFP4 experts
			layer = []tensor{
				{"attn_norm.weight", ggml.F32, []int64{E}, 0},
				{"attn_q.weight", mat, []int64{E, Q}, 0.05},
				{"attn_q.bias", ggml.F32, []int64{Q}, 0.05},
				{"attn_k.weight", mat, []int64{E, KV}, 0.05},
				{"attn_k.bias", ggml.F32, []int64{KV}, 0.05},
				{"attn_v.weight", moreBits(l), []int64{E, KV}, 0.05},
				{"attn_v.bias", ggml.F32, []int64{KV}, 0.05},
				{"attn_output.weight", mat, []int64{Q, E}, 0.05},
				{"attn_output.bias", ggml.F32, []int64{E}, 0.05},
				{"attn_sinks.weight", ggml.F32, []int64{int64(s.Heads)}, 0.5},
				// The FFN's input norm, under this name in gpt-oss.
				{"post_attention_norm.weight", ggml.F32, []int64{E}, 0},
				{"ffn_gate_inp.weight", ggml.F32, []int64{E, X}, 0.5},
				{"ffn_gate_inp.bias", ggml.F32, []int64{X}, 0.5},
				{"ffn_gate_exps.weight", ggml.MXFP4, []int64{E, FX, X}, 0.05},
				{"ffn_gate_exps.bias", ggml.F32, []int64{FX, X}, 0.05},
				{"ffn_up_exps.weight", ggml.MXFP4, []int64{E, FX, X}, 0.05},
				{"ffn_up_exps.bias", ggml.F32, []int64{FX, X}, 0.05},
				{"ffn_down_exps.weight", ggml.MXFP4, []int64{FX, E, X}, 0.05},
				{"ffn_down_exps.bias", ggml.F32, []int64{E, X}, 0.05},
			}
		}
		for _, t := range layer {
			n := 1
			for _, d := range t.dims {
				n *= int(d)
			}
			var x []float32
			switch {
			case t.std < 0: // ssm_a: -exp(A_log), A_log uniform in [0, ln 16)
				x = make([]float32, n)
				for i := range x {
					x[i] = -float32(math.Exp(rng.Float64() * math.Log(16)))
				}
			case t.std > 0 && s.BranchStd > 0 && slices.Contains(branchOutputs, t.name):
				x = normal(n, s.BranchStd)
			case t.std > 0:
				x = normal(n, t.std)
			default:
				x = ones(n)
			}
			if err := add(p+t.name, t.typ, t.dims, x); err != nil {
				return nil, err
			}
		}
		if a == "qwen2" || a == "qwen2moe" {
			for _, b := range []struct {
				n string
				d int64
			}{{"attn_q.bias", Q}, {"attn_k.bias", KV}, {"attn_v.bias", KV}} {
				if err := add(p+b.n, ggml.F32, []int64{b.d}, normal(int(b.d), 0.05)); err != nil {
					return nil, err
				}
			}
		}
		if a == "qwen3" {
			for _, n := range []string{"attn_q_norm.weight", "attn_k_norm.weight"} {
				if err := add(p+n, ggml.F32, []int64{int64(s.HeadDim)}, ones(s.HeadDim)); err != nil {
					return nil, err
				}
			}
		}
	}
	if err := add("output_norm.weight", ggml.F32, []int64{E}, ones(int(E))); err != nil {
		return nil, err
	}
	if tied {
		return w.Bytes(), nil
	}
	out := mat
	if s.Mix != "" {
		out = ggml.Q6_K
	}
	if err := add("output.weight", out, []int64{E, V}, normal(int(E*V), 0.05)); err != nil {
		return nil, err
	}
	return w.Bytes(), nil
}

// tensor is one tensor of a layer as Write draws it.
type tensor struct {
	name string
	typ  ggml.Type
	dims []int64
	std  float64 // 0: RMS-norm weights around 1; negative: ssm_a's decay rates
}

// qwen35Interval is full_attention_interval: Qwen3.5's three DeltaNet
// layers to one attention layer.
const qwen35Interval = 4

// qwen35Layer is layer l of a qwen35, qwen35moe or qwen3next model: a
// gated DeltaNet layer (Qwen3-Next projects beta and alpha with one
// tensor, ssm_ba) or, every qwen35Interval-th, a gated attention one (Q
// projection twice as wide for the gate, per-head Q/K norms); then the
// FFN behind the norm named post_attention_norm.
func qwen35Layer(s Shape, l int, mat ggml.Type, ffn []tensor) []tensor {
	E, Q, KV := int64(s.Embd), int64(s.Heads*s.HeadDim), int64(s.HeadsKV*s.HeadDim)
	hk, hv, st := int64(s.SSMGroups), int64(s.SSMHeads), int64(s.SSMState)
	layer := []tensor{{"attn_norm.weight", ggml.F32, []int64{E}, 0}}
	if (l+1)%qwen35Interval == 0 {
		hd := int64(s.HeadDim)
		layer = append(layer,
			tensor{"attn_q.weight", mat, []int64{E, 2 * Q}, 0.05},
			tensor{"attn_k.weight", mat, []int64{E, KV}, 0.05},
			tensor{"attn_v.weight", mat, []int64{E, KV}, 0.05},
			tensor{"attn_q_norm.weight", ggml.F32, []int64{hd}, 0},
			tensor{"attn_k_norm.weight", ggml.F32, []int64{hd}, 0},
			tensor{"attn_output.weight", mat, []int64{Q, E}, 0.05})
	} else {
		c := (2*hk + hv) * st
		layer = append(layer,
			tensor{"attn_qkv.weight", mat, []int64{E, c}, 0.05},
			tensor{"attn_gate.weight", mat, []int64{E, hv * st}, 0.05})
		if s.Arch == "qwen3next" {
			layer = append(layer, tensor{"ssm_ba.weight", mat, []int64{E, 2 * hv}, 0.05})
		} else {
			layer = append(layer, tensor{"ssm_beta.weight", mat, []int64{E, hv}, 0.05}, tensor{"ssm_alpha.weight", mat, []int64{E, hv}, 0.05})
		}
		layer = append(layer,
			tensor{"ssm_dt.bias", ggml.F32, []int64{hv}, 0.5},
			tensor{"ssm_a", ggml.F32, []int64{hv}, -1},
			tensor{"ssm_conv1d.weight", ggml.F32, []int64{4, c}, 0.3},
			tensor{"ssm_norm.weight", ggml.F32, []int64{st}, 0},
			tensor{"ssm_out.weight", mat, []int64{hv * st, E}, 0.05})
	}
	layer = append(layer, tensor{"post_attention_norm.weight", ggml.F32, []int64{E}, 0})
	return append(layer, ffn...)
}

// TokenizerFrom sets s's Tokenizer to f's tokenizer.* metadata and Vocab
// to its token count.
func (s *Shape) TokenizerFrom(f *gguf.File) error {
	toks, ok := f.Lookup("tokenizer.ggml.tokens")
	if !ok {
		return fmt.Errorf("no tokenizer.ggml.tokens: not a GGUF with a vocabulary")
	}
	s.Tokenizer = nil
	for _, kv := range f.KV {
		if strings.HasPrefix(kv.Key, "tokenizer.") {
			s.Tokenizer = append(s.Tokenizer, kv)
		}
	}
	s.Vocab = toks.Len()
	return nil
}

// setVocab writes an SPM vocabulary: <unk>, <s>, </s>, the 256 byte
// tokens, then "▁"-prefixed filler pieces so any vocabulary size works.
// With phi3 the first filler is Phi-3's control token <|endoftext|>,
// which llama.cpp's loader looks up in every model it takes for a Phi-3
// (by general.name).
func setVocab(w *gguf.Writer, n int, phi3 bool) {
	toks := []string{"<unk>", "<s>", "</s>"}
	types := []int32{2, 3, 3}
	for b := 0; b < 256; b++ {
		toks = append(toks, fmt.Sprintf("<0x%02X>", b))
		types = append(types, 6)
	}
	if phi3 && len(toks) < n {
		toks = append(toks, "<|endoftext|>")
		types = append(types, 3)
	}
	letters := "etaoinshrdlucmfwypvbgkjqxz"
	for i := 0; len(toks) < n; i++ {
		piece := "▁"
		for j := i; ; j /= len(letters) {
			piece += string(letters[j%len(letters)])
			if j < len(letters) {
				break
			}
		}
		toks = append(toks, piece)
		types = append(types, 1)
	}
	scores := make([]float32, n)
	for i := range scores {
		scores[i] = -float32(i)
	}
	w.Set("tokenizer.ggml.model", gguf.Str("llama"))
	w.Set("tokenizer.ggml.tokens", gguf.Strs(toks))
	w.Set("tokenizer.ggml.scores", gguf.F32s(scores))
	w.Set("tokenizer.ggml.token_type", gguf.I32s(types))
	w.Set("tokenizer.ggml.bos_token_id", gguf.U32(1))
	w.Set("tokenizer.ggml.eos_token_id", gguf.U32(2))
	w.Set("tokenizer.ggml.unknown_token_id", gguf.U32(0))
}

func encode(t ggml.Type, x []float32) ([]byte, error) {
	switch t {
	case ggml.F32:
		b := make([]byte, 4*len(x))
		for i, v := range x {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		return b, nil
	case ggml.F16:
		b := make([]byte, 2*len(x))
		for i, v := range x {
			binary.LittleEndian.PutUint16(b[2*i:], quant.F32ToF16(v))
		}
		return b, nil
	case ggml.Q4_K, ggml.Q5_K, ggml.Q6_K, ggml.IQ4_XS:
		if len(x)%qk != 0 {
			return nil, fmt.Errorf("synth: %s needs rows of a multiple of %d elements", t, qk)
		}
		enc, bb := encodeQ4K, 144
		switch t {
		case ggml.Q5_K:
			enc, bb = encodeQ5K, 176
		case ggml.Q6_K:
			enc, bb = encodeQ6K, 210
		case ggml.IQ4_XS:
			enc, bb = encodeIQ4XS, 136
		}
		b := make([]byte, len(x)/qk*bb)
		return b, inParallel(x, b, qk, bb, func(x []float32, b []byte) error { copy(b, enc(x)); return nil })
	case ggml.MXFP4:
		// ggml's quantize_row_mxfp4_ref, as llama-quantize writes MXFP4.
		n, err := t.RowBytes(int64(len(x)))
		if err != nil {
			return nil, err
		}
		b := make([]byte, n)
		return b, inParallel(x, b, 32, 17, quant.QuantizeMXFP4)
	}
	// Q8_0 weights share the activation block format.
	n, err := t.RowBytes(int64(len(x)))
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	info, _ := t.Info() // known: RowBytes succeeded
	return b, inParallel(x, b, int(info.BlockSize), int(info.BlockBytes), func(x []float32, b []byte) error { return quant.QuantizeRow(t, x, b) })
}

// inParallel encodes x into b with enc, split among the CPUs at block
// boundaries (block values to blockBytes bytes). Blocks are encoded
// independently, so the bytes are those one call would give: a 7B's or a
// gpt-oss-20b's weights are billions of values, slow to encode on one
// core.
func inParallel(x []float32, b []byte, block, blockBytes int, enc func([]float32, []byte) error) error {
	nb := len(x) / block
	p := min(runtime.GOMAXPROCS(0), nb/4096)
	if p <= 1 || len(x)%block != 0 {
		return enc(x, b)
	}
	var wg sync.WaitGroup
	errs := make([]error, p)
	for i := range p {
		lo, hi := nb*i/p, nb*(i+1)/p
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = enc(x[lo*block:hi*block], b[lo*blockBytes:hi*blockBytes])
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// gemma4Layout is a gemma4 shape's per-layer layout, as Gemma 4 E2B has
// it: four local layers to one global (every fifth), global layers with
// heads twice as wide and half the KV heads (at least one) and no V
// projection, and the SharedKV last layers, which read an earlier
// layer's cache, with FFNs twice as wide.
type gemma4Layout struct {
	local       []bool
	ff, headsKV []int32
	globalDim   int
}

func (s Shape) gemma4() gemma4Layout {
	if s.Arch != "gemma4" {
		return gemma4Layout{}
	}
	g := gemma4Layout{globalDim: 2 * s.HeadDim}
	for l := range s.Layers {
		local := l%5 != 4
		ff, kv := s.FF, s.HeadsKV
		if !local {
			kv = max(1, kv/2)
		}
		if l >= s.Layers-s.SharedKV {
			ff *= 2
		}
		g.local = append(g.local, local)
		g.ff, g.headsKV = append(g.ff, int32(ff)), append(g.headsKV, int32(kv))
	}
	return g
}

// modelTensors adds the model-level tensors Gemma 4 has beyond the
// embeddings: the per-layer inputs' token table, projection and norm, and
// the global layers' proportional RoPE factors (a quarter of the pairs
// rotate, the others are held still by a factor of 1e30, as the
// converter writes them).
func (g gemma4Layout) modelTensors(s Shape, mat ggml.Type, add func(string, ggml.Type, []int64, []float32) error,
	normal func(int, float64) []float32, ones func(int) []float32) error {
	E, V, PL := int64(s.Embd), int64(s.Vocab), int64(s.PerLayer*s.Layers)
	if err := add("per_layer_token_embd.weight", mat, []int64{PL, V}, normal(int(PL*V), 0.5)); err != nil {
		return err
	}
	if err := add("per_layer_model_proj.weight", ggml.F16, []int64{E, PL}, normal(int(E*PL), 0.05)); err != nil {
		return err
	}
	if err := add("per_layer_proj_norm.weight", ggml.F32, []int64{int64(s.PerLayer)}, ones(s.PerLayer)); err != nil {
		return err
	}
	freqs := make([]float32, g.globalDim/2)
	for i := range freqs {
		freqs[i] = 1
		if i >= len(freqs)/4 {
			freqs[i] = 1e30
		}
	}
	return add("rope_freqs.weight", ggml.F32, []int64{int64(len(freqs))}, freqs)
}

// layer is layer l of a gemma4 model; with experts, each layer also
// routes to them (Gemma 4 26B-A4B's layout).
func (g gemma4Layout) layer(s Shape, l int, mat ggml.Type) []tensor {
	E, P, F := int64(s.Embd), int64(s.PerLayer), int64(g.ff[l])
	hd := int64(s.HeadDim)
	if !g.local[l] {
		hd = int64(g.globalDim)
	}
	Q, KV := int64(s.Heads)*hd, int64(g.headsKV[l])*hd
	layer := []tensor{
		{"attn_norm.weight", ggml.F32, []int64{E}, 0},
		{"attn_q.weight", mat, []int64{E, Q}, 0.05},
		{"attn_k.weight", mat, []int64{E, KV}, 0.05},
	}
	if g.local[l] {
		layer = append(layer, tensor{"attn_v.weight", mat, []int64{E, KV}, 0.05})
	}
	layer = append(layer,
		tensor{"attn_q_norm.weight", ggml.F32, []int64{hd}, 0},
		tensor{"attn_k_norm.weight", ggml.F32, []int64{hd}, 0},
		tensor{"attn_output.weight", mat, []int64{Q, E}, 0.05},
		tensor{"post_attention_norm.weight", ggml.F32, []int64{E}, 0},
		tensor{"ffn_norm.weight", ggml.F32, []int64{E}, 0},
		tensor{"ffn_gate.weight", mat, []int64{E, F}, 0.05},
		tensor{"ffn_up.weight", mat, []int64{E, F}, 0.05},
		tensor{"ffn_down.weight", mat, []int64{F, E}, 0.05},
		tensor{"post_ffw_norm.weight", ggml.F32, []int64{E}, 0},
		tensor{"inp_gate.weight", mat, []int64{E, P}, 0.05},
		tensor{"proj.weight", mat, []int64{P, E}, 0.05},
		tensor{"post_norm.weight", ggml.F32, []int64{E}, 0},
		tensor{"layer_output_scale.weight", ggml.F32, []int64{1}, 0})
	if !s.moe() {
		return layer
	}
	X, FX := int64(s.Experts), int64(s.ExpertFF)
	return append(layer,
		tensor{"ffn_gate_inp.weight", ggml.F32, []int64{E, X}, 0.5},
		tensor{"ffn_gate_inp.scale", ggml.F32, []int64{E}, 0},
		tensor{"pre_ffw_norm_2.weight", ggml.F32, []int64{E}, 0},
		tensor{"post_ffw_norm_1.weight", ggml.F32, []int64{E}, 0},
		tensor{"post_ffw_norm_2.weight", ggml.F32, []int64{E}, 0},
		tensor{"ffn_gate_up_exps.weight", mat, []int64{E, 2 * FX, X}, 0.05},
		tensor{"ffn_down_exps.weight", mat, []int64{FX, E, X}, 0.05},
		tensor{"ffn_down_exps.scale", ggml.F32, []int64{X}, 0})
}

// SetType sets the matrices' weight type by its ggml name, or the
// mixture Q4_K_M.
func (s *Shape) SetType(name string) error {
	if name == "Q4_K_M" {
		s.Mix = name
		return nil
	}
	t, ok := ggml.ParseType(name)
	if !ok {
		return &ShapeError{Err: fmt.Errorf("synth: unknown weight type %q", name)}
	}
	s.Type = t
	return nil
}

// TokenizerFromFile takes the tokenizer of the GGUF at path
// (TokenizerFrom).
func (s *Shape) TokenizerFromFile(path string) error {
	f, err := gguf.Open(path)
	if err != nil {
		return fmt.Errorf("synth: --vocab-from: %w", err)
	}
	defer f.Close()
	if err := s.TokenizerFrom(f); err != nil {
		return fmt.Errorf("synth: --vocab-from %s: %w", path, err)
	}
	return nil
}

// ShapeError is a shape synth cannot write: a mistake in the call.
type ShapeError = usage.Error

// WriteFile writes the model of shape s to path atomically (zrt synth -o).
// A large shape takes a while (45 s for 500 MB), so say (nil: quiet)
// hears its size first, how far it got at most once a second, and what it
// wrote.
func WriteFile(s Shape, path string, say func(format string, a ...any)) error {
	if say == nil {
		say = func(string, ...any) {}
	}
	start, last, total := time.Now(), time.Now(), s.FileBytes()
	say("synth: writing a %d-layer %s model of about %s", s.Layers, s.Arch, bytesize.Format(total))
	b, err := WriteProgress(s, func(tensor string, n int64) {
		if time.Since(last) >= time.Second {
			say("synth: %s of about %s (%s)", bytesize.Format(n), bytesize.Format(total), tensor)
			last = time.Now()
		}
	})
	if err != nil {
		return err
	}
	if err := gguf.WriteFileAtomic(path, b); err != nil {
		return err
	}
	say("wrote %s (%s) in %s", path, bytesize.Format(int64(len(b))), time.Since(start).Round(time.Millisecond))
	return nil
}
