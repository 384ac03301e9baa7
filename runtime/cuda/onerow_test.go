package cuda_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/lebin"
	"github.com/zrtdev/zrt/kernels"
	kcuda "github.com/zrtdev/zrt/kernels/cuda"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/cuda"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
)

// TestVerifyOneRowBits: a speculative verify step — K+1 rows of one
// sequence in one replay of a decode variant, row i in a slot of its own
// mapping the sequence's pages (sequence.Verify, the engine's verify
// chunks) — run with runtime.Batch.OneRowBits gives every row the logits
// and greedy token, bit for bit, that one-row decode steps of the same
// tokens give: so greedy output does not change with speculation on
// T-CUDA (issue 42). Without the flag the step's matrices take the
// tensor-core tiles past 2 rows and its attention other warps a block,
// whose sums differ in the last bits (logged, not required). Q8_0, Q4_K_M
// and F16 weights; K from 1 to 32 (the 4-, 16- and 64-row variants); a
// GQA qwen3 whose rows see more than FA_SPLIT_MIN keys (the one-row
// attention splits them over blocks, kept for the verify rows), and a
// shape with the llama 7B's attention (32 heads of their own KV head),
// whose verify variants of 16 and 64 rows are past the split's counters.
func TestVerifyOneRowBits(t *testing.T) {
	// T-CPU, batch invariant, passes without the flag: the test's own
	// check, run everywhere.
	t.Run("cpu", func(t *testing.T) {
		verifyOneRowBits(t, "cpu", "cpu", synth.Shape{Arch: "qwen3", Layers: 1, Embd: 256, Heads: 4, HeadsKV: 2, HeadDim: 64, FF: 512, Vocab: 320,
			Context: 2048, Type: ggml.Q8_0, Seed: 34}, 1100, []int{1, 4, 32}, "")
	})
	if _, err := driver.Probe(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	all := []int{1, 2, 3, 4, 7, 8, 15, 32}
	for _, c := range []struct {
		name   string
		shape  synth.Shape
		prompt int
		ks     []int  // the draft lengths (all: every one)
		extra  string // more of the model config
	}{
		{"q8_0", synth.Shape{Arch: "llama", Layers: 2, Embd: 512, Heads: 8, HeadsKV: 8, FF: 1024, Vocab: 512, Context: 256, Type: ggml.Q8_0, Seed: 31}, 9, all, ""},
		{"q4_k_m", synth.Shape{Arch: "llama", Layers: 4, Embd: 512, Heads: 8, HeadsKV: 8, FF: 1024, Vocab: 512, Context: 256, Type: ggml.Q4_K, Mix: "Q4_K_M", Seed: 32}, 9, all, ""},
		{"f16", synth.Shape{Arch: "llama", Layers: 2, Embd: 512, Heads: 8, HeadsKV: 8, FF: 1024, Vocab: 512, Context: 256, Type: ggml.F16, Seed: 33}, 9, all, ""},
		{"qwen3-long", synth.Shape{Arch: "qwen3", Layers: 2, Embd: 256, Heads: 4, HeadsKV: 2, HeadDim: 64, FF: 512, Vocab: 320, Context: 2048, Type: ggml.Q8_0, Seed: 34}, 1100, all, ""},
		// 32 head groups: the 16- and 64-row variants' split attention
		// has counters for 8 rows; a step of more takes it unsplit,
		// which has the one-row bits up to 1024 keys a row.
		{"7b-heads", synth.Shape{Arch: "llama", Layers: 1, Embd: 2048, Heads: 32, HeadsKV: 32, FF: 2048, Vocab: 512, Context: 256, Type: ggml.Q8_0, Seed: 35}, 20, all, ""},
		{"7b-heads-long", synth.Shape{Arch: "llama", Layers: 1, Embd: 2048, Heads: 32, HeadsKV: 32, FF: 2048, Vocab: 512, Context: 2048, Type: ggml.Q8_0, Seed: 36}, 1100, []int{1, 3, 4, 7}, ""},
		// The one-row steps on the persistent kernel, the verify rows
		// on the graph path's one-row launches.
		{"megakernel", megakernelShapes[0], 9, all, "megakernel = true\n"},
	} {
		t.Run(c.name, func(t *testing.T) { verifyOneRowBits(t, "cuda:sm_90", "cuda", c.shape, c.prompt, c.ks, c.extra) })
	}
}

// verifyOneRowBits compiles shape for target (extra: more of its model
// config) and runs the test on tier, with a prompt of promptLen tokens,
// for drafts of ks tokens.
func verifyOneRowBits(t *testing.T, target, tier string, shape synth.Shape, promptLen int, ks []int, extra string) {
	const maxK = 32
	pages := (promptLen + maxK + 1 + kernels.KVPageTokens - 1) / kernels.KVPageTokens
	out := compileSynth(t, shape, target, fmt.Sprintf("context_length = %d\nmax_slots = 64\ndecode_slots = [1, 4, 16, 64]\nkv_pages = %d\n%s", shape.Context, pages+4, extra))
	p, err := runtime.Open(out, runtime.Options{Tier: tier})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	table := make([]uint32, pages)
	for i := range table {
		table[i] = uint32(i)
	}
	tok := func(i int) int32 { return int32(3 + (i*37+11)%(shape.Vocab-3)) }
	step := func(b runtime.Batch) {
		t.Helper()
		if err := p.Step(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	// The prompt, in chunks of the largest prefill variant, in slot 0.
	pre, _ := p.Largest(runtime.Prefill)
	for from := 0; from < promptLen; from += pre.Rows {
		n := min(pre.Rows, promptLen-from)
		key, _ := p.Key(runtime.Prefill, n)
		b := runtime.Batch{Key: key, Pages: []runtime.SlotPages{{Slot: 0, Pages: table}}}
		for i := range n {
			b.Rows = append(b.Rows, runtime.Row{Slot: 0, Pos: from + i, Token: tok(from + i), Logits: from+i == promptLen-1, Prompt: promptLen})
		}
		step(b)
	}
	// The next maxK+1 tokens one at a time: the logits and greedy token
	// after each, as decoding without speculation takes them.
	next := func(i int) int32 { return tok(promptLen + i) }
	one, _ := p.Key(runtime.Decode, 1)
	var alone [][]float32
	var greedy []int32
	for i := range maxK + 1 {
		step(runtime.Batch{Key: one, Rows: []runtime.Row{{Slot: 0, Pos: promptLen + i, Token: next(i), Logits: true}},
			Pages: []runtime.SlotPages{{Slot: 0, Pages: table}}})
		alone, greedy = append(alone, p.Logits(0, nil)), append(greedy, p.Greedy(0))
	}
	// verify runs the K+1 tokens as one step of K+1 rows, row i in slot
	// i at position promptLen+i (it writes its K and V there again), and
	// returns the rows whose logits or greedy token differ from alone's
	// and the largest difference relative to the largest |logit|.
	verify := func(k int, oneRow bool) (differ []int, worst float64) {
		key, ok := p.Key(runtime.Decode, k+1)
		if !ok {
			t.Fatalf("no decode variant of %d rows in %v", k+1, p.Keys())
		}
		b := runtime.Batch{Key: key, OneRowBits: oneRow}
		for i := range k + 1 {
			b.Rows = append(b.Rows, runtime.Row{Slot: i, Pos: promptLen + i, Token: next(i), Logits: true})
			b.Pages = append(b.Pages, runtime.SlotPages{Slot: i, Pages: table})
		}
		step(b)
		for i := range k + 1 {
			got, want := p.Logits(i, nil), alone[i]
			scale, d, same := 1.0, 0.0, p.Greedy(i) == greedy[i]
			for j := range want {
				scale = math.Max(scale, math.Abs(float64(want[j])))
			}
			for j := range want {
				if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
					same = false
					d = math.Max(d, math.Abs(float64(got[j])-float64(want[j]))/scale)
				}
			}
			if !same {
				differ = append(differ, i)
				worst = math.Max(worst, d)
			}
		}
		return differ, worst
	}
	for _, k := range ks {
		plain, pw := verify(k, false)
		differ, worst := verify(k, true)
		t.Logf("K = %d: without one-row bits rows %v differ (by up to %.2e); with them %v", k, plain, pw, differ)
		if len(differ) > 0 {
			t.Errorf("K = %d: verify rows %v differ from one-row decode steps (by up to %.2e of the largest logit)", k, differ, worst)
		}
		if math.IsNaN(worst) || math.IsNaN(pw) {
			t.Errorf("K = %d: NaN logits", k)
		}
	}
}

// TestKernelOneRowMatrices holds the integer matrix kernels' launches
// for steps of one-row bits (kcuda.OneRowShape: the matrix-vector
// kernel's _rows4 entry, four rows a block, past two rows; _rows at
// two) to the one-row kernel on each row alone, bit for bit, and to
// T-CPU: plain products added to a residual, the fused norm + gate/up
// and norm + QKV, and lm_head (every row its own slot, in reverse), for
// every integer type, at 2 to 8 active rows of variants of 4, 8 and 16
// (the blocks past the active rows leave at once). It skips where the
// PTX predates the _rows4 entry (the tier then takes _rows).
func TestKernelOneRowMatrices(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(24))
	const n = 300
	for _, tk := range []struct {
		typ ggml.Type
		k   int
	}{{ggml.Q4_K, 4096}, {ggml.Q6_K, 11008}, {ggml.Q8_0, 4096}, {ggml.Q8_0, 1024}, {ggml.Q4_0, 4096}} {
		typ, k := tk.typ, tk.k
		if typ == ggml.Q4_K {
			func() {
				defer g.current()()
				m := g.module(kernels.InstanceName(mustLookup(t, "matmul"), typ))
				defer m.Unload()
				if _, err := m.Function(kcuda.Entry(kernels.InstanceName(mustLookup(t, "matmul"), typ)) + kcuda.EntryRows4.Suffix()); err != nil {
					t.Skipf("the PTX has no _rows4 entry: %v", err)
				}
			}()
		}
		w := kweights(t, rng, typ, n, k)
		wn := lebin.Float32Bytes(randF32(rng, k, 0.5, 1.5))
		for _, c := range []struct{ active, capacity int }{{2, 4}, {3, 4}, {4, 4}, {5, 8}, {7, 8}, {8, 8}, {5, 16}} {
			nr, cp := c.active, c.capacity
			what := fmt.Sprintf("%s k=%d, %d rows of %d", typ, k, nr, cp)
			x := lebin.Float32Bytes(randF32(rng, cp*k, -2, 2))
			row := func(b []byte, i, width int) []byte { return b[i*width*4 : (i+1)*width*4] }
			wide := g.with(t)
			wide.oneRow = true
			// run launches inst over bufs for cp rows with one-row bits,
			// then each active row alone (buffers one(i)) on the one-row
			// kernel, and compares output buffers outs row by row, each
			// of width columns.
			run := func(inst string, bufs [][]byte, one func(i int) [][]byte, push, spec []uint32, outs []int, width int) {
				t.Helper()
				got := wide.runAs(inst, bufs, push, spec, cp, false)
				want := cpuRun(t, inst, bufs, push, spec)
				for _, o := range outs {
					// T-CPU sums in another order: a sum of 11 008 products
					// that cancels to 0.2 came out 2.1e-3 apart (Q6_K, on an
					// H200) where the one-row kernel's bits were these.
					compareF32(t, fmt.Sprintf("%s %s buffer %d", inst, what, o), got[o][:nr*width*4], want[o][:nr*width*4], 5e-3)
				}
				for i := range nr {
					alone := g.runAs(inst, one(i), push, spec, 1, false)
					for _, o := range outs {
						if !bytes.Equal(row(alone[o], 0, width), row(got[o], i, width)) {
							t.Errorf("%s %s: row %d's buffer %d differs from the one-row kernel's result on it alone", inst, what, i, o)
						}
					}
				}
			}
			rows := make([]krow, nr)
			for i := range rows {
				rows[i] = krow{pos: uint32(i), slot: uint32(i)}
			}
			res := lebin.Float32Bytes(randF32(rng, cp*n, -1, 1))
			run(kernels.InstanceName(mustLookup(t, "matmul_residual"), typ), [][]byte{x, w, nil, ioTable(rows, cp, 1, nil), res},
				func(i int) [][]byte {
					return [][]byte{row(x, i, k), w, nil, ioTable([]krow{{slot: 0}}, 1, 1, nil), row(res, i, n)}
				}, []uint32{uint32(k), n}, nil, []int{4}, n)
			half := make([]byte, cp*n/2*4)
			run(kernels.InstanceName(mustLookup(t, "rms_norm_gate_up"), typ), [][]byte{x, wn, w, ioTable(rows, cp, 1, nil), half, append([]byte(nil), half...)},
				func(i int) [][]byte {
					return [][]byte{row(x, i, k), wn, w, ioTable([]krow{{slot: 0}}, 1, 1, nil), make([]byte, n/2*4), make([]byte, n/2*4)}
				}, nil, []uint32{uint32(k), n / 2, math.Float32bits(1e-5)}, []int{4, 5}, n/2)
			third := make([]byte, cp*n/3*4)
			run(kernels.InstanceName(mustLookup(t, "rms_norm_qkv"), typ),
				[][]byte{x, wn, w, nil, ioTable(rows, cp, 1, nil), third, append([]byte(nil), third...), append([]byte(nil), third...)},
				func(i int) [][]byte {
					return [][]byte{row(x, i, k), wn, w, nil, ioTable([]krow{{slot: 0}}, 1, 1, nil), make([]byte, n/3*4), make([]byte, n/3*4), make([]byte, n/3*4)}
				}, nil, []uint32{uint32(k), n / 3, n / 3, math.Float32bits(1e-5)}, []int{5, 6, 7}, n/3)
			// lm_head: row i's logits at slot nr-1-i.
			lm := make([]krow, nr)
			for i := range lm {
				lm[i] = krow{pos: uint32(i), slot: uint32(nr - 1 - i), flags: kernels.RowWantsLogits}
			}
			logits := make([]byte, cp*n*4)
			inst := kernels.InstanceName(mustLookup(t, "lm_head"), typ)
			push := []uint32{uint32(k), n}
			got := wide.runAs(inst, [][]byte{x, w, ioTable(lm, cp, 1, nil), logits}, push, nil, cp, false)
			for i := range nr {
				alone := g.runAs(inst, [][]byte{row(x, i, k), w, ioTable([]krow{{flags: kernels.RowWantsLogits}}, 1, 1, nil), make([]byte, n*4)}, push, nil, 1, false)
				if !bytes.Equal(row(alone[3], 0, n), row(got[3], nr-1-i, n)) {
					t.Errorf("%s %s: row %d's logits differ from the one-row kernel's on it alone", inst, what, i)
				}
			}
		}
	}
}

// TestWalkOneRowFakeMemory walks the decode variants of a Q8_0 llama and
// of a qwen3 of Q4_K_M's mix for one-row bits against a made-up address
// map (no GPU): no launch of them is a tile, a stage or the lean
// attention, the integer products take the matrix-vector kernel (_rows4
// past two rows where the PTX has it), and the split attention keeps its
// staging buffer, which the unsplit walk drops.
func TestWalkOneRowFakeMemory(t *testing.T) {
	for _, s := range []synth.Shape{
		{Arch: "llama", Layers: 2, Embd: 512, Heads: 8, HeadsKV: 8, FF: 1024, Vocab: 512, Context: 256, Type: ggml.Q8_0, Seed: 41},
		{Arch: "qwen3", Layers: 2, Embd: 256, Heads: 4, HeadsKV: 2, HeadDim: 64, FF: 512, Vocab: 320, Context: 256, Type: ggml.Q4_K, Mix: "Q4_K_M", Seed: 42},
	} {
		t.Run(s.Arch, func(t *testing.T) {
			dir := compileSynth(t, s, "cuda:sm_90", "max_slots = 64\ndecode_slots = [1, 2, 4, 16, 64]\n")
			b, err := bundle.Open(dir, true)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			mem := &cuda.Memory{}
			fence := -1
			for i, r := range b.Graph.Regions {
				mem.Base = append(mem.Base, uint64(i+1)<<36)
				mem.Size = append(mem.Size, uint64(r.Bytes))
				if r.Name == "fence" {
					fence = i
				}
			}
			for vi := range b.Graph.Variants {
				v := &b.Graph.Variants[vi]
				if v.Stage != bundle.StageDecode {
					continue
				}
				for _, wide := range []bool{false, true} {
					for _, unsplit := range []bool{false, true} {
						ls, err := cuda.WalkOneRow(v, b.Blobs, mem, fence, func(int) bool { return wide }, unsplit)
						if err != nil {
							t.Fatalf("variant %s: %v", v.Key(), err)
						}
						what := fmt.Sprintf("variant %s (wide %v, unsplit %v)", v.Key(), wide, unsplit)
						split, rows4 := 0, 0
						for i, l := range ls {
							if l.Shape.Entry == kcuda.EntrySplit {
								split++
							}
							family, _, _ := strings.Cut(l.Name, ".")
							e := l.Shape.Entry
							switch {
							case e == kcuda.EntryTile || e == kcuda.EntryTile16 || e == kcuda.EntryTile32 || e == kcuda.EntryDP4A || e == kcuda.EntryStage || e == kcuda.EntryLean:
								t.Errorf("%s: launch %d (%s) takes the %s entry", what, i, l.Name, e.Suffix())
							case kcuda.MatrixFamily(family) && !(e == kcuda.EntryMain || e == kcuda.EntryRows || e == kcuda.EntryRows4 && wide):
								t.Errorf("%s: launch %d (%s) takes the %q entry, not the matrix-vector kernel's", what, i, l.Name, e.Suffix())
							case e == kcuda.EntryRows4:
								rows4++
							case e == kcuda.EntrySplit && (unsplit || l.Staging == 0 || l.Params[len(l.Params)-1] != 0):
								t.Errorf("%s: launch %d (%s): a split attention unsplit, or without its staging buffer", what, i, l.Name)
							}
							abi, _, err := kernels.SplitInstance(l.Name)
							if err != nil {
								t.Fatal(err)
							}
							if want := len(abi.Bufs) + len(abi.Push) + len(abi.Spec); len(l.Params) != want+min(l.Staging, 1) {
								t.Errorf("%s: launch %d (%s) has %d parameters, want %d", what, i, l.Name, len(l.Params), want+min(l.Staging, 1))
							}
						}
						// Both models' one-row attention splits (few head
						// groups): every layer's, unless unsplit.
						if (split == 0) != unsplit {
							t.Errorf("%s: %d split attention launches", what, split)
						}
						if wide && v.Rows > 2 && rows4 == 0 {
							t.Errorf("%s: no product takes the _rows4 entry", what)
						}
					}
				}
			}
		})
	}
}
