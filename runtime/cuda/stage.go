package cuda

import (
	"fmt"
	goruntime "runtime"

	"github.com/zrtdev/zrt/runtime/cuda/driver"
)

// stager is the tier's side of runtime.RegionStager: the page-locked
// slabs it carves host buffers from, and the copies' measured rate.
type stager struct {
	slabs [][]byte
	rest  []byte  // of the last slab, not handed out yet
	rate  float64 // bytes a second, an exponential moving average; 0 until measured
}

// stageSlab is the least a slab of page-locked memory holds: pinning
// takes time in proportion to the bytes plus a fixed cost a call, which
// a host tier filling up (a KV page or two megabytes each, tens a step)
// should not pay a page at a time.
const stageSlab = 128 << 20

// HostBuffer returns n bytes of page-locked host memory, which the
// copy engines read and write directly (a copy from pageable memory is
// staged through the driver's own buffer, the host waiting for it),
// carved from slabs of at least stageSlab bytes; it is freed when the
// tier closes.
func (t *Tier) HostBuffer(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cuda: a host buffer of %d bytes", n)
	}
	if len(t.stage.rest) < n {
		var slab []byte
		err := t.onContext(func() error {
			var err error
			slab, err = driver.MemHostAlloc(max(n, stageSlab/n*n))
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("cuda: a host buffer of %d bytes: %w", n, err)
		}
		t.stage.slabs = append(t.stage.slabs, slab)
		t.stage.rest = slab
	}
	b := t.stage.rest[:n:n]
	t.stage.rest = t.stage.rest[n:]
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

// free frees the page-locked slabs (the tier's stream is quiet).
func (s *stager) free() {
	for _, b := range s.slabs {
		driver.MemFreeHost(b)
	}
	s.slabs, s.rest = nil, nil
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
