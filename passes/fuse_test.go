package passes

import (
	"testing"

	"github.com/zrtdev/zrt/compiler/ir"
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
