package compiler_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/internal/testmodel"
	"github.com/zrtdev/zrt/passes"
)

func TestDumpAfterAll(t *testing.T) {
	model := testmodel.New(t, synth.Tiny)
	dir := filepath.Join(t.TempDir(), "dump")
	out := filepath.Join(t.TempDir(), "b")
	if err := compiler.Compile(context.Background(), model, out, compiler.Options{DumpAfter: "all", DumpDir: dir}); err != nil {
		t.Fatal(err)
	}
	fe, err := compiler.Load(model, compiler.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var variants []string
	for _, g := range fe.Unit.Graphs {
		variants = append(variants, g.Key.String())
	}
	fe.Close()
	want := map[string]bool{}
	for i, p := range passes.Pipeline {
		pre := fmt.Sprintf("%02d-%s", i+1, p.Name)
		for _, v := range variants {
			want[pre+"."+v+".zir"] = true
			switch p.Name {
			case "liveness":
				want[pre+"."+v+".liveness.txt"] = true
			case "regalloc", "memplan":
				want[pre+"."+v+".physical.txt"] = true
			}
		}
		if p.Name == "memplan" {
			want[pre+".json"] = true
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
		if !want[e.Name()] {
			t.Errorf("unexpected dump file %s", e.Name())
		}
		delete(want, e.Name())
	}
	for name := range want {
		t.Errorf("missing dump file %s", name)
	}
	if t.Failed() {
		t.Fatalf("dump files: %v", got)
	}
	v := variants[len(variants)-1]
	lowerAt, _ := passes.PassIndex("lower")
	b, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%02d-lower.%s.zir", lowerAt+1, v)))
	if !strings.HasPrefix(string(b), "graph "+v+"\n") || !strings.Contains(string(b), "=> ") {
		t.Errorf("IR after lower lacks its header or kernel names:\n%.300s", b)
	}
}

// TestCompileToFrom stops the pipeline at every phase, resumes from the
// text, and checks the bundle matches a straight build byte for byte.
func TestCompileToFrom(t *testing.T) {
	model := testmodel.New(t, synth.Tiny)
	ctx := context.Background()
	straight := filepath.Join(t.TempDir(), "straight")
	if err := compiler.Compile(ctx, model, straight, compiler.Options{}); err != nil {
		t.Fatal(err)
	}
	lower, _ := passes.PassIndex("lower") // text IR lacks its streams: resuming stops before it
	for _, p := range passes.Pipeline[:lower] {
		ir := filepath.Join(t.TempDir(), p.Name+".zir")
		if err := compiler.Compile(ctx, model, ir, compiler.Options{CompileTo: p.Name}); err != nil {
			t.Fatalf("compile-to=%s: %v", p.Name, err)
		}
		out := filepath.Join(t.TempDir(), "resumed-from-"+p.Name)
		if err := compiler.Compile(ctx, model, out, compiler.Options{CompileFrom: p.Name, IRPath: ir, VerifyEach: true}); err != nil {
			t.Fatalf("compile-from=%s: %v", p.Name, err)
		}
		testmodel.SameTree(t, straight, out, 1)
	}
}

func TestPhaseErrors(t *testing.T) {
	model := testmodel.New(t, synth.Tiny)
	ctx := context.Background()
	ir := filepath.Join(t.TempDir(), "x.zir")
	if err := compiler.Compile(ctx, model, ir, compiler.Options{CompileTo: "verify"}); err != nil {
		t.Fatal(err)
	}
	src, _ := os.ReadFile(ir)
	edit := func(old, new string) string {
		p := filepath.Join(t.TempDir(), "e.zir")
		os.WriteFile(p, []byte(strings.Replace(string(src), old, new, 1)), 0o644)
		return p
	}
	last := passes.Pipeline[len(passes.Pipeline)-1].Name
	cases := []struct {
		opt  compiler.Options
		want string
	}{
		{compiler.Options{DumpAfter: "all"}, "--dump-after and --dump-dir go together"},
		{compiler.Options{DumpAfter: "liveness,regaloc", DumpDir: t.TempDir()}, `--dump-after: unknown pass "regaloc"`},
		{compiler.Options{CompileTo: "codegen"}, `--compile-to: unknown pass "codegen" (passes: verify`},
		{compiler.Options{CompileFrom: "liveness"}, "--compile-from=PHASE needs the text IR file"},
		{compiler.Options{IRPath: ir}, "needs --compile-from"},
		{compiler.Options{CompileFrom: last, IRPath: ir}, "text IR does not carry: resume before lower"},
		{compiler.Options{CompileFrom: "lower", IRPath: ir}, "text IR does not carry: resume before lower"},
		{compiler.Options{CompileFrom: "memplan", CompileTo: "regalloc", IRPath: ir}, "stops at or before --compile-from=memplan"},
		{compiler.Options{CompileFrom: "verify", IRPath: edit("graph decode.s16.r1", "graph decode.s2.r2")}, "variant 1 is decode.s2.r2; the model's config builds decode.s16.r1"},
		{compiler.Options{CompileFrom: "verify", IRPath: edit("tensor=token_embd.weight", "tensor=nope")}, "names tensor nope, which the GGUF lacks"},
		{compiler.Options{CompileFrom: "verify", IRPath: edit("dims=64x320", "dims=320x64")}, "the GGUF's token_embd.weight is F32 [64 320]"},
		{compiler.Options{CompileFrom: "verify", IRPath: edit(" -> ", " => ")}, "e.zir:"},
		{compiler.Options{CompileFrom: "verify", IRPath: edit(" -> ", " => ")}, "expected '->' between reads and writes"},
	}
	for _, c := range cases {
		err := compiler.Compile(ctx, model, filepath.Join(t.TempDir(), "o"), c.opt)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want %q", c.opt, err, c.want)
		}
	}
}
