package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/kernels/cuda"
)

// TestGeneratedFresh fails when the committed families.cuh, iq3s_grid.cuh
// or instance .cu files are not what the generator writes from the
// current tables (the family table, kernels/quant's IQ3_S grid), or
// a generated .cu no instance wants is left behind: run make generate
// (and then make ptx). CI also checks this by running make generate on a
// clean clone; this test says so sooner, in go test.
func TestGeneratedFresh(t *testing.T) {
	files, err := render()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join("..", name))
		if err != nil {
			t.Errorf("%v: run make generate", err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("kernels/cuda/%s differs from the generator's output: run make generate", name)
		}
	}
	old, err := stale("..", files)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range old {
		t.Errorf("%s is generated but no instance wants it: run make generate", p)
	}
}

// TestRenderDeterministic guards the CI check: output that varied between
// runs (map order, say) would make make generate dirty a clean tree.
func TestRenderDeterministic(t *testing.T) {
	a, err := render()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		b, _ := render()
		if len(a) != len(b) {
			t.Fatalf("render gave %d then %d files", len(a), len(b))
		}
		for n := range a {
			if !bytes.Equal(a[n], b[n]) {
				t.Fatalf("render of %s differs between runs", n)
			}
		}
	}
}

// TestWriteSweepsStale checks that write removes a generated .cu no
// instance wants and keeps a hand-written one.
func TestWriteSweepsStale(t *testing.T) {
	dir := t.TempDir()
	files := map[string][]byte{"a.cu": []byte(header + "// a\n")}
	gone := filepath.Join(dir, "gone.cu")
	kept := filepath.Join(dir, "hand.cu")
	os.WriteFile(gone, []byte(header+"// old\n"), 0o644)
	os.WriteFile(kept, []byte("// written by hand\n"), 0o644)
	if err := write(dir, files); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Error("stale generated file kept")
	}
	if _, err := os.Stat(kept); err != nil {
		t.Error("hand-written file removed")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a.cu")); err != nil || !bytes.Equal(b, files["a.cu"]) {
		t.Errorf("a.cu = %q, %v", b, err)
	}
}

// TestKVInstanceMacros: a quantized cache's instance .cu defines the
// cache's element types (ggml ids, which kv.cuh holds to T_Q8_0) and
// rotations as its name says, and an F16 cache's instance defines none
// (its source stays the one F16 bundles were built from).
func TestKVInstanceMacros(t *testing.T) {
	insts, err := cuda.Instances()
	if err != nil {
		t.Fatal(err)
	}
	quantized := 0
	for _, in := range insts {
		src := string(instance(in))
		has := strings.Contains(src, "#define KV_K ")
		if !in.ABI.KVTyped || in.KV.IsF16() {
			if has {
				t.Errorf("%s: an F16 instance defines KV_K:\n%s", in.Name, src)
			}
			continue
		}
		quantized++
		for _, want := range []string{
			fmt.Sprintf("#define KV_K %d ", uint32(in.KV.K)), fmt.Sprintf("#define KV_V %d ", uint32(in.KV.V)),
			fmt.Sprintf("#define KV_RK %d\n", in.KV.RotK), fmt.Sprintf("#define KV_RV %d\n", in.KV.RotV),
		} {
			if !strings.Contains(src, want) {
				t.Errorf("%s: no %q in\n%s", in.Name, want, src)
			}
		}
	}
	if quantized == 0 {
		t.Error("no quantized cache's instance")
	}
}
