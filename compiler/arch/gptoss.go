package arch

import (
	"github.com/zrtdev/zrt/compiler/config"
	"github.com/zrtdev/zrt/format/gguf"
)

// gptOSS (gpt-oss-20b, -120b) is a MoE of the llama lineage: Q/K/V and
// output projections with biases, per-head attention sinks, sliding-window
// layers (attention.sliding_window) alternating with full ones
// (sliding_window_pattern, default 2: even layers slide), NeoX RoPE with
// YaRN (read by llamaLineage), the FFN's input norm named
// post_attention_norm, and experts with biases, routed by the softmax of
// the chosen logits (router bias included) and activated with the clamped
// SwiGLU. Local layers rotate with rope.freq_base_swa where the file has
// it.
func gptOSS(f *gguf.File, c *config.Config) (*Spec, error) {
	kind := LayerSpec{Mixer: FullAttention{}, Rope: Rope{NeoX: true}, QKVBias: true, OutBias: true, Sinks: true,
		FFNNorm: "attn_post_norm", FFN: MoEFFN{RouterBias: true, ExpertBias: true, SoftmaxWeights: true, OAI: true}}
	s, err := llamaLineage(f, c, kind)
	if err != nil {
		return nil, err
	}
	m := archMeta{f: f, arch: s.Hparams.Arch}
	window, pattern := 0, 2
	if err := m.get("attention.sliding_window", &window, 0); err != nil {
		return nil, err
	}
	if err := m.get("attention.sliding_window_pattern", &pattern, pattern); err != nil {
		return nil, err
	}
	base, err := m.float("rope.freq_base_swa", s.Layers[0].Rope.Base)
	if err != nil {
		return nil, err
	}
	for l := range s.Layers {
		ls := &s.Layers[l]
		if window > 0 && l%pattern < pattern-1 {
			ls.Mixer = SlidingWindowAttention{Window: window}
			ls.Rope.Base = base
		}
	}
	return s, nil
}
