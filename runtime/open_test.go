package runtime_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/internal/testmodel"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/sequence"
	"github.com/zrtdev/zrt/runtime/sysmem"
)

func buildTiny(t testing.TB) string {
	t.Helper()
	// One slot: the tests run out of slots on purpose.
	_, out := testmodel.Bundle(t, "", compiler.Options{Slots: 1})
	return out
}

// copyBundle clones a bundle directory so a test can damage the copy.
func copyBundle(t testing.TB, src string) string {
	dst := filepath.Join(t.TempDir(), "b")
	filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		rel, _ := filepath.Rel(src, p)
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, _ := os.ReadFile(p)
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	return dst
}

func TestOpenAndRun(t *testing.T) {
	dir := buildTiny(t)
	e, err := sequence.Open(dir, runtime.Options{Tier: "cpu", Threads: 2, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	seq, _ := e.NewSequence()
	ctx := context.Background()
	l1, err := seq.Prefill(ctx, []int32{1, 300, 301, 302})
	if err != nil {
		t.Fatal(err)
	}
	// Prefill in one batch and token by token must agree.
	seq2, err := e.NewSequence()
	if err == nil {
		t.Fatal("a second sequence got a slot of a one-slot bundle")
	}
	seq.Release()
	seq2, _ = e.NewSequence()
	var l2 []float32
	for i, tok := range []int32{1, 300, 301, 302} {
		if i == 0 {
			l2, err = seq2.Prefill(ctx, []int32{tok})
		} else {
			l2, err = seq2.Decode(ctx, tok)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range l1 {
		if d := l1[i] - l2[i]; d > 1e-4 || d < -1e-4 {
			t.Fatalf("logit %d: batched prefill %v, token by token %v", i, l1[i], l2[i])
		}
	}
	if _, err := seq2.Decode(ctx, 1<<20); err == nil || !strings.Contains(err.Error(), "outside the vocabulary") {
		t.Errorf("out-of-vocabulary token: %v", err)
	}
}

// TestCorruptBundles damages a bundle in every way a disk or a careless
// copy might and requires a clear error, never a panic.
func TestCorruptBundles(t *testing.T) {
	good := buildTiny(t)
	graph, _ := os.ReadFile(filepath.Join(good, bundle.GraphFile))
	pack, _ := os.ReadFile(filepath.Join(good, bundle.WeightsFile))
	kernels, _ := os.ReadDir(filepath.Join(good, bundle.KernelDir))
	open := func(dir string) error {
		e, err := sequence.Open(dir, runtime.Options{Tier: "cpu", Threads: 1, Verify: true})
		if err == nil {
			e.Close()
		}
		return err
	}
	expectErr := func(what, dir string) {
		t.Helper()
		if err := open(dir); err == nil {
			t.Errorf("%s: bundle accepted", what)
		}
	}
	dir := copyBundle(t, good)
	gpath := filepath.Join(dir, bundle.GraphFile)
	// Every byte of the header and section table, and a stride through the
	// sections, each flipped.
	table := 16 + 32*int(graph[8])
	for i := 0; i < len(graph); i++ {
		if i >= table && i%61 != 0 {
			continue
		}
		c := append([]byte(nil), graph...)
		c[i] ^= 0x5A
		os.WriteFile(gpath, c, 0o644)
		expectErr("graph byte "+strconv.Itoa(i)+" flipped", dir)
	}
	for _, n := range []int{0, 3, 15, 16, table - 1, table, len(graph) / 2, len(graph) - 1} {
		os.WriteFile(gpath, graph[:n], 0o644)
		expectErr("graph truncated to "+strconv.Itoa(n), dir)
	}
	os.WriteFile(gpath, graph, 0o644)
	if err := open(dir); err != nil {
		t.Fatalf("restored bundle: %v", err)
	}

	ppath := filepath.Join(dir, bundle.WeightsFile)
	for _, n := range []int{0, 10, 4096, len(pack) - 1} {
		os.WriteFile(ppath, pack[:n], 0o644)
		expectErr("pack truncated to "+strconv.Itoa(n), dir)
	}
	for _, i := range []int{0, 5, 9, 13, 17, 40, len(pack) - 100} {
		c := append([]byte(nil), pack...)
		c[i] ^= 1
		os.WriteFile(ppath, c, 0o644)
		expectErr("pack byte "+strconv.Itoa(i)+" flipped", dir)
	}
	os.WriteFile(ppath, append(append([]byte(nil), pack...), 0), 0o644)
	if err := open(dir); err == nil || !strings.Contains(err.Error(), "trailing bytes") {
		t.Errorf("pack with a trailing byte: %v", err)
	}
	os.WriteFile(ppath, pack, 0o644)

	kpath := filepath.Join(dir, bundle.KernelDir, kernels[0].Name())
	kb, _ := os.ReadFile(kpath)
	os.Remove(kpath)
	if err := open(dir); err == nil || !strings.Contains(err.Error(), kernels[0].Name()) {
		t.Errorf("missing kernel: %v", err)
	}
	c := append([]byte(nil), kb...)
	c[6] = 0x20 // retarget to sm_90
	os.WriteFile(kpath, c, 0o644)
	expectErr("retargeted kernel", dir)
	os.WriteFile(kpath, kb, 0o644)

	if err := open(filepath.Join(dir, bundle.GraphFile)); err == nil || !strings.Contains(err.Error(), "not a bundle directory") {
		t.Errorf("file instead of bundle: %v", err)
	}
	if err := open(filepath.Join(dir, "nope")); err == nil {
		t.Error("missing bundle accepted")
	}
}

// TestMixedBuildsRefused: the graph file of one build beside the weights
// of another (as a reader racing a replacement could see them) is refused
// by the cheap check every open makes, not only by full verification.
func TestMixedBuildsRefused(t *testing.T) {
	a := buildTiny(t)
	s := synth.Tiny
	s.Seed++
	model := testmodel.Write(t, t.TempDir(), "other.gguf", s)
	other := testmodel.Compile(t, model, filepath.Join(t.TempDir(), "other"), "", compiler.Options{})
	mixed := copyBundle(t, a)
	w, _ := os.ReadFile(filepath.Join(other, bundle.WeightsFile))
	os.WriteFile(filepath.Join(mixed, bundle.WeightsFile), w, 0o644)
	_, err := runtime.Open(mixed, runtime.Options{Tier: "cpu", Threads: 1})
	if err == nil || !strings.Contains(err.Error(), "not from the build of") {
		t.Fatalf("mixed bundle: %v", err)
	}
}

// TestDecodeBatchMatchesSingle decodes two sequences in one step of a
// two-slot bundle and checks each against decoding it alone: for a llama
// model, and for a hybrid one whose recurrent layers keep a state per
// slot (which must carry across prefill chunks, start over for a new
// sequence in a used slot, and not leak between slots).
func TestDecodeBatchMatchesSingle(t *testing.T) {
	model := testmodel.Tiny(t)
	t.Run("llama", func(t *testing.T) { decodeBatchMatchesSingle(t, model) })
	t.Run("qwen35", func(t *testing.T) {
		hybrid := testmodel.Write(t, filepath.Dir(model), "hybrid.gguf", synth.Shape{Arch: "qwen35", Layers: 4, Embd: 64, Heads: 4, HeadsKV: 2, HeadDim: 32, FF: 128, Vocab: 320,
			Context: 64, Type: ggml.Q8_0, Seed: 3})
		decodeBatchMatchesSingle(t, hybrid)
	})
}

func decodeBatchMatchesSingle(t *testing.T, model string) {
	out := testmodel.Compile(t, model, filepath.Join(t.TempDir(), "bundle"), "max_slots = 2\nprefill_chunk = 8\n", compiler.Options{})
	e, err := sequence.Open(out, runtime.Options{Tier: "cpu", Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	prompts := [][]int32{{1, 300, 301, 302, 303, 304, 305, 306, 307, 308, 309}, {1, 310, 311}} // the first spans two chunks
	next := []int32{312, 313}
	// Alone: each sequence by itself.
	var alone [][]float32
	for i, p := range prompts {
		s, _ := e.NewSequence()
		if _, err := s.Prefill(ctx, p); err != nil {
			t.Fatal(err)
		}
		l, err := s.Decode(ctx, next[i])
		if err != nil {
			t.Fatal(err)
		}
		alone = append(alone, l)
		s.Release()
	}
	// Together: both prefilled, then one batched decode step.
	var seqs []*sequence.Sequence
	for _, p := range prompts {
		s, err := e.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Prefill(ctx, p); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, s)
	}
	if err := e.DecodeBatch(ctx, seqs, next); err != nil {
		t.Fatal(err)
	}
	for i := range seqs {
		both := seqs[i].Logits()
		for j := range both {
			if math.Float32bits(both[j]) != math.Float32bits(alone[i][j]) { // batch invariance: bit for bit
				t.Fatalf("sequence %d logit %d: batched %v, alone %v", i, j, both[j], alone[i][j])
			}
		}
		if seqs[i].Pos() != len(prompts[i])+1 {
			t.Errorf("sequence %d at position %d", i, seqs[i].Pos())
		}
	}
	if err := e.DecodeBatch(ctx, []*sequence.Sequence{seqs[0], seqs[0]}, []int32{1, 2}); err == nil {
		t.Error("a sequence twice in one batch was accepted")
	}
}

// TestFusionPreservesResults compiles models that exercise every fused op
// (qwen2's biases, qwen3's per-head norms, llama's RoPE+KV write and
// projection+residual) with and without the fuse pass
// and requires the same logits: a fused kernel does the same arithmetic
// as the sequence it replaces.
func TestFusionPreservesResults(t *testing.T) {
	shapes := []synth.Shape{
		{Arch: "qwen2", Layers: 2, Embd: 64, Heads: 4, HeadsKV: 2, FF: 96, Vocab: 300, Context: 64, Type: ggml.Q8_0, Seed: 5},
		{Arch: "qwen3", Layers: 2, Embd: 64, Heads: 4, HeadsKV: 2, HeadDim: 32, FF: 64, Vocab: 300, Context: 64, Type: ggml.F16, Seed: 6},
		synth.Tiny,
		// llama quantized: ROPE_KV_WRITE and MATMUL_RESIDUAL on integer paths
		{Arch: "llama", Layers: 2, Embd: 256, Heads: 4, HeadsKV: 2, FF: 256, Vocab: 300, Context: 64, Type: ggml.Q4_K, Seed: 7},
	}
	ctx := context.Background()
	for _, s := range shapes {
		dir := t.TempDir()
		model := testmodel.Write(t, dir, "m.gguf", s)
		var results [2][]float32
		for i, noFuse := range []bool{false, true} {
			out := filepath.Join(dir, "b"+strconv.Itoa(i))
			if err := compiler.Compile(ctx, model, out, compiler.Options{NoFuse: noFuse, VerifyEach: true}); err != nil {
				t.Fatal(err)
			}
			e, err := sequence.Open(out, runtime.Options{Tier: "cpu", Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			seq, _ := e.NewSequence()
			if _, err := seq.Prefill(ctx, []int32{1, 270, 280, 290, 299}); err != nil {
				t.Fatal(err)
			}
			if results[i], err = seq.Decode(ctx, 271); err != nil {
				t.Fatal(err)
			}
			e.Close()
		}
		for j := range results[0] {
			if results[0][j] != results[1][j] {
				t.Fatalf("%s: logit %d fused %v, unfused %v", s.Arch, j, results[0][j], results[1][j])
			}
		}
	}
}

// TestReadDuringReplace: while one goroutine replaces a bundle path again
// and again with builds of two different models, readers open and run it;
// every run gives one model's exact logits or a clear error, never a mix.
func TestReadDuringReplace(t *testing.T) {
	dir := t.TempDir()
	var models [2]string
	var want [2][]float32
	prompt := []int32{1, 300, 301, 302}
	out := filepath.Join(dir, "bundle")
	run := func() ([]float32, error) {
		e, err := sequence.Open(out, runtime.Options{Tier: "cpu", Threads: 1})
		if err != nil {
			return nil, err
		}
		defer e.Close()
		seq, err := e.NewSequence()
		if err != nil {
			return nil, err
		}
		return seq.Prefill(context.Background(), prompt)
	}
	for i := range models {
		s := synth.Tiny
		s.Seed += uint64(i)
		models[i] = testmodel.Write(t, dir, "m"+strconv.Itoa(i)+".gguf", s)
		if err := compiler.Compile(context.Background(), models[i], out, compiler.Options{}); err != nil {
			t.Fatal(err)
		}
		var err error
		if want[i], err = run(); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	var builds atomic.Int64
	go func() {
		var err error
		for i := 0; ctx.Err() == nil && err == nil; i++ {
			err = compiler.Compile(ctx, models[i%2], out, compiler.Options{})
			builds.Add(1)
		}
		if ctx.Err() != nil {
			err = nil
		}
		done <- err
	}()
	var ok, refused int
	for builds.Load() < 30 {
		got, err := run()
		if err != nil {
			refused++
			if refused < 5 {
				t.Logf("refused: %v", err)
			}
			continue
		}
		if !slices.Equal(got, want[0]) && !slices.Equal(got, want[1]) {
			t.Fatal("a run's logits are neither model's: it read a mix of two builds")
		}
		ok++
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if ok == 0 {
		t.Fatalf("no run succeeded (%d refused)", refused)
	}
	t.Logf("during %d replacements, %d runs gave one model's logits, %d were refused", builds.Load(), ok, refused)
}

// TestPlanLargerThanMemoryRefused: a plan whose KV cache cannot be resident
// is refused at load with both figures, before anything is allocated.
func TestPlanLargerThanMemoryRefused(t *testing.T) {
	_, out := testmodel.Bundle(t, "kv_pages = 16777216\n", compiler.Options{}) // 64 GiB of KV for the tiny model
	if avail, ok := sysmem.Available(); !ok || avail > 64<<30 {
		t.Skip("this machine could hold the plan")
	}
	_, err := runtime.Open(out, runtime.Options{Tier: "cpu", Threads: 1})
	if err == nil || !strings.Contains(err.Error(), "the bundle's memory plan needs 64.0 GiB of memory") || !strings.Contains(err.Error(), "is available") {
		t.Fatalf("got %v", err)
	}
}

// TestBatchInvariance: on T-CPU a request's logits are bit-identical
// whether its rows ran alone or beside another request's in one step. Here
// a decode row shares a step with a 70-row prefill chunk; had attention
// chosen its path by the step's rows (as ggml does) rather than by the
// request's, the decode row would have been tiled in F32 instead of run
// through one_chunk's F16 accumulator, and its bits would differ.
func TestBatchInvariance(t *testing.T) {
	dir := t.TempDir()
	model := testmodel.Write(t, dir, "m.gguf", synth.Shape{Arch: "llama", Layers: 2, Embd: 64, Heads: 4, HeadsKV: 2, FF: 128, Vocab: 300, Context: 256, Type: ggml.F32, Seed: 7})
	out := testmodel.Compile(t, model, filepath.Join(dir, "bundle"), "context_length = 256\nmax_slots = 2\ndecode_slots = [1, 2]\nprefill_rows = [32, 80]\nkv_pages = 16\n", compiler.Options{})
	p, err := runtime.Open(out, runtime.Options{Tier: "cpu", Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	tables := []runtime.SlotPages{{Slot: 0, Pages: []uint32{0, 1, 2, 3, 4}}, {Slot: 1, Pages: []uint32{8, 9}}}
	rowsOf := func(slot, from, n int, wantLast bool) []runtime.Row {
		var rs []runtime.Row
		for i := range n {
			rs = append(rs, runtime.Row{Slot: slot, Pos: from + i, Token: int32(3 + (slot*31+from+i)%290), Logits: wantLast && i == n-1})
		}
		return rs
	}
	step := func(rows []runtime.Row) {
		t.Helper()
		key, ok := p.Key(runtime.Prefill, len(rows))
		if !ok {
			t.Fatalf("no prefill variant for %d rows", len(rows))
		}
		if err := p.Step(ctx, runtime.Batch{Key: key, Rows: rows, Pages: tables}); err != nil {
			t.Fatal(err)
		}
	}
	logits := func(slot int) []float32 { return p.Logits(slot, nil) }
	// Alone: B's 20-token prompt, then its decode row; then A's 70-row
	// chunk.
	step(rowsOf(1, 0, 20, false))
	step(rowsOf(1, 20, 1, true))
	bAlone := logits(1)
	step(rowsOf(0, 0, 70, true))
	aAlone := logits(0)
	// Together: B's prompt again, then its decode row in the same step as
	// A's chunk (the KV pages are rewritten with the same values).
	step(rowsOf(1, 0, 20, false))
	step(append(rowsOf(0, 0, 70, true), rowsOf(1, 20, 1, true)...))
	for name, c := range map[string]struct{ alone, mixed []float32 }{"decode row": {bAlone, logits(1)}, "prefill chunk": {aAlone, logits(0)}} {
		for j := range c.alone {
			if math.Float32bits(c.alone[j]) != math.Float32bits(c.mixed[j]) {
				t.Fatalf("%s: logit %d is %v alone, %v beside the other request", name, j, c.alone[j], c.mixed[j])
			}
		}
	}
}
