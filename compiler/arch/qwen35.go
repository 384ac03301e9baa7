package arch

import (
	"fmt"

	"github.com/zrtdev/zrt/compiler/config"
	"github.com/zrtdev/zrt/format/gguf"
)

// qwen35 (Qwen3.5) is a hybrid: of every full_attention_interval layers
// (default 4) the last is gated attention (qwen3's per-head Q/K norms,
// NeoX RoPE over rope.dimension_count dims, a sigmoid gate from the Q
// projection) and the others are gated DeltaNet layers; every layer's
// FFN is dense SwiGLU behind a norm named post_attention_norm. The
// multi-section RoPE of the vision-language checkpoints reduces, for
// text, where every section sees the same position, to NeoX RoPE.
func qwen35(f *gguf.File, c *config.Config) (*Spec, error) {
	return qwenHybrid(f, c, DenseFFN{}, false)
}

// qwen35moe is qwen35 with every FFN routed experts (renormalized
// weights) plus, where the file has one, a sigmoid-gated shared expert
// of expert_shared_feed_forward_length columns.
func qwen35moe(f *gguf.File, c *config.Config) (*Spec, error) {
	return qwenHybrid(f, c, MoEFFN{NormWeights: true}, false)
}

// qwen3next (Qwen3-Next) is qwen35moe whose DeltaNet layers project beta
// and alpha with one tensor, ssm_ba, and give each key head to a group of
// consecutive value heads. (Files from before llama.cpp split its joint
// q|k|v|z projection, ssm_in, are not read.)
func qwen3next(f *gguf.File, c *config.Config) (*Spec, error) {
	return qwenHybrid(f, c, MoEFFN{NormWeights: true}, true)
}

// qwenHybrid reads the Qwen3.5/Qwen3-Next family with the given FFN and
// DeltaNet beta/alpha projection.
func qwenHybrid(f *gguf.File, c *config.Config, ffn FFN, jointBA bool) (*Spec, error) {
	s, err := llamaLineage(f, c, LayerSpec{Mixer: FullAttention{}, Rope: Rope{NeoX: true}, QKNorm: true, GatedAttn: true,
		FFNNorm: "attn_post_norm", FFN: ffn})
	if err != nil {
		return nil, err
	}
	a := s.Hparams.Arch
	meta := archMeta{f: f, arch: a}
	m, err := deltaNetShape(f, a)
	if err != nil {
		return nil, err
	}
	m.JointBA, m.Grouped = jointBA, jointBA
	interval := 4
	if err := meta.get("full_attention_interval", &interval, interval); err != nil {
		return nil, err
	}
	shared := 0
	if _, ok := ffn.(MoEFFN); ok {
		if _, ok := f.Tensor(fmt.Sprintf(llamaTensors["shexp_up"], 0)); ok {
			if err := meta.get("expert_shared_feed_forward_length", &shared, -1); err != nil {
				return nil, err
			}
		}
	}
	for l := range s.Layers {
		ls := &s.Layers[l]
		if (l+1)%interval != 0 {
			ls.Mixer = m
		}
		if moe, ok := ls.FFN.(MoEFFN); ok && shared > 0 {
			moe.SharedNFF, moe.SharedGated = shared, true
			ls.FFN = moe
		}
	}
	return s, nil
}

// deltaNetShape reads a gated DeltaNet's shape from ARCH.ssm.*: the
// convolution's taps, the key heads (group_count) of state_size, and the
// value heads (time_step_rank) sharing inner_size, each as wide as a key
// head (llama.cpp requires it).
func deltaNetShape(f *gguf.File, a string) (Recurrent, error) {
	meta := archMeta{f: f, arch: a}
	m := Recurrent{Kind: GatedDeltaNet}
	inner := 0
	for _, p := range []struct {
		key string
		dst *int
	}{{"ssm.conv_kernel", &m.ConvK}, {"ssm.state_size", &m.S}, {"ssm.group_count", &m.HK}, {"ssm.time_step_rank", &m.HV},
		{"ssm.inner_size", &inner}} {
		if err := meta.get(p.key, p.dst, -1); err != nil {
			return m, err
		}
	}
	if inner != m.HV*m.S {
		return m, fmt.Errorf("%s.ssm.inner_size %d is not time_step_rank %d × state_size %d", a, inner, m.HV, m.S)
	}
	return m, nil
}
