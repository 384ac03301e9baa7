package cuda_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/build"
	"github.com/zrtdev/zrt/compiler/config"
	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/bundleset"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/internal/conformance"
	"github.com/zrtdev/zrt/internal/testmodel"
	"github.com/zrtdev/zrt/kernels"
	kcuda "github.com/zrtdev/zrt/kernels/cuda"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/cuda"
	"github.com/zrtdev/zrt/runtime/cuda/nccl"
	"github.com/zrtdev/zrt/runtime/sequence"
)

// needGPUs skips the test unless n CUDA devices and NCCL are here.
func needGPUs(t *testing.T, n int) {
	t.Helper()
	info := cuda.NeedDevices(t, n)
	lib, err := nccl.Open(nccl.Options{})
	if err != nil {
		t.Skipf("no NCCL: %v", err)
	}
	t.Logf("%d × %s; NCCL %s at %s", info.Devices, info.Name, lib.VersionString(), lib.Path())
}

// TestTPParityWithCPU runs the conformance suite on tensor-parallel sets
// on T-CUDA: every shared model whose heads divide, built for cuda:sm_90
// as a set of 2 ranks (and of 4 where 4 GPUs are here), teacher-forced
// against T-CPU's unsplit bundle within T-CUDA's tolerance. A set adds
// only the reordering of the row-parallel sums (NCCL's order, not one
// matmul's) to what TestParityWithCPU allows, which on T-CPU's sets is
// far inside it (runtime/cpu's TestTensorParallel).
func TestTPParityWithCPU(t *testing.T) {
	needGPUs(t, 2)
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprintf("tp%d", n), func(t *testing.T) {
			if n > 2 {
				needGPUs(t, n)
			}
			conformance.Run(t, conformance.Tier{Target: "cuda:sm_90", Options: runtime.Options{Tier: "cuda"}, OracleThreads: 8,
				RelTolerance: relTolerance, RoutedSpikes: 2, TP: n})
		})
	}
}

// TestTPShapes holds T-CUDA sets of synthetic shapes that take each of
// the collectives' paths to T-CPU's unsplit bundle, prompts prefilled
// together and decoded as one batch (several slots' logits gathered in
// one step):
//
//   - ffn-3-blocks: heads whose outputs at 2 ranks are half a Q4_K block
//     (the ranks gather them, ALL_GATHER of values, and project them
//     whole) and an FFN of 3 blocks split 2 + 1;
//   - odd-vocab: a vocabulary of 321 splits 160 + 161, so the logits'
//     gather broadcasts each rank's part instead of ncclAllGather;
//   - moe: routed experts, each expert's FFN split;
//   - q4_k_m: llama-quantize's Q4_K_M mix over 4 layers, whose last two
//     have Q6_K values, so their Q, K and V are not fused and each
//     normalizes on its own: the one-shot all-reduce before takes that
//     norm in (fuseResiduals), as in half the 7B's layers;
//   - wide-batch: 40 sequences of a 2048-wide model decoded together, so
//     a step's all-reduce (its variant's 64 rows, 512 KiB) spreads over
//     more blocks than kcuda.PeerBlocks (kcuda.PeerReduceLaunch), as a
//     64-slot 7B's does.
//
// Each set runs with its collectives through NCCL, then as T-CUDA's
// default has them (the one-shot kernels for the small ones, where the
// bundle has their PTX).
func TestTPShapes(t *testing.T) {
	needGPUs(t, 2)
	cases := []struct {
		name  string
		shape synth.Shape
		batch int // sequences decoded together (0: the two below), and T-CPU's slots for them
	}{
		{"ffn-3-blocks", synth.Shape{Arch: "llama", Layers: 2, Embd: 256, Heads: 4, HeadsKV: 2, FF: 768, Vocab: 320, Context: 256, Type: ggml.Q4_K, Seed: 3}, 0},
		{"odd-vocab", synth.Shape{Arch: "llama", Layers: 2, Embd: 128, Heads: 4, HeadsKV: 4, FF: 256, Vocab: 321, Context: 256, Type: ggml.Q8_0, Seed: 7}, 0},
		{"moe", synth.Shape{Arch: "qwen2moe", Layers: 2, Embd: 128, Heads: 4, HeadsKV: 2, HeadDim: 32, FF: 256, Experts: 4, ExpertsUsed: 2, ExpertFF: 64, Vocab: 320, Context: 256, Type: ggml.Q8_0, Seed: 5}, 0},
		{"q4_k_m", synth.Shape{Arch: "llama", Layers: 4, Embd: 512, Heads: 4, HeadsKV: 4, FF: 1536, Vocab: 1000, Context: 256, Mix: "Q4_K_M", Seed: 11}, 0},
		{"wide-batch", synth.Shape{Arch: "llama", Layers: 2, Embd: 2048, Heads: 16, HeadsKV: 8, FF: 2048, Vocab: 320, Context: 256, Type: ggml.Q8_0, Seed: 13}, 40},
	}
	for _, c := range cases {
		prompts := [][]int32{{1, 17, 42, 99, 7, 250, 3, 64}, {1, 5, 9, 300, 12}}
		forced := [][]int32{{5, 200, 31}, {77, 2, 140}}
		for i := 2; i < c.batch; i++ {
			prompts = append(prompts, []int32{1, int32(3 + i), int32(100 + 3*i), int32(7 * i % 300)})
			forced = append(forced, []int32{int32(11 * i % 320), int32(2 + i), int32(300 - i)})
		}
		t.Run(c.name, func(t *testing.T) {
			tmp := t.TempDir()
			model := testmodel.Write(t, tmp, "model.gguf", c.shape)
			whole := filepath.Join(tmp, "whole")
			if err := compiler.Compile(context.Background(), model, whole, compiler.Options{Target: "cpu", Slots: c.batch}); err != nil {
				t.Fatal(err)
			}
			want := batchLogits(t, whole, runtime.Options{Tier: "cpu", Threads: 8}, prompts, forced)
			set := filepath.Join(tmp, "tp2")
			x := buildTP2(t, model, set)
			m, _ := x.Member("cuda:sm_90")
			// Two ranks' sums are the same bits in either order, so
			// NCCL's collectives, the one-shot kernels and the matmuls
			// that take them in (FuseReduces) give the same logits: a
			// batch, and one sequence alone (the one-row steps).
			const fused = cuda.CollectivesAuto + "+fused"
			same := map[string][2][][][]float32{}
			for _, mode := range []string{cuda.CollectivesNCCL, cuda.CollectivesAuto, fused} {
				opt := runtime.Options{Tier: "cuda"}
				opt.CUDA.Collectives, opt.CUDA.FuseReduces = strings.TrimSuffix(mode, "+fused"), mode == fused
				got := batchLogits(t, m.Path(set), opt, prompts, forced)
				same[mode] = [2][][][]float32{got, batchLogits(t, m.Path(set), opt, prompts[:1], forced[:1])}
				worst := 0.0
				for s := range want {
					for step := range want[s] {
						d, scale := 0.0, 1.0
						for j, w := range want[s][step] {
							d = math.Max(d, math.Abs(float64(w-got[s][step][j])))
							scale = math.Max(scale, math.Abs(float64(w)))
						}
						if d/scale > relTolerance {
							t.Errorf("%s: sequence %d step %d: logits differ by %.3g (relative %.3g, tolerance %g)", mode, s, step, d, d/scale, relTolerance)
						}
						worst = math.Max(worst, d/scale)
					}
				}
				t.Logf("collectives %s: largest relative |Δlogit| against T-CPU's unsplit bundle: %.2e", mode, worst)
			}
			for _, mode := range []string{cuda.CollectivesAuto, fused} {
				for k, what := range []string{"batch", "one sequence"} {
					a, b := same[cuda.CollectivesNCCL][k], same[mode][k]
					for s := range a {
						for step := range a[s] {
							if !slices.Equal(a[s][step], b[s][step]) {
								t.Errorf("%s: sequence %d step %d: logits through NCCL and through %s differ", what, s, step, mode)
							}
						}
					}
				}
			}
		})
	}
}

// buildTP2 builds model's tensor-parallel set of two sm_90 ranks into set
// and reads its index.
func buildTP2(t *testing.T, model, set string) *bundleset.Index {
	t.Helper()
	if _, err := build.Run(context.Background(), build.Options{Model: model, Targets: []string{"cuda:sm_90"}, TP: 2,
		Compiler: compiler.Options{PTXDir: os.Getenv("ZRT_PTX_DIR")}, Out: set}); err != nil {
		t.Fatal(err)
	}
	x, err := bundleset.Read(set)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// batchLogits prefills prompts together through the bundle at dir, then
// decodes forced[i][k] for every sequence i in one batch per step k, and
// returns each sequence's logits after its prompt and after each step.
func batchLogits(t *testing.T, dir string, opt runtime.Options, prompts, forced [][]int32) [][][]float32 {
	t.Helper()
	ctx := context.Background()
	p := openPool(t, dir, opt)
	defer p.Close()
	seqs := make([]*sequence.Sequence, len(prompts))
	for i := range seqs {
		s, err := p.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		seqs[i] = s
	}
	if err := p.PrefillBatch(ctx, seqs, prompts); err != nil {
		t.Fatalf("%s: prefill: %v", dir, err)
	}
	out := make([][][]float32, len(seqs))
	keep := func() {
		for i, s := range seqs {
			out[i] = append(out[i], append([]float32(nil), s.Logits()...))
		}
	}
	keep()
	for k := range forced[0] {
		toks := make([]int32, len(seqs))
		for i := range seqs {
			toks[i] = forced[i][k]
		}
		if err := p.DecodeBatch(ctx, seqs, toks); err != nil {
			t.Fatalf("%s: decode %d: %v", dir, k, err)
		}
		keep()
	}
	return out
}

// TestWalkCollectives walks every variant of both ranks of a T-CUDA set
// against a made-up address map (no GPU needed): each collective's
// dispatch becomes a launch with Collective set, its blob carries the
// one-shot kernel or names NCCL, an all-reduce covers the variant's rows of the model's width, the
// logits' gather every slot's row of the vocabulary, and the attention
// output's gather (heads of half a Q4_K block a rank) the variant's rows
// of the heads' width.
func TestWalkCollectives(t *testing.T) {
	s := synth.Shape{Arch: "llama", Layers: 2, Embd: 256, Heads: 4, HeadsKV: 2, FF: 768, Vocab: 320, Context: 256, Type: ggml.Q4_K, Seed: 3}
	tmp := t.TempDir()
	model := testmodel.Write(t, tmp, "model.gguf", s)
	set := filepath.Join(tmp, "tp2")
	x := buildTP2(t, model, set)
	for r := range 2 {
		m, ok := x.Rank("cuda:sm_90", r)
		if !ok {
			t.Fatalf("no rank %d", r)
		}
		bd, err := bundle.Open(m.Path(set), true)
		if err != nil {
			t.Fatal(err)
		}
		defer bd.Close()
		for _, blob := range bd.Blobs {
			family, _, _ := strings.Cut(blob.Name, ".")
			if !kcuda.Collective(family) {
				continue
			}
			// The one-shot kernel's PTX where this zrtc's archive has it,
			// else the instance's name for NCCL.
			code := string(blob.Code)
			if !strings.HasPrefix(code, kcuda.NCCLBlobPrefix+blob.Name+"\x00") && !strings.Contains(code, ".entry "+kcuda.Entry(blob.Name)+"(") {
				t.Errorf("rank %d: blob %s holds %.60q…, want the one-shot kernel's PTX or its name for NCCL", r, blob.Name, code)
			}
		}
		mem := &cuda.Memory{}
		fence := -1
		for i, reg := range bd.Graph.Regions {
			mem.Base = append(mem.Base, uint64(i+1)<<36)
			mem.Size = append(mem.Size, uint64(reg.Bytes))
			if reg.Name == kernels.RegionFence {
				fence = i
			}
		}
		maxSlots := bd.Graph.Hparams.MaxSlots
		for vi := range bd.Graph.Variants {
			v := &bd.Graph.Variants[vi]
			ls, err := cuda.Walk(v, bd.Blobs, mem, fence)
			if err != nil {
				t.Fatalf("rank %d variant %d: %v", r, vi, err)
			}
			var reduces, logits, heads int
			for _, l := range ls {
				c := l.Collective
				family, _, _ := strings.Cut(l.Name, ".")
				if (c != nil) != kcuda.Collective(family) {
					t.Fatalf("rank %d variant %d: %s with collective %+v", r, vi, l.Name, c)
				}
				switch {
				case c == nil:
				case !c.Gather:
					reduces++
					if c.Rows != int(v.Rows) || c.Cols != s.Embd {
						t.Errorf("rank %d variant %s: all-reduce of %d × %d, want %d × %d", r, v.Key(), c.Rows, c.Cols, v.Rows, s.Embd)
					}
				case c.Cols == s.Vocab:
					logits++
					if !c.BySlot || c.SlotRows != maxSlots || c.Rows != int(v.Rows) || c.X != c.Y {
						t.Errorf("rank %d variant %s: logits gather %+v, want the variant's %d rows by slot, the %d slots' through NCCL, in place", r, v.Key(), c, v.Rows, maxSlots)
					}
				default:
					heads++
					if c.Rows != int(v.Rows) || c.Cols != s.Embd || c.X == c.Y || c.BySlot {
						t.Errorf("rank %d variant %s: gather of %d × %d, want the heads' %d × %d into another register", r, v.Key(), c.Rows, c.Cols, v.Rows, s.Embd)
					}
				}
			}
			// Each layer gathers its heads and sums its FFN's parts; the
			// LM head's logits are gathered once.
			// A draft variant (a default build's) has its first layers.
			layers := s.Layers
			if v.Stage == bundle.StageDraft {
				layers = config.DefaultDraftLayers(s.Layers)
			}
			if reduces != layers || heads != layers || logits != 1 {
				t.Errorf("rank %d variant %s: %d all-reduces, %d head gathers, %d logits gathers; want %d, %d, 1", r, v.Key(), reduces, heads, logits, layers, layers)
			}
			// Run one-shot, every all-reduce takes in the residual add
			// after it: the FFN's sum goes into the residual stream; and
			// the kernel takes in the output norm after the last layer's
			// (the shape's Q, K and V are fused with their norm, so that
			// is the one rms_norm of the stream).
			norms := 0
			for _, l := range ls {
				if family, _, _ := strings.Cut(l.Name, "."); family == "rms_norm" {
					norms++
				}
			}
			fused := cuda.OneShotForTest(slices.Clone(ls), true)
			taken := 0
			for _, l := range fused {
				if c := l.Collective; c != nil && !c.Gather {
					if l.Params[cuda.ReduceResidual] == 0 {
						t.Errorf("rank %d variant %s: an all-reduce without its residual", r, v.Key())
					}
					if l.Params[cuda.ReduceNormY] != 0 {
						taken++
					}
				}
			}
			if norms != 1 || taken != 1 {
				t.Errorf("rank %d variant %s: %d rms_norm launches, %d taken into an all-reduce; want 1, 1", r, v.Key(), norms, taken)
			}
			if want := len(ls) - reduces - taken; len(fused) != want {
				t.Errorf("rank %d variant %s: %d launches with the adds and norms taken in, want %d", r, v.Key(), len(fused), want)
			}
		}
	}
}

// compileSynthTP writes a synthetic model and builds it for target as a
// tensor-parallel set of n ranks, with config (a model config's TOML)
// when it is not empty; it returns rank 0's bundle, which opens the set.
func compileSynthTP(t *testing.T, s synth.Shape, target, config string, n int) string {
	t.Helper()
	b, err := synth.Write(s)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	model := filepath.Join(dir, "m.gguf")
	if err := os.WriteFile(model, b, 0o644); err != nil {
		t.Fatal(err)
	}
	opt := compiler.Options{PTXDir: os.Getenv("ZRT_PTX_DIR")}
	if config != "" {
		opt.ConfigPath = filepath.Join(dir, "m.toml")
		if err := os.WriteFile(opt.ConfigPath, []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	set := filepath.Join(dir, "set")
	if _, err := build.Run(context.Background(), build.Options{Model: model, Targets: []string{target}, TP: n, Compiler: opt, Out: set}); err != nil {
		t.Fatal(err)
	}
	x, err := bundleset.Read(set)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := x.Rank(target, 0)
	if !ok {
		t.Fatalf("set %s has no rank 0 of %s", set, target)
	}
	return m.Path(set)
}
