package main

import (
	"path/filepath"
	"testing"

	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/gguf"
)

// TestSynthFamilyFlags: the expert and window flags reach the file
// (--expert-ff and --sliding-window spell --expert-ffn and --window too),
// gpt-oss defaults to the released checkpoints' Q8_0 beside MXFP4 experts
// and an original context of 4096, and the file builds.
func TestSynthFamilyFlags(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "g.gguf")
	if _, err := zrtc(t, "synth", "--arch", "gpt-oss", "--embd", "64", "--heads", "4", "--heads-kv", "2", "--head-dim", "16",
		"--experts", "4", "--experts-used", "2", "--expert-ff", "32", "--sliding-window", "8", "--vocab", "300", "-o", model); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for k, want := range map[string]uint64{"gpt-oss.expert_count": 4, "gpt-oss.expert_used_count": 2, "gpt-oss.expert_feed_forward_length": 32,
		"gpt-oss.attention.sliding_window": 8, "gpt-oss.rope.scaling.original_context_length": 4096, "gpt-oss.context_length": 131072} {
		if v, err := f.Uint(k); err != nil || v != want {
			t.Errorf("%s = %d (%v), want %d", k, v, err, want)
		}
	}
	for name, typ := range map[string]ggml.Type{"blk.0.attn_q.weight": ggml.Q8_0, "blk.0.ffn_up_exps.weight": ggml.MXFP4, "output.weight": ggml.Q8_0} {
		if ti, ok := f.Tensor(name); !ok || ti.Type != typ {
			t.Errorf("%s: %v, want %s", name, ti, typ)
		}
	}
	if _, err := zrtc(t, "build", model, "-q", "-o", filepath.Join(dir, "b")); err != nil {
		t.Fatal(err)
	}
}
