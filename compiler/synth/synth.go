// Package synth writes synthetic GGUF models: random weights of a chosen
// llama-family shape and a small byte-fallback SentencePiece vocabulary.
// The demo falls back to one when no real model is at hand, tests build
// malformed variants from it, and benchmarks use it for model shapes
// nobody ships. The same seed gives the same file.
package synth

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/kernels/quant"
)

// Shape is a llama-family model shape.
type Shape struct {
	// Arch is llama, qwen2, qwen3, phi3 (fused attn_qkv and gate/up
	// ffn_up; Heads × head width must be Embd) or qwen2moe (routed
	// experts and a sigmoid-gated shared expert of width FF).
	Arch    string
	Layers  int
	Embd    int
	Heads   int
	HeadsKV int
	HeadDim int // 0: Embd/Heads
	FF      int
	Vocab   int // at least 259 (3 specials + 256 bytes)
	Context int
	Type    ggml.Type // F32, F16, Q8_0, Q4_K or Q6_K for the matrices
	// Mix "Q4_K_M" makes attn_v and ffn_down (in llama-quantize's layers)
	// and the output matrix Q6_K and the rest Q4_K, as llama-quantize's
	// Q4_K_M does. Empty: every matrix is Type.
	Mix  string
	Seed uint64
	// Experts, ExpertsUsed and ExpertFF shape a qwen2moe model's routed
	// experts (defaults 4, 2 and FF/2).
	Experts, ExpertsUsed, ExpertFF int
	// LongRoPE gives a phi3 model what the 128k checkpoints have: short
	// and long RoPE frequency factors and an attention factor, for a
	// training context 32 times the original Context.
	LongRoPE bool
}

// moe reports whether s has routed experts.
func (s Shape) moe() bool { return s.Arch == "qwen2moe" }

// withDefaults fills the expert fields a MoE shape leaves zero.
func (s Shape) withDefaults() Shape {
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
	}
	return s
}

// Tiny is a shape that compiles and runs in milliseconds.
var Tiny = Shape{Arch: "llama", Layers: 2, Embd: 64, Heads: 4, HeadsKV: 2, FF: 128, Vocab: 320, Context: 256, Type: ggml.F32, Seed: 1}

// Write returns the GGUF bytes of a model of shape s.
func Write(s Shape) ([]byte, error) {
	s = s.withDefaults()
	if err := s.Check(); err != nil {
		return nil, err
	}
	s.HeadDim = s.headDim()
	switch s.Type {
	case ggml.F32, ggml.F16, ggml.Q8_0, ggml.Q4_K, ggml.Q6_K:
	default:
		return nil, fmt.Errorf("synth: weight type %s unsupported (F32, F16, Q8_0, Q4_K, Q6_K)", s.Type)
	}
	if s.Mix == "Q4_K_M" {
		s.Type = ggml.Q4_K
	} else if s.Mix != "" {
		return nil, fmt.Errorf("synth: mix %q unsupported (Q4_K_M)", s.Mix)
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
	w.Set(a+".context_length", gguf.U32(uint32(ctx)))
	w.Set(a+".embedding_length", gguf.U32(uint32(s.Embd)))
	w.Set(a+".feed_forward_length", gguf.U32(uint32(s.FF)))
	w.Set(a+".attention.head_count", gguf.U32(uint32(s.Heads)))
	w.Set(a+".attention.head_count_kv", gguf.U32(uint32(s.HeadsKV)))
	w.Set(a+".attention.key_length", gguf.U32(uint32(s.HeadDim)))
	w.Set(a+".attention.value_length", gguf.U32(uint32(s.HeadDim)))
	w.Set(a+".attention.layer_norm_rms_epsilon", gguf.F32(1e-5))
	w.Set(a+".rope.freq_base", gguf.F32(10000))
	if s.LongRoPE {
		w.Set(a+".rope.scaling.original_context_length", gguf.U32(uint32(s.Context)))
		w.Set(a+".rope.scaling.attn_factor", gguf.F32(float32(math.Sqrt(1+math.Log(32)/math.Log(float64(s.Context))))))
	}
	if s.moe() {
		w.Set(a+".expert_count", gguf.U32(uint32(s.Experts)))
		w.Set(a+".expert_used_count", gguf.U32(uint32(s.ExpertsUsed)))
		w.Set(a+".expert_feed_forward_length", gguf.U32(uint32(s.ExpertFF)))
		w.Set(a+".expert_shared_feed_forward_length", gguf.U32(uint32(s.FF)))
	}
	setVocab(w, s.Vocab)

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
	add := func(name string, t ggml.Type, dims []int64, x []float32) error {
		b, err := encode(t, x)
		if err != nil {
			return err
		}
		return w.AddTensor(name, t, dims, b)
	}
	E, F, V, Q, KV := int64(s.Embd), int64(s.FF), int64(s.Vocab), int64(s.Heads*s.HeadDim), int64(s.HeadsKV*s.HeadDim)
	mat := s.Type
	// moreBits is llama-quantize's rule for which layers' attn_v and
	// ffn_down get Q6_K in a Q4_K_M mix: the first and last eighth, and
	// every third layer between.
	moreBits := func(l int) ggml.Type {
		n := s.Layers
		if s.Mix == "Q4_K_M" && (l < n/8 || l >= 7*n/8 || (l-n/8)%3 == 2) {
			return ggml.Q6_K
		}
		return mat
	}
	if err := add("token_embd.weight", mat, []int64{E, V}, normal(int(E*V), 0.5)); err != nil {
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
	// A tensor's values are drawn when it is added, in file order, so
	// that a seed gives the files it always gave.
	type tensor struct {
		name string
		typ  ggml.Type
		dims []int64
		std  float64 // 0: RMS-norm weights around 1
	}
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
		case "qwen2moe": // routed experts beside a gated shared one
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
		for _, t := range append(layer, ffn...) {
			n := 1
			for _, d := range t.dims {
				n *= int(d)
			}
			var x []float32
			if t.std > 0 {
				x = normal(n, t.std)
			} else {
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
	out := mat
	if s.Mix == "Q4_K_M" {
		out = ggml.Q6_K
	}
	if err := add("output.weight", out, []int64{E, V}, normal(int(E*V), 0.05)); err != nil {
		return nil, err
	}
	return w.Bytes(), nil
}

// setVocab writes an SPM vocabulary: <unk>, <s>, </s>, the 256 byte
// tokens, then "▁"-prefixed filler pieces so any vocabulary size works.
func setVocab(w *gguf.Writer, n int) {
	toks := []string{"<unk>", "<s>", "</s>"}
	types := []int32{2, 3, 3}
	for b := 0; b < 256; b++ {
		toks = append(toks, fmt.Sprintf("<0x%02X>", b))
		types = append(types, 6)
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
	case ggml.Q4_K, ggml.Q6_K:
		if len(x)%qk != 0 {
			return nil, fmt.Errorf("synth: %s needs rows of a multiple of %d elements", t, qk)
		}
		if t == ggml.Q4_K {
			return encodeQ4K(x), nil
		}
		return encodeQ6K(x), nil
	case ggml.MXFP4:
		// ggml's quantize_row_mxfp4_ref, as llama-quantize writes MXFP4.
		n, err := t.RowBytes(int64(len(x)))
		if err != nil {
			return nil, err
		}
		b := make([]byte, n)
		return b, quant.QuantizeMXFP4(x, b)
	}
	// Q8_0 weights share the activation block format.
	n, err := t.RowBytes(int64(len(x)))
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	return b, quant.QuantizeRow(t, x, b)
}
