package passes

import (
	"context"

	"github.com/zrtdev/zrt/compiler/ir"
	"github.com/zrtdev/zrt/kernels"
)

// TargetFusions returns the fused ops a target has kernels for: those
// whose kernel family the target registry (kernels.Targets) lists as
// fused. fuse forms only these; an unknown target gets none.
func TargetFusions(target string) map[ir.Op]bool {
	t, ok := kernels.LookupTarget(target)
	if !ok {
		return nil
	}
	allowed := map[ir.Op]bool{}
	for _, op := range ir.Ops() {
		if info, _ := op.Info(); t.Fuses(info.Kernel) {
			allowed[op] = true
		}
	}
	return allowed
}

func fuse(_ context.Context, u *Unit) error {
	allowed := TargetFusions(u.Target)
	for op := range allowed {
		if info, _ := op.Info(); u.Lacks != nil && u.Lacks(info.Kernel) {
			delete(allowed, op)
		}
	}
	// The rope and KV write fold stores an F16 cache's rows only.
	if kv := u.KV; kv != (kernels.KVTypes{}) && !kv.IsF16() {
		delete(allowed, ir.RMS_NORM_FUSED_QKV_ROPE_KV_WRITE)
	}
	if u.NoFuse || len(allowed) == 0 {
		return nil
	}
	for _, g := range u.Graphs {
		Fuse(g, allowed)
	}
	return nil
}

// Fuse rewrites instruction sequences into the fused ops in allowed and
// returns how many it formed. A sequence fuses only when the values
// between its ops have no other reader, so the rewrite cannot change what
// any other instruction sees. Norm+projection fusions take precedence
// over residual+norm, since they save more traffic; residual+norm takes
// precedence over projection+residual (the final residual, whose norm
// feeds no fused projection: either saves one dispatch). A K with a
// per-head norm (qwen3) fuses norm, RoPE and KV write; otherwise RoPE of
// Q and K fuse with the KV write. A norm whose projections do not share
// one type fuses with them two of a type at a time (matchNormMatmuls),
// and in a one-row decode variant the SWIGLU after a fused norm+gate/up
// joins it (fuseSwiGLU).
func Fuse(g *ir.Graph, allowed map[ir.Op]bool) int {
	n := 0
	if allowed[ir.RMS_NORM_FUSED_ROPE_KV_WRITE] {
		n += fuseRopeKV(g)
	}
	if allowed[ir.ROPE_KV_WRITE] {
		n += fuseRopeQKV(g)
	}
	readers := countReaders(g)
	startsProjection := func(i int) bool {
		_, q := matchQKV(g, i, readers, false)
		_, gu := matchGateUp(g, i, readers, false)
		_, nm := matchNormMatmuls(g, i, readers, false)
		return (q && allowed[ir.RMS_NORM_FUSED_QKV]) || (gu && allowed[ir.RMS_NORM_FUSED_MLP_GATE_UP]) ||
			(nm > 0 && allowed[ir.RMS_NORM_FUSED_MATMUL])
	}
	residualNorm := func(i int) bool {
		_, ok := matchResidualNorm(g, i)
		return ok && allowed[ir.RESIDUAL_RMS_NORM] && !startsProjection(i+1)
	}
	var out []ir.Inst
	for i := 0; i < len(g.Insts); {
		if _, ok := matchQKV(g, i, readers, false); ok && allowed[ir.RMS_NORM_FUSED_QKV] {
			in, _ := matchQKV(g, i, readers, true)
			out, i, n = append(out, in), i+4, n+1
			continue
		}
		if _, ok := matchGateUp(g, i, readers, false); ok && allowed[ir.RMS_NORM_FUSED_MLP_GATE_UP] {
			in, _ := matchGateUp(g, i, readers, true)
			out, i, n = append(out, in), i+3, n+1
			continue
		}
		if _, m := matchNormMatmuls(g, i, readers, false); m > 0 && allowed[ir.RMS_NORM_FUSED_MATMUL] {
			ins, _ := matchNormMatmuls(g, i, readers, true)
			out, i, n = append(out, ins...), i+1+m, n+len(ins)
			continue
		}
		if in, ok := matchResidualNorm(g, i); ok && residualNorm(i) {
			out, i, n = append(out, in), i+2, n+1
			continue
		}
		if in, ok := matchMatmulResidual(g, i, readers); ok && allowed[ir.MATMUL_RESIDUAL] && !residualNorm(i+1) {
			out, i, n = append(out, in), i+2, n+1
			continue
		}
		out = append(out, g.Insts[i])
		i++
	}
	g.Insts = out
	if allowed[ir.RMS_NORM_FUSED_MLP_SWIGLU] {
		n += fuseSwiGLU(g)
	}
	if allowed[ir.RMS_NORM_FUSED_QKV_ROPE_KV_WRITE] {
		n += fuseQKVRope(g)
	}
	return n
}

// fuseQKVRope folds, in a one-row decode variant, the ROPE_KV_WRITE that
// directly follows an RMS_NORM_FUSED_QKV (without bias) and takes its Q,
// K and V, K and V read by nothing else, into it, where the rotation
// pairs are adjacent features (neox 0): the matrix-vector walk then holds
// each pair in one block and rotates and stores it as it comes
// (RMS_NORM_FUSED_QKV_ROPE_KV_WRITE writes the rotated Q and the cache).
// The multi-row tiles have no such epilogue, so other variants keep both
// ops; the caller allows it for an F16 cache only.
func fuseQKVRope(g *ir.Graph) int {
	if g.Key.Stage != ir.Decode || g.Key.Rows != 1 {
		return 0
	}
	readers := countReaders(g)
	drop := map[int]bool{}
	n := 0
	for j := 0; j+1 < len(g.Insts); j++ {
		qkv, rk := &g.Insts[j], &g.Insts[j+1]
		if qkv.Op != ir.RMS_NORM_FUSED_QKV || rk.Op != ir.ROPE_KV_WRITE || buf(qkv, "b_qkv") >= 0 || rk.Attrs["neox"] != 0 {
			continue
		}
		q, k, v := writes(qkv, "q"), writes(qkv, "k"), writes(qkv, "v")
		if q < 0 || k < 0 || v < 0 || reg(rk, "q") != q || reg(rk, "k") != k || reg(rk, "v") != v || readers[k] != 1 || readers[v] != 1 ||
			rk.Attrs["n_head"]*rk.Attrs["head_dim"] != qkv.Attrs["n_q"] || rk.Attrs["n_head_kv"]*rk.Attrs["head_dim"] != qkv.Attrs["n_kv"] {
			continue
		}
		attrs := ir.Attrs{"k": qkv.Attrs["k"], "n_q": qkv.Attrs["n_q"], "n_kv": qkv.Attrs["n_kv"], "eps": qkv.Attrs["eps"]}
		for _, a := range []string{"layer", "n_layer", "n_head", "n_head_kv", "head_dim", "n_rot", "neox", "freq_base", "freq_scale"} {
			attrs[a] = rk.Attrs[a]
		}
		kv := buf(rk, "kv")
		*qkv = ir.Inst{Op: ir.RMS_NORM_FUSED_QKV_ROPE_KV_WRITE,
			Reads: []ir.Operand{ir.R("x", reg(qkv, "x")), ir.B("w_norm", buf(qkv, "w_norm")), ir.B("w_qkv", buf(qkv, "w_qkv")),
				ir.B("io", buf(qkv, "io")), ir.B("kv", kv)},
			Writes: []ir.Operand{ir.R("q", q), ir.B("kv", kv)}, Attrs: attrs}
		drop[j+1] = true
		n++
	}
	dropInsts(g, drop)
	return n
}

// fuseSwiGLU folds, in a one-row decode variant, the SWIGLU that directly
// follows an RMS_NORM_FUSED_MLP_GATE_UP and reads its gate and up (which
// nothing else reads) into it: RMS_NORM_FUSED_MLP_SWIGLU writes only the
// SWIGLU's output. A one-row step's products are matrix-vector walks,
// which can take each gate feature with its up feature (T-CUDA's pairs);
// the multi-row tiles have no such epilogue, so other variants keep the
// two ops.
func fuseSwiGLU(g *ir.Graph) int {
	if g.Key.Stage != ir.Decode || g.Key.Rows != 1 {
		return 0
	}
	readers := countReaders(g)
	drop := map[int]bool{}
	n := 0
	for j := 0; j+1 < len(g.Insts); j++ {
		gu, act := &g.Insts[j], &g.Insts[j+1]
		if gu.Op != ir.RMS_NORM_FUSED_MLP_GATE_UP || act.Op != ir.SWIGLU {
			continue
		}
		gate, up, y := writes(gu, "gate"), writes(gu, "up"), writes(act, "y")
		if gate < 0 || up < 0 || y < 0 || reg(act, "gate") != gate || reg(act, "up") != up || readers[gate] != 1 || readers[up] != 1 ||
			act.Attrs["cols"] != gu.Attrs["f"] || y == reg(gu, "x") {
			continue
		}
		*gu = ir.Inst{Op: ir.RMS_NORM_FUSED_MLP_SWIGLU,
			Reads:  []ir.Operand{ir.R("x", reg(gu, "x")), ir.B("w_norm", buf(gu, "w_norm")), ir.B("w_gate_up", buf(gu, "w_gate_up")), ir.B("io", buf(gu, "io"))},
			Writes: []ir.Operand{ir.R("y", y)},
			Attrs:  ir.Attrs{"k": gu.Attrs["k"], "f": gu.Attrs["f"], "eps": gu.Attrs["eps"]}}
		drop[j+1] = true
		n++
	}
	dropInsts(g, drop)
	return n
}

func countReaders(g *ir.Graph) []int {
	r := make([]int, len(g.Regs))
	for _, in := range g.Insts {
		for _, o := range in.Reads {
			if o.Kind == ir.RegOperand {
				r[o.ID]++
			}
		}
	}
	return r
}

// reg returns the register in role, or -1.
func reg(in *ir.Inst, role string) int {
	if o, ok := in.Operand(role); ok && o.Kind == ir.RegOperand {
		return o.ID
	}
	return -1
}

// buf returns the buffer in role, or -1.
func buf(in *ir.Inst, role string) int {
	if o, ok := in.Operand(role); ok && o.Kind == ir.BufOperand {
		return o.ID
	}
	return -1
}

// writes returns the register an instruction writes in role, or -1.
func writes(in *ir.Inst, role string) int {
	for _, o := range in.Writes {
		if o.Role == role && o.Kind == ir.RegOperand {
			return o.ID
		}
	}
	return -1
}

// plainNorm reports whether in is a whole-row RMS_NORM into a new register.
func plainNorm(in *ir.Inst) (x, y int, ok bool) {
	if in.Op != ir.RMS_NORM || in.Attrs["group"] != in.Attrs["cols"] || buf(in, "w") < 0 {
		return 0, 0, false
	}
	x, y = reg(in, "x"), writes(in, "y")
	return x, y, x >= 0 && y >= 0 && x != y
}

// concat adds a weight buffer that is the row-wise concatenation of parts,
// all of one type and row length.
func concat(g *ir.Graph, apply bool, class string, parts ...int) (int, bool) {
	first := g.Buffers[parts[0]]
	b := ir.Buffer{Name: class + "(" + first.Name + ")", Class: ir.Weight, Type: first.Type, LayerClass: class}
	rows := int64(0)
	for _, p := range parts {
		w := g.Buffers[p]
		if w.Class != ir.Weight || w.Type != first.Type || len(w.Dims) != len(first.Dims) || w.Dims[0] != first.Dims[0] || len(w.Dims) > 2 {
			return 0, false
		}
		if len(w.Dims) == 2 {
			rows += w.Dims[1]
		} else {
			rows += w.Dims[0]
		}
		b.Sources = append(b.Sources, w.SourceTensors()...)
		b.Bytes += w.Bytes
	}
	if len(first.Dims) == 2 {
		b.Dims = []int64{first.Dims[0], rows}
	} else {
		b.Dims = []int64{rows}
	}
	if !apply {
		return -1, true
	}
	return g.Buffer(b), true
}

// matchQKV: RMS_NORM(x→n) then three MATMULs of n (Q, K, V), n read by
// nothing else, weights of one type, biases on all three or none.
func matchQKV(g *ir.Graph, i int, readers []int, apply bool) (ir.Inst, bool) {
	if i+3 >= len(g.Insts) {
		return ir.Inst{}, false
	}
	norm := &g.Insts[i]
	x, n, ok := plainNorm(norm)
	if !ok || readers[n] != 3 {
		return ir.Inst{}, false
	}
	var ws, bs, outs []int
	for _, mm := range g.Insts[i+1 : i+4] {
		if mm.Op != ir.MATMUL || reg(&mm, "x") != n {
			return ir.Inst{}, false
		}
		ws, outs = append(ws, buf(&mm, "w")), append(outs, writes(&mm, "y"))
		if b := buf(&mm, "bias"); b >= 0 {
			bs = append(bs, b)
		}
	}
	if (len(bs) != 0 && len(bs) != 3) || g.Insts[i+2].Attrs["n"] != g.Insts[i+3].Attrs["n"] {
		return ir.Inst{}, false
	}
	w, ok := concat(g, apply, "qkv", ws...)
	if !ok {
		return ir.Inst{}, false
	}
	io := ir.B("io", buf(norm, "io"))
	reads := []ir.Operand{ir.R("x", x), ir.B("w_norm", buf(norm, "w")), ir.B("w_qkv", w), io}
	if len(bs) == 3 {
		b, ok := concat(g, apply, "qkv_bias", bs...)
		if !ok {
			return ir.Inst{}, false
		}
		reads = append(reads, ir.B("b_qkv", b))
	}
	return ir.Inst{Op: ir.RMS_NORM_FUSED_QKV, Reads: reads,
		Writes: []ir.Operand{ir.R("q", outs[0]), ir.R("k", outs[1]), ir.R("v", outs[2])},
		Attrs:  ir.Attrs{"k": norm.Attrs["cols"], "n_q": g.Insts[i+1].Attrs["n"], "n_kv": g.Insts[i+2].Attrs["n"], "eps": norm.Attrs["eps"]}}, true
}

// matchGateUp: RMS_NORM(x→n) then the gate and up MATMULs of n, no bias,
// followed by the SWIGLU that consumes them (which identifies gate and up).
func matchGateUp(g *ir.Graph, i int, readers []int, apply bool) (ir.Inst, bool) {
	if i+3 >= len(g.Insts) {
		return ir.Inst{}, false
	}
	norm, mg, mu, act := &g.Insts[i], &g.Insts[i+1], &g.Insts[i+2], &g.Insts[i+3]
	x, n, ok := plainNorm(norm)
	if !ok || readers[n] != 2 || mg.Op != ir.MATMUL || mu.Op != ir.MATMUL || act.Op != ir.SWIGLU ||
		reg(mg, "x") != n || reg(mu, "x") != n || buf(mg, "bias") >= 0 || buf(mu, "bias") >= 0 ||
		reg(act, "gate") != writes(mg, "y") || reg(act, "up") != writes(mu, "y") {
		return ir.Inst{}, false
	}
	w, ok := concat(g, apply, "gate_up", buf(mg, "w"), buf(mu, "w"))
	if !ok {
		return ir.Inst{}, false
	}
	return ir.Inst{Op: ir.RMS_NORM_FUSED_MLP_GATE_UP,
		Reads:  []ir.Operand{ir.R("x", x), ir.B("w_norm", buf(norm, "w")), ir.B("w_gate_up", w), ir.B("io", buf(norm, "io"))},
		Writes: []ir.Operand{ir.R("gate", writes(mg, "y")), ir.R("up", writes(mu, "y"))},
		Attrs:  ir.Attrs{"k": norm.Attrs["cols"], "f": mg.Attrs["n"], "eps": norm.Attrs["eps"]}}, true
}

// matchNormMatmuls: RMS_NORM(x→n) then m ≥ 2 MATMULs of n directly after
// it that are all of n's readers, none with a bias, writing registers
// other than x and each other. Those of one weight type pair up, in
// order, into an RMS_NORM_FUSED_MATMUL of their concatenated weight (one
// left over takes its own weight alone), so that each product normalizes
// its input itself instead of waiting for the norm's own launch: a layer
// whose Q and K share a type and V has another (llama.cpp's Q4_K_M gives
// half a 7B's layers Q6_K V), which matchQKV cannot take, runs two
// launches instead of four. It returns the fused instructions (only with
// apply) and m, 0 where the sequence does not match. A single product
// is left alone: its norm's launch would only move, since the product
// may fuse with the residual after it instead.
func matchNormMatmuls(g *ir.Graph, i int, readers []int, apply bool) ([]ir.Inst, int) {
	if i >= len(g.Insts) {
		return nil, 0
	}
	norm := &g.Insts[i]
	x, n, ok := plainNorm(norm)
	m := 0
	if ok {
		m = readers[n]
	}
	if m < 2 || i+m >= len(g.Insts) {
		return nil, 0
	}
	mms := g.Insts[i+1 : i+1+m]
	seen := map[int]bool{x: true}
	for j := range mms {
		mm := &mms[j]
		y := writes(mm, "y")
		if mm.Op != ir.MATMUL || reg(mm, "x") != n || buf(mm, "bias") >= 0 || buf(mm, "w") < 0 || y < 0 || seen[y] ||
			mm.Attrs["k"] != norm.Attrs["cols"] {
			return nil, 0
		}
		seen[y] = true
	}
	if !apply {
		return nil, m
	}
	// Group the products by weight type, in order of first appearance,
	// then take each group two at a time.
	var groups [][]*ir.Inst
	at := map[string]int{}
	for j := range mms {
		t := g.Buffers[buf(&mms[j], "w")].Type.String()
		gi, ok := at[t]
		if !ok {
			gi, at[t] = len(groups), len(groups)
			groups = append(groups, nil)
		}
		groups[gi] = append(groups[gi], &mms[j])
	}
	var out []ir.Inst
	for _, grp := range groups {
		for len(grp) > 0 {
			take := grp[:min(2, len(grp))]
			grp = grp[len(take):]
			w := buf(take[0], "w")
			attrs := ir.Attrs{"k": norm.Attrs["cols"], "n": take[0].Attrs["n"], "n2": 0, "eps": norm.Attrs["eps"]}
			writesTo := []ir.Operand{ir.R("y", writes(take[0], "y"))}
			if len(take) == 2 {
				if both, ok := concat(g, true, "norm_mm", w, buf(take[1], "w")); !ok {
					// Rows of another length: each product alone.
					grp = append([]*ir.Inst{take[1]}, grp...)
				} else {
					w, attrs["n2"] = both, take[1].Attrs["n"]
					writesTo = append(writesTo, ir.R("y2", writes(take[1], "y")))
				}
			}
			out = append(out, ir.Inst{Op: ir.RMS_NORM_FUSED_MATMUL,
				Reads:  []ir.Operand{ir.R("x", x), ir.B("w_norm", buf(norm, "w")), ir.B("w", w), ir.B("io", buf(norm, "io"))},
				Writes: writesTo, Attrs: attrs})
		}
	}
	return out, m
}

// matchResidualNorm: RESIDUAL(x += y) then a whole-row RMS_NORM of x.
func matchResidualNorm(g *ir.Graph, i int) (ir.Inst, bool) {
	if i+1 >= len(g.Insts) {
		return ir.Inst{}, false
	}
	res, norm := &g.Insts[i], &g.Insts[i+1]
	x, out, ok := plainNorm(norm)
	if res.Op != ir.RESIDUAL || !ok || reg(res, "x") != x || writes(res, "x") != x {
		return ir.Inst{}, false
	}
	return ir.Inst{Op: ir.RESIDUAL_RMS_NORM,
		Reads:  []ir.Operand{ir.R("x", x), ir.R("y", reg(res, "y")), ir.B("w", buf(norm, "w")), ir.B("io", buf(res, "io"))},
		Writes: []ir.Operand{ir.R("x", x), ir.R("out", out)},
		Attrs:  ir.Attrs{"cols": res.Attrs["cols"], "eps": norm.Attrs["eps"]}}, true
}

// fuseRopeKV folds the per-head in-place RMS_NORM and ROPE of Q and of K
// (qwen3's q_norm and k_norm) into the KV write that consumes K, when K has
// no other reader and Q's only other reader comes after the write (the
// attention). The fused op leaves Q normalized and rotated in place, as the
// unfused sequence does, and stores K, normalized and rotated, with V.
func fuseRopeKV(g *ir.Graph) int {
	readers := countReaders(g)
	drop := map[int]bool{}
	n := 0
	for j := range g.Insts {
		kw := &g.Insts[j]
		if kw.Op != ir.KV_WRITE && kw.Op != ir.KV_WRITE_BATCHED {
			continue
		}
		k := reg(kw, "k")
		if k < 0 || readers[k] != 3 {
			continue
		}
		mk, rk := headNormRope(g, j, k)
		if mk < 0 {
			continue
		}
		rope := &g.Insts[rk]
		// Q is the other register roped like K just before the write.
		q, mq, rq := -1, -1, -1
		for i := j - 1; i >= 0 && q < 0; i-- {
			in := &g.Insts[i]
			if in.Op == ir.ROPE && i != rk && sameRope(in, rope) && reg(in, "x") == writes(in, "x") {
				q = reg(in, "x")
			}
		}
		if q < 0 || q == k || readers[q] != 3 || readsBetween(g, q, j) {
			continue
		}
		if mq, rq = headNormRope(g, j, q); mq < 0 || g.Insts[mq].Attrs["eps"] != g.Insts[mk].Attrs["eps"] {
			continue
		}
		qn, kn := &g.Insts[mq], &g.Insts[mk]
		*kw = ir.Inst{Op: ir.RMS_NORM_FUSED_ROPE_KV_WRITE,
			Reads: []ir.Operand{ir.R("q", q), ir.R("k", k), ir.R("v", reg(kw, "v")), ir.B("w_qnorm", buf(qn, "w")),
				ir.B("w_knorm", buf(kn, "w")), ir.B("io", buf(kw, "io")), ir.B("kv", buf(kw, "kv"))},
			Writes: []ir.Operand{ir.R("q", q), ir.B("kv", buf(kw, "kv"))},
			Attrs: ir.Attrs{"layer": kw.Attrs["layer"], "n_layer": kw.Attrs["n_layer"], "n_head": g.Insts[rq].Attrs["n_head"],
				"n_head_kv": rope.Attrs["n_head"], "head_dim": rope.Attrs["head_dim"], "n_rot": rope.Attrs["n_rot"],
				"neox": rope.Attrs["neox"], "freq_base": rope.Attrs["freq_base"], "freq_scale": rope.Attrs["freq_scale"],
				"eps": kn.Attrs["eps"]}}
		drop[mq], drop[rq], drop[mk], drop[rk] = true, true, true, true
		n++
	}
	dropInsts(g, drop)
	return n
}

// headNormRope finds, before instruction j, the in-place ROPE of register
// x and before it the in-place per-head RMS_NORM of x (group = head_dim);
// -1s when either is missing.
func headNormRope(g *ir.Graph, j, x int) (norm, rope int) {
	norm, rope = -1, -1
	for i := j - 1; i >= 0 && norm < 0; i-- {
		in := &g.Insts[i]
		switch {
		case in.Op == ir.ROPE && writes(in, "x") == x && rope < 0:
			rope = i
		case in.Op == ir.RMS_NORM && writes(in, "y") == x && reg(in, "x") == x && rope >= 0:
			norm = i
		}
	}
	if norm < 0 || int(g.Insts[norm].Attrs["group"]) != int(g.Insts[rope].Attrs["head_dim"]) || buf(&g.Insts[norm], "w") < 0 {
		return -1, -1
	}
	return norm, rope
}

// sameRope reports whether two ROPEs rotate with the same table.
func sameRope(a, b *ir.Inst) bool {
	for _, k := range []string{"head_dim", "n_rot", "neox", "freq_base", "freq_scale"} {
		if a.Attrs[k] != b.Attrs[k] {
			return false
		}
	}
	return true
}

// readsBetween reports whether an instruction other than a ROPE or
// RMS_NORM of r in place reads r before instruction j: moving r's norm and
// rotation to j would change what that reader sees.
func readsBetween(g *ir.Graph, r, j int) bool {
	for i := range j {
		in := &g.Insts[i]
		inPlace := (in.Op == ir.ROPE && writes(in, "x") == r) || (in.Op == ir.RMS_NORM && writes(in, "y") == r)
		if inPlace {
			continue
		}
		for _, o := range in.Reads {
			if o.Kind == ir.RegOperand && o.ID == r {
				return true
			}
		}
	}
	return false
}

// matchMatmulResidual: MATMUL(x→o) then RESIDUAL(h += o), o read by
// nothing else and x not the residual (the kernel accumulates into h while
// it reads x).
func matchMatmulResidual(g *ir.Graph, i int, readers []int) (ir.Inst, bool) {
	if i+1 >= len(g.Insts) {
		return ir.Inst{}, false
	}
	mm, res := &g.Insts[i], &g.Insts[i+1]
	if mm.Op != ir.MATMUL || res.Op != ir.RESIDUAL {
		return ir.Inst{}, false
	}
	x, o, h := reg(mm, "x"), writes(mm, "y"), reg(res, "x")
	if x < 0 || o < 0 || h < 0 || o == h || x == h || o == x || reg(res, "y") != o || writes(res, "x") != h ||
		readers[o] != 1 || res.Attrs["cols"] != mm.Attrs["n"] {
		return ir.Inst{}, false
	}
	reads := []ir.Operand{ir.R("x", x), ir.B("w", buf(mm, "w"))}
	if b := buf(mm, "bias"); b >= 0 {
		reads = append(reads, ir.B("bias", b))
	}
	reads = append(reads, ir.B("io", buf(mm, "io")), ir.R("y", h))
	return ir.Inst{Op: ir.MATMUL_RESIDUAL, Reads: reads, Writes: []ir.Operand{ir.R("y", h)},
		Attrs: ir.Attrs{"k": mm.Attrs["k"], "n": mm.Attrs["n"]}}, true
}

// fuseRopeQKV folds ROPE(q) and ROPE(k), in place, into the KV write that
// directly follows them and consumes K, when K has no other reader: the
// fused op rotates Q in place and stores the rotated K with V.
func fuseRopeQKV(g *ir.Graph) int {
	readers := countReaders(g)
	drop := map[int]bool{}
	n := 0
	for j := 2; j < len(g.Insts); j++ {
		kw, rq, rk := &g.Insts[j], &g.Insts[j-2], &g.Insts[j-1]
		if (kw.Op != ir.KV_WRITE && kw.Op != ir.KV_WRITE_BATCHED) || rq.Op != ir.ROPE || rk.Op != ir.ROPE {
			continue
		}
		q, k, v := writes(rq, "x"), reg(kw, "k"), reg(kw, "v")
		if k < 0 || q < 0 || v < 0 || q == k || q == v || k == v || readers[k] != 2 ||
			reg(rq, "x") != q || reg(rk, "x") != k || writes(rk, "x") != k {
			continue
		}
		if !sameRope(rq, rk) || int(rk.Attrs["n_head"]*rk.Attrs["head_dim"]) != int(kw.Attrs["kv_dim"]) {
			continue
		}
		*kw = ir.Inst{Op: ir.ROPE_KV_WRITE,
			Reads:  []ir.Operand{ir.R("q", q), ir.R("k", k), ir.R("v", v), ir.B("io", buf(kw, "io")), ir.B("kv", buf(kw, "kv"))},
			Writes: []ir.Operand{ir.R("q", q), ir.B("kv", buf(kw, "kv"))},
			Attrs: ir.Attrs{"layer": kw.Attrs["layer"], "n_layer": kw.Attrs["n_layer"], "n_head": rq.Attrs["n_head"],
				"n_head_kv": rk.Attrs["n_head"], "head_dim": rk.Attrs["head_dim"], "n_rot": rk.Attrs["n_rot"],
				"neox": rk.Attrs["neox"], "freq_base": rk.Attrs["freq_base"], "freq_scale": rk.Attrs["freq_scale"]}}
		drop[j-2], drop[j-1] = true, true
		n++
	}
	dropInsts(g, drop)
	return n
}

// dropInsts removes the instructions whose indices are marked.
func dropInsts(g *ir.Graph, drop map[int]bool) {
	if len(drop) == 0 {
		return
	}
	out := g.Insts[:0]
	for i, in := range g.Insts {
		if !drop[i] {
			out = append(out, in)
		}
	}
	g.Insts = out
}
