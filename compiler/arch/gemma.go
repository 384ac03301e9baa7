package arch

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/zrtdev/zrt/compiler/config"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/format/support"
)

// gemma2 is the llama lineage with Gemma's changes: token embeddings
// scaled by √n_embd, Q scaled before attention by 1/√head_dim (by
// 1/√(n_embd/n_head) in the 27B, which llama.cpp recognises by its 46
// layers), attention scores soft-capped (attn_logit_softcapping, default
// 50), sliding-window layers alternating with full ones
// (attention.sliding_window_pattern, default 2: even layers slide over
// attention.sliding_window, default 4096), RMS norms on the attention and
// FFN outputs, a GeGLU FFN, the output tied to the embeddings, and the
// final logits soft-capped (final_logit_softcapping, default 30).
func gemma2(f *gguf.File, c *config.Config) (*Spec, error) {
	return gemmaLineage(f, c, gemmaDefaults{big: 46, pattern: 2, window: 4096, swaBaseTrain: true, attnSoftcap: 50, softcap: 30})
}

// gemma3 is gemma2 without attention soft-capping and with qwen3's
// per-head Q/K norms; five local layers to one global
// (sliding_window_pattern default 6) where the file sets a sliding window
// (none otherwise); local layers rotate with rope.freq_base_swa (default
// 10000) unscaled, global ones with the model's base and scaling; the
// 27B is recognised by its 62 layers; final logits are soft-capped only
// when the file says so.
func gemma3(f *gguf.File, c *config.Config) (*Spec, error) {
	return gemmaLineage(f, c, gemmaDefaults{big: 62, pattern: 6, qkNorm: true})
}

// gemma4 is gemma3 with local and global layers of their own shapes
// (key_length_swa and rope.dimension_count_swa for the local ones), global
// layers rotated with frequency factors (rope_freqs) and, where they have
// no attn_v, V taken from K's projection; V RMS-normed without a weight;
// attention scores unscaled (Q and K are normed); the last
// attention.shared_kv_layers layers attending over the cache of the last
// earlier layer of their kind (llama.cpp's n_layer_kv_from_start − 2 for
// local, − 1 for global); per-layer inputs
// (embedding_length_per_layer_input) and a per-layer output scale; FFN
// widths per layer; final logits soft-capped (default 30); and, in the
// layers with a router (ffn_gate_inp), routed experts beside the dense FFN
// (GemmaMoEFFN).
func gemma4(f *gguf.File, c *config.Config) (*Spec, error) {
	s, err := gemmaLineage(f, c, gemmaDefaults{big: -1, pattern: 2, qkNorm: true, softcap: 30})
	if err != nil {
		return nil, err
	}
	h := &s.Hparams
	m := archMeta{f: f, arch: h.Arch}
	// The checkpoints without per-layer inputs or shared KV layers (the
	// large ones) may say 0.
	if s.PerLayerInput, err = m.count("embedding_length_per_layer_input"); err != nil {
		return nil, err
	}
	shared, err := m.count("attention.shared_kv_layers")
	if err != nil {
		return nil, err
	}
	if shared >= h.NLayer {
		return nil, fmt.Errorf("%s.attention.shared_kv_layers %d leaves no layer its own KV cache", h.Arch, shared)
	}
	local := AttnShape{NHead: h.NHead}
	if local.HeadDim, err = m.headDim("_swa", h.HeadDim); err != nil {
		return nil, err
	}
	localRot := h.NRot
	if err := m.get("rope.dimension_count_swa", &localRot, h.NRot); err != nil {
		return nil, err
	}
	_, factors := f.Tensor(llamaTensors["rope_freqs"])
	from := h.NLayer - shared
	for l := range s.Layers {
		ls := &s.Layers[l]
		_, isLocal := ls.Mixer.(SlidingWindowAttention)
		if _, moe := f.Tensor(fmt.Sprintf(llamaTensors["moe_router"], l)); moe {
			if ls.FFN, err = gemma4MoE(f, m, l, ls.FFN.(DenseFFN).NFF); err != nil {
				return nil, err
			}
		}
		ls.QScale, ls.VNorm = 1, true
		if isLocal {
			local.NHeadKV = ls.Attn.NHeadKV
			ls.Attn, ls.Rope.NRot = local, localRot
		} else if factors {
			ls.Rope.Factors = "rope_freqs"
		}
		if l >= from {
			ls.KVFrom = from - 1
			if isLocal {
				ls.KVFrom = from - 2
			}
		}
		_, hasV := f.Tensor(fmt.Sprintf(llamaTensors["attn_v"], l))
		ls.VIsK = ls.KVFrom == l && !hasV
		if ls.OutScale, err = scalarTensor(f, fmt.Sprintf(llamaTensors["out_scale"], l)); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// gemma4MoE is layer l's FFN where it has a router: the dense FFN of nff
// columns beside the routed experts that expert_count, expert_used_count
// and expert_feed_forward_length shape.
func gemma4MoE(f *gguf.File, m archMeta, l, nff int) (GemmaMoEFFN, error) {
	ffn := GemmaMoEFFN{NFF: nff}
	for _, p := range []struct {
		key string
		dst *int
	}{{"expert_count", &ffn.NExpert}, {"expert_used_count", &ffn.NExpertUsed}, {"expert_feed_forward_length", &ffn.NFFExpert}} {
		if err := m.get(p.key, p.dst, -1); err != nil {
			return ffn, err
		}
	}
	_, ffn.DownScale = f.Tensor(fmt.Sprintf(llamaTensors["moe_down_scale"], l))
	return ffn, nil
}

// scalarTensor reads a one-element F32 tensor, 0 when the file has none.
func scalarTensor(f *gguf.File, name string) (float64, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return 0, nil
	}
	if t.Type != ggml.F32 || t.Elements() != 1 {
		return 0, &support.Error{What: "tensor type", Value: fmt.Sprintf("%s %v", t.Type, t.Dims), Where: support.In(name),
			Detail: "zrt reads this tensor as one F32 value"}
	}
	b := f.TensorData(t)
	if len(b) < 4 {
		return 0, fmt.Errorf("tensor %s: %d bytes of data", name, len(b))
	}
	x := float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	if math.IsNaN(x) || math.IsInf(x, 0) || x == 0 {
		return 0, fmt.Errorf("tensor %s = %v, want a finite, non-zero scale", name, x)
	}
	return x, nil
}

// slidingLayers says which of n layers attend over a sliding window
// (none when window is 0): attention.sliding_window_pattern as an array
// of per-layer flags (Gemma 4), or as a period, default pattern, whose
// last layer is global and the others slide (llama.cpp's
// set_swa_pattern).
func (m archMeta) slidingLayers(n, window, pattern int) ([]bool, error) {
	out := make([]bool, n)
	if window == 0 {
		return out, nil
	}
	key := m.arch + ".attention.sliding_window_pattern"
	if v, ok := m.f.Lookup(key); ok && v.Type == gguf.TypeArray {
		flags, err := v.Bools()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		if len(flags) != n {
			return nil, fmt.Errorf("%s has %d flags for %d layers", key, len(flags), n)
		}
		return flags, nil
	}
	if err := m.get("attention.sliding_window_pattern", &pattern, pattern); err != nil {
		return nil, err
	}
	for l := range out {
		out[l] = l%pattern < pattern-1
	}
	return out, nil
}

// gemmaDefaults are what a Gemma generation assumes where the file says
// nothing, and how llama.cpp recognises its 27B.
type gemmaDefaults struct {
	// big is the layer count by which llama.cpp recognises the 27B, whose
	// query scale differs (-1: none).
	big int
	// pattern and window are the sliding-window period and width
	// (window 0: no sliding window unless the file sets one).
	pattern, window int
	// swaBaseTrain says whether local layers default to the model's RoPE
	// base and scale (gemma2) or to base 10000 unscaled (gemma3).
	swaBaseTrain bool
	// attnSoftcap is attn_logit_softcapping's default; 0: the generation
	// has no attention soft-capping (the key is not read).
	attnSoftcap float64
	// qkNorm says whether Q and K are RMS-normed per head (qwen3's norms).
	qkNorm bool
	// softcap is final_logit_softcapping's default (0: none).
	softcap float64
}

// gemmaLineage reads what the Gemma generations share, with the
// generation's defaults def.
func gemmaLineage(f *gguf.File, c *config.Config, def gemmaDefaults) (*Spec, error) {
	s, err := llamaLineage(f, c, LayerSpec{Mixer: FullAttention{}, Rope: Rope{NeoX: true}, PostNorms: true, FFN: DenseFFN{GELU: true}})
	if err != nil {
		return nil, err
	}
	h := &s.Hparams
	m := archMeta{f: f, arch: h.Arch}
	s.EmbedScale = float64(float32(math.Sqrt(float64(h.NEmbd))))
	// 1.0f / std::sqrt(float(d)), in float32 as llama.cpp computes it.
	d := h.HeadDim
	if h.NLayer == def.big {
		d = h.NEmbd / h.NHead
	}
	qscale := 1 / float32(math.Sqrt(float64(d)))
	window := def.window
	if err := m.get("attention.sliding_window", &window, window); err != nil {
		return nil, err
	}
	local, err := m.slidingLayers(h.NLayer, window, def.pattern)
	if err != nil {
		return nil, err
	}
	swa := Rope{NeoX: true, NRot: h.NRot, Base: 10000, Scale: 1}
	if def.swaBaseTrain {
		swa.Base, swa.Scale = s.Layers[0].Rope.Base, s.Layers[0].Rope.Scale
	}
	if swa.Base, err = m.float("rope.freq_base_swa", swa.Base); err != nil {
		return nil, err
	}
	if !(swa.Base > 0) {
		return nil, fmt.Errorf("%s.rope.freq_base_swa %v must be positive", h.Arch, swa.Base)
	}
	var attnCap float64
	if def.attnSoftcap > 0 {
		if attnCap, err = m.float("attn_logit_softcapping", def.attnSoftcap); err != nil {
			return nil, err
		}
	}
	for l := range s.Layers {
		ls := &s.Layers[l]
		ls.QScale = float64(qscale)
		ls.Softcap = attnCap
		ls.QKNorm = def.qkNorm
		if local[l] {
			ls.Mixer = SlidingWindowAttention{Window: window}
			ls.Rope = swa
		}
	}
	if s.LogitSoftcap, err = m.float("final_logit_softcapping", def.softcap); err != nil {
		return nil, err
	}
	return s, nil
}
