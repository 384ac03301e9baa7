package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/internal/testmodel"
)

// TestInspectMarksUnsupported: inspect lists a file whose tensor types zrt
// cannot compute with in full, marks those tensors, and ends with the
// build's verdict; the same listing of a buildable file says so.
func TestInspectMarksUnsupported(t *testing.T) {
	out, err := zrtc(t, "inspect", testmodel.Tiny(t))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "build for cpu: supported") || strings.Contains(out, "unsupported") {
		t.Errorf("tiny model:\n%s", out)
	}

	b, err := synth.Write(synth.Tiny)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	w := gguf.NewWriter()
	for _, kv := range f.KV {
		w.Set(kv.Key, kv.Value)
	}
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		typ, data := ti.Type, f.TensorData(ti)
		if ti.Name == "blk.1.ffn_down.weight" {
			typ, data = ggml.NVFP4, make([]byte, ti.Elements()/64*36)
		}
		if err := w.AddTensor(ti.Name, typ, ti.Dims, data); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(t.TempDir(), "nvfp4.gguf")
	if err := os.WriteFile(p, w.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = zrtc(t, "inspect", p)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"blk.1.ffn_down.weight", "NVFP4", "unsupported\n", "NVFP4 (id 40)", "unsupported on cpu",
		"build for cpu: refused: unsupported tensor type NVFP4 (id 40) in blk.1.ffn_down.weight",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("listing lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "  unsupported\n"); n != 1 {
		t.Errorf("%d tensors marked unsupported, want 1", n)
	}
}
