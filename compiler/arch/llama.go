package arch

import (
	"fmt"
	"math"
	"slices"

	"github.com/zrtdev/zrt/compiler/config"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/format/support"
	"github.com/zrtdev/zrt/kernels"
)

// Tensor names in GGUF, by the logical weight they hold. %d is the layer.
// One table serves every family: llama.cpp names a weight the same way in
// every architecture that has it.
var llamaTensors = map[string]string{
	"embed":         "token_embd.weight",
	"out_norm":      "output_norm.weight",
	"lm_head":       "output.weight",
	"attn_norm":     "blk.%d.attn_norm.weight",
	"attn_q":        "blk.%d.attn_q.weight",
	"attn_k":        "blk.%d.attn_k.weight",
	"attn_v":        "blk.%d.attn_v.weight",
	"attn_q_bias":   "blk.%d.attn_q.bias",
	"attn_k_bias":   "blk.%d.attn_k.bias",
	"attn_v_bias":   "blk.%d.attn_v.bias",
	"attn_q_norm":   "blk.%d.attn_q_norm.weight",
	"attn_k_norm":   "blk.%d.attn_k_norm.weight",
	"attn_qkv":      "blk.%d.attn_qkv.weight",
	"attn_qkv_bias": "blk.%d.attn_qkv.bias",
	"attn_out":      "blk.%d.attn_output.weight",
	// gemma2/3's norms of the attention and FFN outputs.
	"attn_post_norm": "blk.%d.post_attention_norm.weight",
	"ffn_post_norm":  "blk.%d.post_ffw_norm.weight",
	"ffn_norm":       "blk.%d.ffn_norm.weight",
	"ffn_gate":       "blk.%d.ffn_gate.weight",
	"ffn_up":         "blk.%d.ffn_up.weight",
	"ffn_down":       "blk.%d.ffn_down.weight",
	// ffn_gate_up is ffn_up where it holds the gate's and the up
	// projection's columns, gate first (phi3).
	"ffn_gate_up": "blk.%d.ffn_up.weight",
	"moe_router":  "blk.%d.ffn_gate_inp.weight",
	"moe_gate":    "blk.%d.ffn_gate_exps.weight",
	"moe_up":      "blk.%d.ffn_up_exps.weight",
	"moe_down":    "blk.%d.ffn_down_exps.weight",
	// gpt-oss's router and expert biases, output bias and sinks.
	"moe_router_bias": "blk.%d.ffn_gate_inp.bias",
	"moe_gate_bias":   "blk.%d.ffn_gate_exps.bias",
	"moe_up_bias":     "blk.%d.ffn_up_exps.bias",
	"moe_down_bias":   "blk.%d.ffn_down_exps.bias",
	"attn_out_bias":   "blk.%d.attn_output.bias",
	"attn_sinks":      "blk.%d.attn_sinks.weight",
	// The gated DeltaNet layers of Qwen3.5 and Qwen3-Next: the joint
	// q|k|v projection is attn_qkv, the output gate z attn_gate.
	"ssm_z":     "blk.%d.attn_gate.weight",
	"ssm_beta":  "blk.%d.ssm_beta.weight",
	"ssm_alpha": "blk.%d.ssm_alpha.weight",
	"ssm_ba":    "blk.%d.ssm_ba.weight",
	"ssm_dt":    "blk.%d.ssm_dt.bias",
	"ssm_a":     "blk.%d.ssm_a",
	"ssm_conv":  "blk.%d.ssm_conv1d.weight",
	"ssm_norm":  "blk.%d.ssm_norm.weight",
	"ssm_out":   "blk.%d.ssm_out.weight",
	// The shared expert of MoE layers and its sigmoid gate's vector.
	"shexp_gate":     "blk.%d.ffn_gate_shexp.weight",
	"shexp_up":       "blk.%d.ffn_up_shexp.weight",
	"shexp_down":     "blk.%d.ffn_down_shexp.weight",
	"shexp_gate_inp": "blk.%d.ffn_gate_inp_shexp.weight",
	// LongRoPE's per-pair frequency factors, one vector for every layer.
	"rope_factors_long":  "rope_factors_long.weight",
	"rope_factors_short": "rope_factors_short.weight",
	// Gemma 4's frequency factors of its global layers' proportional
	// RoPE.
	"rope_freqs": "rope_freqs.weight",
	// Gemma 4's per-layer inputs: the token table and the projection of
	// the embedding to every layer's input, its norm, and each layer's
	// gate, projection back to n_embd, its norm and the layer's output
	// scale.
	"ple_embed":      "per_layer_token_embd.weight",
	"ple_model_proj": "per_layer_model_proj.weight",
	"ple_proj_norm":  "per_layer_proj_norm.weight",
	"ple_gate":       "blk.%d.inp_gate.weight",
	"ple_proj":       "blk.%d.proj.weight",
	"ple_post_norm":  "blk.%d.post_norm.weight",
	"out_scale":      "blk.%d.layer_output_scale.weight",
	// Gemma 4's MoE layers: the router's input scale, the experts'
	// fused gate|up and down tensors and per-expert output scale, and the
	// norms of the dense and the expert branches.
	"moe_router_scale": "blk.%d.ffn_gate_inp.scale",
	"moe_gate_up":      "blk.%d.ffn_gate_up_exps.weight",
	"moe_down_scale":   "blk.%d.ffn_down_exps.scale",
	"ffn_post_norm_1":  "blk.%d.post_ffw_norm_1.weight",
	"ffn_pre_norm_2":   "blk.%d.pre_ffw_norm_2.weight",
	"ffn_post_norm_2":  "blk.%d.post_ffw_norm_2.weight",
}

// llama: adjacent-pair RoPE, no biases, dense FFN.
func llama(f *gguf.File, c *config.Config) (*Spec, error) {
	return llamaLineage(f, c, LayerSpec{Mixer: FullAttention{}, FFN: DenseFFN{}})
}

// qwen2 adds Q/K/V biases and rotates NeoX-style.
func qwen2(f *gguf.File, c *config.Config) (*Spec, error) {
	return llamaLineage(f, c, LayerSpec{Mixer: FullAttention{}, Rope: Rope{NeoX: true}, QKVBias: true, FFN: DenseFFN{}})
}

// qwen3 trades qwen2's biases for per-head Q/K norms.
func qwen3(f *gguf.File, c *config.Config) (*Spec, error) {
	return llamaLineage(f, c, LayerSpec{Mixer: FullAttention{}, Rope: Rope{NeoX: true}, QKNorm: true, FFN: DenseFFN{}})
}

// qwen3moe is qwen3 with every FFN a routed mixture of experts whose
// chosen weights are renormalized.
func qwen3moe(f *gguf.File, c *config.Config) (*Spec, error) {
	return llamaLineage(f, c, LayerSpec{Mixer: FullAttention{}, Rope: Rope{NeoX: true}, QKNorm: true, FFN: MoEFFN{NormWeights: true}})
}

// qwen2moe (Qwen1.5-MoE, Qwen2-57B-A14B) is qwen2 with every FFN routed
// experts whose chosen weights are not renormalized, plus a shared expert
// of expert_shared_feed_forward_length columns (default
// feed_forward_length, as llama.cpp has it) gated by
// sigmoid(x·ffn_gate_inp_shexp). The Q/K/V biases are used where the file
// has them (llama.cpp treats them as optional).
func qwen2moe(f *gguf.File, c *config.Config) (*Spec, error) {
	s, err := llamaLineage(f, c, LayerSpec{Mixer: FullAttention{}, Rope: Rope{NeoX: true}, FFN: MoEFFN{SharedGated: true}})
	if err != nil {
		return nil, err
	}
	m := archMeta{f: f, arch: s.Hparams.Arch}
	if err := m.get("expert_shared_feed_forward_length", &s.Hparams.NFF, s.Hparams.NFF); err != nil {
		return nil, err
	}
	if s.Hparams.NFF == 0 {
		return nil, fmt.Errorf("%s: neither expert_shared_feed_forward_length nor feed_forward_length is set", s.Hparams.Arch)
	}
	for l := range s.Layers {
		ls := &s.Layers[l]
		ffn := ls.FFN.(MoEFFN)
		ffn.SharedNFF = s.Hparams.NFF
		ls.FFN = ffn
		_, ls.QKVBias = f.Tensor(fmt.Sprintf(llamaTensors["attn_q_bias"], l))
	}
	return s, nil
}

// phi3 (Phi-3, Phi-3.5, Phi-4-mini) projects Q, K and V with one tensor
// (attn_qkv; separate ones where the file has them, as llama.cpp accepts)
// and gate and up with another (ffn_up, gate half first), rotates
// NeoX-style over rope.dimension_count of each head's dimensions (Phi-4-
// mini's partial rotary) and, in its long-context checkpoints, uses
// LongRoPE: per-pair frequency factors, short or long by the context
// length as llama.cpp picks them, and an attention factor on the rotation
// (read for every family by llamaLineage).
//
// The sliding window its metadata records is not applied: llama.cpp
// disables it for phi3 (all layers attend fully), and zrt computes what
// llama.cpp computes.
func phi3(f *gguf.File, c *config.Config) (*Spec, error) {
	s, err := llamaLineage(f, c, LayerSpec{Mixer: FullAttention{}, Rope: Rope{NeoX: true}, FFN: DenseFFN{FusedGateUp: true}})
	if err != nil {
		return nil, err
	}
	a := s.Hparams.Arch
	m := archMeta{f: f, arch: a}
	// llama.cpp takes the long factors when a sequence may outgrow the
	// context the model was pre-trained at (original_context_length,
	// default the training context), and the short ones otherwise.
	train := 0
	if err := m.get("context_length", &train, c.ContextLength); err != nil {
		return nil, err
	}
	orig := train
	if err := m.get("rope.scaling.original_context_length", &orig, train); err != nil {
		return nil, err
	}
	factors := "rope_factors_short"
	if c.ContextLength > orig {
		factors = "rope_factors_long"
	}
	if _, ok := f.Tensor(llamaTensors[factors]); !ok {
		factors = ""
	}
	for l := range s.Layers {
		ls := &s.Layers[l]
		ls.Rope.Factors = factors
		_, ls.FusedQKV = f.Tensor(fmt.Sprintf(llamaTensors["attn_qkv"], l))
		bias := "attn_q_bias"
		if ls.FusedQKV {
			bias = "attn_qkv_bias"
		}
		_, ls.QKVBias = f.Tensor(fmt.Sprintf(llamaTensors[bias], l))
	}
	return s, nil
}

// mistral3 (Ministral 3, Mistral Small 3.x text) is llama with YaRN
// (read for every family by llamaLineage) and, when
// attention.temperature_scale is set, Llama 4's attention temperature
// tuning with YaRN's original context as its floor, as llama.cpp has it.
func mistral3(f *gguf.File, c *config.Config) (*Spec, error) {
	s, err := llamaLineage(f, c, LayerSpec{Mixer: FullAttention{}, FFN: DenseFFN{}})
	if err != nil {
		return nil, err
	}
	a := s.Hparams.Arch
	m := archMeta{f: f, arch: a}
	temp, err := m.float("attention.temperature_scale", 0)
	if err != nil || temp == 0 {
		return s, err
	}
	floor := 0
	if err := m.get("context_length", &floor, c.ContextLength); err != nil {
		return nil, err
	}
	if err := m.get("rope.scaling.original_context_length", &floor, floor); err != nil {
		return nil, err
	}
	for l := range s.Layers {
		s.Layers[l].Temp = AttnTemp{Scale: temp, Floor: floor}
	}
	return s, nil
}

// yarn sets r's YaRN parameters from ARCH's rope.scaling keys as llama.cpp
// derives them (llama_context's constructor and
// ggml_rope_yarn_corr_dims), in float32 as it computes them: ext_factor
// 1; beta_fast and beta_slow (default 32 and 1) and the original context
// (default the training context), from which the block derives the
// correction dims with each layer's base; and the attention factor, whose
// YaRN magnitude the kernel's 1 + 0.1·ln(1/scale) cancels, times
// rope.scaling.attn_factor.
func yarn(f *gguf.File, a string, c *config.Config, r *Rope) error {
	m := archMeta{f: f, arch: a}
	train := 0
	if err := m.get("context_length", &train, c.ContextLength); err != nil {
		return err
	}
	orig := train
	if err := m.get("rope.scaling.original_context_length", &orig, train); err != nil {
		return err
	}
	var beta [2]float64
	for i, k := range []struct {
		key string
		def float64
	}{{"rope.scaling.yarn_beta_fast", 32}, {"rope.scaling.yarn_beta_slow", 1}} {
		x, err := m.float(k.key, k.def)
		if err != nil {
			return err
		}
		beta[i] = x
	}
	logMul, err := m.float("rope.scaling.yarn_log_multiplier", 0)
	if err != nil {
		return err
	}
	logf := func(x float32) float32 { return float32(math.Log(float64(x))) }
	mscale := func(scale, m float32) float32 {
		if scale <= 1 {
			return 1
		}
		return 0.1*m*logf(scale) + 1
	}
	factor := 1 / float32(r.Scale)
	attn := mscale(factor, 1)
	if logMul != 0 {
		attn /= mscale(factor, float32(logMul))
	}
	attn *= 1 / (1 + 0.1*logf(factor))
	r.AttnFactor = float64(attn * float32(r.attnFactor()))
	r.ExtFactor, r.OrigCtx, r.BetaFast, r.BetaSlow = 1, orig, beta[0], beta[1]
	return nil
}

// archMeta reads the integer metadata keys of one architecture (ARCH.KEY).
type archMeta struct {
	f    *gguf.File
	arch string
}

// get sets *dst from ARCH.key. A key that is absent takes def when def
// >= 0; otherwise, and when present but not an integer, it is an error.
// Values outside [1, 2^24] are refused: they are corrupt metadata, and
// would size buffers absurdly if let through.
func (m archMeta) get(key string, dst *int, def int) error {
	v, err := m.f.Uint(m.arch + "." + key)
	if err != nil {
		if def >= 0 {
			if _, present := m.f.Lookup(m.arch + "." + key); !present {
				*dst = def
				return nil
			}
		}
		return err
	}
	if v == 0 || v > 1<<24 {
		return fmt.Errorf("%s.%s = %d out of range", m.arch, key, v)
	}
	*dst = int(v)
	return nil
}

// headDim reads the K head width, ARCH.attention.key_length plus suffix
// (def where absent), and holds the V width, value_length plus suffix, to
// it.
func (m archMeta) headDim(suffix string, def int) (int, error) {
	hd, vdim := def, 0
	if err := m.get("attention.key_length"+suffix, &hd, def); err != nil {
		return 0, err
	}
	if err := m.get("attention.value_length"+suffix, &vdim, hd); err != nil {
		return 0, err
	}
	if vdim != hd {
		return 0, &support.Error{What: "attention shape", Value: fmt.Sprintf("value_length%s %d != key_length%s %d", suffix, vdim, suffix, hd),
			Where: support.Key(m.arch + ".attention.value_length" + suffix), Detail: "zrt's attention kernels need equal K and V head widths"}
	}
	return hd, nil
}

// count reads ARCH.key as a count that may be 0 (get refuses 0, a size):
// 0 when absent, at most 2^24.
func (m archMeta) count(key string) (int, error) {
	if _, ok := m.f.Lookup(m.arch + "." + key); !ok {
		return 0, nil
	}
	v, err := m.f.Uint(m.arch + "." + key)
	if err != nil {
		return 0, err
	}
	if v > 1<<24 {
		return 0, fmt.Errorf("%s.%s = %d out of range", m.arch, key, v)
	}
	return int(v), nil
}

// perLayer reads ARCH.key as one value per layer: an array of n, or a
// scalar that every layer shares (llama.cpp's get_key_or_arr). Absent, it
// is def for every layer when def >= 0, an error otherwise. Each value
// must be in [1, 2^24], as get requires.
func (m archMeta) perLayer(key string, n, def int) ([]int, error) {
	out := make([]int, n)
	v, ok := m.f.Lookup(m.arch + "." + key)
	if !ok || v.Type != gguf.TypeArray {
		x := 0
		if err := m.get(key, &x, def); err != nil {
			return nil, err
		}
		for i := range out {
			out[i] = x
		}
		return out, nil
	}
	xs, err := v.Ints()
	if err != nil {
		return nil, fmt.Errorf("%s.%s: %w", m.arch, key, err)
	}
	if len(xs) != n {
		return nil, fmt.Errorf("%s.%s has %d values for %d layers", m.arch, key, len(xs), n)
	}
	for i, x := range xs {
		if x < 1 || x > 1<<24 {
			return nil, fmt.Errorf("%s.%s[%d] = %d out of range", m.arch, key, i, x)
		}
		out[i] = int(x)
	}
	return out, nil
}

// float returns ARCH.key, or def when it is absent; it must be finite.
func (m archMeta) float(key string, def float64) (float64, error) {
	if _, ok := m.f.Lookup(m.arch + "." + key); !ok {
		return def, nil
	}
	x, err := m.f.Float(m.arch + "." + key)
	if err != nil {
		return 0, err
	}
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, fmt.Errorf("%s.%s %v must be finite", m.arch, key, x)
	}
	return x, nil
}

// llamaLineage reads the metadata the llama lineage shares and gives every
// layer the family's kind of layer. kind fixes what a layer is (mixer,
// RoPE style, biases, norms, FFN kind); the metadata and config fill in
// its sizes: the FFN widths and the RoPE base, scale and n_rot.
func llamaLineage(f *gguf.File, c *config.Config, kind LayerSpec) (*Spec, error) {
	a, _ := f.String("general.architecture")
	m := archMeta{f: f, arch: a}
	h := Hparams{Arch: a}
	for _, p := range []struct {
		key string
		dst *int
	}{
		{"embedding_length", &h.NEmbd},
		{"block_count", &h.NLayer},
		{"attention.head_count", &h.NHead},
	} {
		if err := m.get(p.key, p.dst, -1); err != nil {
			return nil, err
		}
	}
	// head_count_kv and feed_forward_length may be per-layer arrays
	// (llama.cpp reads every family's with get_key_or_arr); the model's
	// value is then the largest.
	headsKV, err := m.perLayer("attention.head_count_kv", h.NLayer, h.NHead)
	if err != nil {
		return nil, err
	}
	h.NHeadKV = slices.Max(headsKV)
	if h.HeadDim, err = m.headDim("", h.NEmbd/h.NHead); err != nil {
		return nil, err
	}
	if err := m.get("rope.dimension_count", &h.NRot, h.HeadDim); err != nil {
		return nil, err
	}
	var nff []int
	switch ffn := kind.FFN.(type) {
	case MoEFFN:
		if err := m.get("expert_count", &h.NExpert, -1); err != nil {
			return nil, err
		}
		if err := m.get("expert_used_count", &h.NExpertUsed, -1); err != nil {
			return nil, err
		}
		// feed_forward_length is optional here; llama.cpp sizes experts
		// from it, divided among the used ones, when the expert width
		// is missing.
		if err := m.get("feed_forward_length", &h.NFF, 0); err != nil {
			return nil, err
		}
		def := -1
		if h.NFF > 0 && h.NFF/h.NExpertUsed > 0 {
			def = h.NFF / h.NExpertUsed
		}
		if err := m.get("expert_feed_forward_length", &h.NFFExpert, def); err != nil {
			return nil, err
		}
		if h.NExpertUsed > h.NExpert {
			return nil, fmt.Errorf("expert_used_count %d exceeds expert_count %d", h.NExpertUsed, h.NExpert)
		}
		ffn.NExpert, ffn.NExpertUsed, ffn.NFFExpert = h.NExpert, h.NExpertUsed, h.NFFExpert
		kind.FFN = ffn
	case DenseFFN:
		if nff, err = m.perLayer("feed_forward_length", h.NLayer, -1); err != nil {
			return nil, err
		}
		h.NFF = slices.Max(nff)
	default:
		return nil, fmt.Errorf("llama lineage has no metadata for %T", kind.FFN)
	}
	eps, err := f.Float(a + ".attention.layer_norm_rms_epsilon")
	if err != nil {
		return nil, err
	}
	h.Eps = float32(eps)
	if !(h.Eps > 0) || math.IsInf(float64(h.Eps), 1) {
		return nil, fmt.Errorf("%s.attention.layer_norm_rms_epsilon %v must be positive and finite", a, eps)
	}
	if h.NRot > h.HeadDim || h.NRot%2 != 0 {
		return nil, fmt.Errorf("rope.dimension_count %d does not fit head dim %d", h.NRot, h.HeadDim)
	}
	emb, ok := f.Tensor(llamaTensors["embed"])
	if !ok {
		return nil, fmt.Errorf("missing tensor %s", llamaTensors["embed"])
	}
	if len(emb.Dims) != 2 || emb.Dims[0] != int64(h.NEmbd) {
		return nil, fmt.Errorf("tensor %s has shape %v, want [%d, n_vocab]", emb.Name, emb.Dims, h.NEmbd)
	}
	h.NVocab = int(emb.Dims[1])
	h.MaxPages = (c.ContextLength + kernels.KVPageTokens - 1) / kernels.KVPageTokens

	// llama.cpp scales every family's rotation by rope.scaling.attn_factor
	// when the file has it (LongRoPE writes it).
	if _, ok := f.Lookup(a + ".rope.scaling.attn_factor"); ok {
		x, err := f.Float(a + ".rope.scaling.attn_factor")
		if err != nil {
			return nil, err
		}
		if !(x > 0) || math.IsInf(x, 1) {
			return nil, fmt.Errorf("%s.rope.scaling.attn_factor %v must be positive and finite", a, x)
		}
		kind.Rope.AttnFactor = x
	}
	kind.Rope.Base, kind.Rope.Scale, kind.Rope.NRot = c.Rope.FreqBase, c.Rope.FreqScale, h.NRot
	if c.Rope.Scaling == "yarn" {
		if err := yarn(f, a, c, &kind.Rope); err != nil {
			return nil, err
		}
	}
	layers := make([]LayerSpec, h.NLayer)
	for l := range layers {
		layers[l] = kind
		layers[l].Attn = AttnShape{NHead: h.NHead, NHeadKV: headsKV[l], HeadDim: h.HeadDim}
		layers[l].KVFrom = l
		if ffn, ok := kind.FFN.(DenseFFN); ok {
			ffn.NFF = nff[l]
			layers[l].FFN = ffn
		}
	}
	return &Spec{Hparams: h, Layers: layers}, nil
}
