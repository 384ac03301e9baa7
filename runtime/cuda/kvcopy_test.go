package cuda_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
)

// TestCopyKVPage: a KV page copied into another on the device (queued on
// the tier's stream after the step that wrote it and before the next)
// holds the same bytes, and a decode step on the copy yields the logits
// the original yields.
func TestCopyKVPage(t *testing.T) {
	p := pagedProgram(t)
	if !p.CopiesKVPages() {
		t.Fatal("T-CUDA does not copy KV pages")
	}
	ctx := context.Background()
	last := uint32(p.KVPages() - 1)
	prefill, _ := p.Key(runtime.Prefill, 4)
	b := runtime.Batch{Key: prefill, Pages: []runtime.SlotPages{{Slot: 0, Pages: []uint32{0}}}}
	for i, tok := range []int32{1, 300, 301, 302} {
		b.Rows = append(b.Rows, runtime.Row{Slot: 0, Pos: i, Token: tok, Logits: i == 3})
	}
	if err := p.Step(ctx, b); err != nil {
		t.Fatal(err)
	}
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
	if slices.Equal(a, make([]byte, len(a))) {
		t.Fatal("page 0 holds no KV after the prefill")
	}
	decode, _ := p.Key(runtime.Decode, 1)
	var logits [2][]float32
	for i, pg := range []uint32{0, last} {
		if i == 1 {
			// Copy again right before the step that reads the copy: the
			// copy is queued, not waited for, and must land first.
			if err := p.CopyKVPage(last-1, 0); err != nil {
				t.Fatal(err)
			}
			pg = last - 1
		}
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
}

// pagedProgram opens a small synthetic llama on T-CUDA with two slots and
// 16 KV pages, for the page copy tests (skipped without a GPU); it closes
// when the test ends.
func pagedProgram(t *testing.T) *runtime.Program { return slotsProgram(t, 2, 7) }

// slotsProgram opens the small synthetic llama of weights seed on T-CUDA
// with slots slots (decode variants of 1 and slots rows) and 16 KV pages,
// skipped without a GPU; it closes when the test ends.
func slotsProgram(t *testing.T, slots int, seed uint64) *runtime.Program {
	t.Helper()
	if _, err := driver.Probe(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	shape := synth.Shape{Arch: "llama", Layers: 2, Embd: 128, Heads: 4, HeadsKV: 4, FF: 256, Vocab: 5003, Context: 128, Type: ggml.Q8_0, Seed: seed}
	config := fmt.Sprintf("max_slots = %d\ndecode_slots = [1, %d]\nkv_pages = 16\n", slots, slots)
	p, err := runtime.Open(compileSynth(t, shape, "cuda:sm_90", config), runtime.Options{Tier: "cuda"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestFetchLogits: FetchLogits brings the logits of the slots asked for
// (runs of consecutive slots in one copy) to the host, where LogitsView
// shows them and Logits reads them without a copy of its own, the same
// bits as Logits fetching one slot at a time; the next step drops them.
func TestFetchLogits(t *testing.T) {
	p := slotsProgram(t, 4, 7)
	key, _ := p.Key(runtime.Decode, 4)
	b := runtime.Batch{Key: key}
	for s := range 4 {
		b.Rows = append(b.Rows, runtime.Row{Slot: s, Pos: 0, Token: int32(300 + 7*s), Logits: true})
		b.Pages = append(b.Pages, runtime.SlotPages{Slot: s, Pages: []uint32{uint32(s)}})
	}
	step := func() {
		if err := p.Step(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	step()
	var want [4][]float32
	for s := range want {
		want[s] = p.Logits(s, nil)
		if p.LogitsView(s) != nil {
			t.Fatalf("slot %d: a view of logits nobody fetched", s)
		}
	}
	step()
	if err := p.FetchLogits([]int{3, 0, 1}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []int{0, 1, 3} {
		if v := p.LogitsView(s); !slices.Equal(v, want[s]) || !slices.Equal(p.Logits(s, nil), want[s]) {
			t.Errorf("slot %d: fetched logits differ from one slot's fetch", s)
		}
	}
	if p.LogitsView(2) != nil || !slices.Equal(p.Logits(2, nil), want[2]) {
		t.Error("slot 2, not fetched: a view, or other logits")
	}
	step()
	if p.LogitsView(0) != nil {
		t.Error("a view of the last step's logits after the next step")
	}
	if err := p.FetchLogits([]int{4}); err == nil {
		t.Error("fetched slot 4 of 4")
	}
}
