package main

import (
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/ggml"
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

	p := testmodel.Retyped(t, synth.Tiny, "blk.1.ffn_down.weight", ggml.NVFP4)
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
