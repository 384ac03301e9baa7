package compiler_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/internal/testmodel"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/kernels/cuda"
	"github.com/zrtdev/zrt/kernels/cuda/ptx"
)

// TestMegakernelSchedules: a default cuda:sm_90 build carries a schedule
// for each decode variant and none for the others, byte for byte the same
// in two builds; a cpu build carries none, and the packet streams are the
// same whether or not the schedules are built (the pass only reads them).
func TestMegakernelSchedules(t *testing.T) {
	model := testmodel.New(t, synth.Shape{Arch: "qwen3", Layers: 2, Embd: 256, Heads: 4, HeadsKV: 2, HeadDim: 64, FF: 512, Vocab: 300, Context: 64, Type: ggml.Q4_K, Seed: 5})
	ctx := context.Background()
	read := func(dir string) *bundle.Graph {
		b, err := os.ReadFile(filepath.Join(dir, bundle.GraphFile))
		if err != nil {
			t.Fatal(err)
		}
		g, err := bundle.DecodeGraph(b)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	var graphs [][]byte
	for range 2 {
		out := filepath.Join(t.TempDir(), "b")
		if err := compiler.Compile(ctx, model, out, compiler.Options{Target: "cuda:sm_90", Slots: 4, VerifyEach: true}); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(filepath.Join(out, bundle.GraphFile))
		graphs = append(graphs, b)
		g := read(out)
		decode := 0
		for _, v := range g.Variants {
			if v.Stage == bundle.StageDecode {
				decode++
			}
		}
		if len(g.Schedules) != decode || decode == 0 {
			t.Fatalf("%d schedules for %d decode variants", len(g.Schedules), decode)
		}
		for _, s := range g.Schedules {
			v := g.Variants[s.Variant]
			if v.Stage != bundle.StageDecode || s.SMs != 132 || len(s.Ops) != int(v.Dispatches) {
				t.Errorf("schedule of %s: %d SMs, %d ops for %d dispatches", v.Key(), s.SMs, len(s.Ops), v.Dispatches)
			}
			tiles := 0
			for _, tk := range s.Tasks {
				if tk.Kind == bundle.TaskTile {
					tiles++
				}
			}
			if tiles == 0 {
				t.Errorf("schedule of %s has no matrix tiles", v.Key())
			}
		}
	}
	if !bytes.Equal(graphs[0], graphs[1]) {
		t.Error("two cuda:sm_90 builds' graph files differ")
	}
	out := filepath.Join(t.TempDir(), "cpu")
	if err := compiler.Compile(ctx, model, out, compiler.Options{Slots: 4}); err != nil {
		t.Fatal(err)
	}
	if g := read(out); len(g.Schedules) != 0 {
		t.Errorf("a cpu build carries %d megakernel schedules", len(g.Schedules))
	}
	// Without the pass (--compile-to lower stops before it) the streams
	// are what they are with it.
	fe, err := compiler.Load(model, compiler.Options{Target: "cuda:sm_90", Slots: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer fe.Close()
	if _, err := fe.RunPasses(ctx, compiler.Options{CompileTo: "lower"}); err != nil {
		t.Fatal(err)
	}
	gf, err := bundle.DecodeGraph(graphs[0])
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range fe.Unit.Streams {
		v := gf.Variants[i]
		if len(s.Words) != len(v.Words) {
			t.Fatalf("variant %s: %d dwords without the pass, %d with it", s.Key, len(s.Words), len(v.Words))
		}
		for j := range s.Words {
			if s.Words[j] != v.Words[j] {
				t.Fatalf("variant %s: dword %d differs without the pass", s.Key, j)
			}
		}
	}
}

// TestMegakernelInBundle: megakernel = true puts the persistent kernel's
// PTX, from ZRT_PTX_DIR's directory as every instance's, into the bundle
// as its last kernel (no dispatch names it, so the instances keep their
// places and bytes); a default build carries none, and a cpu build that
// asks for it is refused.
func TestMegakernelInBundle(t *testing.T) {
	model := testmodel.New(t, synth.Shape{Arch: "llama", Layers: 1, Embd: 256, Heads: 4, HeadsKV: 2, FF: 512, Vocab: 300, Context: 64, Type: ggml.Q4_K, Seed: 6})
	files, err := ptx.Embedded().Files()
	if err != nil {
		t.Skipf("no PTX archive: %v", err)
	}
	// A kernel directory: the archive's PTX and a stand-in megakernel.
	dir := t.TempDir()
	for name, b := range files {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(name)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mkPTX := []byte("// stand-in megakernel PTX\n.version 8.0\n")
	if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(ptx.File("sm_90", cuda.MegakernelModule))), mkPTX, 0o644); err != nil {
		t.Fatal(err)
	}
	on := filepath.Join(t.TempDir(), "on.toml")
	if err := os.WriteFile(on, []byte("megakernel = true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	build := func(target, config string) (*bundle.Bundle, error) {
		out := filepath.Join(t.TempDir(), "b")
		if err := compiler.Compile(context.Background(), model, out, compiler.Options{Target: target, ConfigPath: config, PTXDir: dir}); err != nil {
			return nil, err
		}
		b, err := bundle.Open(out, false)
		if err == nil {
			t.Cleanup(func() { b.Close() })
		}
		return b, err
	}
	with, err := build("cuda:sm_90", on)
	if err != nil {
		t.Fatal(err)
	}
	without, err := build("cuda:sm_90", "")
	if err != nil {
		t.Fatal(err)
	}
	last := with.Blobs[len(with.Blobs)-1]
	if last.Name != cuda.MegakernelModule || !bytes.HasPrefix(last.Code, append(mkPTX, 0)) {
		t.Fatalf("last kernel of a megakernel = true build: %q, code %q", last.Name, last.Code[:min(len(last.Code), 40)])
	}
	// The loader's check of meaning (zrt-run's open, zrtc verify) takes
	// it: the streams are checked against the instances only.
	if _, err := kernels.CheckBundle(with.Graph); err != nil {
		t.Fatalf("a megakernel = true bundle fails the loader's check: %v", err)
	}
	// A megakernel build forms none of the fused families the megakernel
	// has no task for, so its other kernels are some of the default
	// build's, each the same code.
	defaults := map[string][]byte{}
	for _, b := range without.Blobs {
		defaults[b.Name] = b.Code
	}
	for i, b := range with.Blobs[:len(with.Blobs)-1] {
		if code, ok := defaults[b.Name]; !ok || b.Name == cuda.MegakernelModule || !bytes.Equal(code, b.Code) {
			t.Fatalf("kernel %d of the megakernel build, %s, is not the default build's", i, b.Name)
		}
	}
	if _, err := build("cpu", on); err == nil || !strings.Contains(err.Error(), "megakernel") {
		t.Fatalf("cpu build with megakernel = true: %v, want a refusal naming megakernel", err)
	}
}
