package cuda_test

import (
	"context"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/zrtdev/zrt/runtime"
)

// TestStageKVPages: a batch copy of KV pages into page-locked host
// memory, queued on the tier's stream, lands with the bytes the pages
// held before the step queued right after it (which writes one of them
// again), without the host waiting for it at the call; the bytes written
// back in a batch into other pages, queued right before a decode step on
// them, give the logits the originals gave; a landed batch gives the
// copies' rate.
func TestStageKVPages(t *testing.T) {
	p := pagedProgram(t)
	ctx := context.Background()
	n := p.KVPageBytes()
	// Slots 0 and 1 prefill 4 tokens each, into pages 0 and 1.
	prefill, _ := p.Key(runtime.Prefill, 8)
	b := runtime.Batch{Key: prefill, Pages: []runtime.SlotPages{{Slot: 0, Pages: []uint32{0}}, {Slot: 1, Pages: []uint32{1}}}}
	for s := range 2 {
		for i, tok := range []int32{1, 300 + int32(s), 301, 302} {
			b.Rows = append(b.Rows, runtime.Row{Slot: s, Pos: i, Token: tok, Logits: i == 3})
		}
	}
	if err := p.Step(ctx, b); err != nil {
		t.Fatal(err)
	}
	want := [][]byte{make([]byte, n), make([]byte, n)}
	for pg := range want {
		if err := p.ReadKVPage(uint32(pg), want[pg]); err != nil {
			t.Fatal(err)
		}
	}
	bufs := make([][]byte, 2)
	for i := range bufs {
		var err error
		if bufs[i], err = p.KVHostBuffer(); err != nil || len(bufs[i]) != n {
			t.Fatalf("a host buffer of %d bytes (%v), want %d", len(bufs[i]), err, n)
		}
	}
	read, err := p.ReadKVPages([]uint32{0, 1}, bufs)
	if err != nil {
		t.Fatal(err)
	}
	decode, _ := p.Key(runtime.Decode, 2)
	step := func(pages [2]uint32) [2][]float32 {
		d := runtime.Batch{Key: decode, Pages: []runtime.SlotPages{{Slot: 0, Pages: pages[:1]}, {Slot: 1, Pages: pages[1:]}},
			Rows: []runtime.Row{{Slot: 0, Pos: 4, Token: 303, Logits: true}, {Slot: 1, Pos: 4, Token: 304, Logits: true}}}
		if err := p.Step(ctx, d); err != nil {
			t.Fatal(err)
		}
		return [2][]float32{p.Logits(0, nil), p.Logits(1, nil)}
	}
	first := step([2]uint32{0, 1}) // writes position 4 of pages 0 and 1
	waitLanded(t, read)
	for pg := range want {
		if !slices.Equal(bufs[pg], want[pg]) {
			t.Fatalf("the batch read of page %d holds other bytes than the page before the next step", pg)
		}
	}
	if p.KVCopyRate() <= 0 {
		t.Errorf("no copy rate measured after a batch landed")
	}
	last := uint32(p.KVPages() - 1)
	write, err := p.WriteKVPages([]uint32{last, last - 1}, bufs)
	if err != nil {
		t.Fatal(err)
	}
	again := step([2]uint32{last, last - 1})
	waitLanded(t, write)
	for s := range 2 {
		if !slices.Equal(first[s], again[s]) {
			t.Errorf("slot %d: a decode step on the pages written back yields other logits than on the originals", s)
		}
	}
	t.Logf("copies of %d-byte pages at %.2f GB/s", n, p.KVCopyRate()/1e9)

	// Buffers reserved ahead are pinned in the background: a call fails
	// only while none is ready, each is a range of its own, and they copy
	// as the others do. The tier closes (at the test's end) while it still pins the
	// second reservation.
	const count = 48
	p.ReserveKVHostBuffers(count)
	var got [][]byte
	for deadline := time.Now().Add(20 * time.Second); len(got) < count && time.Now().Before(deadline); {
		b, err := p.KVHostBuffer()
		if err != nil {
			time.Sleep(time.Millisecond)
			continue
		}
		if len(b) != n {
			t.Fatalf("a reserved buffer of %d bytes, want %d", len(b), n)
		}
		got = append(got, b)
	}
	if len(got) < count {
		t.Fatalf("%d of %d reserved buffers within 20 s", len(got), count)
	}
	starts := make([]uintptr, len(got))
	for i, b := range got {
		starts[i] = uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	}
	slices.Sort(starts)
	for i := 1; i < len(starts); i++ {
		if starts[i]-starts[i-1] < uintptr(n) {
			t.Fatalf("reserved buffers overlap: %#x and %#x, %d bytes each", starts[i-1], starts[i], n)
		}
	}
	page0 := make([]byte, n)
	if err := p.ReadKVPage(0, page0); err != nil {
		t.Fatal(err)
	}
	read, err = p.ReadKVPages([]uint32{0}, got[count-1:])
	if err != nil {
		t.Fatal(err)
	}
	waitLanded(t, read)
	if !slices.Equal(got[count-1], page0) {
		t.Error("a reserved buffer's batch read of page 0 holds other bytes than the page")
	}
	p.ReserveKVHostBuffers(4096)
}

func waitLanded(t *testing.T, done func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, err := done()
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("a batch of copies never landed")
		}
	}
}
