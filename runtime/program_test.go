package runtime_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/internal/reference"
	"github.com/zrtdev/zrt/internal/testmodel"
	"github.com/zrtdev/zrt/runtime"
)

// openTiny opens buildTiny's bundle on T-CPU, one thread, closed when the
// test ends.
func openTiny(t *testing.T) *runtime.Program {
	t.Helper()
	p, err := runtime.Open(buildTiny(t), runtime.Options{Tier: "cpu", Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestStepChecksBatch: Step refuses, before any kernel runs, every batch
// field a kernel would index with unchecked, and runs a well-formed batch
// with pages given in any order of ids.
func TestStepChecksBatch(t *testing.T) {
	p := openTiny(t)
	decode, ok := p.Key(runtime.Decode, 1)
	if !ok {
		t.Fatalf("no decode variant in %v", p.Keys())
	}
	prefill, ok := p.Key(runtime.Prefill, 4)
	if !ok || prefill.Rows < 4 {
		t.Fatalf("no prefill variant for 4 rows in %v", p.Keys())
	}
	if _, ok := p.Key(runtime.Prefill, prefill.Rows+1); ok {
		t.Errorf("Key found a prefill variant for more rows than any has")
	}
	last := uint32(p.KVPages() - 1) // any page of the pool, not the slot's "own"
	pages := []runtime.SlotPages{{Slot: 0, Pages: []uint32{last}}}
	row := runtime.Row{Slot: 0, Pos: 0, Token: 1, Logits: true}
	ctx := context.Background()
	bad := []struct {
		name string
		b    runtime.Batch
		want string
	}{
		{"unknown variant", runtime.Batch{Key: runtime.ShapeKey{Stage: runtime.Decode, Slots: 9, Rows: 9}, Rows: []runtime.Row{row}, Pages: pages}, "no variant decode.s9.r9"},
		{"no rows", runtime.Batch{Key: decode, Pages: pages}, "0 rows"},
		{"too many rows", runtime.Batch{Key: decode, Rows: []runtime.Row{row, row}, Pages: pages}, "2 rows"},
		{"token", runtime.Batch{Key: decode, Rows: []runtime.Row{{Token: 1 << 20}}, Pages: pages}, "outside the vocabulary"},
		{"unmapped position", runtime.Batch{Key: decode, Rows: []runtime.Row{{Pos: 16, Token: 1}}, Pages: pages}, "not on a page"},
		{"no page table", runtime.Batch{Key: decode, Rows: []runtime.Row{row}}, "not on a page"},
		{"page id", runtime.Batch{Key: decode, Rows: []runtime.Row{row}, Pages: []runtime.SlotPages{{Slot: 0, Pages: []uint32{last + 1}}}}, "KV region has"},
		{"slot", runtime.Batch{Key: decode, Rows: []runtime.Row{row}, Pages: []runtime.SlotPages{{Slot: p.Slots(), Pages: []uint32{0}}}}, "for slot"},
	}
	for _, c := range bad {
		if err := p.Step(ctx, c.b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}

	// The same prompt on pages [last] and on page [0] gives the same
	// logits: page ids are the caller's, not tied to slots.
	run := func(pg uint32) []float32 {
		b := runtime.Batch{Key: prefill, Pages: []runtime.SlotPages{{Slot: 0, Pages: []uint32{pg}}}}
		for i, tok := range []int32{1, 300, 301, 302} {
			b.Rows = append(b.Rows, runtime.Row{Slot: 0, Pos: i, Token: tok, Logits: i == 3})
		}
		if err := p.Step(ctx, b); err != nil {
			t.Fatal(err)
		}
		return p.Logits(0, nil)
	}
	if a, b := run(last), run(0); !slices.Equal(a, b) {
		t.Error("logits depend on which KV page holds the sequence")
	}
}

// TestStepMask: a row's mask restricts its greedy choice to the tokens it
// allows — the largest allowed logit, whatever the unmasked argmax — and
// a mask on a row that wants no logits is refused.
func TestStepMask(t *testing.T) {
	p := openTiny(t)
	decode, _ := p.Key(runtime.Decode, 1)
	pages := []runtime.SlotPages{{Slot: 0, Pages: []uint32{0}}}
	ctx := context.Background()
	step := func(mask []uint64, logits bool) error {
		return p.Step(ctx, runtime.Batch{Key: decode, Pages: pages, Rows: []runtime.Row{{Slot: 0, Token: 1, Logits: logits, Mask: mask}}})
	}
	if err := step(nil, true); err != nil {
		t.Fatal(err)
	}
	logits := p.Logits(0, nil)
	free := p.Greedy(0)
	nv := p.Hparams.NVocab
	// Allow every third token but the free choice; the mask's last words
	// are left out (clear).
	mask := make([]uint64, (nv+63)/64-1)
	want, best := int32(-1), float32(0)
	for tok := range 64 * len(mask) {
		if tok%3 != 0 || int32(tok) == free {
			continue
		}
		mask[tok/64] |= 1 << (tok % 64)
		if want < 0 || logits[tok] > best {
			want, best = int32(tok), logits[tok]
		}
	}
	if err := step(mask, true); err != nil {
		t.Fatal(err)
	}
	if got := p.Greedy(0); got != want {
		t.Errorf("masked greedy choice %d, want %d (unmasked %d)", got, want, free)
	}
	if err := step(make([]uint64, len(mask)), true); err != nil {
		t.Fatal(err)
	}
	if got := p.Greedy(0); got != -1 {
		t.Errorf("greedy choice under an empty mask %d, want -1", got)
	}
	if err := step(mask, false); err == nil || !strings.Contains(err.Error(), "wants no logits") {
		t.Errorf("a mask on a row without logits: %v", err)
	}
	// A mask still being written when Step starts: Step reads it only
	// after MasksReady, once.
	late := make([]uint64, len(mask))
	filled := make(chan struct{})
	go func() {
		copy(late, mask)
		close(filled)
	}()
	calls := 0
	b := runtime.Batch{Key: decode, Pages: pages, Rows: []runtime.Row{{Slot: 0, Token: 1, Logits: true, Mask: late}},
		MasksReady: func() { calls++; <-filled }}
	if err := p.Step(ctx, b); err != nil {
		t.Fatal(err)
	}
	if got := p.Greedy(0); got != want || calls != 1 {
		t.Errorf("greedy choice under a late mask %d after %d MasksReady calls, want %d after 1", got, calls, want)
	}
}

// TestKVPageCopy: a KV page's bytes go out and back exactly through the
// tier (the prefix cache's host tier), a step's KV writes are what a read
// sees, and a page outside the pool or a buffer of another size is
// refused.
func TestKVPageCopy(t *testing.T) {
	p := openTiny(t)
	if p.KVLayout() == "" || len(p.KVLayout()) != 64 {
		t.Fatalf("T-CPU's KV layout is %q", p.KVLayout())
	}
	n, last := p.KVPageBytes(), uint32(p.KVPages()-1)
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i*7 + 3)
	}
	if err := p.WriteKVPage(last, src); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, n)
	if err := p.ReadKVPage(last, dst); err != nil || !slices.Equal(src, dst) {
		t.Fatalf("page %d came back different (%v)", last, err)
	}
	// A prompt's step writes its KV into page 0.
	if err := p.ReadKVPage(0, dst); err != nil {
		t.Fatal(err)
	}
	before := slices.Clone(dst)
	prefill, _ := p.Key(runtime.Prefill, 4)
	b := runtime.Batch{Key: prefill, Pages: []runtime.SlotPages{{Slot: 0, Pages: []uint32{0}}}}
	for i, tok := range []int32{1, 300, 301, 302} {
		b.Rows = append(b.Rows, runtime.Row{Slot: 0, Pos: i, Token: tok, Logits: i == 3})
	}
	if err := p.Step(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if err := p.ReadKVPage(0, dst); err != nil || slices.Equal(before, dst) {
		t.Errorf("page 0 reads the same after a step wrote its KV (%v)", err)
	}
	for _, c := range []struct {
		page uint32
		n    int
		want string
	}{{last + 1, n, "outside the pool"}, {0, n - 1, "a page is"}} {
		if err := p.ReadKVPage(c.page, make([]byte, c.n)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("read of page %d, %d bytes: %v, want %q", c.page, c.n, err, c.want)
		}
		if err := p.WriteKVPage(c.page, make([]byte, c.n)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("write of page %d, %d bytes: %v, want %q", c.page, c.n, err, c.want)
		}
	}
}

// TestBeside: a program opened beside another (a draft model beside its
// target) runs on the other's T-CPU worker pool with two threads: the two
// step in turn with the logits each gets alone, and closing the one
// opened beside leaves the other running.
func TestBeside(t *testing.T) {
	dir := buildTiny(t)
	ctx := context.Background()
	open := func(beside *runtime.Program) *runtime.Program {
		p, err := runtime.Open(dir, runtime.Options{Tier: "cpu", Threads: 2, Beside: beside})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	step := func(p *runtime.Program, tok int32) []float32 {
		key, _ := p.Key(runtime.Decode, 1)
		b := runtime.Batch{Key: key, Rows: []runtime.Row{{Slot: 0, Pos: 0, Token: tok, Logits: true}}, Pages: []runtime.SlotPages{{Slot: 0, Pages: []uint32{0}}}}
		if err := p.Step(ctx, b); err != nil {
			t.Fatal(err)
		}
		return p.Logits(0, nil)
	}
	alone := open(nil)
	defer alone.Close()
	want3, want5 := step(alone, 3), step(alone, 5)
	target := open(nil)
	defer target.Close()
	draft := open(target)
	for range 3 {
		if got := step(target, 3); !slices.Equal(got, want3) {
			t.Fatal("the target's logits beside a draft differ from its logits alone")
		}
		if got := step(draft, 5); !slices.Equal(got, want5) {
			t.Fatal("the draft's logits on the target's workers differ from its logits alone")
		}
	}
	if err := draft.Close(); err != nil {
		t.Fatal(err)
	}
	if got := step(target, 3); !slices.Equal(got, want3) {
		t.Fatal("the target's logits after the draft closed differ")
	}
}

// TestCopyKVPage: a page copied into another (a SubmitN choice's own
// copy of its group's partial prompt page) holds the same bytes, and a
// decode step on the copy yields the logits the original yields; a page
// outside the pool is refused.
func TestCopyKVPage(t *testing.T) {
	p := openTiny(t)
	if !p.CopiesKVPages() {
		t.Fatal("T-CPU does not copy KV pages")
	}
	copyKVPage(t, p)
}

// copyKVPage prefills 4 tokens into page 0, copies page 0 into the
// pool's last page, and decodes the next token once on each.
func copyKVPage(t *testing.T, p *runtime.Program) {
	t.Helper()
	ctx := context.Background()
	last := uint32(p.KVPages() - 1)
	prefillPage0(t, p)
	if err := p.CopyKVPage(last, 0); err != nil {
		t.Fatal(err)
	}
	a, c := make([]byte, p.KVPageBytes()), make([]byte, p.KVPageBytes())
	if err := p.ReadKVPage(0, a); err != nil {
		t.Fatal(err)
	}
	if err := p.ReadKVPage(last, c); err != nil || !slices.Equal(a, c) {
		t.Fatalf("page %d differs from page 0 after the copy (%v)", last, err)
	}
	decode, _ := p.Key(runtime.Decode, 1)
	var logits [2][]float32
	for i, pg := range []uint32{last, 0} {
		d := runtime.Batch{Key: decode, Pages: []runtime.SlotPages{{Slot: 0, Pages: []uint32{pg}}},
			Rows: []runtime.Row{{Slot: 0, Pos: 4, Token: 303, Logits: true}}}
		if err := p.Step(ctx, d); err != nil {
			t.Fatal(err)
		}
		logits[i] = p.Logits(0, nil)
	}
	if !slices.Equal(logits[0], logits[1]) {
		t.Errorf("a decode step on the copied page yields other logits than on the original")
	}
	if err := p.CopyKVPage(last+1, 0); err == nil || !strings.Contains(err.Error(), "outside the pool") {
		t.Errorf("a copy into page %d: %v, want outside the pool", last+1, err)
	}
}

// prefillPage0 prefills 4 tokens of slot 0 into KV page 0, the start
// of the page-copy tests.
func prefillPage0(t *testing.T, p *runtime.Program) {
	t.Helper()
	prefill, _ := p.Key(runtime.Prefill, 4)
	b := runtime.Batch{Key: prefill, Pages: []runtime.SlotPages{{Slot: 0, Pages: []uint32{0}}}}
	for i, tok := range []int32{1, 300, 301, 302} {
		b.Rows = append(b.Rows, runtime.Row{Slot: 0, Pos: i, Token: tok, Logits: i == 3})
	}
	if err := p.Step(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

// TestStageKVPages: T-CPU, which is no RegionStager, copies batches of
// KV pages to and from host memory before ReadKVPages and WriteKVPages
// return (stageKVPages); a batch with a page outside the pool is
// refused.
func TestStageKVPages(t *testing.T) {
	p := openTiny(t)
	stageKVPages(t, p)
	if p.KVCopyRate() != 0 {
		t.Errorf("T-CPU measured a copy rate of %g", p.KVCopyRate())
	}
	b, _ := p.KVHostBuffer()
	if _, err := p.ReadKVPages([]uint32{uint32(p.KVPages())}, [][]byte{b}); err == nil || !strings.Contains(err.Error(), "outside the pool") {
		t.Errorf("a batch read of page %d: %v, want outside the pool", p.KVPages(), err)
	}
}

// stageKVPages prefills 4 tokens into page 0, queues a batch copy of it
// into host memory and, before it has landed, a decode step that writes
// position 4 of page 0: the bytes that land are the page before the
// step. Written into the pool's last page in a batch, a decode step
// right after, at position 4, yields the logits the first one did.
func stageKVPages(t *testing.T, p *runtime.Program) {
	t.Helper()
	ctx := context.Background()
	last := uint32(p.KVPages() - 1)
	prefillPage0(t, p)
	want := make([]byte, p.KVPageBytes())
	if err := p.ReadKVPage(0, want); err != nil {
		t.Fatal(err)
	}
	buf, err := p.KVHostBuffer()
	if err != nil || len(buf) != p.KVPageBytes() {
		t.Fatalf("a host buffer of %d bytes (%v), want %d", len(buf), err, p.KVPageBytes())
	}
	read, err := p.ReadKVPages([]uint32{0}, [][]byte{buf})
	if err != nil {
		t.Fatal(err)
	}
	decode, _ := p.Key(runtime.Decode, 1)
	step := func(pg uint32) []float32 {
		d := runtime.Batch{Key: decode, Pages: []runtime.SlotPages{{Slot: 0, Pages: []uint32{pg}}},
			Rows: []runtime.Row{{Slot: 0, Pos: 4, Token: 303, Logits: true}}}
		if err := p.Step(ctx, d); err != nil {
			t.Fatal(err)
		}
		return p.Logits(0, nil)
	}
	first := step(0)
	waitLanded(t, read)
	if !slices.Equal(buf, want) {
		t.Fatal("the batch read of page 0 holds other bytes than the page before the next step")
	}
	write, err := p.WriteKVPages([]uint32{last}, [][]byte{buf})
	if err != nil {
		t.Fatal(err)
	}
	if again := step(last); !slices.Equal(first, again) {
		t.Error("a decode step on the page written back yields other logits than on the original")
	}
	waitLanded(t, write)
}

func waitLanded(t *testing.T, done func() (bool, error)) {
	t.Helper()
	for {
		ok, err := done()
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
	}
}

// TestStepRefusesDeviceDraws: T-CPU draws no sampled row's token on the
// device, so a row asking for that is refused, as is one that asks for a
// draw without wanting logits.
func TestStepRefusesDeviceDraws(t *testing.T) {
	p := openTiny(t)
	if p.SamplesOnDevice() {
		t.Fatal("T-CPU says it samples on the device")
	}
	decode, _ := p.Key(runtime.Decode, 1)
	for _, logits := range []bool{true, false} {
		b := runtime.Batch{Key: decode, Pages: []runtime.SlotPages{{Slot: 0, Pages: []uint32{0}}},
			Rows: []runtime.Row{{Slot: 0, Pos: 0, Token: 1, Logits: logits, Sample: &runtime.RowSample{Inv: 1, U: 0.5}}}}
		if err := p.Step(context.Background(), b); err == nil {
			t.Errorf("logits %v: a device draw on T-CPU was taken", logits)
		}
	}
}

// TestWarm: Warm replays a prefill and a decode variant, and a program
// warmed gives a prompt on page 0 of slot 0 (where the warm-up's row
// went), then a decode step after it, the bits of one never warmed: for
// the tiny model, and for models whose slot holds state a step reads
// (qwen3.5's recurrent layers, gemma3's window ring), which a request's
// first step must write again from position 0.
func TestWarm(t *testing.T) {
	ctx := context.Background()
	run := func(p *runtime.Program) (prefill, decode []float32) {
		pk, _ := p.Key(runtime.Prefill, 4)
		dk, _ := p.Key(runtime.Decode, 1)
		pages := []runtime.SlotPages{{Slot: 0, Pages: []uint32{0}}}
		b := runtime.Batch{Key: pk, Pages: pages}
		for i, tok := range []int32{1, 30, 31, 32} {
			b.Rows = append(b.Rows, runtime.Row{Slot: 0, Pos: i, Token: tok, Logits: i == 3, Prompt: 4})
		}
		if err := p.Step(ctx, b); err != nil {
			t.Fatal(err)
		}
		prefill = p.Logits(0, nil)
		if err := p.Step(ctx, runtime.Batch{Key: dk, Pages: pages, Rows: []runtime.Row{{Slot: 0, Pos: 4, Token: 33, Logits: true}}}); err != nil {
			t.Fatal(err)
		}
		return prefill, p.Logits(0, nil)
	}
	models := map[string]string{"tiny": buildTiny(t)}
	for _, f := range []string{"synthetic/syn-qwen35-q8_0.gguf", "synthetic/syn-gemma3-q4km.gguf"} {
		if _, err := os.Stat(filepath.Join(reference.SharedDir(), "models", f)); err == nil {
			models[filepath.Base(f)] = testmodel.CompileShared(t, f, "", compiler.Options{Slots: 1})
		}
	}
	for name, dir := range models {
		t.Run(name, func(t *testing.T) {
			open := func() *runtime.Program {
				p, err := runtime.Open(dir, runtime.Options{Tier: "cpu", Threads: 1})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { p.Close() })
				return p
			}
			cold, warm := open(), open()
			if err := warm.Warm(ctx); err != nil {
				t.Fatal(err)
			}
			if warm.SlotState() != cold.SlotState() {
				t.Fatal("the same bundle opened twice differs")
			}
			cp, cd := run(cold)
			wp, wd := run(warm)
			if !slices.Equal(cp, wp) || !slices.Equal(cd, wd) {
				t.Errorf("a warmed program's logits differ from a cold one's (slot state: %v)", warm.SlotState())
			}
		})
	}
}
