package engine

import (
	"fmt"
	"runtime"

	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/runtime/engine/hostkv"
)

// KVBatchPager is a KVPager that copies many pages in one batch without
// the host waiting for them (T-CUDA: page-locked host memory, copies
// queued on the device's stream in order with its steps). The engine
// queues a step's copies together and looks for their completion at the
// next steps, so neither the pages the pool evicts nor those the host
// tier gives back hold the step loop up.
type KVBatchPager interface {
	// KVHostBuffer returns one page's bytes of host memory that the
	// copies are fastest to and from; the engine keeps it for reuse. It
	// may fail while ReserveKVHostBuffers is preparing them: the pages
	// are then not kept.
	KVHostBuffer() ([]byte, error)
	// ReserveKVHostBuffers prepares count KVHostBuffers in the
	// background (the engine asks for its host tier's worth at start).
	ReserveKVHostBuffers(count int)
	// ReadKVPages queues copies of pages' bytes, as the last step left
	// them, into dsts (one page each, from KVHostBuffer), ordered before
	// any later step or WriteKVPages writes the pages: a page may be
	// reused at once. dsts hold the bytes once done reports true.
	ReadKVPages(pages []uint32, dsts [][]byte) (done func() (bool, error), err error)
	// WriteKVPages queues copies of srcs into pages, in time for the
	// next step to read them; srcs must not change until done reports
	// true.
	WriteKVPages(pages []uint32, srcs [][]byte) (done func() (bool, error), err error)
	// KVCopyRate is the measured rate of the copies in bytes a second
	// (0: not measured yet), against which the engine weighs a page's
	// copy with computing its tokens again.
	KVCopyRate() float64
}

// syncPager is a KVPager's pages copied one by one as a KVBatchPager:
// every copy is done when it returns.
type syncPager struct{ KVPager }

func (p syncPager) KVHostBuffer() ([]byte, error) { return make([]byte, p.KVPageBytes()), nil }

func (syncPager) ReserveKVHostBuffers(int) {}

func (p syncPager) ReadKVPages(pages []uint32, dsts [][]byte) (func() (bool, error), error) {
	for i, pg := range pages {
		if err := p.ReadKVPage(pg, dsts[i]); err != nil {
			return nil, err
		}
	}
	return doneNow, nil
}

func (p syncPager) WriteKVPages(pages []uint32, srcs [][]byte) (func() (bool, error), error) {
	for i, pg := range pages {
		if err := p.WriteKVPage(pg, srcs[i]); err != nil {
			return nil, err
		}
	}
	return doneNow, nil
}

func (syncPager) KVCopyRate() float64 { return 0 }

func doneNow() (bool, error) { return true, nil }

// hostCopy is a batch of copies between KV pages and the engine's host
// buffers in flight: copy-outs of evicted pages, whose buffers the host
// tier adopts under keys once they land, or restores, whose buffers
// (taken out of the tier) go back into it under keys.
type hostCopy struct {
	done    func() (bool, error)
	keys    []uint64
	bufs    [][]byte
	restore bool
}

// hostPages is the engine's side of the host tier's copies: the pages
// evicted in the step whose copy-out is not queued yet, the batches in
// flight, and the host buffers free for the next ones.
type hostPages struct {
	pager    KVBatchPager
	outKeys  []uint64
	outPages []uint32
	inflight []hostCopy
	// leaving holds the chunks whose copy-out is queued or in flight:
	// the host tier has not got them yet, and they are not copied twice.
	leaving   map[uint64]bool
	free      [][]byte
	made      int // buffers taken from the pager, free or in use
	pageBytes int
}

// evicted notes that the device cache evicted page pg, cached under
// chunk key, for a copy-out queued with the step's others (flushOut);
// the page may be reallocated at once: its copy is queued before
// anything writes it.
func (e *Engine) evicted(key uint64, pg uint32) {
	k := hostkv.Key{Layout: e.layout, Chunk: key}
	if e.host.Has(k) {
		e.host.Put(k, nil) // its bytes came from there: only mark it used
		return
	}
	if e.hp.leaving[key] {
		return
	}
	e.hp.leaving[key] = true
	e.hp.outKeys = append(e.hp.outKeys, key)
	e.hp.outPages = append(e.hp.outPages, pg)
}

// flushOut queues the copy-outs of the pages evicted since the last,
// in one batch. It runs before anything writes a page: before swapIn's
// restores and copies and before the step. Pages it cannot copy are
// simply not kept: a later request computes their tokens.
func (e *Engine) flushOut() {
	h := &e.hp
	if len(h.outKeys) == 0 {
		return
	}
	keys, pages := h.outKeys, h.outPages
	h.outKeys, h.outPages = nil, nil
	// Those it has no buffer for (the tier still preparing them) are not
	// kept.
	bufs := e.hostBufs(len(keys))
	for _, k := range keys[len(bufs):] {
		delete(h.leaving, k)
	}
	keys, pages = keys[:len(bufs)], pages[:len(bufs)]
	if len(keys) == 0 {
		return
	}
	done, err := h.pager.ReadKVPages(pages, bufs)
	if err != nil {
		h.free = append(h.free, bufs...)
		for _, k := range keys {
			delete(h.leaving, k)
		}
		e.mu.Lock()
		e.stats.HostReadErrors += uint64(len(keys))
		e.mu.Unlock()
		return
	}
	h.inflight = append(h.inflight, hostCopy{done: done, keys: keys, bufs: bufs})
}

// hostBufs takes up to n host buffers, free ones first, then new ones
// from the pager for as long as it has them.
func (e *Engine) hostBufs(n int) [][]byte {
	h := &e.hp
	bufs := make([][]byte, 0, n)
	for len(bufs) < n && len(h.free) > 0 {
		bufs = append(bufs, h.free[len(h.free)-1])
		h.free = h.free[:len(h.free)-1]
	}
	for len(bufs) < n {
		b, err := h.pager.KVHostBuffer()
		if err != nil || len(b) != h.pageBytes {
			break
		}
		h.made++
		bufs = append(bufs, b)
	}
	return bufs
}

// landHost takes the copies that have completed: the copy-outs' bytes
// go into the host tier, and their buffers are free again. With wait it
// waits for all of them.
func (e *Engine) landHost(wait bool) {
	h := &e.hp
	live := h.inflight[:0]
	var failed uint64
	for _, c := range h.inflight {
		ok, err := c.done()
		for wait && !ok && err == nil {
			runtime.Gosched()
			ok, err = c.done()
		}
		if !ok && err == nil {
			live = append(live, c)
			continue
		}
		for i, k := range c.keys {
			hk := hostkv.Key{Layout: e.layout, Chunk: k}
			switch {
			case c.restore:
				// Their bytes are the tier's still, whatever the copy did.
				h.free = append(h.free, e.host.Return(hk, c.bufs[i])...)
			case err == nil:
				delete(h.leaving, k)
				h.free = append(h.free, e.host.Adopt(hk, c.bufs[i])...)
			default:
				delete(h.leaving, k)
				h.free = append(h.free, c.bufs[i])
				failed++
			}
		}
	}
	clear(h.inflight[len(live):])
	h.inflight = live
	if failed > 0 {
		e.mu.Lock()
		e.stats.HostReadErrors += failed
		e.mu.Unlock()
	}
}

// restoreCheaper reports whether a page from the host tier costs less to
// copy back than its tokens to compute: its bytes at the copies'
// measured rate against KVPageTokens prefill rows at the step cost
// model's. Until both are measured, pages come back.
func (e *Engine) restoreCheaper() bool {
	rate, row := e.hp.pager.KVCopyRate(), e.cost.row
	if rate <= 0 || row <= 0 {
		return true
	}
	return float64(e.hp.pageBytes)/rate < row*kernels.KVPageTokens
}

// restore queues the copies of srcs into pages (swapIn's restores) in
// one batch; the buffers swapIn took out of the host tier (taken, under
// keys) go back into it once they have landed, as the most recently
// used.
func (e *Engine) restore(pages []uint32, srcs [][]byte, keys []uint64, taken map[uint64][]byte) error {
	c := hostCopy{keys: keys, restore: true}
	for _, k := range keys {
		c.bufs = append(c.bufs, taken[k])
	}
	var err error
	if len(pages) > 0 {
		c.done, err = e.hp.pager.WriteKVPages(pages, srcs)
	}
	if len(pages) == 0 || err != nil {
		c.done = doneNow
	}
	e.hp.inflight = append(e.hp.inflight, c)
	return err
}

// checkHostIdle reports, once every copy has landed, copy-outs left
// unqueued or buffers not given back (tests).
func (e *Engine) checkHostIdle() error {
	h := &e.hp
	switch {
	case h.pager == nil:
		return nil
	case len(h.outKeys) > 0 || len(h.inflight) > 0 || len(h.leaving) > 0:
		return fmt.Errorf("%d copy-outs unqueued, %d batches in flight, %d chunks leaving", len(h.outKeys), len(h.inflight), len(h.leaving))
	case len(h.free)+e.host.Len() != h.made:
		return fmt.Errorf("%d host buffers made, %d free and %d in the host tier", h.made, len(h.free), e.host.Len())
	}
	return nil
}
