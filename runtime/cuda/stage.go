package cuda

import (
	"errors"
	"fmt"
	goruntime "runtime"
	"sync"

	"github.com/zrtdev/zrt/runtime/cuda/driver"
)

// stager is the tier's side of runtime.RegionStager: the page-locked
// slabs it carves host buffers from, those pinned ahead of need, and the
// copies' measured rate.
type stager struct {
	mu    sync.Mutex
	slabs [][]byte // every slab pinned, for free
	rest  []byte   // of the slab being carved, not handed out yet
	ready [][]byte // slabs pinned ahead (ReserveHostBuffers), not carved yet
	// want is the bytes a reservation still asks for; pinning says a
	// goroutine is pinning them, stop that the tier is closing.
	want    int
	unit    int // the reserved buffers' size: slabs hold whole buffers
	pinning bool
	stop    bool
	pinned  sync.WaitGroup

	// rate is the copies' bytes a second, an exponential moving average
	// (0 until measured), read and written on the step's goroutine only.
	rate float64
}

// stageSlab is the least a slab of page-locked memory holds: pinning
// takes time in proportion to the bytes plus a fixed cost a call, which
// a host tier filling up (a KV page or two megabytes each, tens a step)
// should not pay a page at a time.
const stageSlab = 128 << 20

// errPinning is HostBuffer's answer while the memory reserved is still
// being pinned.
var errPinning = errors.New("cuda: the reserved page-locked host memory is still being pinned")

// ReserveHostBuffers pins host memory for count buffers of n bytes in the
// background, a slab at a time, for HostBuffer to hand out: pinning takes
// the driver tens of milliseconds a slab (about half a second a GiB on an
// H200's host), which a step that hands buffers out must not wait for.
func (t *Tier) ReserveHostBuffers(n, count int) {
	if n <= 0 || count <= 0 {
		return
	}
	s := &t.stage
	s.mu.Lock()
	defer s.mu.Unlock()
	s.want += n * count
	s.unit = n
	if s.pinning || s.stop {
		return
	}
	s.pinning = true
	s.pinned.Add(1)
	go t.pinAhead()
}

// pinAhead pins the reserved bytes slab by slab, on a thread of its own.
func (t *Tier) pinAhead() {
	s := &t.stage
	defer s.pinned.Done()
	for {
		s.mu.Lock()
		if s.stop || s.want <= 0 {
			s.pinning = false
			s.mu.Unlock()
			return
		}
		size := slabSize(s.unit, min(s.want, stageSlab))
		s.mu.Unlock()
		slab, err := t.pin(size)
		s.mu.Lock()
		if err != nil {
			// Not pinned: HostBuffer pins what it needs itself.
			s.want, s.pinning = 0, false
			s.mu.Unlock()
			return
		}
		s.slabs = append(s.slabs, slab)
		s.ready = append(s.ready, slab)
		s.want -= len(slab)
		s.mu.Unlock()
	}
}

// pin allocates n bytes of page-locked host memory.
func (t *Tier) pin(n int) (slab []byte, err error) {
	err = t.onContext(func() error {
		slab, err = driver.MemHostAlloc(n)
		return err
	})
	return slab, err
}

// slabSize is the bytes of a slab of buffers of n bytes: whole buffers,
// at least want bytes' worth (one at least).
func slabSize(n, want int) int {
	return max(n, (want+n-1)/n*n)
}

// HostBuffer returns n bytes of page-locked host memory, which the
// copy engines read and write directly (a copy from pageable memory is
// staged through the driver's own buffer, the host waiting for it),
// carved from slabs of at least stageSlab bytes; it is freed when the
// tier closes. Buffers ReserveHostBuffers pins come first; while it is
// still pinning and has none ready, HostBuffer fails at once rather than
// wait (a caller on a step's path does without the buffer); with no
// reservation under way it pins a slab itself.
func (t *Tier) HostBuffer(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cuda: a host buffer of %d bytes", n)
	}
	s := &t.stage
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.rest) < n && len(s.ready) > 0 {
		s.rest, s.ready = s.ready[0], s.ready[1:]
	}
	if len(s.rest) < n {
		if s.pinning {
			return nil, errPinning
		}
		slab, err := t.pin(slabSize(n, stageSlab))
		if err != nil {
			return nil, fmt.Errorf("cuda: a host buffer of %d bytes: %w", n, err)
		}
		s.slabs = append(s.slabs, slab)
		s.rest = slab
	}
	b := s.rest[:n:n]
	s.rest = s.rest[n:]
	return b, nil
}

// StageFromRegion queues copies of len(dsts[k]) bytes at offs[k] of
// region i into dsts[k] (page-locked memory from HostBuffer) on the
// tier's stream: after the replays queued before them, before those
// queued after, so the pages they read may be written again at once.
// The host waits for none of it; done queries an event recorded after
// the copies.
func (t *Tier) StageFromRegion(i int, offs []int64, dsts [][]byte) (func() (bool, error), error) {
	return t.stageCopies(i, offs, dsts, func(p driver.DevPtr, b []byte) error {
		return driver.MemcpyDtoHAsync(b, p, t.stream)
	})
}

// StageToRegion queues copies of srcs[k] (page-locked memory from
// HostBuffer) into region i at offs[k] on the tier's stream, so the next
// replay reads the bytes; srcs must not change until done reports true.
func (t *Tier) StageToRegion(i int, offs []int64, srcs [][]byte) (func() (bool, error), error) {
	return t.stageCopies(i, offs, srcs, func(p driver.DevPtr, b []byte) error {
		return driver.MemcpyHtoDAsync(p, b, t.stream)
	})
}

// StageRate is the staged copies' measured rate in bytes a second (0
// until a batch has landed).
func (t *Tier) StageRate() float64 { return t.stage.rate }

// stageCopies queues one copy per buffer between two timing events on
// the tier's stream; the done it returns measures the batch's rate once
// the second event has completed, and destroys both.
func (t *Tier) stageCopies(i int, offs []int64, bufs [][]byte, copy1 func(driver.DevPtr, []byte) error) (func() (bool, error), error) {
	if len(offs) != len(bufs) {
		return nil, fmt.Errorf("cuda: %d copies with %d buffers", len(offs), len(bufs))
	}
	total := 0
	for k, b := range bufs {
		if i < 0 || i >= len(t.regions) || offs[k] < 0 || offs[k]+int64(len(b)) > int64(t.regions[i].size) {
			return nil, fmt.Errorf("cuda: no bytes [%d, %d) in region %d", offs[k], offs[k]+int64(len(b)), i)
		}
		total += len(b)
	}
	var start, end driver.Event
	err := t.onContext(func() error {
		var err error
		if start, err = driver.NewEvent(0); err != nil {
			return err
		}
		if end, err = driver.NewEvent(0); err != nil {
			return err
		}
		if err := start.Record(t.stream); err != nil {
			return err
		}
		for k, b := range bufs {
			if err := copy1(t.regions[i].dev+driver.DevPtr(offs[k]), b); err != nil {
				return err
			}
		}
		return end.Record(t.stream)
	})
	if err != nil {
		// Copies queued before the failure may still run: let them
		// finish before the events go and the caller reuses the buffers.
		t.onContext(func() error {
			t.stream.Synchronize()
			destroyEvents(start, end)
			return nil
		})
		return nil, fmt.Errorf("cuda: copying %d ranges of region %d to or from the host: %w", len(bufs), i, err)
	}
	landed := false
	var failed error
	done := func() (bool, error) {
		if landed || failed != nil {
			return landed, failed
		}
		err := t.onContext(func() error {
			err := end.Query()
			if driver.IsNotReady(err) {
				return err
			}
			if err == nil {
				if ms, err := end.Elapsed(start); err == nil && ms > 0 {
					t.stage.observe(float64(total) / (float64(ms) / 1e3))
				}
			}
			destroyEvents(start, end)
			return err
		})
		switch {
		case err == nil:
			landed = true
		case driver.IsNotReady(err):
			return false, nil
		default:
			failed = fmt.Errorf("cuda: copies to or from region %d: %w", i, err)
		}
		return landed, failed
	}
	return done, nil
}

// observe folds a batch's rate into the average.
func (s *stager) observe(rate float64) {
	if s.rate == 0 {
		s.rate = rate
	} else {
		s.rate += 0.1 * (rate - s.rate)
	}
}

// free stops the pinning ahead and frees the page-locked slabs (the
// tier's stream is quiet).
func (s *stager) free() {
	s.mu.Lock()
	s.stop = true
	s.mu.Unlock()
	s.pinned.Wait()
	for _, b := range s.slabs {
		driver.MemFreeHost(b)
	}
	s.slabs, s.rest, s.ready = nil, nil, nil
}

func destroyEvents(es ...driver.Event) {
	for _, e := range es {
		if e != 0 {
			e.Destroy()
		}
	}
}

// onContext runs do on this thread with the tier's context current.
func (t *Tier) onContext(do func() error) error {
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	if err := t.ctx.SetCurrent(); err != nil {
		return err
	}
	return do()
}
