package arch

import (
	"fmt"
	"math"

	"github.com/zrtdev/zrt/compiler/config"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/format/support"
	"github.com/zrtdev/zrt/kernels"
)

func init() {
	register("llama", specBuilder(llama))
	register("qwen2", specBuilder(qwen2))
	register("qwen3", specBuilder(qwen3))
	register("qwen3moe", specBuilder(qwen3moe))
}

// Tensor names in GGUF, by the logical weight they hold. %d is the layer.
// One table serves every family: llama.cpp names a weight the same way in
// every architecture that has it.
var llamaTensors = map[string]string{
	"embed":       "token_embd.weight",
	"out_norm":    "output_norm.weight",
	"lm_head":     "output.weight",
	"attn_norm":   "blk.%d.attn_norm.weight",
	"attn_q":      "blk.%d.attn_q.weight",
	"attn_k":      "blk.%d.attn_k.weight",
	"attn_v":      "blk.%d.attn_v.weight",
	"attn_q_bias": "blk.%d.attn_q.bias",
	"attn_k_bias": "blk.%d.attn_k.bias",
	"attn_v_bias": "blk.%d.attn_v.bias",
	"attn_q_norm": "blk.%d.attn_q_norm.weight",
	"attn_k_norm": "blk.%d.attn_k_norm.weight",
	"attn_out":    "blk.%d.attn_output.weight",
	"ffn_norm":    "blk.%d.ffn_norm.weight",
	"ffn_gate":    "blk.%d.ffn_gate.weight",
	"ffn_up":      "blk.%d.ffn_up.weight",
	"ffn_down":    "blk.%d.ffn_down.weight",
	"moe_router":  "blk.%d.ffn_gate_inp.weight",
	"moe_gate":    "blk.%d.ffn_gate_exps.weight",
	"moe_up":      "blk.%d.ffn_up_exps.weight",
	"moe_down":    "blk.%d.ffn_down_exps.weight",
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
	if err := m.get("attention.head_count_kv", &h.NHeadKV, h.NHead); err != nil {
		return nil, err
	}
	if err := m.get("attention.key_length", &h.HeadDim, h.NEmbd/h.NHead); err != nil {
		return nil, err
	}
	vdim := h.HeadDim
	if err := m.get("attention.value_length", &vdim, h.HeadDim); err != nil {
		return nil, err
	}
	if vdim != h.HeadDim {
		return nil, &support.Error{What: "attention shape", Value: fmt.Sprintf("value_length %d != key_length %d", vdim, h.HeadDim),
			Where: support.Key(a + ".attention.value_length"), Detail: "zrt's attention kernels need equal K and V head widths"}
	}
	if err := m.get("rope.dimension_count", &h.NRot, h.HeadDim); err != nil {
		return nil, err
	}
	switch ffn := kind.FFN.(type) {
	case MoEFFN:
		if err := m.get("expert_count", &h.NExpert, -1); err != nil {
			return nil, err
		}
		if err := m.get("expert_used_count", &h.NExpertUsed, -1); err != nil {
			return nil, err
		}
		if err := m.get("expert_feed_forward_length", &h.NFFExpert, -1); err != nil {
			return nil, err
		}
		if h.NExpertUsed > h.NExpert {
			return nil, fmt.Errorf("expert_used_count %d exceeds expert_count %d", h.NExpertUsed, h.NExpert)
		}
		ffn.NExpert, ffn.NExpertUsed, ffn.NFFExpert = h.NExpert, h.NExpertUsed, h.NFFExpert
		kind.FFN = ffn
	case DenseFFN:
		if err := m.get("feed_forward_length", &h.NFF, -1); err != nil {
			return nil, err
		}
		ffn.NFF = h.NFF
		kind.FFN = ffn
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
	switch {
	case h.NHead%h.NHeadKV != 0:
		return nil, fmt.Errorf("head_count %d is not a multiple of head_count_kv %d", h.NHead, h.NHeadKV)
	case h.NRot > h.HeadDim || h.NRot%2 != 0:
		return nil, fmt.Errorf("rope.dimension_count %d does not fit head dim %d", h.NRot, h.HeadDim)
	}
	// Llama 3.1-style RoPE frequency factors change every rotation; refusing
	// the model beats silently computing something else.
	if _, ok := f.Tensor("rope_freqs.weight"); ok {
		return nil, &support.Error{What: "RoPE frequency factors", Value: "(tensor rope_freqs.weight)",
			Detail: "per-dimension RoPE frequency factors (Llama 3.1-style) are not implemented"}
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

	kind.Rope.Base, kind.Rope.Scale, kind.Rope.NRot = c.Rope.FreqBase, c.Rope.FreqScale, h.NRot
	layers := make([]LayerSpec, h.NLayer)
	for l := range layers {
		layers[l] = kind
	}
	return &Spec{Hparams: h, Layers: layers}, nil
}
