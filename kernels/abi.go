// Package kernels is the kernel catalog: for every kernel zrt ships, the ABI
// the compiler lowers against and every tier implements — its buffer
// arguments in order, its push constants and its specialization slots.
// It is shared by zrtc (which lowers IR onto it) and zrt-run (whose tiers
// bind implementations to it), so neither side can drift from the other.
package kernels

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/zrtdev/zrt/format/ggml"
)

// ParamKind says how a scalar parameter is encoded in its dword.
type ParamKind uint8

// Parameter encodings.
const (
	U32 ParamKind = iota
	F32
)

// Param is one push constant or specialization slot.
type Param struct {
	Name string
	Kind ParamKind
}

// ABI is the calling convention of one kernel family. Buffer arguments are
// passed as 64-bit pointers in user-data dwords, in Bufs order, followed by
// the push constants; a buffer marked optional may be passed as null.
type ABI struct {
	Name     string
	Bufs     []string
	Optional map[string]bool
	Push     []Param
	// Spec are specialization slots: constants baked into the kernel blob
	// by zrtc, not passed per dispatch.
	Spec []Param
	// Typed kernels exist once per weight type; the instance name is
	// Name + "." + lowercase type name (matmul.q4_k).
	Typed bool
	// KVTyped kernels read or write the KV cache, whose element types
	// the model config chooses: the instance for an F16 cache is the
	// family name, any other is KVInstanceName's (flash_attn.kv-q8_0-q8_0),
	// so a bundle names the layout its kernels address.
	KVTyped bool
}

// Part is rank r's columns [lo, hi) of a value cols wide split over n
// ranks of a tensor-parallel set: the balanced partition the shard pass
// splits the vocabulary by and the collectives gather by.
func Part(cols, r, n int) (lo, hi int) { return r * cols / n, (r + 1) * cols / n }

// UserDataDwords is the number of dwords a dispatch of this ABI passes.
func (a *ABI) UserDataDwords() int { return 2*len(a.Bufs) + len(a.Push) }

// MaxUserData is the number of COMPUTE_USER_DATA registers a dispatch can set.
const MaxUserData = 16

// catalog is the truth about every kernel. Buffer names are the operand
// roles the IR uses; "io" is the request table (see io.go).
var catalog = []ABI{
	{Name: "embed", Typed: true, Bufs: []string{"table", "io", "y"}, Push: []Param{{"cols", U32}}},
	// rms_norm normalizes each group of a row and multiplies it by w (an
	// F32 vector of group; null for none: Gemma 4's V norm).
	{Name: "rms_norm", Bufs: []string{"x", "w", "io", "y"}, Optional: map[string]bool{"w": true},
		Push: []Param{{"cols", U32}, {"group", U32}}, Spec: []Param{{"eps", F32}}},
	{Name: "matmul", Typed: true, Bufs: []string{"x", "w", "bias", "io", "y"}, Optional: map[string]bool{"bias": true},
		Push: []Param{{"k", U32}, {"n", U32}}},
	{Name: "rope", Bufs: []string{"x", "io"}, Push: []Param{{"n_head", U32}, {"head_dim", U32}},
		Spec: []Param{{"n_rot", U32}, {"neox", U32}, {"freq_base", F32}, {"freq_scale", F32}}},
	// rope_ext is rope with ggml_rope_ext's extensions: per-pair
	// frequency factors (pair i turns by θ_i / freq[i]: LongRoPE's short or
	// long factors, an F32 vector of n_rot/2; null for none), an attention
	// factor that scales cos and sin (LongRoPE's magnitude correction), and
	// YaRN: with ext_factor ≠ 0, pair i's angle mixes the interpolated and
	// the extrapolated one by a ramp that falls from 1 to 0 between the
	// correction dims corr_lo and corr_hi, and cos and sin are scaled by
	// 1 + 0.1·ln(1/freq_scale) as well.
	{Name: "rope_ext", Bufs: []string{"x", "freq", "io"}, Optional: map[string]bool{"freq": true},
		Push: []Param{{"n_head", U32}, {"head_dim", U32}},
		Spec: []Param{{"n_rot", U32}, {"neox", U32}, {"freq_base", F32}, {"freq_scale", F32}, {"attn_factor", F32},
			{"ext_factor", F32}, {"corr_lo", F32}, {"corr_hi", F32}}},
	{Name: "kv_write", KVTyped: true, Bufs: []string{"k", "v", "io", "kv"}, Push: []Param{{"layer", U32}, {"kv_dim", U32}},
		Spec: []Param{{"n_layer", U32}}},
	{Name: "flash_attn", KVTyped: true, Bufs: []string{"q", "kv", "io", "y"}, Push: []Param{{"layer", U32}},
		Spec: []Param{{"n_layer", U32}, {"n_head", U32}, {"n_head_kv", U32}, {"head_dim", U32}, {"scale", F32}}},
	// flash_attn_ext is flash_attn with ggml_flash_attn_ext's extensions:
	// scores become softcap·tanh(score/softcap) (0: none), a query at
	// position p sees keys p-window+1..p only (0: every earlier key), and
	// sinks (an F32 logit per query head; null for none) join each
	// head's softmax as a key with no value.
	{Name: "flash_attn_ext", KVTyped: true, Bufs: []string{"q", "kv", "sinks", "io", "y"}, Optional: map[string]bool{"sinks": true},
		Push: []Param{{"layer", U32}},
		Spec: []Param{{"n_layer", U32}, {"n_head", U32}, {"n_head_kv", U32}, {"head_dim", U32}, {"scale", F32},
			{"softcap", F32}, {"window", U32}}},
	{Name: "add", Bufs: []string{"x", "y", "io"}, Push: []Param{{"cols", U32}}},
	// add_gated adds a branch into the residual scaled per row by a
	// sigmoid gate: x[r] += sigmoid(g[r]·w)·y[r], w an F32 vector of k
	// (the sigmoid-gated shared expert of MoE models).
	{Name: "add_gated", Bufs: []string{"x", "y", "g", "w", "io"}, Push: []Param{{"cols", U32}, {"k", U32}}},
	{Name: "swiglu", Bufs: []string{"gate", "up", "io", "y"}, Push: []Param{{"cols", U32}}},
	// geglu is swiglu with GELU (tanh form) for SiLU: y = gelu(gate)·up.
	{Name: "geglu", Bufs: []string{"gate", "up", "io", "y"}, Push: []Param{{"cols", U32}}},
	// scale multiplies each row in place by a constant (gemma's embedding
	// scale √n_embd).
	{Name: "scale", Bufs: []string{"x", "io"}, Push: []Param{{"cols", U32}}, Spec: []Param{{"factor", F32}}},
	// logit_softcap soft-caps the logits of each row that asks for them,
	// in its slot's row: x = cap·tanh(x/cap) (gemma2's final logits).
	{Name: "logit_softcap", Bufs: []string{"logits", "io"}, Push: []Param{{"n_vocab", U32}}, Spec: []Param{{"cap", F32}}},
	// attn_temp is Llama 4's attention temperature tuning: each row (a
	// query at position p) is scaled in place by
	// 1 + temp_scale·ln(⌊p/floor⌋ + 1).
	{Name: "attn_temp", Bufs: []string{"x", "io"}, Push: []Param{{"cols", U32}}, Spec: []Param{{"temp_scale", F32}, {"floor", U32}}},
	// moe_gate_topk routes each row: router logits x·w (+ bias, an F32
	// vector of n_expert; null for none), then, with gating 0, the n_used
	// largest of their softmax, renormalized to sum to one when norm is
	// set; with gating 1 (ggml's SOFTMAX_WEIGHT, gpt-oss), the n_used
	// largest logits, weighted by the softmax over those alone.
	{Name: "moe_gate_topk", Typed: true, Bufs: []string{"x", "w", "bias", "io", "route"}, Optional: map[string]bool{"bias": true},
		Push: []Param{{"k", U32}, {"n_expert", U32}, {"n_used", U32}, {"norm", U32}, {"gating", U32}}},
	// Seven pointers leave room for only two push dwords, so the shape is
	// specialized instead.
	{Name: "moe_gate_up", Typed: true, Bufs: []string{"x", "w_gate", "w_up", "route", "io", "gate", "up"},
		Spec: []Param{{"k", U32}, {"f", U32}, {"n_used", U32}}},
	// moe_down_acc adds Σ_u weight_u·(W_e(u)·h_u + bias_e(u)) to y, the
	// bias an F32 [n, n_expert] tensor (null for none).
	{Name: "moe_down_acc", Typed: true, Bufs: []string{"h", "w", "bias", "route", "io", "y"}, Optional: map[string]bool{"bias": true},
		Push: []Param{{"f", U32}, {"n", U32}, {"n_used", U32}}},
	// moe_add_bias adds each routed expert's bias to its f columns of x in
	// place: x[r, u, :] += b[e(r, u), :], b an F32 [f, n_expert] tensor
	// (gpt-oss's expert biases, ggml_add_id).
	{Name: "moe_add_bias", Bufs: []string{"x", "b", "route", "io"}, Push: []Param{{"f", U32}, {"n_used", U32}}},
	// ssm_conv is the short causal convolution of a recurrent layer,
	// followed by SiLU: for each row (a token of slot s at position p),
	// y[c] = silu(Σ_k win[k][c]·w[c][k]) over the window of the slot's
	// last k-1 inputs (its state, zero at p = 0) and this row's x, w an
	// F32 [k, cols] tensor; the state then drops its oldest input and
	// keeps x. A slot's state is at state + slot·slot_bytes + off.
	{Name: "ssm_conv", Bufs: []string{"x", "w", "state", "io", "y"}, Push: []Param{{"cols", U32}, {"off", U32}},
		Spec: []Param{{"k", U32}, {"slot_bytes", U32}}},
	// gdn_gates turns a gated DeltaNet's per-head projections into its
	// gates in place: alpha = softplus(alpha + dt)·a (the decay's log),
	// beta = sigmoid(beta); dt and a are F32 [heads].
	{Name: "gdn_gates", Bufs: []string{"alpha", "beta", "dt", "a", "io"}, Push: []Param{{"heads", U32}}},
	// gated_delta_net is the gated delta rule over each slot's state, row
	// by row in order: qkv holds the convolved q (h_k heads), k (h_k) and
	// v (h_v heads), all of width s; q and k are L2-normalized (eps); v
	// head h pairs with q and k head h mod h_k (with grouped, head
	// h/(h_v/h_k), as Qwen3-Next repeats them); per head S ← S·e^alpha,
	// S ← S + k ⊗ beta·(v − Sᵀk), y = Sᵀq/√s. The state (h_v × s × s
	// F32 per slot, at state + slot·slot_bytes + off) is zero at p = 0.
	{Name: "gated_delta_net", Bufs: []string{"qkv", "alpha", "beta", "state", "io", "y"}, Push: []Param{{"off", U32}},
		Spec: []Param{{"h_k", U32}, {"h_v", U32}, {"s", U32}, {"eps", F32}, {"slot_bytes", U32}, {"grouped", U32}}},
	// rms_norm_gated is y = rms_norm(x per group)·w·silu(z) (the gated
	// DeltaNet's output norm), w an F32 vector of group.
	{Name: "rms_norm_gated", Bufs: []string{"x", "w", "z", "io", "y"}, Push: []Param{{"cols", U32}, {"group", U32}},
		Spec: []Param{{"eps", F32}}},
	// split_halves splits each of a row's heads of 2·width columns into
	// its first half (to a) and its second (to b): a gated attention's
	// joint query and gate projection.
	{Name: "split_halves", Bufs: []string{"x", "io", "a", "b"}, Push: []Param{{"heads", U32}, {"width", U32}}},
	// copy_cols copies columns off..off+cols of each row of x (rows of
	// stride columns) into y (rows of cols): one layer's slice of Gemma 4's
	// per-layer inputs.
	{Name: "copy_cols", Bufs: []string{"x", "io", "y"}, Push: []Param{{"cols", U32}, {"off", U32}}, Spec: []Param{{"stride", U32}}},
	// zero clears cols columns of each active row of y (a sum's start).
	{Name: "zero", Bufs: []string{"y", "io"}, Push: []Param{{"cols", U32}}},
	// mul_vec multiplies each row of x in place by w, an F32 vector of
	// cols, column by column (ggml_mul by a row: Gemma 4's router scale).
	{Name: "mul_vec", Bufs: []string{"x", "w", "io"}, Push: []Param{{"cols", U32}}},
	// moe_route_scale multiplies each routed expert's weight in place by
	// s[expert], s an F32 vector of n_expert (Gemma 4's per-expert scale
	// of the down projection, which a weight carries into moe_down_acc).
	{Name: "moe_route_scale", Bufs: []string{"route", "s", "io"}, Push: []Param{{"n_used", U32}}},
	// mul_sigmoid gates x in place: x ·= sigmoid(g).
	{Name: "mul_sigmoid", Bufs: []string{"x", "g", "io"}, Push: []Param{{"cols", U32}}},
	// swiglu_oai is gpt-oss's clamped SwiGLU: with g = min(gate, limit) and
	// u = clamp(up, -limit, limit), y = g·sigmoid(alpha·g)·(u + 1).
	{Name: "swiglu_oai", Bufs: []string{"gate", "up", "io", "y"}, Push: []Param{{"cols", U32}},
		Spec: []Param{{"alpha", F32}, {"limit", F32}}},
	{Name: "lm_head", Typed: true, Bufs: []string{"x", "w", "io", "logits"}, Push: []Param{{"k", U32}, {"n_vocab", U32}}},
	{Name: "argmax", Bufs: []string{"logits", "io", "tokens"}, Push: []Param{{"n_vocab", U32}}},
	// all_reduce_sum replaces cols columns of each active row of x by
	// their sum over the ranks of a tensor-parallel set, in rank order
	// (so every rank holds the same bits). all_gather assembles y, cols
	// wide, from every rank's x, which holds rank r's columns
	// [r·cols/R, (r+1)·cols/R) packed; with by_slot the rows are those of
	// the active rows that want logits, at their slot's row (the logits
	// of a vocabulary-parallel LM head; x may then be y). Both are
	// collectives: a tier runs them only for a rank of a set.
	{Name: "all_reduce_sum", Bufs: []string{"x", "io"}, Push: []Param{{"cols", U32}}},
	{Name: "all_gather", Bufs: []string{"x", "io", "y"}, Push: []Param{{"cols", U32}, {"by_slot", U32}}},

	// Fused kernels (seed 000, Appendix B). Their weights are concatenated
	// by zrtc so that the pointers fit the user-data registers; shapes are
	// specialized for the same reason.
	{Name: "rms_norm_qkv", Typed: true, Bufs: []string{"x", "w_norm", "w_qkv", "b_qkv", "io", "q", "k", "v"},
		Optional: map[string]bool{"b_qkv": true},
		Spec:     []Param{{"k", U32}, {"n_q", U32}, {"n_kv", U32}, {"eps", F32}}},
	{Name: "rms_norm_gate_up", Typed: true, Bufs: []string{"x", "w_norm", "w_gate_up", "io", "gate", "up"},
		Spec: []Param{{"k", U32}, {"f", U32}, {"eps", F32}}},
	// rms_norm_matmul is RMS_NORM then the projections of the normalized
	// row that share one weight type, over their concatenated weight: y
	// takes the first n rows' outputs, y2 (null where n2 is 0) the next
	// n2. The fuse pass forms it where rms_norm_qkv cannot (a layer whose
	// V projection has another type than Q and K: llama.cpp's Q4_K_M
	// gives half a 7B's layers Q6_K V).
	{Name: "rms_norm_matmul", Typed: true, Bufs: []string{"x", "w_norm", "w", "io", "y", "y2"},
		Optional: map[string]bool{"y2": true},
		Spec:     []Param{{"k", U32}, {"n", U32}, {"n2", U32}, {"eps", F32}}},
	// rms_norm_gate_up_swiglu is rms_norm_gate_up then swiglu of its two
	// outputs, y = silu(gate)·up, for one-row decode steps: the fuse pass
	// forms it only in those variants, where T-CUDA's matrix-vector kernel
	// takes gate and up features in pairs.
	{Name: "rms_norm_gate_up_swiglu", Typed: true, Bufs: []string{"x", "w_norm", "w_gate_up", "io", "y"},
		Spec: []Param{{"k", U32}, {"f", U32}, {"eps", F32}}},
	// rms_norm_qkv_rope_kv_write is rms_norm_qkv (no bias) then
	// rope_kv_write of its outputs, for one-row decode steps over an F16
	// cache: q comes out rotated, K rotated and V into the cache; K and V
	// themselves are not written. T-CUDA rotates adjacent pairs only
	// (neox = 0).
	{Name: "rms_norm_qkv_rope_kv_write", Typed: true, Bufs: []string{"x", "w_norm", "w_qkv", "io", "q", "kv"}, Push: []Param{{"layer", U32}},
		Spec: []Param{{"k", U32}, {"n_q", U32}, {"n_kv", U32}, {"eps", F32}, {"n_layer", U32}, {"n_head", U32}, {"n_head_kv", U32},
			{"head_dim", U32}, {"n_rot", U32}, {"neox", U32}, {"freq_base", F32}, {"freq_scale", F32}}},
	{Name: "residual_rms_norm", Bufs: []string{"x", "y", "w", "io", "out"}, Push: []Param{{"cols", U32}}, Spec: []Param{{"eps", F32}}},
	// rms_norm_rope_kv_write is a per-head norm (qwen3's q_norm, k_norm)
	// with rope_kv_write: each Q head normalized and rotated in place, each
	// K head normalized and rotated on its way into the cache with V.
	{Name: "rms_norm_rope_kv_write", KVTyped: true, Bufs: []string{"q", "k", "v", "w_qnorm", "w_knorm", "io", "kv"}, Push: []Param{{"layer", U32}},
		Spec: []Param{{"n_layer", U32}, {"n_head", U32}, {"n_head_kv", U32}, {"head_dim", U32}, {"n_rot", U32}, {"neox", U32},
			{"freq_base", F32}, {"freq_scale", F32}, {"eps", F32}}},
	// rope_kv_write rotates Q in place and K on its way into the cache
	// with V; K itself is left as it was.
	{Name: "rope_kv_write", KVTyped: true, Bufs: []string{"q", "k", "v", "io", "kv"}, Push: []Param{{"layer", U32}},
		Spec: []Param{{"n_layer", U32}, {"n_head", U32}, {"n_head_kv", U32}, {"head_dim", U32}, {"n_rot", U32},
			{"neox", U32}, {"freq_base", F32}, {"freq_scale", F32}}},
	// matmul_residual is matmul accumulating into y (the residual): y[r] +=
	// W·x[r] (+ bias), the product rounded to float32 before the add.
	{Name: "matmul_residual", Typed: true, Bufs: []string{"x", "w", "bias", "io", "y"}, Optional: map[string]bool{"bias": true},
		Push: []Param{{"k", U32}, {"n", U32}}},
}

var byName = func() map[string]*ABI {
	m := map[string]*ABI{}
	for i := range catalog {
		a := &catalog[i]
		if a.UserDataDwords() > MaxUserData {
			panic(fmt.Sprintf("kernels: %s passes %d user-data dwords, more than %d", a.Name, a.UserDataDwords(), MaxUserData))
		}
		m[a.Name] = a
	}
	return m
}()

// Lookup returns the ABI of a kernel family.
func Lookup(family string) (*ABI, bool) {
	a, ok := byName[family]
	return a, ok
}

// InstanceName is the name of a family's instance for weight type t.
func InstanceName(a *ABI, t ggml.Type) string {
	if !a.Typed {
		return a.Name
	}
	return a.Name + "." + strings.ToLower(t.String())
}

// SplitInstance splits "matmul.q4_k" into its family ABI and weight type.
// A KV-typed family's instance ("flash_attn.kv-q8_0-q8_0") has no weight
// type; InstanceKV reads its cache types.
func SplitInstance(name string) (*ABI, ggml.Type, error) {
	fam, typ, typed := strings.Cut(name, ".")
	a, ok := byName[fam]
	if !ok {
		return nil, 0, fmt.Errorf("kernels: unknown kernel %q", name)
	}
	if a.KVTyped {
		if _, err := InstanceKV(name); err != nil {
			return nil, 0, err
		}
		return a, 0, nil
	}
	if a.Typed != typed {
		return nil, 0, fmt.Errorf("kernels: kernel %q: family %s typed=%v", name, fam, a.Typed)
	}
	if !typed {
		return a, 0, nil
	}
	t, ok := ggml.ParseType(strings.ToUpper(typ))
	if !ok {
		return nil, 0, fmt.Errorf("kernels: kernel %q: unknown weight type %q", name, typ)
	}
	return a, t, nil
}

// CompleteTypes lists, in id order, the weight types t for which has
// holds of the instance of every typed family of families at t: the
// types a tier's compiled kernels (PTX, code objects) cover, so that a
// model of them can be built for it.
func CompleteTypes(families []string, has func(instance string) bool) []ggml.Type {
	var out []ggml.Type
	for _, t := range ggml.Types() {
		complete := true
		for _, fam := range families {
			abi, _ := Lookup(fam)
			if abi.Typed && !has(InstanceName(abi, t)) {
				complete = false
				break
			}
		}
		if complete {
			out = append(out, t)
		}
	}
	return out
}

// Families lists the kernel families in name order.
func Families() []string {
	return slices.Sorted(maps.Keys(byName))
}
