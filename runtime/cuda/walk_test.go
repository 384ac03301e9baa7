package cuda_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/zrt"
	"github.com/zrtdev/zrt/internal/testmodel"
	"github.com/zrtdev/zrt/kernels"
	kcuda "github.com/zrtdev/zrt/kernels/cuda"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/cuda"
	"github.com/zrtdev/zrt/runtime/sequence"
)

// openPool opens the bundle at dir with opt as a sequence pool, failing
// the test (naming the bundle and the tier) when it cannot; the caller
// closes it.
func openPool(t *testing.T, dir string, opt runtime.Options) *sequence.Pool {
	t.Helper()
	p, err := sequence.Open(dir, opt)
	if err != nil {
		t.Fatalf("open %s on %s: %v", dir, opt.Tier, err)
	}
	return p
}

// compileSynth writes a synthetic model and compiles it for target, with
// config (a model config's TOML) when it is not empty.
func compileSynth(t *testing.T, s synth.Shape, target, config string) string {
	t.Helper()
	dir := t.TempDir()
	model := testmodel.Write(t, dir, "m.gguf", s)
	opt := compiler.Options{Target: target, PTXDir: os.Getenv("ZRT_PTX_DIR")}
	if config != "" {
		opt.ConfigPath = filepath.Join(dir, "m.toml")
		if err := os.WriteFile(opt.ConfigPath, []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "bundle")
	if err := compiler.Compile(context.Background(), model, out, opt); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestWalkFakeMemory compiles models for cuda:sm_90 and walks every
// variant's stream against a made-up address map: no GPU needed. Every
// blob must carry NUL-terminated PTX with the instance's entry, every
// launch's pointers must land in a region and its parameters must follow
// the ABI. Besides the tiny llama, a phi3 (fused projections from the
// file, ROPE_EXT with LongRoPE's factors) and a qwen2moe (experts and
// RESIDUAL_GATED) take the other families. A llama of Q4_K_M's mix,
// whose Q6_K V layers make separate Q, K and V products, has 16-row decode
// variants on the tensor-core tiles: those products stage their common
// input once.
func TestWalkFakeMemory(t *testing.T) {
	for _, c := range []struct {
		s           synth.Shape
		config      string
		reuseStages bool
	}{
		{s: synth.Tiny},
		{s: synth.Shape{Arch: "phi3", Layers: 2, Embd: 256, Heads: 4, HeadsKV: 2, FF: 256, Vocab: 300, Context: 64, Type: ggml.Q6_K, Seed: 3, LongRoPE: true}},
		{s: synth.Shape{Arch: "qwen2moe", Layers: 2, Embd: 256, Heads: 4, HeadsKV: 4, FF: 512, Vocab: 300, Context: 64, Type: ggml.Q8_0, Seed: 4}},
		{s: synth.Shape{Arch: "llama", Layers: 8, Embd: 256, Heads: 4, HeadsKV: 4, FF: 512, Vocab: 300, Context: 64, Type: ggml.Q4_K, Mix: "Q4_K_M", Seed: 5},
			config: "max_slots = 16\ndecode_slots = [1, 16]\n"},
		// Q, K and V with biases and of two types fuse with neither their
		// norm (rms_norm_qkv wants one type, rms_norm_matmul no bias), so
		// K's product takes the records Q's staged.
		{s: synth.Shape{Arch: "qwen2", Layers: 8, Embd: 256, Heads: 4, HeadsKV: 4, FF: 512, Vocab: 300, Context: 64, Type: ggml.Q4_K, Mix: "Q4_K_M", Seed: 5},
			config: "max_slots = 16\ndecode_slots = [1, 16]\n", reuseStages: true},
	} {
		t.Run(c.s.Arch+c.s.Mix, func(t *testing.T) { walkFakeMemory(t, c.s, c.config, c.reuseStages) })
	}
}

func walkFakeMemory(t *testing.T, s synth.Shape, config string, reuseStages bool) {
	dir := compileSynth(t, s, "cuda:sm_90", config)
	b, err := bundle.Open(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, blob := range b.Blobs {
		if blob.Header.Target != zrt.SM90 {
			t.Errorf("%s: target %s", blob.Name, blob.Header.Target)
		}
	}
	mem := &cuda.Memory{}
	fence := -1
	totalReused, splits := 0, 0
	for i, r := range b.Graph.Regions {
		mem.Base = append(mem.Base, uint64(i+1)<<36)
		mem.Size = append(mem.Size, uint64(r.Bytes))
		if r.Name == "fence" {
			fence = i
		}
	}
	for vi := range b.Graph.Variants {
		v := &b.Graph.Variants[vi]
		ls, err := cuda.Walk(v, b.Blobs, mem, fence)
		if err != nil {
			t.Fatalf("variant %d: %v", vi, err)
		}
		staged, reused, rest := 0, 0, 0
		for i, l := range ls {
			if l.Shape.Entry == kcuda.EntryRest {
				// The decode rows' launch beside a prefill tile: the
				// same kernel and parameters as the tile before it.
				rest++
				if i == 0 || ls[i-1].Shape.Entry != kcuda.EntryTile || ls[i-1].Kernel != l.Kernel || !slices.Equal(ls[i-1].Params, l.Params) {
					t.Errorf("variant %d: launch %d (%s) takes a tile's other rows, but follows no tile of its kernel", vi, i, l.Name)
				}
			}
			abi, _, err := kernels.SplitInstance(l.Name)
			if err != nil {
				t.Fatal(err)
			}
			want := len(abi.Bufs) + len(abi.Push) + len(abi.Spec)
			if l.Staging > 0 { // and the staging buffer, after a stage launch of the same kernel or a product of the same input
				want++
				if l.Shape.Entry == kcuda.EntrySplit {
					// The split decode attention keeps its partial
					// states there, and has no stage launch; only decode
					// variants split.
					splits++
					if l.Shape.Stage != nil || l.Staging != l.Shape.Staged || v.Stage == bundle.StagePrefill {
						t.Errorf("variant %d (%s): launch %d (%s): split attention %+v with a stage launch or another buffer, or in a prefill variant", vi, v.Key(), i, l.Name, l.Shape)
					}
				} else if l.Shape.Entry != kcuda.EntryStage {
					staged++
					switch {
					case i > 0 && ls[i-1].Shape.Entry == kcuda.EntryStage && ls[i-1].Kernel == l.Kernel:
					case i > 0 && ls[i-1].Staging > 0 && kcuda.SameStage(ls[i-1].Name, l.Name) && ls[i-1].Params[0] == l.Params[0]:
						reused++
					default:
						t.Errorf("variant %d: launch %d (%s) stages its rows, but no stage launch precedes it", vi, i, l.Name)
					}
				}
			}
			if len(l.Params) != want || len(l.Sizes) != want {
				t.Errorf("%s: %d parameters, ABI has %d", l.Name, len(l.Params), want)
			}
			for i, role := range abi.Bufs {
				p := l.Params[i]
				if p == 0 && abi.Optional[role] {
					continue
				}
				ok := false
				for r := range mem.Base {
					ok = ok || (p >= mem.Base[r] && p <= mem.Base[r]+mem.Size[r])
				}
				if !ok {
					t.Errorf("%s: %s = %#x outside every region", l.Name, role, p)
				}
			}
			if l.Shape.Grid[0] == 0 || l.Shape.Block[0] == 0 {
				t.Errorf("%s: empty launch %+v", l.Name, l.Shape)
			}
		}
		if len(ls) != int(v.Dispatches)+staged-reused+rest {
			t.Errorf("variant %d: %d launches for %d dispatches, %d of them staged, %d of those on the records before, %d tiles' other rows", vi, len(ls), v.Dispatches, staged, reused, rest)
		}
		totalReused += reused
	}
	if splits == 0 { // a decode step of few rows over these few heads is few blocks
		t.Error("no decode attention launch splits its rows' keys")
	}
	if reuseStages && totalReused == 0 {
		t.Error("no staged launch reuses the records of the one before it")
	}
	// A stream walked against a map missing its regions is refused.
	if _, err := cuda.Walk(&b.Graph.Variants[0], b.Blobs, &cuda.Memory{Base: mem.Base[:1], Size: mem.Size[:1]}, fence); err == nil {
		t.Error("walk with a truncated memory map succeeded")
	}
}

// TestTierSelection: a cuda bundle on the cpu tier, and a cpu bundle on
// the cuda tier, are refused with the rebuild hint; without a GPU, the
// cuda tier fails with the probe's reason.
func TestTierSelection(t *testing.T) {
	cudaDir := compileSynth(t, synth.Tiny, "cuda:sm_90", "")
	if _, err := sequence.Open(cudaDir, runtime.Options{Tier: "cpu"}); err == nil {
		t.Error("cpu tier opened a cuda bundle")
	}
	cpuDir := compileSynth(t, synth.Tiny, "cpu", "")
	if _, err := sequence.Open(cpuDir, runtime.Options{Tier: "cuda"}); err == nil {
		t.Error("cuda tier opened a cpu bundle")
	} else {
		t.Log(err)
	}
	e, err := sequence.Open(cudaDir, runtime.Options{Tier: "auto"})
	if err != nil {
		t.Logf("auto on a cuda bundle without CUDA: %v", err)
		return
	}
	defer e.Close()
	if e.TierName() != "cuda" {
		t.Errorf("auto picked %s for a cuda bundle", e.TierName())
	}
}
