package passes

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler/ir"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/zrt"
	"github.com/zrtdev/zrt/kernels"
)

func TestPipelineHonorsConstraints(t *testing.T) {
	pos := map[string]int{}
	for i, p := range Pipeline {
		if _, dup := pos[p.Name]; dup {
			t.Errorf("pass %s listed twice", p.Name)
		}
		pos[p.Name] = i
	}
	for _, c := range Constraints {
		b, okb := pos[c.Before]
		a, oka := pos[c.After]
		if !okb || !oka || b >= a {
			t.Errorf("constraint %s before %s (%s) broken", c.Before, c.After, c.Why)
		}
	}
}

// decodeGraph starts a one-row decode graph and its request table.
func decodeGraph() (*ir.Graph, int) {
	g := ir.NewGraph(ir.ShapeKey{Stage: ir.Decode, Slots: 1, Rows: 1})
	return g, g.Buffer(ir.Buffer{Name: "request.table", Class: ir.IO})
}

// f32Weight adds to g the F32 weight name of layer class class and
// dims, returning its buffer.
func f32Weight(g *ir.Graph, name, class string, dims ...int64) int {
	bytes := int64(4)
	for _, d := range dims {
		bytes *= d
	}
	return g.Buffer(ir.Buffer{Name: name, Class: ir.Weight, Type: ggml.F32, Dims: dims, LayerClass: class, Bytes: bytes})
}

// small builds x → RMS_NORM → MATMUL → RESIDUAL over a tiny graph.
func small() *ir.Graph {
	g, io := decodeGraph()
	w := f32Weight(g, "w", "w", 8, 8)
	nw := f32Weight(g, "nw", "n", 8)
	emb := f32Weight(g, "emb", "e", 8, 4)
	x, y, z := g.NewReg("x", 1, 8, 4), g.NewReg("y", 1, 8, 4), g.NewReg("z", 1, 8, 4)
	g.Emit(ir.EMBED, []ir.Operand{ir.B("table", emb), ir.B("io", io)}, []ir.Operand{ir.R("y", x)}, ir.Attrs{"cols": 8})
	g.Emit(ir.RMS_NORM, []ir.Operand{ir.R("x", x), ir.B("w", nw), ir.B("io", io)}, []ir.Operand{ir.R("y", y)}, ir.Attrs{"cols": 8, "group": 8, "eps": 1e-5})
	g.Emit(ir.MATMUL, []ir.Operand{ir.R("x", y), ir.B("w", w), ir.B("io", io)}, []ir.Operand{ir.R("y", z)}, ir.Attrs{"k": 8, "n": 8})
	g.Emit(ir.RESIDUAL, []ir.Operand{ir.R("x", x), ir.R("y", z), ir.B("io", io)}, []ir.Operand{ir.R("x", x)}, ir.Attrs{"cols": 8})
	return g
}

func TestVerifyRejects(t *testing.T) {
	if err := Verify(small()); err != nil {
		t.Fatalf("valid graph: %v", err)
	}
	cases := map[string]func(g *ir.Graph){
		"before any write":   func(g *ir.Graph) { g.Insts = g.Insts[1:] },
		"missing operand":    func(g *ir.Graph) { g.Insts[2].Reads = g.Insts[2].Reads[1:] },
		"missing attribute":  func(g *ir.Graph) { delete(g.Insts[1].Attrs, "eps") },
		"weight shape":       func(g *ir.Graph) { g.Insts[2].Attrs["n"] = 4 },
		"in place":           func(g *ir.Graph) { g.Insts[2].Writes[0].ID = 1 },
		"writes weight":      func(g *ir.Graph) { g.Insts[2].Writes = append(g.Insts[2].Writes, ir.B("w", 1)) },
		"out of range":       func(g *ir.Graph) { g.Insts[1].Reads[1].ID = 99 },
		"not an argument of": func(g *ir.Graph) { g.Insts[3].Reads = append(g.Insts[3].Reads, ir.B("bias", 1)) },
	}
	verifyRejects(t, small, cases)
}

// verifyRejects checks that Verify refuses each graph build gives after
// the case's change, with an error containing the case's key.
func verifyRejects(t *testing.T, build func() *ir.Graph, cases map[string]func(g *ir.Graph)) {
	t.Helper()
	for want, mod := range cases {
		g := build()
		mod(g)
		if err := Verify(g); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
}

// extended builds x → RMS_NORM_FUSED_QKV (q 8, k and v 4) → ROPE_EXT of
// q with frequency factors → RESIDUAL_GATED of q into x, gated by x.
func extended() *ir.Graph {
	g, io := decodeGraph()
	emb := f32Weight(g, "emb", "e", 8, 4)
	nw := f32Weight(g, "nw", "n", 8)
	qkv := f32Weight(g, "qkv", "qkv", 8, 16)
	ff := f32Weight(g, "ff", "ff", 2)
	gw := f32Weight(g, "gw", "gw", 8)
	x, q, k, v := g.NewReg("x", 1, 8, 4), g.NewReg("q", 1, 8, 4), g.NewReg("k", 1, 4, 4), g.NewReg("v", 1, 4, 4)
	g.Emit(ir.EMBED, []ir.Operand{ir.B("table", emb), ir.B("io", io)}, []ir.Operand{ir.R("y", x)}, ir.Attrs{"cols": 8})
	g.Emit(ir.RMS_NORM_FUSED_QKV, []ir.Operand{ir.R("x", x), ir.B("w_norm", nw), ir.B("w_qkv", qkv), ir.B("io", io)},
		[]ir.Operand{ir.R("q", q), ir.R("k", k), ir.R("v", v)}, ir.Attrs{"k": 8, "n_q": 8, "n_kv": 4, "eps": 1e-5})
	g.Emit(ir.ROPE_EXT, []ir.Operand{ir.R("x", q), ir.B("freq", ff), ir.B("io", io)}, []ir.Operand{ir.R("x", q)},
		ir.Attrs{"n_head": 2, "head_dim": 4, "n_rot": 4, "neox": 1, "freq_base": 1e4, "freq_scale": 1, "attn_factor": 1.2,
			"ext_factor": 0, "corr_lo": 0, "corr_hi": 0})
	g.Emit(ir.RESIDUAL_GATED, []ir.Operand{ir.R("x", x), ir.R("y", q), ir.R("g", x), ir.B("w", gw), ir.B("io", io)},
		[]ir.Operand{ir.R("x", x)}, ir.Attrs{"cols": 8, "k": 8})
	return g
}

// The ops graph builders emit beyond the llama set are held to their
// shapes: fused projections over a file's concatenated weight, RoPE's
// frequency factors, the gated residual's F32 gate vector.
func TestVerifyExtendedOps(t *testing.T) {
	if err := Verify(extended()); err != nil {
		t.Fatalf("valid graph: %v", err)
	}
	cases := map[string]func(g *ir.Graph){
		"weight shape":       func(g *ir.Graph) { g.Buffers[3].Dims = []int64{8, 12} },
		"operand k has":      func(g *ir.Graph) { g.Regs[2].Cols = 8 },
		"frequency factors":  func(g *ir.Graph) { g.Buffers[4].Dims = []int64{4} },
		"gate weight F16":    func(g *ir.Graph) { g.Buffers[5].Type = ggml.F16 },
		"operand g has":      func(g *ir.Graph) { g.Insts[3].Attrs["k"] = 4 },
		"missing attribute":  func(g *ir.Graph) { delete(g.Insts[2].Attrs, "attn_factor") },
		"not an argument of": func(g *ir.Graph) { g.Insts[2].Reads = append(g.Insts[2].Reads, ir.B("bias", 4)) },
	}
	verifyRejects(t, extended, cases)
	// Without factors (a null optional buffer) ROPE_EXT is valid.
	g := extended()
	g.Insts[2].Reads = append(g.Insts[2].Reads[:1], g.Insts[2].Reads[2])
	if err := Verify(g); err != nil {
		t.Errorf("ROPE_EXT without factors: %v", err)
	}
}

func TestRegallocReusesAndNeverOverlaps(t *testing.T) {
	g := small()
	lv := Analyze(g)
	pm, err := Allocate(g, lv)
	if err != nil {
		t.Fatal(err)
	}
	// x lives throughout; y dies at the matmul that defines z, so z needs
	// its own buffer: three physical buffers, none reused.
	if len(pm.PhysicalSizes) != 3 {
		t.Errorf("%d physical buffers, want 3", len(pm.PhysicalSizes))
	}
	pm.PhysicalOffsets = []int64{0, 256, 512}
	if err := CheckNoOverlap(g, lv, pm); err != nil {
		t.Fatal(err)
	}
	pm.PhysicalOffsets = []int64{0, 0, 512}
	if err := CheckNoOverlap(g, lv, pm); err == nil {
		t.Error("overlapping registers passed the check")
	}
	if lv.PeakBytes != 96 {
		t.Errorf("peak %d, want 96 (three 32-byte registers live at the matmul)", lv.PeakBytes)
	}
}

// testUnit wraps graphs with stand-in kernel templates: blobs whose code
// is just a slot dword per specialization constant.
// testUnit does not fuse: the tests that use it count small()'s
// instructions (fusion has its own tests, fuse_test.go).
func testUnit(graphs ...*ir.Graph) *Unit {
	return &Unit{Graphs: graphs, Target: "cpu", NoFuse: true, Templates: func(instance string) (*zrt.Blob, error) {
		abi, _, err := kernels.SplitInstance(instance)
		if err != nil {
			return nil, err
		}
		b := &zrt.Blob{Name: instance, Header: zrt.Header{ABIVersion: zrt.ABIVersion, Target: zrt.CPU}, Code: make([]byte, 4*len(abi.Spec)+4)}
		for i, p := range abi.Spec {
			b.Slots = append(b.Slots, zrt.Slot{Name: p.Name, CodeOffset: uint32(4 * i)})
		}
		return b, nil
	}}
}

func TestSpecializeSharesAndPatches(t *testing.T) {
	u := testUnit(small(), small())
	if _, err := Run(context.Background(), u, "specialize", true); err != nil {
		t.Fatal(err)
	}
	// Two identical graphs: four instructions, four distinct kernels.
	if len(u.Kernels) != 4 || len(u.Blobs) != 4 {
		t.Fatalf("%d kernels, %d blobs", len(u.Kernels), len(u.Blobs))
	}
	for i, b := range u.Blobs {
		if err := b.CheckPatched(); err != nil {
			t.Errorf("blob %d: %v", i, err)
		}
	}
	if v, _ := u.Blobs[1].SlotValue("eps"); math.Float32frombits(v) != 1e-5 {
		t.Errorf("rms_norm eps slot %v", math.Float32frombits(v))
	}
	if u.InstKernel[0][2] != u.InstKernel[1][2] || u.Graphs[0].Insts[2].Kernel != "matmul.f32" {
		t.Errorf("matmul instances %v, kernel %q", u.InstKernel, u.Graphs[0].Insts[2].Kernel)
	}
	u.Templates = nil
	if _, err := Run(context.Background(), u, "specialize", false); err == nil {
		t.Error("specialize ran without templates")
	}
}
