package gguf_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/internal/testmodel"
)

// writeSplit writes model as n parts named as llama-gguf-split names them
// and returns the first part's path.
func writeSplit(t *testing.T, dir string, model []byte, n int) string {
	t.Helper()
	f, err := gguf.Parse(model)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := gguf.Split(f, n)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range parts {
		name := filepath.Join(dir, fmt.Sprintf("m-%05d-of-%05d.gguf", i+1, n))
		if err := os.WriteFile(name, p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, fmt.Sprintf("m-00001-of-%05d.gguf", n))
}

// TestOpenSplit: the parts of a split model read back as the model: its
// metadata, and every tensor with the same bytes.
func TestOpenSplit(t *testing.T) {
	model := testmodel.Bytes(t, synth.Tiny)
	whole, err := gguf.Parse(model)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	first := writeSplit(t, dir, model, 3)
	f, err := gguf.OpenModel(first)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if len(f.Tensors) != len(whole.Tensors) || len(f.Sources()) != 3 {
		t.Fatalf("%d tensors from %d files, want %d from 3", len(f.Tensors), len(f.Sources()), len(whole.Tensors))
	}
	for i := range whole.Tensors {
		w := &whole.Tensors[i]
		g, ok := f.Tensor(w.Name)
		if !ok || !bytes.Equal(f.TensorData(g), whole.TensorData(w)) {
			t.Errorf("tensor %s differs in the split model", w.Name)
		}
	}
	for _, kv := range whole.KV {
		if v, ok := f.Lookup(kv.Key); !ok || v.String() != kv.Value.String() {
			t.Errorf("metadata %s: %v, want %v", kv.Key, v, kv.Value)
		}
	}
	// One file is read as it always was.
	if parts, err := gguf.Parts(filepath.Join(dir, "model.gguf")); err != nil || len(parts) != 1 {
		t.Errorf("Parts of a plain name: %v %v", parts, err)
	}
}

// TestSplitErrors: a later part named, a part missing, or parts whose
// split keys disagree with their names are refused with the reason.
func TestSplitErrors(t *testing.T) {
	model := testmodel.Bytes(t, synth.Tiny)
	dir := t.TempDir()
	first := writeSplit(t, dir, model, 3)
	second := strings.Replace(first, "-00001-", "-00002-", 1)
	third := strings.Replace(first, "-00001-", "-00003-", 1)
	if _, err := gguf.OpenModel(second); err == nil || !strings.Contains(err.Error(), "give its first part, m-00001-of-00003.gguf") {
		t.Errorf("second part named: %v", err)
	}
	// The parts swapped: part 2's file says it is part 3.
	b2, _ := os.ReadFile(second)
	b3, _ := os.ReadFile(third)
	os.WriteFile(second, b3, 0o644)
	if _, err := gguf.OpenModel(first); err == nil || !strings.Contains(err.Error(), "split.no is 2, its name makes it 1") {
		t.Errorf("swapped parts: %v", err)
	}
	os.WriteFile(second, b2, 0o644)
	os.Remove(third)
	if _, err := gguf.OpenModel(first); err == nil || !strings.Contains(err.Error(), "part 3 of 3") {
		t.Errorf("missing part: %v", err)
	}
}
