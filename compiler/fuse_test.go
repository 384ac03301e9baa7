package compiler_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/ir"
	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/internal/testmodel"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/kernels/cuda/ptx"
	"github.com/zrtdev/zrt/passes"
)

// TestFuseMixedQKV compiles a Q4_K_M llama (llama-quantize's mix: Q6_K
// attn_v and ffn_down in some layers) for cuda:sm_90, whole and as rank 0
// of two, and counts each decode variant's ops after fuse: every layer's
// norm and projections are fused, rms_norm_qkv where Q, K and V share a
// type and two rms_norm_matmul launches (Q|K, then V) where they do not,
// so no RMS_NORM or MATMUL is left; each FFN's norm, gate/up and SwiGLU
// are one rms_norm_gate_up_swiglu; the uniform layers' norm+QKV takes
// their RoPE and KV write (rms_norm_qkv_rope_kv_write). With PTX that lacks the two new
// families (Lacks), or for the megakernel, it forms neither, as zrtc did
// before them.
func TestFuseMixedQKV(t *testing.T) {
	s := synth.Shape{Arch: "llama", Layers: 8, Embd: 256, Heads: 4, HeadsKV: 4, FF: 512, Vocab: 300, Context: 256, Mix: "Q4_K_M", Seed: 3}
	model := testmodel.Write(t, t.TempDir(), "m.gguf", s)
	ctx := context.Background()
	mk := filepath.Join(t.TempDir(), "mk.toml")
	if err := os.WriteFile(mk, []byte("megakernel = true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	count := func(tp passes.TP, lacking bool, config string) map[ir.Op]int {
		t.Helper()
		// A PTX directory with a (Q4_K) file of every family (empty: the
		// passes stop before any template is read), or of every family
		// but the two new ones.
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "sm_90"), 0o755)
		for _, f := range kernels.Families() {
			if lacking && (f == "rms_norm_matmul" || f == "rms_norm_gate_up_swiglu" || f == "rms_norm_qkv_rope_kv_write") {
				continue
			}
			abi, _ := kernels.Lookup(f)
			os.WriteFile(filepath.Join(dir, filepath.FromSlash(ptx.File("sm_90", kernels.InstanceName(abi, ggml.Q4_K)))), nil, 0o644)
		}
		os.WriteFile(filepath.Join(dir, "sm_90", "megakernel.ptx"), []byte("//"), 0o644)
		fe, err := compiler.Load(model, compiler.Options{Target: "cuda:sm_90", TP: tp, PTXDir: dir, ConfigPath: config})
		if err != nil {
			t.Fatal(err)
		}
		defer fe.Close()
		if _, err := passes.RunWith(ctx, fe.Unit, passes.RunOptions{StopAfter: "fuse", VerifyEach: true}); err != nil {
			t.Fatal(err)
		}
		for _, g := range fe.Unit.Graphs {
			if g.Key.Stage == ir.Decode && g.Key.Rows == 1 {
				m := map[ir.Op]int{}
				for _, in := range g.Insts {
					m[in.Op]++
				}
				return m
			}
		}
		t.Fatal("no one-row decode variant")
		return nil
	}
	for _, tp := range []passes.TP{{}, {Rank: 0, Ranks: 2}} {
		m := count(tp, false, "")
		// The uniform layers' norm+QKV takes their RoPE and KV write too
		// (one-row decode, F16 cache, adjacent pairs); the mixed layers
		// keep ROPE_KV_WRITE.
		qkv, nm := m[ir.RMS_NORM_FUSED_QKV_ROPE_KV_WRITE], m[ir.RMS_NORM_FUSED_MATMUL]
		if m[ir.RMS_NORM_FUSED_QKV] != 0 || m[ir.ROPE_KV_WRITE] != nm/2 {
			t.Errorf("tp %+v: RoPE and KV writes %v", tp, m)
		}
		if qkv == 0 || nm == 0 || qkv+nm/2 != s.Layers || nm%2 != 0 {
			t.Errorf("tp %+v: %d RMS_NORM_FUSED_QKV_ROPE_KV_WRITE and %d RMS_NORM_FUSED_MATMUL over %d layers: %v", tp, qkv, nm, s.Layers, m)
		}
		// The final norm before the LM head is the one RMS_NORM left.
		if m[ir.MATMUL] != 0 && tp.Ranks == 0 || m[ir.RMS_NORM] > 1 {
			t.Errorf("tp %+v: unfused ops left: %v", tp, m)
		}
		// The one-row variant's FFNs: norm, gate, up and SwiGLU in one.
		if m[ir.RMS_NORM_FUSED_MLP_SWIGLU] != s.Layers || m[ir.SWIGLU] != 0 || m[ir.RMS_NORM_FUSED_MLP_GATE_UP] != 0 {
			t.Errorf("tp %+v: FFNs %v", tp, m)
		}
		old := count(tp, true, "")
		if old[ir.RMS_NORM_FUSED_MATMUL] != 0 || old[ir.RMS_NORM] != 1+nm/2 || old[ir.MATMUL] < 3*nm/2 ||
			old[ir.RMS_NORM_FUSED_MLP_SWIGLU] != 0 || old[ir.SWIGLU] != s.Layers || old[ir.RMS_NORM_FUSED_QKV_ROPE_KV_WRITE] != 0 {
			t.Errorf("tp %+v, without rms_norm_matmul's code: %v", tp, old)
		}
		// A megakernel build: the persistent kernel serves neither new
		// family, so neither forms.
		if tp.Ranks == 0 {
			if m := count(tp, false, mk); m[ir.RMS_NORM_FUSED_MATMUL] != 0 || m[ir.RMS_NORM_FUSED_MLP_SWIGLU] != 0 ||
				m[ir.RMS_NORM_FUSED_QKV_ROPE_KV_WRITE] != 0 {
				t.Errorf("megakernel build: %v", m)
			}
		}
	}
}
