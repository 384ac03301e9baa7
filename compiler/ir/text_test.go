package ir_test

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/ir"
	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/support"
	"github.com/zrtdev/zrt/internal/testmodel"
	"github.com/zrtdev/zrt/passes"
)

// models returns GGUF paths to round-trip: synthetic shapes written to a
// temporary directory, and the shared models when the checkout has them.
func models(t *testing.T) []string {
	var paths []string
	dir := t.TempDir()
	for i, s := range []synth.Shape{synth.Tiny,
		{Arch: "qwen2", Layers: 1, Embd: 64, Heads: 2, HeadsKV: 1, FF: 96, Vocab: 300, Context: 64, Type: ggml.Q8_0, Seed: 2},
		{Arch: "qwen3", Layers: 1, Embd: 64, Heads: 4, HeadsKV: 2, HeadDim: 32, FF: 64, Vocab: 300, Context: 64, Type: ggml.F16, Seed: 3}} {
		paths = append(paths, testmodel.Write(t, dir, s.Arch+string(rune('a'+i))+".gguf", s))
	}
	shared, _ := filepath.Glob("../../../shared/models/*.gguf")
	more, _ := filepath.Glob("../../../shared/models/synthetic/*.gguf")
	return append(append(paths, shared...), more...)
}

// cloneText copies g through its text form.
func cloneText(t *testing.T, g *ir.Graph) *ir.Graph {
	gs, err := ir.Parse([]byte(ir.Text(g)))
	if err != nil {
		t.Fatal(err)
	}
	return gs[0]
}

func sameGraph(t *testing.T, what string, a, b *ir.Graph) {
	t.Helper()
	if a.Key != b.Key || !reflect.DeepEqual(a.Regs, b.Regs) || !reflect.DeepEqual(a.Buffers, b.Buffers) {
		t.Fatalf("%s: key, registers or buffers differ after parsing", what)
	}
	if len(a.Insts) != len(b.Insts) {
		t.Fatalf("%s: %d instructions, parsed %d", what, len(a.Insts), len(b.Insts))
	}
	for i := range a.Insts {
		x, y := a.Insts[i], b.Insts[i]
		if len(x.Attrs) == 0 && len(y.Attrs) == 0 {
			x.Attrs, y.Attrs = nil, nil
		}
		if !reflect.DeepEqual(x, y) {
			t.Fatalf("%s: instruction %d differs:\n%+v\n%+v", what, i, x, y)
		}
	}
}

func TestRoundTripModels(t *testing.T) {
	var seen string
	defer func() {
		for _, want := range []string{" source=", " => matmul", "RMS_NORM_FUSED_QKV"} {
			if !strings.Contains(seen, want) {
				t.Errorf("no graph had %q: the round trip missed a feature", want)
			}
		}
	}()
	for _, path := range models(t) {
		fe, err := compiler.Load(path, compiler.Options{})
		if support.Is(err) {
			t.Logf("%s: skipped: %v", filepath.Base(path), err)
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", filepath.Base(path), err)
		}
		// As built, and after every pass: fused ops, derived weights and
		// kernel names must survive too.
		graphs := append([]*ir.Graph(nil), fe.Unit.Graphs...)
		for _, g := range fe.Unit.Graphs {
			graphs = append(graphs, cloneText(t, g))
		}
		if _, err := passes.Run(context.Background(), &passes.Unit{Graphs: graphs[len(graphs)/2:], Target: "cpu", State: fe.Unit.State, Templates: fe.Unit.Templates}, "", false); err != nil {
			t.Fatalf("%s: %v", filepath.Base(path), err)
		}
		for _, g := range graphs {
			what := filepath.Base(path) + " " + g.Key.String()
			text := ir.Text(g)
			gs, err := ir.Parse([]byte(text))
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if len(gs) != 1 {
				t.Fatalf("%s: parsed %d graphs", what, len(gs))
			}
			sameGraph(t, what, g, gs[0])
			if again := ir.Text(gs[0]); again != text {
				t.Fatalf("%s: print→parse→print differs", what)
			}
			seen += text
		}
		// All variants in one file, as --compile-to writes them.
		all := ir.Text(fe.Unit.Graphs...)
		gs, err := ir.Parse([]byte(all))
		if err != nil || len(gs) != len(fe.Unit.Graphs) || ir.Text(gs...) != all {
			t.Fatalf("%s: multi-graph round trip: %v", filepath.Base(path), err)
		}
		fe.Close()
	}
}

// odd builds a graph with everything the syntax has to carry: names that
// need quoting, shared names, in-place and multiple writes, awkward floats
// and a kernel name.
func odd() *ir.Graph {
	g := ir.NewGraph(ir.ShapeKey{Stage: ir.Prefill, Slots: 2, Rows: 8})
	io := g.Buffer(ir.Buffer{Name: "request.table", Class: ir.IO})
	w := g.Buffer(ir.Buffer{Name: "w eird=\"x\"", Class: ir.Weight, Tensor: "blk.0;x", Type: ggml.F32, Dims: []int64{8, 8}, LayerClass: "", Bytes: 256})
	g.Buffers = append(g.Buffers, ir.Buffer{Name: "dup", Class: ir.KV}, ir.Buffer{Name: "dup", Class: ir.Out, Type: ggml.Q4_K},
		ir.Buffer{Name: "qkv", Class: ir.Weight, Sources: []string{"b.q", "b k", "b.v"}, Type: ggml.Q8_0, Dims: []int64{32, 96}, Bytes: 3264})
	a := g.NewReg("a", 8, 8, 4)
	b := g.NewReg("a", 8, 8, 4) // shared name: referenced by index
	c := g.NewReg("", 8, 3, 8)
	d := g.NewReg("ünï→code", 8, 1, 4)
	g.Emit(ir.MATMUL, []ir.Operand{ir.R("x", a), ir.B("w", w), ir.B("io", io)}, []ir.Operand{ir.R("y", b), ir.R("y", c), ir.B("kv", 2)},
		ir.Attrs{"k": 8, "n": 8, "eps": 1e-5, "third": 1.0 / 3, "neg0": negZero(), "big": 1e300, "tiny": 5e-324, "f32": float64(float32(0.1))})
	g.Emit(ir.ROPE, []ir.Operand{ir.R("x", d), ir.B("o", 3)}, []ir.Operand{ir.R("x", d)}, nil)
	g.Insts[1].Kernel = "rope"
	g.Emit(ir.ARGMAX, nil, nil, ir.Attrs{})
	return g
}

func negZero() float64 { z := 0.0; return -z }

func TestRoundTripSyntax(t *testing.T) {
	g := odd()
	text := ir.Text(g)
	gs, err := ir.Parse([]byte(text))
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	sameGraph(t, "odd", g, gs[0])
	if ir.Text(gs[0]) != text {
		t.Fatalf("print→parse→print differs:\n%s\n%s", text, ir.Text(gs[0]))
	}
	for _, want := range []string{"%#0", "%#1", `%""`, `@"w eird=\"x\""`, "@#2", "neg0=-0", "third=0.3333333333333333", "=> rope", `source=b.q source="b k" source=b.v type=Q8_0`, "-> y=%#1 y=%\"\" kv=@#2"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	if gs[0].Buffer(ir.Buffer{Name: "request.table"}) != 0 {
		t.Error("a parsed graph does not index its buffers by name")
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct{ src, want string }{
		{"reg %a 1x1x4", "1:1: reg before any graph line"},
		{"graph decode.s1", "1:7: bad shape key"},
		{"graph decode.s1.r1\nreg %a 1x1", "2:8: bad register shape"},
		{"graph decode.s1.r1\nbuffer @w weight tpye=F32", "2:18: unknown buffer field"},
		{"graph decode.s1.r1\nbuffer @w weight type=F33", "2:23: unknown tensor type"},
		{"graph decode.s1.r1\nbuffer @w heap", "2:11: unknown buffer class"},
		{"graph decode.s1.r1\nbuffer @w weight dims=4xy", "2:23: bad dims \"4xy\""},
		{"graph decode.s1.r1\nbuffer @w weight bytes=1k", "2:24: bad byte count \"1k\""},
		{"graph decode.s1.r1\nbuffer @w weight bytes=", "2:24: expected byte count"},
		{"graph decode.s1.r1\n  0  MATMUL x=%a -> y=%a", "2:16: undeclared register"},
		{"graph decode.s1.r1\nFOO ->", "2:1: unknown opcode"},
		{"graph decode.s1.r1\nreg %a 1x1x4\nRESIDUAL x=%a y=%#1 ->", "3:19: register index \"1\" out of range"},
		{"graph decode.s1.r1\nreg %a 1x1x4\nreg %a 1x1x4\nRESIDUAL x=%a ->", "4:13: register name \"a\" is shared"},
		{"graph decode.s1.r1\nRESIDUAL {cols=1}", "2:10: expected '->'"},
		{"graph decode.s1.r1\nRESIDUAL -> {cols=1x}", "2:19: bad number"},
		{"graph decode.s1.r1\nRESIDUAL -> {cols=1 cols=2}", "2:21: attribute cols given twice"},
		{"graph decode.s1.r1\nRESIDUAL -> => ", "2:16: expected kernel name"},
		{"graph decode.s1.r1\nbuffer @\"w 1x1", "2:9: bad quoted name"},
		{"graph decode.s1.r1\nRESIDUAL -> ! ", "2:13: unexpected character"},
	}
	for _, c := range cases {
		_, err := ir.Parse([]byte(c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.src, err, c.want)
		}
	}
}

// FuzzParse checks that whatever the parser accepts prints to text that
// parses back to the same text, and that no input makes it panic.
func FuzzParse(f *testing.F) {
	f.Add([]byte(ir.Text(odd())))
	f.Add([]byte("graph decode.s1.r1\nbuffer @io io\nreg %x 1x8x4\n0 RESIDUAL x=%x y=%x io=@io -> x=%x {cols=8} => add ; c\n"))
	f.Add([]byte("graph prefill.s4.r32\ngraph decode.s4.r4\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		gs, err := ir.Parse(src)
		if err != nil {
			return
		}
		text := ir.Text(gs...)
		gs2, err := ir.Parse([]byte(text))
		if err != nil {
			t.Fatalf("printed text does not parse: %v\n%s", err, text)
		}
		if again := ir.Text(gs2...); again != text {
			t.Fatalf("print→parse→print differs:\n%s\n---\n%s", text, again)
		}
	})
}
