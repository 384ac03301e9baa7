package arch

import (
	"fmt"
	"math"
	"sort"

	"github.com/zrtdev/zrt/compiler/config"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/format/support"
	"github.com/zrtdev/zrt/kernels"
)

// Spec is a model as the graph builder sees it: the model-level
// hyperparameters and what each layer is. A family's only job is to read
// its metadata into a Spec; the blocks that turn a Spec into IR are shared,
// so a new family is a new Spec (and, for a new kind of layer, a new block)
// rather than a new builder.
type Spec struct {
	Hparams Hparams
	// Layers has one entry per layer, Hparams.NLayer in all. Layers may
	// differ from each other (sliding-window and full attention
	// interleaved, recurrent layers between attention ones, dense layers
	// before routed ones), which is why the spec is per layer.
	Layers []LayerSpec
	// EmbedScale, when not 0, multiplies the token embeddings (gemma's
	// √n_embd).
	EmbedScale float64
	// LogitSoftcap, when not 0, soft-caps the logits:
	// cap·tanh(logit/cap) (gemma2).
	LogitSoftcap float64
	// PerLayerInput, when not 0, is the width of Gemma 4's per-layer
	// inputs: every layer ends by adding a projection of
	// gelu(x·inp_gate) ⊙ its own PerLayerInput columns of a table computed
	// once from the token (per_layer_token_embd) and the scaled embedding
	// (per_layer_model_proj).
	PerLayerInput int
	// kv is where each layer's K and V sit in a KV page (placeKV).
	kv []kvPlace
}

// AttnShape is the shape of one layer's attention: query heads, KV heads
// and the width of each. Families whose layers all share the model's
// shape (Hparams) give every layer that; Gemma 4's local and global
// layers differ.
type AttnShape struct {
	NHead, NHeadKV, HeadDim int
}

// QDim and KVDim are the widths of a row's Q and of its K (or V).
func (a AttnShape) QDim() int  { return a.NHead * a.HeadDim }
func (a AttnShape) KVDim() int { return a.NHeadKV * a.HeadDim }

// Family reads one architecture's GGUF metadata and the model config into
// its Spec. It reads sizes and checks them; it emits no IR.
type Family func(f *gguf.File, c *config.Config) (*Spec, error)

// LayerSpec is what one transformer layer is: its token mixer, the
// attention details (Rope, QKVBias, QKNorm: they apply when the mixer is
// an attention one) and its feed-forward network.
type LayerSpec struct {
	Mixer Mixer
	// Attn is the attention shape, for attention mixers.
	Attn AttnShape
	// KVFrom is the layer whose KV cache this layer attends over: itself,
	// or an earlier layer of the same shape and mixer whose cache it
	// shares, projecting no K and V of its own (Gemma 4's last layers).
	KVFrom int
	// VIsK: the layer has no V projection; V is K's projection, taken
	// before K's norm (Gemma 4's global layers).
	VIsK bool
	// VNorm: V gets a per-head RMS norm without a weight (Gemma 4).
	VNorm bool
	Rope  Rope
	// QKVBias: the Q, K and V projections add a bias (qwen2).
	QKVBias bool
	// QKNorm: Q and K get a per-head RMS norm before RoPE (qwen3).
	QKNorm bool
	// FusedQKV: Q, K and V are one projection, attn_qkv, whose output
	// columns are Q's, then K's, then V's (phi3); QKVBias then means its
	// one concatenated bias.
	FusedQKV bool
	// QScale, when not 0, multiplies Q before attention, which then
	// scales scores by 1 instead of 1/√head_dim (gemma's
	// query_pre_attn_scalar, as llama.cpp applies it).
	QScale float64
	// Softcap, when not 0, soft-caps attention scores:
	// softcap·tanh(score/softcap) (gemma2).
	Softcap float64
	// Temp is the attention temperature tuning of Q (Llama 4, mistral3).
	Temp AttnTemp
	// GatedAttn: one projection gives each query head and a gate of the
	// same width (the head's second half), and the attention output is
	// multiplied by the gate's sigmoid before the output projection
	// (Qwen3.5, Qwen3-Next).
	GatedAttn bool
	// OutBias: the attention output projection adds a bias (gpt-oss).
	OutBias bool
	// Sinks: each query head has a learned sink logit (attn_sinks) that
	// joins its softmax as a key with no value (gpt-oss).
	Sinks bool
	// FFNNorm is the role of the FFN's input norm weight; "" means
	// ffn_norm (gpt-oss names it post_attention_norm).
	FFNNorm string
	// PostNorms: the attention and FFN outputs are RMS-normed
	// (post_attention_norm, post_ffw_norm) before their residual adds
	// (gemma2/3).
	PostNorms bool
	FFN       FFN
	// OutScale, when not 0, multiplies the layer's output (Gemma 4's
	// layer_output_scale, a one-element tensor read at build time).
	OutScale float64
}

// AttnTemp is Llama 4's attention temperature tuning: Q at position p is
// scaled by 1 + Scale·ln(⌊p/Floor⌋ + 1). Scale 0 means none.
type AttnTemp struct {
	Scale float64
	Floor int
}

// Rope is a layer's rotary position embedding. It is per layer because
// families that interleave sliding-window and full layers rotate them
// with different bases.
type Rope struct {
	// Base is the frequency base θ; Scale multiplies positions (linear
	// scaling, 1 for none).
	Base, Scale float64
	// NeoX rotates the pairs (i, i+n_rot/2) instead of adjacent ones.
	NeoX bool
	// NRot is how many leading dimensions of each head rotate; the rest
	// pass through.
	NRot int
	// Factors, when set, is the role (a key of llamaTensors) of an F32
	// vector of NRot/2 frequency factors: pair i turns by θ_i/factor_i
	// (LongRoPE's short or long factors).
	Factors string
	// AttnFactor, when not 0, multiplies cos and sin, and so the rotated
	// dimensions of Q and K (LongRoPE's magnitude correction); 0 and 1
	// mean none.
	AttnFactor float64
	// YaRN, when ExtFactor is not 0: pair i turns by a mix of the
	// scaled (interpolated) and unscaled angle, weighted by a ramp from 1
	// below one correction dim to 0 above another, and cos and sin carry
	// 1 + 0.1·ln(1/Scale) on top of AttnFactor (ggml's rope_yarn). The
	// correction dims follow from the original context OrigCtx, BetaFast,
	// BetaSlow and the layer's Base (corrDims).
	ExtFactor          float64
	OrigCtx            int
	BetaFast, BetaSlow float64
}

// corrDims are YaRN's correction dims as ggml_rope_yarn_corr_dims
// computes them, in float32: the dims whose wavelength over the original
// context is BetaFast and BetaSlow turns, floored and ceiled into
// [0, NRot-1].
func (r Rope) corrDims() (lo, hi float64) {
	logf := func(x float32) float32 { return float32(math.Log(float64(x))) }
	n := float32(r.NRot)
	corr := func(beta float64) float64 {
		return float64(n * logf(float32(r.OrigCtx)/(float32(beta)*2*math.Pi)) / (2 * logf(float32(r.Base))))
	}
	return float64(max(0, float32(math.Floor(corr(r.BetaFast))))), float64(min(n-1, float32(math.Ceil(corr(r.BetaSlow)))))
}

// attnFactor is the factor on cos and sin, 1 for none.
func (r Rope) attnFactor() float64 {
	if r.AttnFactor == 0 {
		return 1
	}
	return r.AttnFactor
}

// extended reports whether the rotation needs ROPE_EXT: frequency
// factors or an attention factor other than 1.
func (r Rope) extended() bool { return r.Factors != "" || r.attnFactor() != 1 || r.ExtFactor != 0 }

// Mixer is a layer's token mixer: FullAttention, SlidingWindowAttention
// or Recurrent. The set is closed (the builder must know each kind to
// build it), hence the unexported method.
type Mixer interface {
	fmt.Stringer
	mixer()
}

// FullAttention attends to every earlier position of the sequence.
type FullAttention struct{}

// SlidingWindowAttention attends to the last Window positions only
// (gemma2/3/4's local layers).
type SlidingWindowAttention struct{ Window int }

// Recurrent is a linear-recurrence mixer with a fixed-size state instead
// of a KV cache. Kind names the recurrence as the family reads it; zrt
// builds "gated_deltanet" (Qwen3.5, Qwen3-Next): a short causal
// convolution of ConvK taps over the joint q|k|v projection, then the
// gated delta rule with HK key heads and HV value heads of width S.
type Recurrent struct {
	Kind             string
	ConvK, HK, HV, S int
	// JointBA: beta and alpha come from one projection (ssm_ba), each
	// key head's group of value heads' betas then their alphas
	// (Qwen3-Next); otherwise from ssm_beta and ssm_alpha.
	JointBA bool
	// Grouped: value head h reads key head h/(HV/HK) (Qwen3-Next repeats
	// each key head for its group); otherwise key head h mod HK.
	Grouped bool
	// Off is the byte offset of the layer's state in a slot's recurrent
	// state (Hparams.RecurrentBytes): the convolution window, then the
	// HV state matrices.
	Off int
}

// GatedDeltaNet is Recurrent's Kind for the gated DeltaNet.
const GatedDeltaNet = "gated_deltanet"

// channels is the convolution's width: q and k (HK heads each) and v.
func (m Recurrent) channels() int { return (2*m.HK + m.HV) * m.S }

// convBytes and stateBytes are the layer's convolution window and delta
// rule state in a slot.
func (m Recurrent) convBytes() int  { return 4 * (m.ConvK - 1) * m.channels() }
func (m Recurrent) stateBytes() int { return m.convBytes() + 4*m.HV*m.S*m.S }

func (FullAttention) mixer()          {}
func (SlidingWindowAttention) mixer() {}
func (Recurrent) mixer()              {}

func (FullAttention) String() string { return "full attention" }
func (m SlidingWindowAttention) String() string {
	return fmt.Sprintf("sliding-window attention (window %d)", m.Window)
}
func (m Recurrent) String() string { return fmt.Sprintf("recurrent mixer %q", m.Kind) }

// recurrentBytes lays out the recurrent layers' states in a slot, one
// after another, setting each layer's Off, and returns a slot's bytes.
func (s *Spec) recurrentBytes() int {
	n := 0
	for l := range s.Layers {
		if m, ok := s.Layers[l].Mixer.(Recurrent); ok {
			m.Off = n
			s.Layers[l].Mixer = m
			n += m.stateBytes()
		}
	}
	return n
}

// FFN is a layer's feed-forward network: DenseFFN or MoEFFN.
type FFN interface {
	fmt.Stringer
	ffn()
}

// DenseFFN is the SwiGLU feed-forward network down(silu(gate·x) ⊙ up·x)
// with NFF hidden columns.
type DenseFFN struct {
	NFF int
	// GELU gates with GELU (tanh form) instead of SiLU: GeGLU (gemma).
	GELU bool
	// FusedGateUp: gate and up are one [n_embd, 2·NFF] tensor, ffn_up,
	// the gate's columns first (phi3).
	FusedGateUp bool
}

// MoEFFN routes each token to NExpertUsed of NExpert SwiGLU experts of
// NFFExpert hidden columns each and sums their outputs weighted by the
// router. NormWeights rescales the chosen experts' weights to sum to one
// (qwen3moe does; qwen2moe does not).
type MoEFFN struct {
	NExpert, NExpertUsed, NFFExpert int
	NormWeights                     bool
	// SharedNFF, when positive, adds an always-active shared expert: a
	// SwiGLU FFN of that many hidden columns (ffn_{gate,up,down}_shexp)
	// on the same normed input, whose output SharedGated scales by
	// sigmoid(x·ffn_gate_inp_shexp) (qwen2moe).
	SharedNFF   int
	SharedGated bool
	// RouterBias: the router adds a bias (ffn_gate_inp.bias); ExpertBias:
	// every expert's gate, up and down projections add one
	// (ffn_{gate,up,down}_exps.bias). Both gpt-oss.
	RouterBias, ExpertBias bool
	// SoftmaxWeights picks the NExpertUsed largest router logits and
	// weights them by their own softmax (ggml's SOFTMAX_WEIGHT gating)
	// instead of taking the largest of the softmax over all experts.
	SoftmaxWeights bool
	// OAI activates with gpt-oss's clamped SwiGLU (alpha 1.702, limit 7)
	// instead of SiLU.
	OAI bool
}

// GemmaMoEFFN is Gemma 4's FFN in its MoE layers: a dense GeGLU FFN of
// NFF columns and NExpertUsed of NExpert routed GeGLU experts of NFFExpert
// columns side by side, each with norms of its own, their outputs summed.
// The router reads the un-normed residual (RMS-normed, over √n_embd,
// times ffn_gate_inp.scale) and weights by the renormalized softmax;
// each expert's gate and up rows are the halves of its rows of one
// tensor (ffn_gate_up_exps), and DownScale multiplies each expert's
// output by its ffn_down_exps.scale.
type GemmaMoEFFN struct {
	NFF, NExpert, NExpertUsed, NFFExpert int
	DownScale                            bool
}

func (DenseFFN) ffn()    {}
func (MoEFFN) ffn()      {}
func (GemmaMoEFFN) ffn() {}

func (f GemmaMoEFFN) String() string {
	return fmt.Sprintf("dense GeGLU FFN (n_ff %d) beside routed GeGLU experts (%d of %d, n_ff %d)", f.NFF, f.NExpertUsed, f.NExpert, f.NFFExpert)
}

func (f DenseFFN) String() string {
	if f.GELU {
		return fmt.Sprintf("dense GeGLU FFN (n_ff %d)", f.NFF)
	}
	return fmt.Sprintf("dense SwiGLU FFN (n_ff %d)", f.NFF)
}
func (f MoEFFN) String() string {
	shared := ""
	if f.SharedNFF > 0 {
		shared = fmt.Sprintf(", shared expert n_ff %d", f.SharedNFF)
		if f.SharedGated {
			shared += " sigmoid-gated"
		}
	}
	return fmt.Sprintf("routed MoE FFN (%d of %d experts, n_ff %d%s)", f.NExpertUsed, f.NExpert, f.NFFExpert, shared)
}

// check fails when the builder cannot build s: a layer kind with no block
// yet is a *support.Error (the model is valid, zrt is behind); a spec that
// contradicts itself is a plain error (the family is wrong). It runs before
// any variant is built, so an unbuildable model fails once, not per
// variant, and never with a half-built graph.
func (s *Spec) check() error {
	h := &s.Hparams
	for _, f := range []struct {
		name string
		v    int
	}{{"embedding_length", h.NEmbd}, {"block_count", h.NLayer}, {"head_count", h.NHead}, {"head_count_kv", h.NHeadKV},
		{"key_length", h.HeadDim}, {"n_vocab", h.NVocab}} {
		if f.v < 1 {
			return fmt.Errorf("%s %d must be positive", f.name, f.v)
		}
	}
	for _, v := range []struct {
		name string
		x    float64
	}{{"embedding scale", s.EmbedScale}, {"logit softcap", s.LogitSoftcap}} {
		if v.x < 0 || math.IsInf(v.x, 0) || math.IsNaN(v.x) {
			return fmt.Errorf("%s %v must be 0 (none) or positive and finite", v.name, v.x)
		}
	}
	if len(s.Layers) != h.NLayer {
		return fmt.Errorf("spec has %d layers, block_count is %d", len(s.Layers), h.NLayer)
	}
	for l := range s.Layers {
		ls := &s.Layers[l]
		where := support.In(fmt.Sprintf("layer %d", l))
		switch m := ls.Mixer.(type) {
		case FullAttention:
		case SlidingWindowAttention:
			if m.Window < 1 {
				return fmt.Errorf("layer %d: %v", l, m)
			}
		case Recurrent:
			if m.Kind != GatedDeltaNet {
				return &support.Error{What: "layer mixer", Value: m.String(), Where: where, Detail: "zrt builds attention and gated DeltaNet layers"}
			}
			if m.ConvK < 2 || m.HK < 1 || m.HV < 1 || m.S < 1 || m.HV%m.HK != 0 {
				return fmt.Errorf("layer %d: gated DeltaNet conv %d, heads %d/%d, width %d", l, m.ConvK, m.HK, m.HV, m.S)
			}
		case nil:
			return fmt.Errorf("layer %d has no mixer", l)
		default:
			return &support.Error{What: "layer mixer", Value: m.String(), Where: where, Detail: "zrt builds attention and gated DeltaNet layers"}
		}
		switch ffn := ls.FFN.(type) {
		case DenseFFN:
			if ffn.NFF < 1 {
				return fmt.Errorf("layer %d: %v", l, ffn)
			}
		case MoEFFN:
			if ffn.NExpert < 1 || ffn.NExpertUsed < 1 || ffn.NExpertUsed > ffn.NExpert || ffn.NFFExpert < 1 || ffn.SharedNFF < 0 ||
				(ffn.SharedGated && ffn.SharedNFF == 0) {
				return fmt.Errorf("layer %d: %v", l, ffn)
			}
		case GemmaMoEFFN:
			if ffn.NFF < 1 || ffn.NExpert < 1 || ffn.NExpertUsed < 1 || ffn.NExpertUsed > ffn.NExpert || ffn.NFFExpert < 1 {
				return fmt.Errorf("layer %d: %v", l, ffn)
			}
		case nil:
			return fmt.Errorf("layer %d has no FFN", l)
		default:
			return &support.Error{What: "layer FFN", Value: ffn.String(), Where: where}
		}
		if err := s.checkAttention(l); err != nil {
			return err
		}
		if a := ls.Rope.attnFactor(); !(a > 0) || math.IsInf(a, 1) {
			return fmt.Errorf("layer %d: rope attention factor %v must be positive and finite", l, a)
		}
		for _, v := range []struct {
			name string
			x    float64
		}{{"query scale", ls.QScale}, {"attention softcap", ls.Softcap}, {"attention temperature scale", ls.Temp.Scale}} {
			if v.x < 0 || math.IsInf(v.x, 0) || math.IsNaN(v.x) {
				return fmt.Errorf("layer %d: %s %v must be 0 (none) or positive and finite", l, v.name, v.x)
			}
		}
		if ls.Temp.Scale != 0 && ls.Temp.Floor < 1 {
			return fmt.Errorf("layer %d: attention temperature floor %d must be positive", l, ls.Temp.Floor)
		}
	}
	return nil
}

// checkAttention checks layer l's attention shape, rotation and KV
// source; a layer whose mixer is not attention has none to check.
func (s *Spec) checkAttention(l int) error {
	ls := &s.Layers[l]
	if !ls.attends() {
		return nil
	}
	a := ls.Attn
	switch {
	case a.NHead < 1 || a.NHeadKV < 1 || a.HeadDim < 1:
		return fmt.Errorf("layer %d: attention shape %+v", l, a)
	case a.NHead%a.NHeadKV != 0:
		return fmt.Errorf("layer %d: head_count %d is not a multiple of head_count_kv %d", l, a.NHead, a.NHeadKV)
	case ls.Rope.NRot < 0 || ls.Rope.NRot > a.HeadDim || ls.Rope.NRot%2 != 0:
		return fmt.Errorf("layer %d: rope n_rot %d does not fit head dim %d", l, ls.Rope.NRot, a.HeadDim)
	case ls.KVFrom < 0 || ls.KVFrom > l:
		return fmt.Errorf("layer %d: KV cache of layer %d", l, ls.KVFrom)
	}
	if src := &s.Layers[ls.KVFrom]; ls.KVFrom != l {
		if src.KVFrom != ls.KVFrom || src.Attn != a || src.Mixer != ls.Mixer {
			return fmt.Errorf("layer %d shares the KV cache of layer %d, which differs in shape (%+v, %v) or owns none",
				l, ls.KVFrom, src.Attn, src.Mixer)
		}
	}
	return nil
}

// attends reports whether the layer's mixer is attention.
func (ls *LayerSpec) attends() bool {
	switch ls.Mixer.(type) {
	case FullAttention, SlidingWindowAttention:
		return true
	}
	return false
}

// kvPlace is where one layer's K and V sit in a KV page, in the terms the
// attention kernels address a page by: the page holds nSlots regions of
// this layer's width (2 × KVPageTokens rows of K then V) and the layer's
// is region slot. ring says the page is one of a slot's window ring
// (Hparams.KVWindowRing) rather than of the shared pool. A layer that
// shares another's cache reads its source's place; recurrent layers have
// none.
type kvPlace struct {
	slot, nSlots int
	ring         bool
}

// windowRing is the pages of each slot's ring for the sliding-window
// layers (seed 000 §19's window state kind): enough for the widest window
// and one prefill chunk, since a step writes a chunk's K and V before any
// of its rows attends. It is 0, keeping every layer in the shared pages,
// when the config asks for full windows (swa_full), the model has no
// window layer or no full-attention one (whose pages the request pool
// still counts), or the ring would be no shorter than a full sequence.
func (s *Spec) windowRing(c *config.Config) int {
	window, full := 0, false
	for l := range s.Layers {
		switch m := s.Layers[l].Mixer.(type) {
		case SlidingWindowAttention:
			window = max(window, m.Window)
		case FullAttention:
			full = true
		}
	}
	if c.SWAFull || window == 0 || !full {
		return 0
	}
	if r := (window-1+c.PrefillChunk+kernels.KVPageTokens-1)/kernels.KVPageTokens + 1; r < s.Hparams.MaxPages {
		return r
	}
	return 0
}

// placeKV lays out the layers that own a KV cache, each kind in its own
// page: the window layers in ring pages when ring, the others (all of
// them when not ring) in the shared pages. In a page the layers go
// widest first, each at a multiple of its own width (so that the
// kernels' addressing, which knows one width, finds it). Widths must each
// divide every larger one (Gemma 4's local and global widths do); any
// other mix is refused rather than padded silently, and so is a head a
// quantized cache type cannot hold in whole blocks. It returns the bytes
// of a shared page and of a ring page (0 without a ring), in the cache's
// element types kv.
func (s *Spec) placeKV(ring bool, kv kernels.KVTypes) (pageBytes, ringPageBytes int, err error) {
	s.kv = make([]kvPlace, len(s.Layers))
	for _, kind := range []bool{false, true} {
		type owner struct{ layer, width int }
		var owners []owner
		for l := range s.Layers {
			ls := &s.Layers[l]
			_, window := ls.Mixer.(SlidingWindowAttention)
			if ls.attends() && ls.KVFrom == l && (ring && window) == kind {
				for _, c := range []struct {
					key string
					t   ggml.Type
				}{{"cache_type_k", kv.K}, {"cache_type_v", kv.V}} {
					if err := kernels.CheckKVWidth(c.t, ls.Attn.HeadDim); err != nil {
						return 0, 0, &support.Error{What: "KV cache type", Value: kernels.KVTypeName(c.t), Where: support.Key(c.key),
							Detail: fmt.Sprintf("layer %d's head dim is %d: %v", l, ls.Attn.HeadDim, err)}
					}
				}
				owners = append(owners, owner{l, ls.Attn.KVDim()})
			}
		}
		if len(owners) == 0 {
			continue
		}
		sort.SliceStable(owners, func(i, j int) bool { return owners[i].width > owners[j].width })
		// off is in columns of one token row; a page is 2·KVPageTokens rows.
		off, widest := 0, owners[0].width
		offs := make([]int, len(owners))
		for i, o := range owners {
			if i > 0 && owners[i-1].width%o.width != 0 {
				return 0, 0, &support.Error{What: "attention shape", Value: fmt.Sprintf("KV widths %d and %d", owners[i-1].width, o.width),
					Where: support.In(fmt.Sprintf("layer %d", o.layer)), Detail: "zrt's KV pages need each layer's K width to divide every wider one's"}
			}
			offs[i], off = off, off+o.width
		}
		total := (off + widest - 1) / widest * widest
		for i, o := range owners {
			s.kv[o.layer] = kvPlace{slot: offs[i] / o.width, nSlots: total / o.width, ring: kind}
		}
		// One region of the total width holds every owner's columns at the
		// same byte offsets as their own-width regions: a quantized row's
		// bytes are proportional to its width, whole blocks each.
		page := kernels.KVLayout{Slots: 1, Width: total, Types: kv}.PageBytes()
		if kind {
			ringPageBytes = page
		} else {
			pageBytes = page
		}
	}
	for l := range s.Layers {
		if ls := &s.Layers[l]; ls.attends() {
			s.kv[l] = s.kv[ls.KVFrom]
		}
	}
	return pageBytes, ringPageBytes, nil
}

// checkRopeFactors refuses a model whose file has RoPE frequency factors
// (rope_freqs.weight, Llama 3.1's) that no layer rotates by: computing
// without them would be silently wrong.
func (s *Spec) checkRopeFactors(f *gguf.File) error {
	if _, ok := f.Tensor(llamaTensors["rope_freqs"]); !ok {
		return nil
	}
	for l := range s.Layers {
		if s.Layers[l].Rope.Factors == "rope_freqs" {
			return nil
		}
	}
	return &support.Error{What: "RoPE frequency factors", Value: "(tensor rope_freqs.weight)",
		Detail: "per-dimension RoPE frequency factors (Llama 3.1-style) are not implemented for " + s.Hparams.Arch}
}
