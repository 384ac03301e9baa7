package arch

import (
	"fmt"
	"math"

	"github.com/zrtdev/zrt/compiler/config"
	"github.com/zrtdev/zrt/compiler/ir"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/format/support"
	"github.com/zrtdev/zrt/kernels"
)

// llamaFamily is what distinguishes the members of the llama family.
type llamaFamily struct {
	neox   bool // RoPE rotates (i, i+d/2) pairs instead of adjacent ones
	qkBias bool // Q/K/V projections carry biases (qwen2)
	qkNorm bool // per-head RMS norm on Q and K before RoPE (qwen3)
	moe    bool // FFN is a routed mixture of experts (qwen3moe)
}

var llamaFamilies = map[string]llamaFamily{
	"llama":    {},
	"qwen2":    {neox: true, qkBias: true},
	"qwen3":    {neox: true, qkNorm: true},
	"qwen3moe": {neox: true, qkNorm: true, moe: true},
}

func init() {
	for name, fam := range llamaFamilies {
		register(name, func(f *gguf.File, c *config.Config) (*Model, error) { return buildLlama(f, c, fam) })
	}
}

// Tensor names in GGUF, by the logical weight they hold. %d is the layer.
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

func llamaHparams(f *gguf.File, c *config.Config, fam llamaFamily) (Hparams, error) {
	a, _ := f.String("general.architecture")
	h := Hparams{Arch: a}
	get := func(key string, dst *int, def int) error {
		v, err := f.Uint(a + "." + key)
		if err != nil {
			if def >= 0 {
				if _, present := f.Lookup(a + "." + key); !present {
					*dst = def
					return nil
				}
			}
			return err
		}
		if v == 0 || v > 1<<24 {
			return fmt.Errorf("%s.%s = %d out of range", a, key, v)
		}
		*dst = int(v)
		return nil
	}
	for _, p := range []struct {
		key string
		dst *int
		def int
	}{
		{"embedding_length", &h.NEmbd, -1},
		{"block_count", &h.NLayer, -1},
		{"attention.head_count", &h.NHead, -1},
	} {
		if err := get(p.key, p.dst, p.def); err != nil {
			return h, err
		}
	}
	if err := get("attention.head_count_kv", &h.NHeadKV, h.NHead); err != nil {
		return h, err
	}
	if err := get("attention.key_length", &h.HeadDim, h.NEmbd/h.NHead); err != nil {
		return h, err
	}
	vdim := h.HeadDim
	if err := get("attention.value_length", &vdim, h.HeadDim); err != nil {
		return h, err
	}
	if vdim != h.HeadDim {
		return h, &support.Error{What: "attention shape", Value: fmt.Sprintf("value_length %d != key_length %d", vdim, h.HeadDim),
			Where: support.Key(a + ".attention.value_length"), Detail: "zrt's attention kernels need equal K and V head widths"}
	}
	if err := get("rope.dimension_count", &h.NRot, h.HeadDim); err != nil {
		return h, err
	}
	if fam.moe {
		if err := get("expert_count", &h.NExpert, -1); err != nil {
			return h, err
		}
		if err := get("expert_used_count", &h.NExpertUsed, -1); err != nil {
			return h, err
		}
		if err := get("expert_feed_forward_length", &h.NFFExpert, -1); err != nil {
			return h, err
		}
		if h.NExpertUsed > h.NExpert {
			return h, fmt.Errorf("expert_used_count %d exceeds expert_count %d", h.NExpertUsed, h.NExpert)
		}
	} else if err := get("feed_forward_length", &h.NFF, -1); err != nil {
		return h, err
	}
	eps, err := f.Float(a + ".attention.layer_norm_rms_epsilon")
	if err != nil {
		return h, err
	}
	h.Eps = float32(eps)
	switch {
	case h.NHead%h.NHeadKV != 0:
		return h, fmt.Errorf("head_count %d is not a multiple of head_count_kv %d", h.NHead, h.NHeadKV)
	case h.NRot > h.HeadDim || h.NRot%2 != 0:
		return h, fmt.Errorf("rope.dimension_count %d does not fit head dim %d", h.NRot, h.HeadDim)
	}
	// Llama 3.1-style RoPE frequency factors change every rotation; refusing
	// the model beats silently computing something else.
	if _, ok := f.Tensor("rope_freqs.weight"); ok {
		return h, &support.Error{What: "RoPE frequency factors", Value: "(tensor rope_freqs.weight)",
			Detail: "per-dimension RoPE frequency factors (Llama 3.1-style) are not implemented"}
	}
	emb, ok := f.Tensor(llamaTensors["embed"])
	if !ok {
		return h, fmt.Errorf("missing tensor %s", llamaTensors["embed"])
	}
	if len(emb.Dims) != 2 || emb.Dims[0] != int64(h.NEmbd) {
		return h, fmt.Errorf("tensor %s has shape %v, want [%d, n_vocab]", emb.Name, emb.Dims, h.NEmbd)
	}
	h.NVocab = int(emb.Dims[1])
	h.MaxPages = (c.ContextLength + kernels.KVPageTokens - 1) / kernels.KVPageTokens
	return h, nil
}

// llamaBuilder carries what every variant's graph needs.
type llamaBuilder struct {
	f   *gguf.File
	c   *config.Config
	h   Hparams
	fam llamaFamily
	g   *ir.Graph
}

// weight adds the named weight buffer, checking it exists with the shape
// the graph needs (dims in ggml order; -1 matches anything).
func (b *llamaBuilder) weight(role string, layer int, logical string, dims ...int64) (int, error) {
	name := llamaTensors[role]
	if layer >= 0 {
		name = fmt.Sprintf(name, layer)
	}
	t, ok := b.f.Tensor(name)
	if !ok {
		return 0, fmt.Errorf("missing tensor %s", name)
	}
	if len(t.Dims) != len(dims) {
		return 0, fmt.Errorf("tensor %s has shape %v, want %v", name, t.Dims, dims)
	}
	for i, d := range dims {
		if d >= 0 && t.Dims[i] != d {
			return 0, fmt.Errorf("tensor %s has shape %v, want %v", name, t.Dims, dims)
		}
	}
	if layer >= 0 {
		logical = fmt.Sprintf("%s[%d]", logical, layer)
	}
	return b.g.Buffer(ir.Buffer{Name: logical, Class: ir.Weight, Tensor: name, Type: t.Type,
		Dims: append([]int64(nil), t.Dims...), LayerClass: role, Bytes: t.Size}), nil
}

func (b *llamaBuilder) has(role string, layer int) bool {
	_, ok := b.f.Tensor(fmt.Sprintf(llamaTensors[role], layer))
	return ok
}

func buildLlama(f *gguf.File, c *config.Config, fam llamaFamily) (*Model, error) {
	h, err := llamaHparams(f, c, fam)
	if err != nil {
		return nil, err
	}
	m := &Model{Hparams: h, Config: c}
	for _, k := range c.ShapeKeys() {
		b := &llamaBuilder{f: f, c: c, h: h, fam: fam, g: ir.NewGraph(k)}
		if err := b.build(); err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		m.Graphs = append(m.Graphs, b.g)
	}
	return m, nil
}

func (b *llamaBuilder) build() error {
	g, h := b.g, &b.h
	E, V, T := int64(h.NEmbd), int64(h.NVocab), g.Key.Rows
	qDim, kvDim := h.NHead*h.HeadDim, h.KVDim()
	io := g.Buffer(ir.Buffer{Name: "request.table", Class: ir.IO})
	kv := g.Buffer(ir.Buffer{Name: "state.kv", Class: ir.KV})
	logits := g.Buffer(ir.Buffer{Name: "out.logits", Class: ir.Out})
	tokens := g.Buffer(ir.Buffer{Name: "out.tokens", Class: ir.Out})

	embed, err := b.weight("embed", -1, "model.embed_table", E, V)
	if err != nil {
		return err
	}
	x := g.NewReg("hidden", T, h.NEmbd, 4)
	g.Emit(ir.EMBED, []ir.Operand{ir.B("table", embed), ir.B("io", io)}, []ir.Operand{ir.R("y", x)},
		ir.Attrs{"cols": float64(E)})

	flash, kvWrite := ir.FLASH_ATTN, ir.KV_WRITE
	if g.Key.Stage == ir.Prefill {
		flash, kvWrite = ir.FLASH_ATTN_BATCHED, ir.KV_WRITE_BATCHED
	}
	norm := func(dst, src, w, cols, group int) {
		reads := []ir.Operand{ir.R("x", src), ir.B("w", w), ir.B("io", io)}
		g.Emit(ir.RMS_NORM, reads, []ir.Operand{ir.R("y", dst)},
			ir.Attrs{"cols": float64(cols), "group": float64(group), "eps": float64(h.Eps)})
	}
	matmul := func(dst, src, w, bias, k, n int) {
		reads := []ir.Operand{ir.R("x", src), ir.B("w", w), ir.B("io", io)}
		if bias >= 0 {
			reads = append(reads, ir.B("bias", bias))
		}
		g.Emit(ir.MATMUL, reads, []ir.Operand{ir.R("y", dst)}, ir.Attrs{"k": float64(k), "n": float64(n)})
	}

	for l := 0; l < h.NLayer; l++ {
		reg := func(name string, cols int) int { return g.NewReg(fmt.Sprintf("l%d.%s", l, name), T, cols, 4) }
		wn, err := b.weight("attn_norm", l, "model.attn.norm", E)
		if err != nil {
			return err
		}
		xn := reg("attn_in", h.NEmbd)
		norm(xn, x, wn, h.NEmbd, h.NEmbd)

		q, k, v := reg("q", qDim), reg("k", kvDim), reg("v", kvDim)
		for _, p := range []struct {
			role, bias, logical string
			dst, n              int
		}{{"attn_q", "attn_q_bias", "model.attn.q_weight", q, qDim}, {"attn_k", "attn_k_bias", "model.attn.k_weight", k, kvDim}, {"attn_v", "attn_v_bias", "model.attn.v_weight", v, kvDim}} {
			w, err := b.weight(p.role, l, p.logical, E, int64(p.n))
			if err != nil {
				return err
			}
			bias := -1
			if b.fam.qkBias {
				if bias, err = b.weight(p.bias, l, p.logical+"_bias", int64(p.n)); err != nil {
					return err
				}
			}
			matmul(p.dst, xn, w, bias, h.NEmbd, p.n)
		}
		if b.fam.qkNorm {
			for _, p := range []struct {
				role, logical string
				r             int
			}{{"attn_q_norm", "model.attn.q_norm", q}, {"attn_k_norm", "model.attn.k_norm", k}} {
				w, err := b.weight(p.role, l, p.logical, int64(h.HeadDim))
				if err != nil {
					return err
				}
				cols := g.Regs[p.r].Cols
				g.Emit(ir.RMS_NORM, []ir.Operand{ir.R("x", p.r), ir.B("w", w), ir.B("io", io)}, []ir.Operand{ir.R("y", p.r)},
					ir.Attrs{"cols": float64(cols), "group": float64(h.HeadDim), "eps": float64(h.Eps)})
			}
		}
		neox := 0.0
		if b.fam.neox {
			neox = 1
		}
		for _, p := range []struct{ r, heads int }{{q, h.NHead}, {k, h.NHeadKV}} {
			g.Emit(ir.ROPE, []ir.Operand{ir.R("x", p.r), ir.B("io", io)}, []ir.Operand{ir.R("x", p.r)}, ir.Attrs{
				"n_head": float64(p.heads), "head_dim": float64(h.HeadDim), "n_rot": float64(h.NRot), "neox": neox,
				"freq_base": b.c.Rope.FreqBase, "freq_scale": b.c.Rope.FreqScale})
		}
		g.Emit(kvWrite, []ir.Operand{ir.R("k", k), ir.R("v", v), ir.B("io", io), ir.B("kv", kv)}, []ir.Operand{ir.B("kv", kv)},
			ir.Attrs{"layer": float64(l), "kv_dim": float64(kvDim), "n_layer": float64(h.NLayer)})
		att := reg("attn", qDim)
		g.Emit(flash, []ir.Operand{ir.R("q", q), ir.B("kv", kv), ir.B("io", io)}, []ir.Operand{ir.R("y", att)}, ir.Attrs{
			"layer": float64(l), "n_layer": float64(h.NLayer), "n_head": float64(h.NHead), "n_head_kv": float64(h.NHeadKV),
			"head_dim": float64(h.HeadDim), "scale": 1 / math.Sqrt(float64(h.HeadDim))})
		wo, err := b.weight("attn_out", l, "model.attn.o_weight", int64(qDim), E)
		if err != nil {
			return err
		}
		o := reg("attn_out", h.NEmbd)
		matmul(o, att, wo, -1, qDim, h.NEmbd)
		g.Emit(ir.RESIDUAL, []ir.Operand{ir.R("x", x), ir.R("y", o), ir.B("io", io)}, []ir.Operand{ir.R("x", x)}, ir.Attrs{"cols": float64(E)})

		wfn, err := b.weight("ffn_norm", l, "model.ffn.norm", E)
		if err != nil {
			return err
		}
		fn := reg("ffn_in", h.NEmbd)
		norm(fn, x, wfn, h.NEmbd, h.NEmbd)
		if b.fam.moe {
			if err := b.moe(l, fn, x, io); err != nil {
				return err
			}
			continue
		}
		F := int64(h.NFF)
		wg, err := b.weight("ffn_gate", l, "model.ffn.gate_weight", E, F)
		if err != nil {
			return err
		}
		wu, err := b.weight("ffn_up", l, "model.ffn.up_weight", E, F)
		if err != nil {
			return err
		}
		wd, err := b.weight("ffn_down", l, "model.ffn.down_weight", F, E)
		if err != nil {
			return err
		}
		gate, up, act, down := reg("gate", h.NFF), reg("up", h.NFF), reg("act", h.NFF), reg("down", h.NEmbd)
		matmul(gate, fn, wg, -1, h.NEmbd, h.NFF)
		matmul(up, fn, wu, -1, h.NEmbd, h.NFF)
		g.Emit(ir.SWIGLU, []ir.Operand{ir.R("gate", gate), ir.R("up", up), ir.B("io", io)}, []ir.Operand{ir.R("y", act)}, ir.Attrs{"cols": float64(F)})
		matmul(down, act, wd, -1, h.NFF, h.NEmbd)
		g.Emit(ir.RESIDUAL, []ir.Operand{ir.R("x", x), ir.R("y", down), ir.B("io", io)}, []ir.Operand{ir.R("x", x)}, ir.Attrs{"cols": float64(E)})
	}

	won, err := b.weight("out_norm", -1, "model.out_norm", E)
	if err != nil {
		return err
	}
	xo := g.NewReg("out_in", T, h.NEmbd, 4)
	norm(xo, x, won, h.NEmbd, h.NEmbd)
	headRole := "lm_head"
	if _, ok := b.f.Tensor(llamaTensors["lm_head"]); !ok {
		headRole = "embed" // tied output embedding
	}
	wh, err := b.weight(headRole, -1, "model.lm_head", E, V)
	if err != nil {
		return err
	}
	g.Emit(ir.LM_HEAD, []ir.Operand{ir.R("x", xo), ir.B("w", wh), ir.B("io", io)}, []ir.Operand{ir.B("logits", logits)},
		ir.Attrs{"k": float64(E), "n_vocab": float64(V)})
	g.Emit(ir.ARGMAX, []ir.Operand{ir.B("logits", logits), ir.B("io", io)}, []ir.Operand{ir.B("tokens", tokens)},
		ir.Attrs{"n_vocab": float64(V)})
	return nil
}

// moe emits the routed-experts FFN of layer l: route, per-expert gate/up,
// SwiGLU, and the weighted down projection accumulated into the residual.
func (b *llamaBuilder) moe(l, fn, x, io int) error {
	g, h := b.g, &b.h
	T, E, F, X := g.Key.Rows, int64(h.NEmbd), int64(h.NFFExpert), int64(h.NExpert)
	wr, err := b.weight("moe_router", l, "model.moe.gate_w", E, X)
	if err != nil {
		return err
	}
	wg, err := b.weight("moe_gate", l, "model.moe.gate_exps", E, F, X)
	if err != nil {
		return err
	}
	wu, err := b.weight("moe_up", l, "model.moe.up_exps", E, F, X)
	if err != nil {
		return err
	}
	wd, err := b.weight("moe_down", l, "model.moe.down_exps", F, E, X)
	if err != nil {
		return err
	}
	if tg, tu := g.Buffers[wg].Type, g.Buffers[wu].Type; tg != tu {
		return &support.Error{What: "expert weight mix", Value: fmt.Sprintf("gate %s, up %s", tg, tu),
			Where: support.In(g.Buffers[wu].Tensor), Detail: "MOE_GATE_UP needs one type for the gate and up experts"}
	}
	U := h.NExpertUsed
	route := g.NewReg(fmt.Sprintf("l%d.route", l), T, U, kernels.RouteEntryBytes)
	gate := g.NewReg(fmt.Sprintf("l%d.moe_gate", l), T, U*h.NFFExpert, 4)
	up := g.NewReg(fmt.Sprintf("l%d.moe_up", l), T, U*h.NFFExpert, 4)
	act := g.NewReg(fmt.Sprintf("l%d.moe_act", l), T, U*h.NFFExpert, 4)
	g.Emit(ir.MOE_GATE_TOPK, []ir.Operand{ir.R("x", fn), ir.B("w", wr), ir.B("io", io)}, []ir.Operand{ir.R("route", route)},
		ir.Attrs{"k": float64(E), "n_expert": float64(X), "n_used": float64(U), "norm": 1})
	g.Emit(ir.MOE_GATE_UP, []ir.Operand{ir.R("x", fn), ir.B("w_gate", wg), ir.B("w_up", wu), ir.R("route", route), ir.B("io", io)},
		[]ir.Operand{ir.R("gate", gate), ir.R("up", up)}, ir.Attrs{"k": float64(E), "f": float64(F), "n_used": float64(U)})
	g.Emit(ir.MOE_SWIGLU, []ir.Operand{ir.R("gate", gate), ir.R("up", up), ir.B("io", io)}, []ir.Operand{ir.R("y", act)},
		ir.Attrs{"cols": float64(U) * float64(F)})
	g.Emit(ir.MOE_DOWN_ACC, []ir.Operand{ir.R("h", act), ir.B("w", wd), ir.R("route", route), ir.B("io", io), ir.R("y", x)},
		[]ir.Operand{ir.R("y", x)}, ir.Attrs{"f": float64(F), "n": float64(E), "n_used": float64(U)})
	return nil
}
