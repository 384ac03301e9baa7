package arch

import (
	"fmt"
	"math"

	"github.com/zrtdev/zrt/compiler/config"
	"github.com/zrtdev/zrt/format/gguf"
)

func init() {
	register("gemma2", specBuilder(gemma2))
	register("gemma3", specBuilder(gemma3))
}

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
	s, err := gemmaLineage(f, c, 46, 2, 4096, true)
	if err != nil {
		return nil, err
	}
	m := archMeta{f: f, arch: s.Hparams.Arch}
	attnCap, err := m.float("attn_logit_softcapping", 50)
	if err != nil {
		return nil, err
	}
	if s.LogitSoftcap, err = m.float("final_logit_softcapping", 30); err != nil {
		return nil, err
	}
	for l := range s.Layers {
		s.Layers[l].Softcap = attnCap
	}
	return s, nil
}

// gemma3 is gemma2 without attention soft-capping and with qwen3's
// per-head Q/K norms; five local layers to one global
// (sliding_window_pattern default 6) where the file sets a sliding window
// (none otherwise); local layers rotate with rope.freq_base_swa (default
// 10000) unscaled, global ones with the model's base and scaling; the
// 27B is recognised by its 62 layers; final logits are soft-capped only
// when the file says so.
func gemma3(f *gguf.File, c *config.Config) (*Spec, error) {
	s, err := gemmaLineage(f, c, 62, 6, 0, false)
	if err != nil {
		return nil, err
	}
	m := archMeta{f: f, arch: s.Hparams.Arch}
	if s.LogitSoftcap, err = m.float("final_logit_softcapping", 0); err != nil {
		return nil, err
	}
	for l := range s.Layers {
		s.Layers[l].QKNorm = true
	}
	return s, nil
}

// gemmaLineage reads what gemma2 and gemma3 share. big is the layer count
// by which llama.cpp recognises the 27B, whose query scale differs;
// pattern and window are the family's default sliding-window period and
// width (window 0: no sliding window unless the file sets one); swaBaseTrain
// says whether local layers default to the model's RoPE base and scale
// (gemma2) or to base 10000 unscaled (gemma3).
func gemmaLineage(f *gguf.File, c *config.Config, big, pattern, window int, swaBaseTrain bool) (*Spec, error) {
	s, err := llamaLineage(f, c, LayerSpec{Mixer: FullAttention{}, Rope: Rope{NeoX: true}, PostNorms: true, FFN: DenseFFN{GELU: true}})
	if err != nil {
		return nil, err
	}
	h := &s.Hparams
	m := archMeta{f: f, arch: h.Arch}
	s.EmbedScale = float64(float32(math.Sqrt(float64(h.NEmbd))))
	// 1.0f / std::sqrt(float(d)), in float32 as llama.cpp computes it.
	d := h.HeadDim
	if h.NLayer == big {
		d = h.NEmbd / h.NHead
	}
	qscale := 1 / float32(math.Sqrt(float64(d)))
	if err := m.get("attention.sliding_window", &window, window); err != nil {
		return nil, err
	}
	if window > 0 {
		if err := m.get("attention.sliding_window_pattern", &pattern, pattern); err != nil {
			return nil, fmt.Errorf("%w (an array of per-layer flags is not read yet)", err)
		}
	}
	swa := Rope{NeoX: true, NRot: h.NRot, Base: 10000, Scale: 1}
	if swaBaseTrain {
		swa.Base, swa.Scale = s.Layers[0].Rope.Base, s.Layers[0].Rope.Scale
	}
	if swa.Base, err = m.float("rope.freq_base_swa", swa.Base); err != nil {
		return nil, err
	}
	if !(swa.Base > 0) {
		return nil, fmt.Errorf("%s.rope.freq_base_swa %v must be positive", h.Arch, swa.Base)
	}
	for l := range s.Layers {
		ls := &s.Layers[l]
		ls.QScale = float64(qscale)
		// llama.cpp's set_swa_pattern: the last layer of each period is
		// global, the others slide.
		if window > 0 && l%pattern < pattern-1 {
			ls.Mixer = SlidingWindowAttention{Window: window}
			ls.Rope = swa
		}
	}
	return s, nil
}
