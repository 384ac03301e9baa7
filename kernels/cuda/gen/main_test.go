package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
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
