package cpu

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestPoolFor checks that every index runs exactly once, in chunks whose
// worker numbers are distinct, for pool sizes and loop lengths around the
// chunking boundaries, with pauses that let the workers park between
// loops as well as back-to-back loops that catch them spinning.
func TestPoolFor(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 4} {
		p := NewPool(threads)
		for iter := 0; iter < 200; iter++ {
			n := iter % 37
			grain := 1 + iter%5
			hits := make([]int32, n)
			var busy [8]atomic.Int32
			if err := p.For(n, grain, func(w, lo, hi int) {
				if busy[w].Add(1) != 1 {
					panic("worker index shared by two chunks")
				}
				for i := lo; i < hi; i++ {
					atomic.AddInt32(&hits[i], 1)
				}
				busy[w].Add(-1)
			}); err != nil {
				t.Fatalf("threads %d n %d: %v", threads, n, err)
			}
			for i, h := range hits {
				if h != 1 {
					t.Fatalf("threads %d n %d grain %d: index %d ran %d times", threads, n, grain, i, h)
				}
			}
			if iter%50 == 49 {
				time.Sleep(2 * spinFor) // workers park
			}
		}
		p.Close()
		p.Close()
	}
}

// TestPoolFault turns a panic in any chunk into the loop's error, and the
// pool keeps working afterwards.
func TestPoolFault(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	for _, bad := range []int{0, 9} {
		err := p.For(10, 1, func(_, lo, hi int) {
			if lo <= bad && bad < hi {
				panic("boom")
			}
		})
		if err == nil || !strings.Contains(err.Error(), "boom") {
			t.Fatalf("fault in index %d: err %v", bad, err)
		}
	}
	var sum atomic.Int64
	if err := p.For(100, 1, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			sum.Add(int64(i))
		}
	}); err != nil || sum.Load() != 4950 {
		t.Fatalf("after faults: err %v sum %d", err, sum.Load())
	}
}

// TestPoolSlowWorker makes one chunk finish long after the other, so that
// the caller parks while it waits (when a worker took the slow one).
func TestPoolSlowWorker(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	for i := 0; i < 5; i++ {
		var done atomic.Int32
		if err := p.For(2, 1, func(_, lo, _ int) {
			if lo == 1 {
				time.Sleep(3 * spinFor)
			}
			done.Add(1)
		}); err != nil || done.Load() != 2 {
			t.Fatalf("err %v, %d chunks done", err, done.Load())
		}
	}
}

// BenchmarkPoolFor measures a dispatch of an empty loop over two threads:
// the per-dispatch overhead decode pays a few hundred times per token.
func BenchmarkPoolFor(b *testing.B) {
	p := NewPool(2)
	defer p.Close()
	fn := func(_, _, _ int) {}
	b.ReportAllocs()
	for b.Loop() {
		_ = p.For(2, 1, fn)
	}
}

// TestPoolLateWorker has every chunk a worker runs take far longer than the
// caller's: the caller, claiming as it goes, runs all the others instead of
// waiting for the late thread's share.
func TestPoolLateWorker(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	var mine atomic.Int32
	if err := p.For(8, 1, func(w, _, _ int) {
		if w == 0 {
			mine.Add(1)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}); err != nil {
		t.Fatal(err)
	}
	if mine.Load() < 7 {
		t.Fatalf("the caller ran %d of 8 chunks beside a late worker, want at least 7", mine.Load())
	}
}

// TestPoolBackToBack runs loops of changing sizes back to back, where a
// worker still leaving one loop meets the next one's chunks.
func TestPoolBackToBack(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	sizes := []int{16, 768, 3, 32000, 1, 17, 192}
	for iter := range 20000 {
		n := sizes[iter%len(sizes)]
		var total atomic.Int64
		if err := p.For(n, 1+iter%5, func(_, lo, hi int) { total.Add(int64(hi - lo)) }); err != nil {
			t.Fatal(err)
		}
		if total.Load() != int64(n) {
			t.Fatalf("loop %d: %d items ran, want %d", iter, total.Load(), n)
		}
	}
}
