package passes

import (
	"context"
	"fmt"
	"testing"

	"github.com/zrtdev/zrt/compiler/ir"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/kernels"
)

// attnTail is ROPE(q), ROPE(k), KV_WRITE(k, v), then MATMUL(q→o) and
// RESIDUAL(x += o); extra adds an instruction reading reg extra (k or o).
func attnTail(extra string) *ir.Graph {
	g, io := decodeGraph()
	kv := g.Buffer(ir.Buffer{Name: "state.kv", Class: ir.KV})
	w := f32Weight(g, "w", "w", 8, 8)
	emb := f32Weight(g, "emb", "e", 8, 4)
	x, q, k, v, o := g.NewReg("x", 1, 8, 4), g.NewReg("q", 1, 8, 4), g.NewReg("k", 1, 4, 4), g.NewReg("v", 1, 4, 4), g.NewReg("o", 1, 8, 4)
	for _, r := range []int{x, q, k, v} {
		g.Emit(ir.EMBED, []ir.Operand{ir.B("table", emb), ir.B("io", io)}, []ir.Operand{ir.R("y", r)}, ir.Attrs{"cols": 8})
	}
	rope := func(r int, heads float64) {
		g.Emit(ir.ROPE, []ir.Operand{ir.R("x", r), ir.B("io", io)}, []ir.Operand{ir.R("x", r)},
			ir.Attrs{"n_head": heads, "head_dim": 2, "n_rot": 2, "neox": 0, "freq_base": 10000, "freq_scale": 1})
	}
	rope(q, 4)
	rope(k, 2)
	g.Emit(ir.KV_WRITE, []ir.Operand{ir.R("k", k), ir.R("v", v), ir.B("io", io), ir.B("kv", kv)}, []ir.Operand{ir.B("kv", kv)},
		ir.Attrs{"layer": 0, "n_layer": 1, "kv_dim": 4})
	g.Emit(ir.MATMUL, []ir.Operand{ir.R("x", q), ir.B("w", w), ir.B("io", io)}, []ir.Operand{ir.R("y", o)}, ir.Attrs{"k": 8, "n": 8})
	g.Emit(ir.RESIDUAL, []ir.Operand{ir.R("x", x), ir.R("y", o), ir.B("io", io)}, []ir.Operand{ir.R("x", x)}, ir.Attrs{"cols": 8})
	if extra != "" {
		r := map[string]int{"k": k, "o": o}[extra]
		g.Emit(ir.RESIDUAL, []ir.Operand{ir.R("x", x), ir.R("y", r), ir.B("io", io)}, []ir.Operand{ir.R("x", x)}, ir.Attrs{"cols": 8})
	}
	return g
}

func ops(g *ir.Graph) map[ir.Op]int {
	m := map[ir.Op]int{}
	for _, in := range g.Insts {
		m[in.Op]++
	}
	return m
}

func TestFuseRopeKVWriteAndMatmulResidual(t *testing.T) {
	allowed := TargetFusions("cpu")
	g := attnTail("")
	if n := Fuse(g, allowed); n != 2 {
		t.Fatalf("formed %d fused ops, want 2", n)
	}
	m := ops(g)
	if m[ir.ROPE_KV_WRITE] != 1 || m[ir.MATMUL_RESIDUAL] != 1 || m[ir.ROPE] != 0 || m[ir.KV_WRITE] != 0 || m[ir.MATMUL] != 0 || m[ir.RESIDUAL] != 0 {
		t.Fatalf("ops after fusion: %v", m)
	}
	if err := Verify(g); err != nil {
		t.Fatal(err)
	}
	for _, in := range g.Insts {
		if in.Op == ir.ROPE_KV_WRITE && (in.Attrs["n_head"] != 4 || in.Attrs["n_head_kv"] != 2) {
			t.Errorf("ROPE_KV_WRITE attrs %v", in.Attrs)
		}
	}

	// K read by another instruction: no ROPE_KV_WRITE.
	g = attnTail("k")
	Fuse(g, allowed)
	if m := ops(g); m[ir.ROPE_KV_WRITE] != 0 || m[ir.ROPE] != 2 || m[ir.MATMUL_RESIDUAL] != 1 {
		t.Fatalf("K with another reader: %v", m)
	}
	// The projection read by another instruction: no MATMUL_RESIDUAL.
	g = attnTail("o")
	Fuse(g, allowed)
	if m := ops(g); m[ir.MATMUL_RESIDUAL] != 0 || m[ir.MATMUL] != 1 || m[ir.ROPE_KV_WRITE] != 1 {
		t.Fatalf("projection with another reader: %v", m)
	}
	// Not allowed on the target: nothing forms.
	g = attnTail("")
	if n := Fuse(g, map[ir.Op]bool{ir.RESIDUAL_RMS_NORM: true}); n != 0 {
		t.Fatalf("formed %d with the new fusions disallowed", n)
	}
}

// mixedQKV is RMS_NORM(x→n) then the Q, K and V MATMULs of n, Q and K of
// type qk and V of type v (llama.cpp's Q4_K_M: Q4_K Q and K, Q6_K V in
// half the layers), K and V 4 features wide and Q 8.
func mixedQKV(qk, v ggml.Type) *ir.Graph {
	g, io := decodeGraph()
	weight := func(name string, t ggml.Type, n int64) int {
		return g.Buffer(ir.Buffer{Name: name, Class: ir.Weight, Type: t, Dims: []int64{256, n}, LayerClass: name, Bytes: 256 * n})
	}
	wq, wk, wv := weight("wq", qk, 8), weight("wk", qk, 4), weight("wv", v, 4)
	nw := f32Weight(g, "nw", "n", 256)
	emb := f32Weight(g, "emb", "e", 256, 4)
	x, n := g.NewReg("x", 1, 256, 4), g.NewReg("n", 1, 256, 4)
	q, k, vv := g.NewReg("q", 1, 8, 4), g.NewReg("k", 1, 4, 4), g.NewReg("v", 1, 4, 4)
	g.Emit(ir.EMBED, []ir.Operand{ir.B("table", emb), ir.B("io", io)}, []ir.Operand{ir.R("y", x)}, ir.Attrs{"cols": 256})
	g.Emit(ir.RMS_NORM, []ir.Operand{ir.R("x", x), ir.B("w", nw), ir.B("io", io)}, []ir.Operand{ir.R("y", n)},
		ir.Attrs{"cols": 256, "group": 256, "eps": 1e-5})
	for _, p := range []struct{ w, y, n int }{{wq, q, 8}, {wk, k, 4}, {wv, vv, 4}} {
		g.Emit(ir.MATMUL, []ir.Operand{ir.R("x", n), ir.B("w", p.w), ir.B("io", io)}, []ir.Operand{ir.R("y", p.y)},
			ir.Attrs{"k": 256, "n": float64(p.n)})
	}
	for _, r := range []struct{ r, n int }{{q, 8}, {k, 4}, {vv, 4}} { // readers, so that nothing is dead
		g.Emit(ir.RESIDUAL, []ir.Operand{ir.R("x", r.r), ir.R("y", r.r), ir.B("io", io)}, []ir.Operand{ir.R("x", r.r)},
			ir.Attrs{"cols": float64(r.n)})
	}
	return g
}

// The fuse rules for a norm whose products do not share one type, as
// data: the ops before, the fused ops (and their n, n2) after.
func TestFuseNormMatmuls(t *testing.T) {
	cuda := TargetFusions("cuda:sm_90")
	if !cuda[ir.RMS_NORM_FUSED_MATMUL] || TargetFusions("cpu")[ir.RMS_NORM_FUSED_MATMUL] {
		t.Fatal("RMS_NORM_FUSED_MATMUL: want it on the CUDA targets only")
	}
	for _, c := range []struct {
		name   string
		qk, v  ggml.Type
		want   map[ir.Op]int
		shapes [][2]float64 // each RMS_NORM_FUSED_MATMUL's n, n2
	}{
		// Q4_K Q and K, Q6_K V: Q|K in one launch, V in another.
		{"q4_k q k, q6_k v", ggml.Q4_K, ggml.Q6_K, map[ir.Op]int{ir.RMS_NORM_FUSED_MATMUL: 2}, [][2]float64{{8, 4}, {4, 0}}},
		// One type: rms_norm_qkv, as before.
		{"one type", ggml.Q4_K, ggml.Q4_K, map[ir.Op]int{ir.RMS_NORM_FUSED_QKV: 1}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := mixedQKV(c.qk, c.v)
			Fuse(g, cuda)
			if err := Verify(g); err != nil {
				t.Fatal(err)
			}
			m := ops(g)
			for op, n := range c.want {
				if m[op] != n {
					t.Errorf("%d %s, want %d (%v)", m[op], op, n, m)
				}
			}
			if m[ir.RMS_NORM] != 0 || m[ir.MATMUL] != 0 {
				t.Errorf("left unfused: %v", m)
			}
			var got [][2]float64
			for _, in := range g.Insts {
				if in.Op == ir.RMS_NORM_FUSED_MATMUL {
					got = append(got, [2]float64{in.Attrs["n"], in.Attrs["n2"]})
					if w := g.Buffers[buf(&in, "w")]; in.Attrs["n2"] == 0 && w.Name != "wv" {
						t.Errorf("a single product's weight is %s, want its own (wv)", w.Name)
					}
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(c.shapes) && c.shapes != nil {
				t.Errorf("fused shapes %v, want %v", got, c.shapes)
			}
		})
	}
	// The norm read by something other than the products: nothing forms.
	g := mixedQKV(ggml.Q4_K, ggml.Q6_K)
	n := writes(&g.Insts[1], "y")
	g.Emit(ir.RESIDUAL, []ir.Operand{ir.R("x", reg(&g.Insts[1], "x")), ir.R("y", n), ir.B("io", buf(&g.Insts[1], "io"))},
		[]ir.Operand{ir.R("x", reg(&g.Insts[1], "x"))}, ir.Attrs{"cols": 256})
	Fuse(g, cuda)
	if m := ops(g); m[ir.RMS_NORM_FUSED_MATMUL] != 0 || m[ir.RMS_NORM] != 1 || m[ir.MATMUL] != 3 {
		t.Errorf("norm with another reader: %v", m)
	}
	// Not allowed: nothing forms.
	g = mixedQKV(ggml.Q4_K, ggml.Q6_K)
	if n := Fuse(g, TargetFusions("cpu")); ops(g)[ir.RMS_NORM_FUSED_MATMUL] != 0 {
		t.Errorf("formed %d ops on cpu: %v", n, ops(g))
	}
}

// ffn is RMS_NORM(x→n), the gate and up MATMULs of n, SWIGLU and the down
// MATMUL, in a decode variant of rows rows.
func ffn(rows int) *ir.Graph {
	g := ir.NewGraph(ir.ShapeKey{Stage: ir.Decode, Slots: rows, Rows: rows})
	io := g.Buffer(ir.Buffer{Name: "request.table", Class: ir.IO})
	wg, wu, wd := f32Weight(g, "wg", "g", 8, 6), f32Weight(g, "wu", "u", 8, 6), f32Weight(g, "wd", "d", 6, 8)
	nw, emb := f32Weight(g, "nw", "n", 8), f32Weight(g, "emb", "e", 8, 4)
	x, n, gate, up, act, y := g.NewReg("x", rows, 8, 4), g.NewReg("n", rows, 8, 4), g.NewReg("gate", rows, 6, 4), g.NewReg("up", rows, 6, 4),
		g.NewReg("act", rows, 6, 4), g.NewReg("y", rows, 8, 4)
	g.Emit(ir.EMBED, []ir.Operand{ir.B("table", emb), ir.B("io", io)}, []ir.Operand{ir.R("y", x)}, ir.Attrs{"cols": 8})
	g.Emit(ir.RMS_NORM, []ir.Operand{ir.R("x", x), ir.B("w", nw), ir.B("io", io)}, []ir.Operand{ir.R("y", n)}, ir.Attrs{"cols": 8, "group": 8, "eps": 1e-5})
	g.Emit(ir.MATMUL, []ir.Operand{ir.R("x", n), ir.B("w", wg), ir.B("io", io)}, []ir.Operand{ir.R("y", gate)}, ir.Attrs{"k": 8, "n": 6})
	g.Emit(ir.MATMUL, []ir.Operand{ir.R("x", n), ir.B("w", wu), ir.B("io", io)}, []ir.Operand{ir.R("y", up)}, ir.Attrs{"k": 8, "n": 6})
	g.Emit(ir.SWIGLU, []ir.Operand{ir.R("gate", gate), ir.R("up", up), ir.B("io", io)}, []ir.Operand{ir.R("y", act)}, ir.Attrs{"cols": 6})
	g.Emit(ir.MATMUL, []ir.Operand{ir.R("x", act), ir.B("w", wd), ir.B("io", io)}, []ir.Operand{ir.R("y", y)}, ir.Attrs{"k": 6, "n": 8})
	return g
}

// The SwiGLU fold, as data: in a one-row decode variant the norm, gate,
// up and SWIGLU become one RMS_NORM_FUSED_MLP_SWIGLU writing the SWIGLU's
// output; in a variant of more rows they stay rms_norm_gate_up and
// swiglu; on a target without the kernel nothing changes.
func TestFuseSwiGLU(t *testing.T) {
	cuda := TargetFusions("cuda:sm_90")
	for _, c := range []struct {
		rows    int
		allowed map[ir.Op]bool
		want    []ir.Op
	}{
		{1, cuda, []ir.Op{ir.EMBED, ir.RMS_NORM_FUSED_MLP_SWIGLU, ir.MATMUL}},
		{2, cuda, []ir.Op{ir.EMBED, ir.RMS_NORM_FUSED_MLP_GATE_UP, ir.SWIGLU, ir.MATMUL}},
		{1, TargetFusions("cpu"), []ir.Op{ir.EMBED, ir.RMS_NORM_FUSED_MLP_GATE_UP, ir.SWIGLU, ir.MATMUL}},
	} {
		g := ffn(c.rows)
		act := writes(&g.Insts[4], "y")
		Fuse(g, c.allowed)
		if err := Verify(g); err != nil {
			t.Fatal(err)
		}
		var got []ir.Op
		for _, in := range g.Insts {
			got = append(got, in.Op)
			if in.Op == ir.RMS_NORM_FUSED_MLP_SWIGLU && (writes(&in, "y") != act || in.Attrs["f"] != 6 || in.Attrs["k"] != 8) {
				t.Errorf("%d rows: %v writes %d, attrs %v", c.rows, in.Op, writes(&in, "y"), in.Attrs)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%d rows: ops %v, want %v", c.rows, got, c.want)
		}
	}
}

// attnHead is RMS_NORM(x→n), the Q, K and V MATMULs of n (one type), the
// ROPEs of Q and K (neox as given) and the KV write, then a reader of Q,
// in a decode variant of rows rows.
func attnHead(rows int, neox float64) *ir.Graph {
	g := ir.NewGraph(ir.ShapeKey{Stage: ir.Decode, Slots: rows, Rows: rows})
	io := g.Buffer(ir.Buffer{Name: "request.table", Class: ir.IO})
	kv := g.Buffer(ir.Buffer{Name: "state.kv", Class: ir.KV})
	wq, wk, wv := f32Weight(g, "wq", "q", 8, 8), f32Weight(g, "wk", "k", 8, 4), f32Weight(g, "wv", "v", 8, 4)
	nw, emb := f32Weight(g, "nw", "n", 8), f32Weight(g, "emb", "e", 8, 4)
	x, n := g.NewReg("x", rows, 8, 4), g.NewReg("n", rows, 8, 4)
	q, k, v := g.NewReg("q", rows, 8, 4), g.NewReg("k", rows, 4, 4), g.NewReg("v", rows, 4, 4)
	g.Emit(ir.EMBED, []ir.Operand{ir.B("table", emb), ir.B("io", io)}, []ir.Operand{ir.R("y", x)}, ir.Attrs{"cols": 8})
	g.Emit(ir.RMS_NORM, []ir.Operand{ir.R("x", x), ir.B("w", nw), ir.B("io", io)}, []ir.Operand{ir.R("y", n)}, ir.Attrs{"cols": 8, "group": 8, "eps": 1e-5})
	for _, p := range []struct{ w, y, n int }{{wq, q, 8}, {wk, k, 4}, {wv, v, 4}} {
		g.Emit(ir.MATMUL, []ir.Operand{ir.R("x", n), ir.B("w", p.w), ir.B("io", io)}, []ir.Operand{ir.R("y", p.y)}, ir.Attrs{"k": 8, "n": float64(p.n)})
	}
	for _, r := range []struct {
		r     int
		heads float64
	}{{q, 4}, {k, 2}} {
		g.Emit(ir.ROPE, []ir.Operand{ir.R("x", r.r), ir.B("io", io)}, []ir.Operand{ir.R("x", r.r)},
			ir.Attrs{"n_head": r.heads, "head_dim": 2, "n_rot": 2, "neox": neox, "freq_base": 10000, "freq_scale": 1})
	}
	g.Emit(ir.KV_WRITE, []ir.Operand{ir.R("k", k), ir.R("v", v), ir.B("io", io), ir.B("kv", kv)}, []ir.Operand{ir.B("kv", kv)},
		ir.Attrs{"layer": 0, "n_layer": 1, "kv_dim": 4})
	g.Emit(ir.RESIDUAL, []ir.Operand{ir.R("x", x), ir.R("y", q), ir.B("io", io)}, []ir.Operand{ir.R("x", x)}, ir.Attrs{"cols": 8})
	return g
}

// The RoPE and KV write fold, as data: in a one-row decode variant with
// adjacent rotation pairs, norm+QKV and the RoPE+KV write become one
// RMS_NORM_FUSED_QKV_ROPE_KV_WRITE writing Q and the cache; with NeoX
// pairs or more rows they stay two ops.
func TestFuseQKVRope(t *testing.T) {
	cuda := TargetFusions("cuda:sm_90")
	for _, c := range []struct {
		rows int
		neox float64
		want []ir.Op
	}{
		{1, 0, []ir.Op{ir.EMBED, ir.RMS_NORM_FUSED_QKV_ROPE_KV_WRITE, ir.RESIDUAL}},
		{1, 1, []ir.Op{ir.EMBED, ir.RMS_NORM_FUSED_QKV, ir.ROPE_KV_WRITE, ir.RESIDUAL}},
		{2, 0, []ir.Op{ir.EMBED, ir.RMS_NORM_FUSED_QKV, ir.ROPE_KV_WRITE, ir.RESIDUAL}},
	} {
		g := attnHead(c.rows, c.neox)
		q := writes(&g.Insts[2], "y")
		Fuse(g, cuda)
		if err := Verify(g); err != nil {
			t.Fatal(err)
		}
		var got []ir.Op
		for _, in := range g.Insts {
			got = append(got, in.Op)
			if in.Op == ir.RMS_NORM_FUSED_QKV_ROPE_KV_WRITE && (writes(&in, "q") != q || in.Attrs["n_q"] != 8 || in.Attrs["n_kv"] != 4 ||
				in.Attrs["n_head"] != 4 || in.Attrs["n_head_kv"] != 2 || in.Attrs["n_rot"] != 2) {
				t.Errorf("%v: writes q %d, attrs %v", in.Op, writes(&in, "q"), in.Attrs)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%d rows, neox %v: ops %v, want %v", c.rows, c.neox, got, c.want)
		}
	}
	// A Q8_0 cache: the fuse pass does not allow it.
	u := &Unit{Graphs: []*ir.Graph{attnHead(1, 0)}, Target: "cuda:sm_90", KV: kernels.KVTypes{K: ggml.Q8_0, V: ggml.Q8_0}}
	if err := fuse(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	if m := ops(u.Graphs[0]); m[ir.RMS_NORM_FUSED_QKV_ROPE_KV_WRITE] != 0 || m[ir.RMS_NORM_FUSED_QKV] != 1 {
		t.Errorf("q8_0 cache: %v", m)
	}
}
