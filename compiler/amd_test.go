package compiler_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/support"
	"github.com/zrtdev/zrt/format/zrt"
	"github.com/zrtdev/zrt/internal/testmodel"
	"github.com/zrtdev/zrt/kernels/amd"
)

// amdModels are the shared models the AMD targets must build: stories260K
// and the synthetic models of the llama, qwen2, qwen3 and qwen3moe
// families (issue #20).
func amdModels() []string {
	var out []string
	for _, pat := range []string{"../../shared/models/*.gguf", "../../shared/models/synthetic/syn-llama-*.gguf",
		"../../shared/models/synthetic/syn-qwen2-*.gguf", "../../shared/models/synthetic/syn-qwen3-*.gguf",
		"../../shared/models/synthetic/syn-qwen3moe-*.gguf"} {
		m, _ := filepath.Glob(pat)
		out = append(out, m...)
	}
	return out
}

// checkAMDBundle holds every kernel blob of an AMD bundle to its code
// object: the header's wavefront size, workgroup size, LDS bytes and VGPR
// and SGPR counts are the object's own, its slots lie after the object and
// are patched, and the object is for the target's processor.
func checkAMDBundle(t *testing.T, dir, gfx string, target zrt.Target) {
	t.Helper()
	blobs, _ := filepath.Glob(filepath.Join(dir, "kernels", "*.zrt"))
	if len(blobs) == 0 {
		t.Fatalf("%s: no kernel blobs", dir)
	}
	for _, p := range blobs {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b, err := zrt.Decode(raw)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		h := b.Header
		if h.Target != target {
			t.Errorf("%s: target %s, want %s", b.Name, h.Target, target)
		}
		co, err := amd.ParseCodeObject(b.Code)
		if err != nil {
			t.Fatalf("%s: %v", b.Name, err)
		}
		k, ok := co.Kernel(amd.Entry(b.Name))
		if !ok || co.Processor() != gfx {
			t.Fatalf("%s: code object for %q lacks kernel %s", b.Name, co.Processor(), amd.Entry(b.Name))
		}
		if h.SubgroupSize != k.WavefrontSize || h.Workgroup != k.ReqdWorkgroupSize || h.LDSBytes != k.GroupSegmentFixedSize ||
			h.VGPRCount != k.VGPRCount || h.SGPRCount != k.SGPRCount {
			t.Errorf("%s: header wave %d wg %v lds %d vgpr %d sgpr %d; code object %d %v %d %d %d", b.Name,
				h.SubgroupSize, h.Workgroup, h.LDSBytes, h.VGPRCount, h.SGPRCount,
				k.WavefrontSize, k.ReqdWorkgroupSize, k.GroupSegmentFixedSize, k.VGPRCount, k.SGPRCount)
		}
		if h.LDSBytes != k.Descriptor.GroupSegmentFixedSize || !k.Descriptor.Wave32() || h.SubgroupSize != 32 ||
			h.Workgroup != [3]uint32{amd.WorkgroupSize, 1, 1} {
			t.Errorf("%s: header disagrees with the kernel descriptor %+v", b.Name, k.Descriptor)
		}
		for _, s := range b.Slots {
			if !s.Patched || s.CodeOffset < uint32(len(b.Code)-4*len(b.Slots)) {
				t.Errorf("%s: slot %s at %d (patched %v), not a patched dword after the code object", b.Name, s.Name, s.CodeOffset, s.Patched)
			}
		}
	}
}

// TestAMDBuilds compiles the shared llama/qwen2/qwen3/qwen3moe models and
// a synthetic model for both AMD targets, twice, and checks the bundles
// are byte-identical and their blobs are their code objects' (no LLVM
// needed: the objects are committed).
func TestAMDBuilds(t *testing.T) {
	var models []string
	for _, s := range []synth.Shape{synth.Tiny, {Arch: "qwen3", Layers: 1, Embd: 256, Heads: 4, HeadsKV: 2, HeadDim: 64, FF: 256, Vocab: 300, Context: 64, Type: ggml.Q4_K, Seed: 5}} {
		models = append(models, testmodel.New(t, s))
	}
	shared := amdModels()
	if len(shared) == 0 {
		t.Log("no shared models under ../../shared/models: building synthetic models only")
	}
	if testing.Short() && len(shared) > 2 {
		shared = shared[:2]
	}
	models = append(models, shared...)
	for _, tg := range []struct {
		name string
		code zrt.Target
	}{{"amd:gfx1201", zrt.GFX1201}, {"amd:gfx1100", zrt.GFX1100}} {
		gfx := strings.TrimPrefix(tg.name, "amd:")
		for _, m := range models {
			name := strings.TrimSuffix(filepath.Base(m), ".gguf")
			t.Run(gfx+"/"+name, func(t *testing.T) {
				a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
				for _, out := range []string{a, b} {
					if err := compiler.Compile(context.Background(), m, out, compiler.Options{Target: tg.name, VerifyEach: out == a}); err != nil {
						t.Fatal(err)
					}
				}
				testmodel.SameTree(t, a, b, 3)
				checkAMDBundle(t, a, gfx, tg.code)
			})
		}
	}
}

// A family whose operations the AMD targets have no kernels for yet is
// unsupported there, not malformed: the build says which operation,
// before any pass runs.
func TestAMDRefusesMissingKernels(t *testing.T) {
	dir := t.TempDir()
	model := testmodel.Write(t, dir, "g.gguf", synth.Shape{Arch: "gemma2", Layers: 2, Embd: 64, Heads: 4, HeadsKV: 2, HeadDim: 32, FF: 128, Vocab: 300,
		Context: 64, Type: ggml.Q8_0, Window: 8, Seed: 1})
	err := compiler.Compile(context.Background(), model, filepath.Join(dir, "b"), compiler.Options{Target: "amd:gfx1201"})
	if !support.Is(err) || !strings.Contains(err.Error(), "unsupported operation SCALE in architecture gemma2: target amd:gfx1201 has no scale kernel") {
		t.Fatalf("gemma2 for amd:gfx1201: %v", err)
	}
}
