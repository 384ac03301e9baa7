package cuda_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/ggml"
	kcuda "github.com/zrtdev/zrt/kernels/cuda"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/cuda"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
	"github.com/zrtdev/zrt/runtime/sequence"
)

// megakernelShapes are the models the persistent kernel is held to: a
// llama of Q4_K_M's mix (Q4_K and Q6_K products, some fused with their
// norms, some not) and a qwen3 of Q4_K (per-head Q/K norms fused with
// RoPE and the KV write, GQA).
var megakernelShapes = []synth.Shape{
	{Arch: "llama", Layers: 4, Embd: 256, Heads: 4, HeadsKV: 2, FF: 512, Vocab: 320, Context: 128, Type: ggml.Q4_K, Mix: "Q4_K_M", Seed: 21},
	{Arch: "qwen3", Layers: 3, Embd: 256, Heads: 4, HeadsKV: 2, HeadDim: 64, FF: 512, Vocab: 320, Context: 128, Type: ggml.Q4_K, Seed: 22},
}

const megakernelConfig = "max_slots = 8\ndecode_slots = [1, 2, 4, 8]\n"

// megakernelOn is megakernelConfig with the persistent kernel in the
// bundle (its PTX from ZRT_PTX_DIR, as the instances', or zrtc's archive).
const megakernelOn = megakernelConfig + "megakernel = true\n"

// TestMegakernelTables builds, without a GPU, the persistent kernel's
// tables for every decode variant of megakernelShapes, of one to eight
// rows (and of a llama of the qwen2 tokenizer's vocabulary, whose lm_head
// blocks are no whole passes, and of a llama as wide as the 7B shape, whose two-row products of
// k = 4096 take the _rows entry, as every product of more rows does in
// the kernel) (launches walked against made-up addresses as the kernel
// runs them, WalkMegakernel): every dispatch must be one the
// kernel serves and every task a box of its launch's blocks, the boxes of
// a dispatch covering each block once (buildMkTables checks that), and
// every tile of a matrix product prefetching weights inside a region. Then
// it regroups the tasks for GPUs that keep fewer blocks resident than the
// schedule's queues (or two a multiprocessor) and holds every grouping to
// the deadlock rule: each task in one queue, each queue in task order.
func TestMegakernelTables(t *testing.T) {
	wide := synth.Shape{Arch: "llama", Layers: 1, Embd: 4096, Heads: 32, HeadsKV: 8, FF: 512, Vocab: 320, Context: 128, Type: ggml.Q4_K, Mix: "Q4_K_M", Seed: 23}
	// A vocabulary of the qwen2 tokenizer's 151 669 tokens: the lm_head's
	// launch (capped blocks) makes 575 features a block, no whole passes.
	vocab := synth.Shape{Arch: "llama", Layers: 1, Embd: 256, Heads: 4, HeadsKV: 2, FF: 512, Vocab: 151669, Context: 128, Type: ggml.Q4_K, Mix: "Q4_K_M", Seed: 24}
	for _, s := range append(slices.Clone(megakernelShapes), wide, vocab) {
		t.Run(fmt.Sprintf("%s%s-%d", s.Arch, s.Mix, s.Embd), func(t *testing.T) {
			b, ls := walkedBundle(t, s, megakernelOn)
			ones := 0 // variants of one and two rows
			for _, sc := range b.Graph.Schedules {
				v := &b.Graph.Variants[sc.Variant]
				qs, _, size, err := cuda.MkTables(&sc, ls[sc.Variant], int(v.Rows), 0)
				if err != nil {
					t.Fatalf("%s: %v", v.Key(), err)
				}
				checkSpread(t, v.Key(), &sc, ls[sc.Variant], int(v.Rows))
				rowsEntries, matrices := 0, 0
				for _, l := range ls[sc.Variant] {
					if family, _, _ := strings.Cut(l.Name, "."); kcuda.MatrixFamily(family) {
						matrices++
					}
					if l.Shape.Entry == kcuda.EntryRows {
						rowsEntries++
					}
				}
				if s.Embd >= 4096 && v.Rows == 2 && rowsEntries == 0 || v.Rows > 2 && rowsEntries != matrices {
					t.Fatalf("%s: %d of %d products take the _rows entry", v.Key(), rowsEntries, matrices)
				}
				ones += int(v.Rows)
				if len(qs) != int(sc.SMs) || size == 0 {
					t.Fatalf("%s: %d queues, %d bytes of tables; want the schedule's %d", v.Key(), len(qs), size, sc.SMs)
				}
				// Every tile of a matrix product prefetches its weights: a
				// range inside one region (the weights'), none elsewhere.
				addr, n, matrix, err := cuda.MkPrefetch(&sc, ls[sc.Variant], int(v.Rows))
				if err != nil {
					t.Fatal(err)
				}
				for ti := range addr {
					if matrix[ti] != (n[ti] > 0) {
						t.Fatalf("%s: task %d (matrix %v) prefetches %d bytes", v.Key(), ti, matrix[ti], n[ti])
					}
					if n[ti] == 0 {
						continue
					}
					r := int(addr[ti]>>36) - 1 // walkedBundle's made-up bases
					if r < 0 || r >= len(b.Graph.Regions) || (addr[ti]-uint64(r+1)<<36)+uint64(n[ti]) > uint64(b.Graph.Regions[r].Bytes) {
						t.Fatalf("%s: task %d prefetches [%#x, +%d), outside every region", v.Key(), ti, addr[ti], n[ti])
					}
				}
				for _, blocks := range []int{1, 7, 66, 2 * int(sc.SMs)} {
					qs, tasks, _, err := cuda.MkTables(&sc, ls[sc.Variant], int(v.Rows), blocks)
					if err != nil {
						t.Fatal(err)
					}
					seen := make([]bool, tasks)
					for qi, q := range qs {
						if !slices.IsSorted(q) {
							t.Fatalf("%s at %d blocks: queue %d is out of task order", v.Key(), blocks, qi)
						}
						for _, ti := range q {
							if seen[ti] {
								t.Fatalf("%s at %d blocks: task %d queued twice", v.Key(), blocks, ti)
							}
							seen[ti] = true
						}
					}
					if i := slices.Index(seen, false); i >= 0 || len(qs) != blocks {
						t.Fatalf("%s at %d blocks: %d queues, task %d in none", v.Key(), blocks, len(qs), i)
					}
				}
			}
			if ones != 1+2+4+8 {
				t.Fatalf("decode variants of %d rows in all with schedules; want those of 1, 2, 4 and 8", ones)
			}
		})
	}
}

// checkSpread holds the tier's tasks to what spread promises: no task of
// more than one block but a matrix product's tiles (up to the bound of
// pieces), a split attention's blocks each a task, every counter's count
// the tasks that signal it and every wait for its counter's whole count,
// and the tasks' order by dispatch kept (a task waits only on counters of
// earlier dispatches).
func checkSpread(t *testing.T, key string, sc *bundle.Schedule, ls []cuda.Launch, rows int) {
	t.Helper()
	boxes, sigs, waits, err := cuda.MkCounts(sc, ls, rows)
	if err != nil {
		t.Fatal(err)
	}
	count := map[uint32]uint32{}
	for _, c := range sigs {
		count[c]++
	}
	for _, w := range waits {
		if w.Count != count[w.Counter] {
			t.Fatalf("%s: a wait for counter %d to reach %d, which %d tasks signal", key, w.Counter, w.Count, count[w.Counter])
		}
	}
	splits := 0
	for _, l := range ls {
		if l.Shape.Entry == kcuda.EntrySplit {
			splits += int(l.Shape.Grid[0] * l.Shape.Grid[1] * l.Shape.Grid[2])
		}
	}
	ones := 0
	for _, b := range boxes {
		if (b[1]-b[0])*(b[3]-b[2])*(b[5]-b[4]) == 1 {
			ones++
		}
	}
	if ones < splits {
		t.Fatalf("%s: %d tasks of one block, the split attention alone has %d blocks", key, ones, splits)
	}
	if len(boxes) <= len(sc.Tasks) && splits > 0 {
		t.Fatalf("%s: %d tasks from the schedule's %d, with a split attention", key, len(boxes), len(sc.Tasks))
	}
}

// walkedBundle compiles s for cuda:sm_90 and walks every variant against
// made-up addresses, the decode variants as the persistent kernel runs
// them.
func walkedBundle(t *testing.T, s synth.Shape, config string) (*bundle.Bundle, [][]cuda.Launch) {
	t.Helper()
	b, err := bundle.Open(compileSynth(t, s, "cuda:sm_90", config), true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	mem := &cuda.Memory{}
	fence := -1
	for i, r := range b.Graph.Regions {
		mem.Base = append(mem.Base, uint64(i+1)<<36)
		mem.Size = append(mem.Size, uint64(r.Bytes))
		if r.Name == "fence" {
			fence = i
		}
	}
	var out [][]cuda.Launch
	for vi := range b.Graph.Variants {
		walk := cuda.Walk
		if b.Graph.Variants[vi].Stage != bundle.StagePrefill {
			walk = cuda.WalkMegakernel
		}
		ls, err := walk(&b.Graph.Variants[vi], b.Blobs, mem, fence)
		if err != nil {
			t.Fatalf("variant %d: %v", vi, err)
		}
		out = append(out, ls)
	}
	return b, out
}

// TestMegakernelMatchesGraphAndCPU runs megakernelShapes on the GPU: a
// prompt, then eight greedy decode steps, with the persistent kernel (its
// one- and two-row decode variants must run on it: Tier.Megakernel), with it
// switched off (the graph path), and on T-CPU teacher-forced with the
// megakernel's tokens. The persistent kernel runs the graph path's code
// block by block, so its logits and greedy tokens (the device's argmax)
// must be the graph path's bit for bit; against T-CPU they are held to the
// parity tolerance (relTolerance). A second run of the megakernel must
// repeat the first exactly (no race between its tasks shows as noise).
// Two sequences decoded together (the two-row variant) must match the
// graph path bit for bit too.
func TestMegakernelMatchesGraphAndCPU(t *testing.T) {
	if _, err := driver.Probe(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	for _, s := range megakernelShapes {
		t.Run(s.Arch+s.Mix, func(t *testing.T) {
			dir := compileSynth(t, s, "cuda:sm_90", megakernelOn)
			requireMegakernel(t, dir)
			on := greedyRun(t, dir, runtime.Options{Tier: "cuda"}, nil)
			again := greedyRun(t, dir, runtime.Options{Tier: "cuda"}, nil)
			off := greedyRun(t, dir, runtime.Options{Tier: "cuda", CUDA: cuda.Options{NoMegakernel: true}}, nil)
			cpu := greedyRun(t, compileSynth(t, s, "cpu", megakernelConfig), runtime.Options{Tier: "cpu"}, on.tokens)
			t.Logf("tokens %v", on.tokens)
			for step := range on.logits {
				if !slices.Equal(on.tokens, off.tokens) {
					t.Fatalf("greedy tokens: %v with the megakernel, %v on the graph path", on.tokens, off.tokens)
				}
				if !slices.Equal(on.tokens, again.tokens) {
					t.Fatalf("greedy tokens: %v, then %v with the megakernel", on.tokens, again.tokens)
				}
				for j := range on.logits[step] {
					a, b, c := on.logits[step][j], off.logits[step][j], again.logits[step][j]
					if math.Float32bits(a) != math.Float32bits(b) || math.Float32bits(a) != math.Float32bits(c) {
						t.Fatalf("step %d logit %d: %v with the megakernel (%v again), %v on the graph path", step, j, a, c, b)
					}
				}
				scale, worst := 1.0, 0.0
				for _, v := range cpu.logits[step] {
					scale = math.Max(scale, math.Abs(float64(v)))
				}
				for j, v := range cpu.logits[step] {
					d := math.Abs(float64(on.logits[step][j])-float64(v)) / scale
					if !(d <= relTolerance) {
						t.Fatalf("step %d logit %d: %v with the megakernel, %v on T-CPU", step, j, on.logits[step][j], v)
					}
					worst = math.Max(worst, d)
				}
				t.Logf("step %d: %.2e of the largest logit from T-CPU", step, worst)
			}
			// Two sequences a step: the two-row variant.
			offOpt := runtime.Options{Tier: "cuda", CUDA: cuda.Options{NoMegakernel: true}}
			pair, pairOff := batchRun(t, dir, runtime.Options{Tier: "cuda"}, 2, false), batchRun(t, dir, offOpt, 2, false)
			for i := range pair {
				for j := range pair[i] {
					if math.Float32bits(pair[i][j]) != math.Float32bits(pairOff[i][j]) {
						t.Fatalf("two rows a step: result %d logit %d: %v with the megakernel, %v on the graph path", i, j, pair[i][j], pairOff[i][j])
					}
				}
			}
			// Three, four and eight sequences a step (the four- and
			// eight-row variants): the kernel's products take the _rows
			// entry where the graph path takes the tensor-core tiles, so
			// its logits are held to the parity tolerance against the
			// graph path's, and to themselves bit for bit (fed fixed
			// tokens: greedy ones could part at a near tie).
			for _, n := range []int{3, 4, 8} {
				mk, mk2, gr := batchRun(t, dir, runtime.Options{Tier: "cuda"}, n, true), batchRun(t, dir, runtime.Options{Tier: "cuda"}, n, true),
					batchRun(t, dir, offOpt, n, true)
				worst := 0.0
				for i := range mk {
					scale := 1.0
					for _, v := range gr[i] {
						scale = math.Max(scale, math.Abs(float64(v)))
					}
					for j := range mk[i] {
						if math.Float32bits(mk[i][j]) != math.Float32bits(mk2[i][j]) {
							t.Fatalf("%d rows a step: result %d logit %d: %v, then %v with the megakernel", n, i, j, mk[i][j], mk2[i][j])
						}
						d := math.Abs(float64(mk[i][j])-float64(gr[i][j])) / scale
						if !(d <= relTolerance) {
							t.Fatalf("%d rows a step: result %d logit %d: %v with the megakernel, %v on the graph path", n, i, j, mk[i][j], gr[i][j])
						}
						worst = math.Max(worst, d)
					}
				}
				t.Logf("%d rows a step: %.2e of the largest logit from the graph path", n, worst)
			}
		})
	}
}

// batchRun decodes n sequences together for four steps, each feeding its
// greedy token (or, fixed, a token of the step and sequence), and returns
// every sequence's logits after every step.
func batchRun(t *testing.T, dir string, opt runtime.Options, n int, fixed bool) [][]float32 {
	t.Helper()
	p := openPool(t, dir, opt)
	defer p.Close()
	ctx := context.Background()
	var seqs []*sequence.Sequence
	for i := range n {
		s, err := p.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Release()
		if _, err := s.Prefill(ctx, []int32{1, int32(30 + 11*i), int32(200 - 7*i)}); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, s)
	}
	var out [][]float32
	for step := range 4 {
		var toks []int32
		for i, s := range seqs {
			tok := s.Greedy()
			if fixed {
				tok = int32(5 + 37*step + 11*i)
			}
			toks = append(toks, tok)
		}
		if err := p.DecodeBatch(ctx, seqs, toks); err != nil {
			t.Fatal(err)
		}
		for _, s := range seqs {
			out = append(out, append([]float32(nil), s.Logits()...))
		}
	}
	return out
}

// TestMegakernelOffByDefault: a bundle built without megakernel = true
// carries no persistent kernel, so every variant keeps the graph path and
// says why.
func TestMegakernelOffByDefault(t *testing.T) {
	if _, err := driver.Probe(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	dir := compileSynth(t, megakernelShapes[0], "cuda:sm_90", megakernelConfig)
	b, err := bundle.Open(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if len(b.Graph.Schedules) == 0 {
		t.Fatal("no megakernel schedules in a cuda build")
	}
	tier, err := cuda.Load(b, cuda.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	for vi, v := range b.Graph.Variants {
		if on, why := tier.Megakernel(vi); on || (v.Stage == bundle.StageDecode && !strings.Contains(why, "megakernel = true")) {
			t.Fatalf("%s: megakernel %v (%s) in a bundle built without it", v.Key(), on, why)
		}
	}
}

// requireMegakernel fails the test unless the bundle's decode variants
// (one to eight rows) run on the persistent kernel.
func requireMegakernel(t *testing.T, dir string) {
	t.Helper()
	b, err := bundle.Open(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tier, err := cuda.Load(b, cuda.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	found := false
	for vi, v := range b.Graph.Variants {
		on, why := tier.Megakernel(vi)
		t.Logf("%s: megakernel %v %s", v.Key(), on, why)
		// Draft variants (self-speculation's first layers) have no
		// schedule: the pass plans decode variants only.
		if v.Stage == bundle.StageDecode && v.Rows <= 8 {
			found = true
			if !on {
				t.Fatalf("%s keeps the graph path: %s", v.Key(), why)
			}
		}
	}
	if !found {
		t.Fatal("no one-row decode variant")
	}
}

// greedyRun_ is a run of greedyRun: the token each decode step fed and
// the logits after it.
type greedyRun_ struct {
	tokens []int32
	logits [][]float32
}

// greedyRun evaluates a fixed prompt and then eight decode steps of one
// sequence, each feeding the device's greedy token of the step before
// (or force[i], when given), and returns the tokens fed and the logits.
func greedyRun(t *testing.T, dir string, opt runtime.Options, force []int32) greedyRun_ {
	t.Helper()
	p := openPool(t, dir, opt)
	defer p.Close()
	ctx := context.Background()
	s, err := p.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	if _, err := s.Prefill(ctx, []int32{1, 17, 42, 99, 7}); err != nil {
		t.Fatal(err)
	}
	var r greedyRun_
	for i := range 8 {
		tok := s.Greedy()
		if force != nil {
			tok = force[i]
		}
		l, err := s.Decode(ctx, tok)
		if err != nil {
			t.Fatal(err)
		}
		r.tokens = append(r.tokens, tok)
		r.logits = append(r.logits, append([]float32(nil), l...))
	}
	return r
}
