package arch

import (
	"fmt"
	"math"

	"github.com/zrtdev/zrt/compiler/config"
	"github.com/zrtdev/zrt/compiler/ir"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/format/support"
	"github.com/zrtdev/zrt/kernels"
)

// specBuilder turns a Family into a Builder: the metadata is read once,
// then every variant is assembled from the same Spec.
func specBuilder(fam Family) Builder {
	return func(f *gguf.File, c *config.Config) (*Model, error) {
		s, err := fam(f, c)
		if err != nil {
			return nil, err
		}
		return buildModel(f, c, s)
	}
}

// buildModel builds one graph per variant of s.
func buildModel(f *gguf.File, c *config.Config, s *Spec) (*Model, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := s.checkRopeFactors(f); err != nil {
		return nil, err
	}
	if err := s.settle(c); err != nil {
		return nil, err
	}
	h := &s.Hparams
	kv, err := cacheTypes(c)
	if err != nil {
		return nil, err
	}
	if !kv.IsF16() {
		// llama.cpp rotates a quantized cache's rows when every layer of
		// the cache has heads of one size; zrt decides over all the
		// attention layers (llama.cpp per cache: a model whose sliding and
		// global layers differ in head size is rotated by llama.cpp, not
		// by zrt).
		hd, uniform := 0, true
		for l := range s.Layers {
			if ls := &s.Layers[l]; ls.attends() {
				if hd != 0 && hd != ls.Attn.HeadDim {
					uniform = false
				}
				hd = ls.Attn.HeadDim
			}
		}
		kv.RotK, kv.RotV = kernels.KVRotation(kv.K, kv.V, hd, uniform)
		// Only a cache that is not F16 says so: an F16 bundle keeps the
		// bytes it had before the option.
		h.CacheTypeK, h.CacheTypeV = kernels.KVTypeName(kv.K), kernels.KVTypeName(kv.V)
		h.CacheRotK, h.CacheRotV = kv.RotK, kv.RotV
	}
	if h.KVPageBytes, h.KVWindowPageBytes, err = s.placeKV(h.KVWindowRing > 0, kv); err != nil {
		return nil, err
	}
	// The variants to build, in the order the bundle lists them.
	keys := c.ShapeKeys()
	m := &Model{Hparams: s.Hparams, Config: c, KV: kv}
	for _, k := range keys {
		n := len(s.Layers)
		if k.Stage == ir.Draft {
			n = c.Draft()
		}
		g, err := buildGraph(f, s, k, n)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		m.Graphs = append(m.Graphs, g)
	}
	return m, nil
}

// settle works out what the variants depend on besides the config: the
// per-slot state (a recurrent state, a sliding-window ring) and the
// draft variants' layers (resolveDraft).
func (s *Spec) settle(c *config.Config) error {
	s.Hparams.RecurrentBytes = s.recurrentBytes()
	s.Hparams.KVWindowRing = s.windowRing(c)
	return s.resolveDraft(c)
}

// checkDraft fails when a self-speculation draft of the first n layers
// of s cannot be built: it must leave a layer out, and take no recurrent
// layer, whose state cannot be rolled back after a rejected draft (a
// *support.Error).
func (s *Spec) checkDraft(n int) error {
	if n >= len(s.Layers) {
		return fmt.Errorf("config: draft_layers %d: the draft takes fewer layers than the model's %d", n, len(s.Layers))
	}
	for l := range n {
		if _, ok := s.Layers[l].Mixer.(Recurrent); ok {
			return &support.Error{What: "self-speculation draft", Value: fmt.Sprintf("of %d layers", n),
				Where: fmt.Sprintf("(layer %d is recurrent)", l), Detail: "a recurrent layer's state cannot be rolled back after a rejected draft"}
		}
	}
	return nil
}

// resolveDraft checks the draft c asks for, or where c leaves
// draft_layers unset settles it (config.DefaultDraft): a quarter of the
// layers (config.DefaultDraftLayers) where checkDraft takes them and the
// model keeps no state of a slot's own (a recurrent state or a window
// ring: the runtime speculates on neither, so a draft would only cost
// build time and bytes), else none.
func (s *Spec) resolveDraft(c *config.Config) error {
	if c.DraftLayers != nil {
		if n := c.Draft(); n > 0 {
			return s.checkDraft(n)
		}
		return nil
	}
	n := config.DefaultDraftLayers(len(s.Layers))
	why := fmt.Sprintf("a quarter of the model's %d layers, at least 1, for --speculative self", len(s.Layers))
	switch {
	case n == 0:
		why = fmt.Sprintf("none: a draft of a %d-layer model would leave no layer out", len(s.Layers))
	case s.Hparams.RecurrentBytes > 0:
		n, why = 0, "none: the model's recurrent layers keep a state per slot, and zrt-run does not speculate on such a model"
	case s.Hparams.KVWindowRing > 0:
		n, why = 0, "none: the model's sliding-window layers keep a ring of pages per slot (swa_full = false), and zrt-run does not speculate on such a model"
	default:
		if err := s.checkDraft(n); err != nil {
			n, why = 0, "none: "+err.Error()
		}
	}
	c.DefaultDraft(n, why)
	return nil
}

// buildGraph assembles the variant k of s: embedding, the mixer and FFN
// of each of the first layers layers (all of them but in a draft
// variant), output head.
func buildGraph(f *gguf.File, s *Spec, k ir.ShapeKey, layers int) (*ir.Graph, error) {
	b := newGraphBuilder(f, s, k)
	x, err := b.embedding()
	if err != nil {
		return nil, err
	}
	if s.PerLayerInput > 0 {
		if b.perLayer, err = b.perLayerInputs(x); err != nil {
			return nil, err
		}
	}
	for l := range layers {
		if err := b.layer(l, &s.Layers[l], x); err != nil {
			return nil, err
		}
	}
	if err := b.head(x); err != nil {
		return nil, err
	}
	return b.g, nil
}

// graphBuilder holds what every block of one variant's graph shares.
type graphBuilder struct {
	f *gguf.File
	s *Spec
	h *Hparams
	g *ir.Graph
	// The graph's I/O and state buffers, which most instructions name;
	// rec, the recurrent state, is -1 until a recurrent layer needs it.
	io, kv, logits, tokens, rec int
	// perLayer is the register of every layer's per-layer input
	// (Spec.PerLayerInput), -1 for models without.
	perLayer int
	// kvRing and ioRing are the window ring and its request table, -1
	// until a ringed layer needs them.
	kvRing, ioRing int
	// The attention instructions differ between prefill (many rows of one
	// sequence) and decode (one row of many sequences).
	flash, kvWrite ir.Op
}

func newGraphBuilder(f *gguf.File, s *Spec, k ir.ShapeKey) *graphBuilder {
	g := ir.NewGraph(k)
	b := &graphBuilder{f: f, s: s, h: &s.Hparams, g: g, flash: ir.FLASH_ATTN, kvWrite: ir.KV_WRITE}
	if k.Stage == ir.Prefill {
		b.flash, b.kvWrite = ir.FLASH_ATTN_BATCHED, ir.KV_WRITE_BATCHED
	}
	b.io = g.Buffer(ir.Buffer{Name: "request.table", Class: ir.IO})
	b.kv = g.Buffer(ir.Buffer{Name: "state.kv", Class: ir.KV})
	b.logits = g.Buffer(ir.Buffer{Name: "out.logits", Class: ir.Out})
	b.tokens = g.Buffer(ir.Buffer{Name: "out.tokens", Class: ir.Out})
	b.rec, b.perLayer, b.kvRing, b.ioRing = -1, -1, -1, -1
	return b
}

// weight adds the named weight buffer, checking it exists with the shape
// the graph needs (dims in ggml order; -1 matches anything). role is a key
// of llamaTensors; layer is -1 for model-level weights.
func (b *graphBuilder) weight(role string, layer int, logical string, dims ...int64) (int, error) {
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

// b2f is a flag attribute's value.
func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// f32Weight is weight for the vectors and biases the kernels take in
// F32 only: another type is a *support.Error naming the tensor.
func (b *graphBuilder) f32Weight(role string, layer int, logical string, dims ...int64) (int, error) {
	w, err := b.weight(role, layer, logical, dims...)
	if err != nil {
		return 0, err
	}
	if buf := &b.g.Buffers[w]; buf.Type != ggml.F32 {
		return 0, &support.Error{What: "tensor type", Value: buf.Type.String(), Where: support.In(buf.Tensor), Detail: "zrt's kernels take this tensor in F32 only"}
	}
	return w, nil
}

// reg adds layer l's f32 register name, one row per token.
func (b *graphBuilder) reg(l int, name string, cols int) int {
	return b.g.NewReg(fmt.Sprintf("l%d.%s", l, name), b.g.Key.Rows, cols, 4)
}

// rmsNorm normalizes each group of columns of src into dst (dst may be
// src) and scales it by w.
func (b *graphBuilder) rmsNorm(dst, src, w, cols, group int) {
	b.g.Emit(ir.RMS_NORM, []ir.Operand{ir.R("x", src), ir.B("w", w), ir.B("io", b.io)}, []ir.Operand{ir.R("y", dst)},
		ir.Attrs{"cols": float64(cols), "group": float64(group), "eps": float64(b.h.Eps)})
}

// matmul computes dst = src·w (+ bias when bias >= 0).
func (b *graphBuilder) matmul(dst, src, w, bias, k, n int) {
	reads := []ir.Operand{ir.R("x", src), ir.B("w", w), ir.B("io", b.io)}
	if bias >= 0 {
		reads = append(reads, ir.B("bias", bias))
	}
	b.g.Emit(ir.MATMUL, reads, []ir.Operand{ir.R("y", dst)}, ir.Attrs{"k": float64(k), "n": float64(n)})
}

// residual adds y into the hidden state x.
func (b *graphBuilder) residual(x, y int) { b.add(x, y, b.h.NEmbd) }

// preNorm adds layer l's norm weight role and returns a new register
// (named name) holding the RMS-normed hidden state x.
func (b *graphBuilder) preNorm(l int, role, logical, name string, x int) (int, error) {
	w, err := b.weight(role, l, logical, int64(b.h.NEmbd))
	if err != nil {
		return 0, err
	}
	xn := b.reg(l, name, b.h.NEmbd)
	b.rmsNorm(xn, x, w, b.h.NEmbd, b.h.NEmbd)
	return xn, nil
}

// embedding looks up each row's token and returns the hidden-state
// register the layers update in place.
func (b *graphBuilder) embedding() (int, error) {
	h, g := b.h, b.g
	embed, err := b.weight("embed", -1, "model.embed_table", int64(h.NEmbd), int64(h.NVocab))
	if err != nil {
		return 0, err
	}
	x := g.NewReg("hidden", g.Key.Rows, h.NEmbd, 4)
	g.Emit(ir.EMBED, []ir.Operand{ir.B("table", embed), ir.B("io", b.io)}, []ir.Operand{ir.R("y", x)},
		ir.Attrs{"cols": float64(h.NEmbd)})
	if b.s.EmbedScale != 0 {
		b.scale(x, h.NEmbd, b.s.EmbedScale)
	}
	return x, nil
}

// perLayerInputs adds Gemma 4's per-layer inputs, computed once from the
// tokens and the scaled embedding x: for each row, every layer's
// PerLayerInput columns of per_layer_token_embd·√P, plus the RMS-normed
// (per layer, by per_layer_proj_norm) x·per_layer_model_proj/√n_embd, the
// sum over √2, in float32 as llama.cpp computes each factor. It returns
// the register, n_layer·P columns, layer l's at l·P.
func (b *graphBuilder) perLayerInputs(x int) (int, error) {
	g, h, P := b.g, b.h, b.s.PerLayerInput
	W := P * h.NLayer
	table, err := b.weight("ple_embed", -1, "model.ple.embed_table", int64(W), int64(h.NVocab))
	if err != nil {
		return 0, err
	}
	proj, err := b.weight("ple_model_proj", -1, "model.ple.model_proj", int64(h.NEmbd), int64(W))
	if err != nil {
		return 0, err
	}
	norm, err := b.weight("ple_proj_norm", -1, "model.ple.proj_norm", int64(P))
	if err != nil {
		return 0, err
	}
	tok, pl := g.NewReg("ple.tokens", g.Key.Rows, W, 4), g.NewReg("ple.inputs", g.Key.Rows, W, 4)
	g.Emit(ir.EMBED, []ir.Operand{ir.B("table", table), ir.B("io", b.io)}, []ir.Operand{ir.R("y", tok)}, ir.Attrs{"cols": float64(W)})
	b.scale(tok, W, float64(sqrtf(P)))
	b.matmul(pl, x, proj, -1, h.NEmbd, W)
	b.scale(pl, W, float64(1/sqrtf(h.NEmbd)))
	b.rmsNorm(pl, pl, norm, W, P)
	b.add(pl, tok, W)
	b.scale(pl, W, float64(1/sqrtf(2)))
	return pl, nil
}

// perLayerInput adds layer l's use of its per-layer input to x:
// x += post_norm(proj·(gelu(x·inp_gate) ⊙ input_l)).
func (b *graphBuilder) perLayerInput(l, x int) error {
	g, h, P := b.g, b.h, b.s.PerLayerInput
	E := int64(h.NEmbd)
	wg, err := b.weight("ple_gate", l, "model.ple.gate", E, int64(P))
	if err != nil {
		return err
	}
	wp, err := b.weight("ple_proj", l, "model.ple.proj", int64(P), E)
	if err != nil {
		return err
	}
	wn, err := b.weight("ple_post_norm", l, "model.ple.post_norm", E)
	if err != nil {
		return err
	}
	gate, in, act, out := b.reg(l, "ple_gate", P), b.reg(l, "ple_in", P), b.reg(l, "ple_act", P), b.reg(l, "ple_out", h.NEmbd)
	b.matmul(gate, x, wg, -1, h.NEmbd, P)
	g.Emit(ir.COPY_COLS, []ir.Operand{ir.R("x", b.perLayer), ir.B("io", b.io)}, []ir.Operand{ir.R("y", in)},
		ir.Attrs{"cols": float64(P), "off": float64(l * P), "stride": float64(P * h.NLayer)})
	b.gatedDown(gate, in, act, out, wp, P, true)
	b.rmsNorm(out, out, wn, h.NEmbd, h.NEmbd)
	b.residual(x, out)
	return nil
}

// sqrtf is C's sqrtf of an integer: the float32 square root.
func sqrtf(n int) float32 { return float32(math.Sqrt(float64(n))) }

// add adds register y into x (cols wide) in place.
func (b *graphBuilder) add(x, y, cols int) {
	b.g.Emit(ir.RESIDUAL, []ir.Operand{ir.R("x", x), ir.R("y", y), ir.B("io", b.io)}, []ir.Operand{ir.R("x", x)},
		ir.Attrs{"cols": float64(cols)})
}

// scale multiplies register x (cols wide) in place by f.
func (b *graphBuilder) scale(x, cols int, f float64) {
	b.g.Emit(ir.SCALE, []ir.Operand{ir.R("x", x), ir.B("io", b.io)}, []ir.Operand{ir.R("x", x)},
		ir.Attrs{"cols": float64(cols), "factor": f})
}

// layer adds layer l: its mixer, then its FFN, each a residual update of
// x; then its per-layer input and output scale where the model has them.
func (b *graphBuilder) layer(l int, ls *LayerSpec, x int) error {
	if err := b.mixerFFN(l, ls, x); err != nil {
		return err
	}
	if b.perLayer >= 0 {
		if err := b.perLayerInput(l, x); err != nil {
			return err
		}
	}
	if ls.OutScale != 0 {
		b.scale(x, b.h.NEmbd, ls.OutScale)
	}
	return nil
}

// mixerFFN adds layer l's mixer and FFN.
func (b *graphBuilder) mixerFFN(l int, ls *LayerSpec, x int) error {
	switch m := ls.Mixer.(type) {
	case FullAttention, SlidingWindowAttention:
		if err := b.attention(l, ls, x); err != nil {
			return err
		}
	case Recurrent:
		if err := b.gatedDeltaNet(l, m, x); err != nil {
			return err
		}
	default:
		// Spec.check refuses these before any graph is started.
		return fmt.Errorf("layer %d: no block builds %v", l, m)
	}
	if ffn, ok := ls.FFN.(DenseFFN); ok && ffn.FusedGateUp {
		return b.fusedDenseFFN(l, ls, ffn, x)
	}
	normRole := "ffn_norm"
	if ls.FFNNorm != "" {
		normRole = ls.FFNNorm
	}
	fn, err := b.preNorm(l, normRole, "model.ffn.norm", "ffn_in", x)
	if err != nil {
		return err
	}
	switch ffn := ls.FFN.(type) {
	case DenseFFN:
		return b.denseFFN(l, ls, ffn, fn, x)
	case GemmaMoEFFN:
		return b.gemmaMoE(l, ls, ffn, fn, x)
	case MoEFFN:
		return b.moe(l, ffn, fn, x)
	default:
		return fmt.Errorf("layer %d: no block builds %v", l, ffn)
	}
}

// attention adds layer l's attention block: norm, Q/K/V projections (with
// biases when ls.QKVBias; one fused projection when ls.FusedQKV), per-head
// Q/K norms (ls.QKNorm), RoPE by ls.Rope, the KV-cache write, flash
// attention over the cache, the output projection and the residual add
// into x.
func (b *graphBuilder) attention(l int, ls *LayerSpec, x int) error {
	g, h, a := b.g, b.h, ls.Attn
	E := int64(h.NEmbd)
	qDim, kvDim := a.QDim(), a.KVDim()
	project := b.qkv
	if ls.FusedQKV {
		project = b.fusedQKV
	}
	q, k, v, gate, err := project(l, ls, x)
	if err != nil {
		return err
	}
	// V is taken before K is normed and rotated in place; V's own norm
	// has no weight.
	vn := v
	if v >= 0 && v == k {
		vn = b.reg(l, "v", kvDim)
		if !ls.VNorm {
			g.Emit(ir.COPY_COLS, []ir.Operand{ir.R("x", k), ir.B("io", b.io)}, []ir.Operand{ir.R("y", vn)},
				ir.Attrs{"cols": float64(kvDim), "off": 0, "stride": float64(kvDim)})
		}
	}
	if ls.VNorm && v >= 0 {
		g.Emit(ir.RMS_NORM, []ir.Operand{ir.R("x", v), ir.B("io", b.io)}, []ir.Operand{ir.R("y", vn)},
			ir.Attrs{"cols": float64(kvDim), "group": float64(a.HeadDim), "eps": float64(h.Eps)})
	}
	v = vn
	if ls.QKNorm {
		for _, p := range []struct {
			role, logical string
			r             int
		}{{"attn_q_norm", "model.attn.q_norm", q}, {"attn_k_norm", "model.attn.k_norm", k}} {
			if p.r < 0 {
				continue
			}
			w, err := b.weight(p.role, l, p.logical, int64(a.HeadDim))
			if err != nil {
				return err
			}
			b.rmsNorm(p.r, p.r, w, g.Regs[p.r].Cols, a.HeadDim)
		}
	}
	for _, p := range []struct{ r, heads int }{{q, a.NHead}, {k, a.NHeadKV}} {
		if p.r < 0 {
			continue
		}
		if err := b.rope(ls.Rope, p.r, p.heads, a.HeadDim); err != nil {
			return err
		}
	}
	if ls.Temp.Scale != 0 {
		g.Emit(ir.ATTN_TEMP, []ir.Operand{ir.R("x", q), ir.B("io", b.io)}, []ir.Operand{ir.R("x", q)},
			ir.Attrs{"cols": float64(qDim), "temp_scale": ls.Temp.Scale, "floor": float64(ls.Temp.Floor)})
	}
	scale := 1 / math.Sqrt(float64(a.HeadDim))
	if ls.QScale != 0 {
		if ls.QScale != 1 {
			b.scale(q, qDim, ls.QScale)
		}
		scale = 1
	}
	// The attention kernels address a page by the layer's width, so a
	// layer's place is given in those terms (placeKV). A ringed layer
	// reads its slot's ring through the ring's request table, whose rows
	// are the step's rows.
	place, kv, io := b.s.kv[l], b.kv, b.io
	if place.ring {
		kv, io = b.ring()
	}
	if k >= 0 {
		g.Emit(b.kvWrite, []ir.Operand{ir.R("k", k), ir.R("v", v), ir.B("io", io), ir.B("kv", kv)}, []ir.Operand{ir.B("kv", kv)},
			ir.Attrs{"layer": float64(place.slot), "kv_dim": float64(kvDim), "n_layer": float64(place.nSlots)})
	}
	att := b.reg(l, "attn", qDim)
	flash, attrs := b.flash, ir.Attrs{
		"layer": float64(place.slot), "n_layer": float64(place.nSlots), "n_head": float64(a.NHead), "n_head_kv": float64(a.NHeadKV),
		"head_dim": float64(a.HeadDim), "scale": scale}
	reads := []ir.Operand{ir.R("q", q), ir.B("kv", kv), ir.B("io", io)}
	if w, ok := ls.Mixer.(SlidingWindowAttention); ok || ls.Softcap != 0 || ls.Sinks {
		flash, attrs["window"], attrs["softcap"] = ir.FLASH_ATTN_EXT, float64(w.Window), ls.Softcap
		if ls.Sinks {
			sinks, err := b.f32Weight("attn_sinks", l, "model.attn.sinks", int64(a.NHead))
			if err != nil {
				return err
			}
			reads = append(reads, ir.B("sinks", sinks))
		}
	}
	g.Emit(flash, reads, []ir.Operand{ir.R("y", att)}, attrs)
	wo, err := b.weight("attn_out", l, "model.attn.o_weight", int64(qDim), E)
	if err != nil {
		return err
	}
	bias := -1
	if ls.OutBias {
		if bias, err = b.weight("attn_out_bias", l, "model.attn.o_bias", E); err != nil {
			return err
		}
	}
	o := b.reg(l, "attn_out", h.NEmbd)
	if gate >= 0 {
		g.Emit(ir.MUL_SIGMOID, []ir.Operand{ir.R("x", att), ir.R("g", gate), ir.B("io", b.io)}, []ir.Operand{ir.R("x", att)},
			ir.Attrs{"cols": float64(qDim)})
	}
	b.matmul(o, att, wo, bias, qDim, h.NEmbd)
	return b.postNormResidual(l, ls, "attn_post_norm", "model.attn.post_norm", x, o)
}

// ring returns the window ring's KV and request-table buffers, adding
// them to the graph the first time.
func (b *graphBuilder) ring() (kv, io int) {
	if b.kvRing < 0 {
		b.kvRing = b.g.Buffer(ir.Buffer{Name: "state.kv_window", Class: ir.KVWindow})
		b.ioRing = b.g.Buffer(ir.Buffer{Name: "request.table_window", Class: ir.IOWindow})
	}
	return b.kvRing, b.ioRing
}

// postNormResidual adds the branch output y into the hidden state x,
// RMS-normed first by layer l's weight role when ls.PostNorms.
func (b *graphBuilder) postNormResidual(l int, ls *LayerSpec, role, logical string, x, y int) error {
	if ls.PostNorms {
		w, err := b.weight(role, l, logical, int64(b.h.NEmbd))
		if err != nil {
			return err
		}
		b.rmsNorm(y, y, w, b.h.NEmbd, b.h.NEmbd)
	}
	b.residual(x, y)
	return nil
}

// qkv adds layer l's attention norm and its separate Q, K and V
// projections of x (with biases when ls.QKVBias), and returns the
// registers they write. With ls.GatedAttn the Q projection is twice as
// wide, each head followed by its gate, and SPLIT_HALVES separates them;
// gate is -1 otherwise.
//
// A layer that shares another's KV cache projects only Q (k and v are
// -1); with ls.VIsK, v is k.
func (b *graphBuilder) qkv(l int, ls *LayerSpec, x int) (q, k, v, gate int, err error) {
	h, a := b.h, ls.Attn
	E := int64(h.NEmbd)
	qDim, kvDim := a.QDim(), a.KVDim()
	xn, err := b.preNorm(l, "attn_norm", "model.attn.norm", "attn_in", x)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	q, k, v, gate = b.reg(l, "q", qDim), -1, -1, -1
	qOut, qCols := q, qDim
	if ls.GatedAttn {
		qOut, qCols = b.reg(l, "q_gate", 2*qDim), 2*qDim
	}
	type projection struct {
		role, bias, logical string
		dst, n              int
	}
	projections := []projection{{"attn_q", "attn_q_bias", "model.attn.q_weight", qOut, qCols}}
	if ls.KVFrom == l {
		k = b.reg(l, "k", kvDim)
		projections = append(projections, projection{"attn_k", "attn_k_bias", "model.attn.k_weight", k, kvDim})
		if !ls.VIsK {
			v = b.reg(l, "v", kvDim)
			projections = append(projections, projection{"attn_v", "attn_v_bias", "model.attn.v_weight", v, kvDim})
		}
	}
	for _, p := range projections {
		w, err := b.weight(p.role, l, p.logical, E, int64(p.n))
		if err != nil {
			return 0, 0, 0, 0, err
		}
		bias := -1
		if ls.QKVBias {
			if bias, err = b.weight(p.bias, l, p.logical+"_bias", int64(p.n)); err != nil {
				return 0, 0, 0, 0, err
			}
		}
		b.matmul(p.dst, xn, w, bias, h.NEmbd, p.n)
	}
	if ls.GatedAttn {
		gate = b.reg(l, "attn_gate", qDim)
		b.g.Emit(ir.SPLIT_HALVES, []ir.Operand{ir.R("x", qOut), ir.B("io", b.io)}, []ir.Operand{ir.R("a", q), ir.R("b", gate)},
			ir.Attrs{"heads": float64(a.NHead), "width": float64(a.HeadDim)})
	}
	if ls.VIsK {
		v = k
	}
	return q, k, v, gate, nil
}

// gatedDeltaNet adds recurrent layer l (kind GatedDeltaNet, shape m): its
// norm; the q|k|v, output-gate, beta and alpha projections; the gates;
// the causal convolution with SiLU; the gated delta rule over the slot's
// state; the gated output norm, the output projection and the residual
// add into x.
func (b *graphBuilder) gatedDeltaNet(l int, m Recurrent, x int) error {
	g, h := b.g, b.h
	E, C, V := int64(h.NEmbd), m.channels(), m.HV*m.S
	if b.rec < 0 {
		b.rec = g.Buffer(ir.Buffer{Name: "state.recurrent", Class: ir.Recurrent})
	}
	xn, err := b.preNorm(l, "attn_norm", "model.attn.norm", "attn_in", x)
	if err != nil {
		return err
	}
	type projection struct {
		role, logical, reg string
		n                  int
	}
	projections := []projection{{"attn_qkv", "model.ssm.qkv_weight", "ssm_qkv", C}, {"ssm_z", "model.ssm.z_weight", "ssm_z", V}}
	if m.JointBA {
		projections = append(projections, projection{"ssm_ba", "model.ssm.ba_weight", "ssm_ba", 2 * m.HV})
	} else {
		projections = append(projections, projection{"ssm_beta", "model.ssm.beta_weight", "ssm_beta", m.HV},
			projection{"ssm_alpha", "model.ssm.alpha_weight", "ssm_alpha", m.HV})
	}
	regs := map[string]int{}
	for _, p := range projections {
		w, err := b.weight(p.role, l, p.logical, E, int64(p.n))
		if err != nil {
			return err
		}
		regs[p.reg] = b.reg(l, p.reg, p.n)
		b.matmul(regs[p.reg], xn, w, -1, h.NEmbd, p.n)
	}
	vecs := map[string]int{}
	for _, p := range []struct {
		role, logical string
		dims          []int64
	}{{"ssm_dt", "model.ssm.dt_bias", []int64{int64(m.HV)}}, {"ssm_a", "model.ssm.a", []int64{int64(m.HV)}},
		{"ssm_conv", "model.ssm.conv_weight", []int64{int64(m.ConvK), int64(C)}}, {"ssm_norm", "model.ssm.norm", []int64{int64(m.S)}}} {
		w, err := b.f32Weight(p.role, l, p.logical, p.dims...)
		if err != nil {
			return err
		}
		vecs[p.role] = w
	}
	if m.JointBA {
		regs["ssm_beta"], regs["ssm_alpha"] = b.reg(l, "ssm_beta", m.HV), b.reg(l, "ssm_alpha", m.HV)
		g.Emit(ir.SPLIT_HALVES, []ir.Operand{ir.R("x", regs["ssm_ba"]), ir.B("io", b.io)},
			[]ir.Operand{ir.R("a", regs["ssm_beta"]), ir.R("b", regs["ssm_alpha"])}, ir.Attrs{"heads": float64(m.HK), "width": float64(m.HV / m.HK)})
	}
	alpha, beta := regs["ssm_alpha"], regs["ssm_beta"]
	g.Emit(ir.GDN_GATES, []ir.Operand{ir.R("alpha", alpha), ir.R("beta", beta), ir.B("dt", vecs["ssm_dt"]), ir.B("a", vecs["ssm_a"]), ir.B("io", b.io)},
		[]ir.Operand{ir.R("alpha", alpha), ir.R("beta", beta)}, ir.Attrs{"heads": float64(m.HV)})
	slot := float64(h.RecurrentBytes)
	conv := b.reg(l, "ssm_conv", C)
	g.Emit(ir.SSM_CONV, []ir.Operand{ir.R("x", regs["ssm_qkv"]), ir.B("w", vecs["ssm_conv"]), ir.B("state", b.rec), ir.B("io", b.io)},
		[]ir.Operand{ir.B("state", b.rec), ir.R("y", conv)},
		ir.Attrs{"cols": float64(C), "off": float64(m.Off), "k": float64(m.ConvK), "slot_bytes": slot})
	o := b.reg(l, "ssm_o", V)
	g.Emit(ir.GATED_DELTA_NET, []ir.Operand{ir.R("qkv", conv), ir.R("alpha", alpha), ir.R("beta", beta), ir.B("state", b.rec), ir.B("io", b.io)},
		[]ir.Operand{ir.B("state", b.rec), ir.R("y", o)},
		ir.Attrs{"off": float64(m.Off + m.convBytes()), "h_k": float64(m.HK), "h_v": float64(m.HV), "s": float64(m.S),
			"eps": float64(h.Eps), "slot_bytes": slot, "grouped": b2f(m.Grouped)})
	on := b.reg(l, "ssm_onorm", V)
	g.Emit(ir.RMS_NORM_GATED, []ir.Operand{ir.R("x", o), ir.B("w", vecs["ssm_norm"]), ir.R("z", regs["ssm_z"]), ir.B("io", b.io)},
		[]ir.Operand{ir.R("y", on)}, ir.Attrs{"cols": float64(V), "group": float64(m.S), "eps": float64(h.Eps)})
	wo, err := b.weight("ssm_out", l, "model.ssm.out_weight", int64(V), E)
	if err != nil {
		return err
	}
	out := b.reg(l, "ssm_out", h.NEmbd)
	b.matmul(out, on, wo, -1, V, h.NEmbd)
	b.residual(x, out)
	return nil
}

// fusedQKV adds layer l's attention norm and its one Q|K|V projection of
// x (attn_qkv, with its bias when ls.QKVBias) as RMS_NORM_FUSED_QKV: the
// op the fuse pass forms from separate projections, whose weight is the
// file's tensor as it stands. It returns the registers it writes (gate
// -1: a fused projection has none).
func (b *graphBuilder) fusedQKV(l int, ls *LayerSpec, x int) (q, k, v, gate int, err error) {
	h := b.h
	E := int64(h.NEmbd)
	qDim, kvDim := ls.Attn.QDim(), ls.Attn.KVDim()
	wn, err := b.weight("attn_norm", l, "model.attn.norm", E)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	w, err := b.weight("attn_qkv", l, "model.attn.qkv_weight", E, int64(qDim+2*kvDim))
	if err != nil {
		return 0, 0, 0, 0, err
	}
	reads := []ir.Operand{ir.R("x", x), ir.B("w_norm", wn), ir.B("w_qkv", w), ir.B("io", b.io)}
	if ls.QKVBias {
		bias, err := b.weight("attn_qkv_bias", l, "model.attn.qkv_bias", int64(qDim+2*kvDim))
		if err != nil {
			return 0, 0, 0, 0, err
		}
		reads = append(reads, ir.B("b_qkv", bias))
	}
	q, k, v = b.reg(l, "q", qDim), b.reg(l, "k", kvDim), b.reg(l, "v", kvDim)
	b.g.Emit(ir.RMS_NORM_FUSED_QKV, reads, []ir.Operand{ir.R("q", q), ir.R("k", k), ir.R("v", v)},
		ir.Attrs{"k": float64(h.NEmbd), "n_q": float64(qDim), "n_kv": float64(kvDim), "eps": float64(h.Eps)})
	return q, k, v, -1, nil
}

// rope rotates the heads of register x in place by r: ROPE, or ROPE_EXT
// when r has frequency factors or an attention factor.
func (b *graphBuilder) rope(r Rope, x, heads, headDim int) error {
	attrs := ir.Attrs{"n_head": float64(heads), "head_dim": float64(headDim), "n_rot": float64(r.NRot), "neox": b2f(r.NeoX),
		"freq_base": r.Base, "freq_scale": r.Scale}
	if !r.extended() {
		b.g.Emit(ir.ROPE, []ir.Operand{ir.R("x", x), ir.B("io", b.io)}, []ir.Operand{ir.R("x", x)}, attrs)
		return nil
	}
	reads := []ir.Operand{ir.R("x", x)}
	if r.Factors != "" {
		w, err := b.weight(r.Factors, -1, "model.rope_factors", int64(r.NRot/2))
		if err != nil {
			return err
		}
		reads = append(reads, ir.B("freq", w))
	}
	attrs["attn_factor"] = r.attnFactor()
	attrs["ext_factor"] = r.ExtFactor
	if r.ExtFactor != 0 {
		attrs["corr_lo"], attrs["corr_hi"] = r.corrDims()
	} else {
		attrs["corr_lo"], attrs["corr_hi"] = 0, 0
	}
	b.g.Emit(ir.ROPE_EXT, append(reads, ir.B("io", b.io)), []ir.Operand{ir.R("x", x)}, attrs)
	return nil
}

// denseFFN adds layer l's SwiGLU FFN on the normed input fn and its
// residual add into x.
func (b *graphBuilder) denseFFN(l int, ls *LayerSpec, ffn DenseFFN, fn, x int) error {
	down, err := b.swigluFFN(l, fn, ffn.NFF, swiglu{role: "ffn_", buf: "model.ffn.", reg: "", gelu: ffn.GELU})
	if err != nil {
		return err
	}
	return b.postNormResidual(l, ls, "ffn_post_norm", "model.ffn.post_norm", x, down)
}

// swiglu names one gated FFN's tensors (role+"gate", …), weight buffers
// (buf+"gate_weight", …) and registers (reg+"gate", …): the dense FFN's
// and the MoE shared expert's differ only in these. gelu gates with GELU
// instead of SiLU.
type swiglu struct {
	role, buf, reg string
	gelu           bool
}

// swigluFFN adds the gate and up projections of the normed input fn to
// nff columns, the activation and the down projection, and returns the
// down projection's register.
func (b *graphBuilder) swigluFFN(l, fn, nff int, n swiglu) (int, error) {
	h := b.h
	E, F := int64(h.NEmbd), int64(nff)
	wg, err := b.weight(n.role+"gate", l, n.buf+"gate_weight", E, F)
	if err != nil {
		return -1, err
	}
	wu, err := b.weight(n.role+"up", l, n.buf+"up_weight", E, F)
	if err != nil {
		return -1, err
	}
	wd, err := b.weight(n.role+"down", l, n.buf+"down_weight", F, E)
	if err != nil {
		return -1, err
	}
	gate, up, act, down := b.reg(l, n.reg+"gate", nff), b.reg(l, n.reg+"up", nff), b.reg(l, n.reg+"act", nff), b.reg(l, n.reg+"down", h.NEmbd)
	b.matmul(gate, fn, wg, -1, h.NEmbd, nff)
	b.matmul(up, fn, wu, -1, h.NEmbd, nff)
	b.gatedDown(gate, up, act, down, wd, nff, n.gelu)
	return down, nil
}

// fusedDenseFFN adds layer l's SwiGLU FFN whose gate and up are one
// tensor (ffn_up, the gate's columns first): its norm and gate/up
// projection of x as RMS_NORM_FUSED_MLP_GATE_UP, the op the fuse pass
// forms from separate ones, over the file's tensor as it stands; then
// the activation, down projection and residual add into x.
func (b *graphBuilder) fusedDenseFFN(l int, ls *LayerSpec, ffn DenseFFN, x int) error {
	h := b.h
	E, F := int64(h.NEmbd), int64(ffn.NFF)
	wn, err := b.weight("ffn_norm", l, "model.ffn.norm", E)
	if err != nil {
		return err
	}
	wgu, err := b.weight("ffn_gate_up", l, "model.ffn.gate_up_weight", E, 2*F)
	if err != nil {
		return err
	}
	wd, err := b.weight("ffn_down", l, "model.ffn.down_weight", F, E)
	if err != nil {
		return err
	}
	gate, up, act, down := b.reg(l, "gate", ffn.NFF), b.reg(l, "up", ffn.NFF), b.reg(l, "act", ffn.NFF), b.reg(l, "down", h.NEmbd)
	b.g.Emit(ir.RMS_NORM_FUSED_MLP_GATE_UP, []ir.Operand{ir.R("x", x), ir.B("w_norm", wn), ir.B("w_gate_up", wgu), ir.B("io", b.io)},
		[]ir.Operand{ir.R("gate", gate), ir.R("up", up)}, ir.Attrs{"k": float64(h.NEmbd), "f": float64(F), "eps": float64(h.Eps)})
	b.gatedDown(gate, up, act, down, wd, ffn.NFF, ffn.GELU)
	return b.postNormResidual(l, ls, "ffn_post_norm", "model.ffn.post_norm", x, down)
}

// gatedDown adds act = silu(gate) ⊙ up (gelu(gate) ⊙ up when gelu) and
// down = act·wd, f hidden columns.
func (b *graphBuilder) gatedDown(gate, up, act, down, wd, f int, gelu bool) {
	op := ir.SWIGLU
	if gelu {
		op = ir.GEGLU
	}
	b.g.Emit(op, []ir.Operand{ir.R("gate", gate), ir.R("up", up), ir.B("io", b.io)}, []ir.Operand{ir.R("y", act)},
		ir.Attrs{"cols": float64(f)})
	b.matmul(down, act, wd, -1, f, b.h.NEmbd)
}

// moe adds layer l's routed-experts FFN on the normed input fn: route,
// per-expert gate/up, SwiGLU, and the weighted down projection accumulated
// into the residual x.
func (b *graphBuilder) moe(l int, ffn MoEFFN, fn, x int) error {
	g, h := b.g, b.h
	T, E, F, X := g.Key.Rows, int64(h.NEmbd), int64(ffn.NFFExpert), int64(ffn.NExpert)
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
	U := ffn.NExpertUsed
	// bias adds layer l's bias of role, of shape dims, as the optional
	// operand "bias", to reads when on.
	bias := func(on bool, role, logical string, reads []ir.Operand, dims ...int64) ([]ir.Operand, error) {
		if !on {
			return reads, nil
		}
		w, err := b.f32Weight(role, l, logical, dims...)
		return append(reads, ir.B("bias", w)), err
	}
	routerReads, err := bias(ffn.RouterBias, "moe_router_bias", "model.moe.gate_b", []ir.Operand{ir.R("x", fn), ir.B("w", wr), ir.B("io", b.io)}, X)
	if err != nil {
		return err
	}
	route := g.NewReg(fmt.Sprintf("l%d.route", l), T, U, kernels.RouteEntryBytes)
	gate := b.reg(l, "moe_gate", U*ffn.NFFExpert)
	up := b.reg(l, "moe_up", U*ffn.NFFExpert)
	act := b.reg(l, "moe_act", U*ffn.NFFExpert)
	g.Emit(ir.MOE_GATE_TOPK, routerReads, []ir.Operand{ir.R("route", route)},
		ir.Attrs{"k": float64(E), "n_expert": float64(X), "n_used": float64(U), "norm": b2f(ffn.NormWeights), "gating": b2f(ffn.SoftmaxWeights)})
	g.Emit(ir.MOE_GATE_UP, []ir.Operand{ir.R("x", fn), ir.B("w_gate", wg), ir.B("w_up", wu), ir.R("route", route), ir.B("io", b.io)},
		[]ir.Operand{ir.R("gate", gate), ir.R("up", up)}, ir.Attrs{"k": float64(E), "f": float64(F), "n_used": float64(U)})
	for _, p := range []struct {
		role, logical string
		r             int
	}{{"moe_gate_bias", "model.moe.gate_exps_b", gate}, {"moe_up_bias", "model.moe.up_exps_b", up}} {
		if !ffn.ExpertBias {
			break
		}
		w, err := b.f32Weight(p.role, l, p.logical, F, X)
		if err != nil {
			return err
		}
		g.Emit(ir.MOE_ADD_BIAS, []ir.Operand{ir.R("x", p.r), ir.B("b", w), ir.R("route", route), ir.B("io", b.io)},
			[]ir.Operand{ir.R("x", p.r)}, ir.Attrs{"f": float64(F), "n_used": float64(U)})
	}
	if ffn.OAI {
		g.Emit(ir.MOE_SWIGLU_OAI, []ir.Operand{ir.R("gate", gate), ir.R("up", up), ir.B("io", b.io)}, []ir.Operand{ir.R("y", act)},
			ir.Attrs{"cols": float64(U) * float64(F), "alpha": 1.702, "limit": 7})
	} else {
		g.Emit(ir.MOE_SWIGLU, []ir.Operand{ir.R("gate", gate), ir.R("up", up), ir.B("io", b.io)}, []ir.Operand{ir.R("y", act)},
			ir.Attrs{"cols": float64(U) * float64(F)})
	}
	downReads, err := bias(ffn.ExpertBias, "moe_down_bias", "model.moe.down_exps_b",
		[]ir.Operand{ir.R("h", act), ir.B("w", wd), ir.R("route", route), ir.B("io", b.io), ir.R("y", x)}, E, X)
	if err != nil {
		return err
	}
	g.Emit(ir.MOE_DOWN_ACC, downReads,
		[]ir.Operand{ir.R("y", x)}, ir.Attrs{"f": float64(F), "n": float64(E), "n_used": float64(U)})
	if ffn.SharedNFF > 0 {
		return b.sharedExpert(l, ffn, fn, x)
	}
	return nil
}

// sharedExpert adds layer l's always-active expert on the normed input
// fn: a SwiGLU FFN of ffn.SharedNFF columns whose output is added into x,
// scaled per row by sigmoid(fn·ffn_gate_inp_shexp) when ffn.SharedGated
// (RESIDUAL_GATED).
func (b *graphBuilder) sharedExpert(l int, ffn MoEFFN, fn, x int) error {
	g, h := b.g, b.h
	E := int64(h.NEmbd)
	down, err := b.swigluFFN(l, fn, ffn.SharedNFF, swiglu{role: "shexp_", buf: "model.moe.shared_", reg: "shexp_"})
	if err != nil {
		return err
	}
	if !ffn.SharedGated {
		b.residual(x, down)
		return nil
	}
	wi, err := b.f32Weight("shexp_gate_inp", l, "model.moe.shared_gate_inp", E)
	if err != nil {
		return err
	}
	g.Emit(ir.RESIDUAL_GATED, []ir.Operand{ir.R("x", x), ir.R("y", down), ir.R("g", fn), ir.B("w", wi), ir.B("io", b.io)},
		[]ir.Operand{ir.R("x", x)}, ir.Attrs{"cols": float64(h.NEmbd), "k": float64(h.NEmbd)})
	return nil
}

// head adds the output norm, the LM head (the embedding table when the
// model ties them) and greedy sampling.
func (b *graphBuilder) head(x int) error {
	g, h := b.g, b.h
	E, V := int64(h.NEmbd), int64(h.NVocab)
	won, err := b.weight("out_norm", -1, "model.out_norm", E)
	if err != nil {
		return err
	}
	xo := g.NewReg("out_in", g.Key.Rows, h.NEmbd, 4)
	b.rmsNorm(xo, x, won, h.NEmbd, h.NEmbd)
	headRole := "lm_head"
	if _, ok := b.f.Tensor(llamaTensors["lm_head"]); !ok {
		headRole = "embed" // tied output embedding
	}
	wh, err := b.weight(headRole, -1, "model.lm_head", E, V)
	if err != nil {
		return err
	}
	g.Emit(ir.LM_HEAD, []ir.Operand{ir.R("x", xo), ir.B("w", wh), ir.B("io", b.io)}, []ir.Operand{ir.B("logits", b.logits)},
		ir.Attrs{"k": float64(E), "n_vocab": float64(V)})
	if c := b.s.LogitSoftcap; c != 0 {
		g.Emit(ir.LOGIT_SOFTCAP, []ir.Operand{ir.B("logits", b.logits), ir.B("io", b.io)}, []ir.Operand{ir.B("logits", b.logits)},
			ir.Attrs{"n_vocab": float64(V), "cap": c})
	}
	g.Emit(ir.ARGMAX, []ir.Operand{ir.B("logits", b.logits), ir.B("io", b.io)}, []ir.Operand{ir.B("tokens", b.tokens)},
		ir.Attrs{"n_vocab": float64(V)})
	return nil
}

// gemmaMoE adds layer l's Gemma 4 MoE FFN (see GemmaMoEFFN) on the normed
// input fn of the residual x, and its residual add into x: the dense
// branch normed by post_ffw_norm_1, the experts' (on pre_ffw_norm_2's
// input) by post_ffw_norm_2, their sum by post_ffw_norm.
func (b *graphBuilder) gemmaMoE(l int, ls *LayerSpec, ffn GemmaMoEFFN, fn, x int) error {
	g, h := b.g, b.h
	T, E, F, X, U := g.Key.Rows, int64(h.NEmbd), int64(ffn.NFFExpert), int64(ffn.NExpert), ffn.NExpertUsed
	dense, err := b.swigluFFN(l, fn, ffn.NFF, swiglu{role: "ffn_", buf: "model.ffn.", reg: "", gelu: true})
	if err != nil {
		return err
	}
	w1, err := b.weight("ffn_post_norm_1", l, "model.ffn.post_norm_1", E)
	if err != nil {
		return err
	}
	b.rmsNorm(dense, dense, w1, h.NEmbd, h.NEmbd)
	xe, err := b.preNorm(l, "ffn_pre_norm_2", "model.moe.pre_norm", "moe_in", x)
	if err != nil {
		return err
	}
	// The router's input, in llama.cpp's order of roundings.
	rs, err := b.f32Weight("moe_router_scale", l, "model.moe.router_scale", E)
	if err != nil {
		return err
	}
	rin := b.reg(l, "router_in", h.NEmbd)
	g.Emit(ir.RMS_NORM, []ir.Operand{ir.R("x", x), ir.B("io", b.io)}, []ir.Operand{ir.R("y", rin)},
		ir.Attrs{"cols": float64(E), "group": float64(E), "eps": float64(h.Eps)})
	b.scale(rin, h.NEmbd, float64(1/sqrtf(h.NEmbd)))
	g.Emit(ir.MUL_VEC, []ir.Operand{ir.R("x", rin), ir.B("w", rs), ir.B("io", b.io)}, []ir.Operand{ir.R("x", rin)},
		ir.Attrs{"cols": float64(E)})
	wr, err := b.weight("moe_router", l, "model.moe.gate_w", E, X)
	if err != nil {
		return err
	}
	route := g.NewReg(fmt.Sprintf("l%d.route", l), T, U, kernels.RouteEntryBytes)
	g.Emit(ir.MOE_GATE_TOPK, []ir.Operand{ir.R("x", rin), ir.B("w", wr), ir.B("io", b.io)}, []ir.Operand{ir.R("route", route)},
		ir.Attrs{"k": float64(E), "n_expert": float64(X), "n_used": float64(U), "norm": 1, "gating": 0})
	if ffn.DownScale {
		s, err := b.f32Weight("moe_down_scale", l, "model.moe.down_scale", X)
		if err != nil {
			return err
		}
		g.Emit(ir.MOE_ROUTE_SCALE, []ir.Operand{ir.R("route", route), ir.B("s", s), ir.B("io", b.io)}, []ir.Operand{ir.R("route", route)},
			ir.Attrs{"n_used": float64(U)})
	}
	// Each expert's gate rows are the first half of its rows of the fused
	// tensor, its up rows the second: two derived weights, sliced when
	// the pack is written.
	var halves [2]int
	for i, half := range []string{"gate", "up"} {
		if halves[i], err = b.rowSlice("moe_gate_up", l, "model.moe."+half+"_exps", int64(i)*F, int64(i+1)*F, 2*F, E, F, X); err != nil {
			return err
		}
	}
	wd, err := b.weight("moe_down", l, "model.moe.down_exps", F, E, X)
	if err != nil {
		return err
	}
	gate, up, act := b.reg(l, "moe_gate", U*ffn.NFFExpert), b.reg(l, "moe_up", U*ffn.NFFExpert), b.reg(l, "moe_act", U*ffn.NFFExpert)
	g.Emit(ir.MOE_GATE_UP, []ir.Operand{ir.R("x", xe), ir.B("w_gate", halves[0]), ir.B("w_up", halves[1]), ir.R("route", route), ir.B("io", b.io)},
		[]ir.Operand{ir.R("gate", gate), ir.R("up", up)}, ir.Attrs{"k": float64(E), "f": float64(F), "n_used": float64(U)})
	g.Emit(ir.GEGLU, []ir.Operand{ir.R("gate", gate), ir.R("up", up), ir.B("io", b.io)}, []ir.Operand{ir.R("y", act)},
		ir.Attrs{"cols": float64(U) * float64(F)})
	moe := b.reg(l, "moe_out", h.NEmbd)
	g.Emit(ir.ZERO, []ir.Operand{ir.B("io", b.io)}, []ir.Operand{ir.R("y", moe)}, ir.Attrs{"cols": float64(E)})
	g.Emit(ir.MOE_DOWN_ACC, []ir.Operand{ir.R("h", act), ir.B("w", wd), ir.R("route", route), ir.B("io", b.io), ir.R("y", moe)},
		[]ir.Operand{ir.R("y", moe)}, ir.Attrs{"f": float64(F), "n": float64(E), "n_used": float64(U)})
	w2, err := b.weight("ffn_post_norm_2", l, "model.moe.post_norm", E)
	if err != nil {
		return err
	}
	b.rmsNorm(moe, moe, w2, h.NEmbd, h.NEmbd)
	b.add(dense, moe, h.NEmbd)
	return b.postNormResidual(l, ls, "ffn_post_norm", "model.ffn.post_norm", x, dense)
}

// rowSlice adds a derived weight: rows lo..hi-1 of every block of period
// rows of layer l's tensor role (ir.Source), of the given dims in ggml
// order, of the tensor's type.
func (b *graphBuilder) rowSlice(role string, layer int, logical string, lo, hi, period int64, dims ...int64) (int, error) {
	name := fmt.Sprintf(llamaTensors[role], layer)
	t, ok := b.f.Tensor(name)
	if !ok {
		return 0, fmt.Errorf("missing tensor %s", name)
	}
	rows := int64(1)
	for _, d := range t.Dims[1:] {
		rows *= d
	}
	want := int64(1)
	for _, d := range dims[1:] {
		want *= d
	}
	if len(t.Dims) == 0 || t.Dims[0] != dims[0] || rows%period != 0 || want != rows/period*(hi-lo) {
		return 0, fmt.Errorf("tensor %s has shape %v: rows %d:%d of blocks of %d do not make %v", name, t.Dims, lo, hi, period, dims)
	}
	src := ir.Source{Tensor: name, Lo: lo, Hi: hi, Period: period}
	return b.g.Buffer(ir.Buffer{Name: fmt.Sprintf("%s[%d]", logical, layer), Class: ir.Weight, Sources: []string{src.String()}, Type: t.Type,
		Dims: dims, LayerClass: role, Bytes: t.Size / period * (hi - lo)}), nil
}

// cacheTypes is the KV cache's element types the config chose.
func cacheTypes(c *config.Config) (kernels.KVTypes, error) {
	kv := kernels.F16KV
	for _, f := range []struct {
		key, name string
		t         *ggml.Type
	}{{"cache_type_k", c.CacheTypeK, &kv.K}, {"cache_type_v", c.CacheTypeV, &kv.V}} {
		if f.name == "" {
			continue // a config built by hand, without Load's defaults
		}
		t, ok := kernels.ParseKVType(f.name)
		if !ok {
			return kv, &support.Error{What: "KV cache type", Value: f.name, Where: support.Key(f.key), Detail: "zrt lays out f16, q8_0 and fp8_e4m3 caches"}
		}
		*f.t = t
	}
	return kv, nil
}
