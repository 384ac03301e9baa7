package arch

import (
	"fmt"

	"github.com/zrtdev/zrt/compiler/config"
	"github.com/zrtdev/zrt/format/gguf"
)

func init() {
	register("qwen35", specBuilder(qwen35))
}

// qwen35 (Qwen3.5) is a hybrid: of every full_attention_interval layers
// (default 4) the last is gated attention (qwen3's per-head Q/K norms,
// NeoX RoPE over rope.dimension_count dims, a sigmoid gate from the Q
// projection) and the others are gated DeltaNet layers; every layer's
// FFN is dense SwiGLU behind a norm named post_attention_norm. The
// multi-section RoPE of the vision-language checkpoints reduces, for
// text, where every section sees the same position, to NeoX RoPE.
func qwen35(f *gguf.File, c *config.Config) (*Spec, error) {
	s, err := llamaLineage(f, c, LayerSpec{Mixer: FullAttention{}, Rope: Rope{NeoX: true}, QKNorm: true, GatedAttn: true,
		FFNNorm: "attn_post_norm", FFN: DenseFFN{}})
	if err != nil {
		return nil, err
	}
	m, err := deltaNetShape(f, s.Hparams.Arch)
	if err != nil {
		return nil, err
	}
	interval := 4
	if err := (archMeta{f: f, arch: s.Hparams.Arch}).get("full_attention_interval", &interval, interval); err != nil {
		return nil, err
	}
	for l := range s.Layers {
		if (l+1)%interval != 0 {
			s.Layers[l].Mixer = m
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
