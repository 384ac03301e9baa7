package cpu

import (
	"fmt"
	"runtime/debug"

	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/runtime/sysmem"
)

// place returns the host memory of every region of b's memory plan, in
// plan order.
//
// A decode step streams every weight byte once, so what backs the weights
// matters: over 4 KiB pages a step walks a page-table entry per 4 KiB,
// far more than the TLB holds. Copied into memory backed by 2 MiB pages,
// the qwen3 0.6B shape (Q4_K_M, 2 threads, zrt-run bench --slots 1,16 on
// a 2-core EPYC VM) decoded 10-25% faster at one slot and 6-10% faster at
// sixteen; with the KV pages in such memory too, 11-17% and 15-20%. The
// copy costs one read of the pack at load and memory of the
// process's own (the kernel may drop the page cache's copy), so it is made
// only where the kernel gives huge pages and the weights take at most half
// the memory available; Options.MapWeights turns it off. The other
// regions (KV pages, activations), read and written every step, go into
// huge-page memory wherever the kernel has it.
func (t *Tier) place(b *bundle.Bundle, opt Options) ([][]byte, error) {
	g := b.Graph
	huge := hugePagesOn()
	var wBytes, oBytes int
	for _, r := range g.Regions {
		if w, ok := b.Weights[r.Name]; ok {
			wBytes += alignUp(len(w), r.Align)
		} else {
			oBytes += alignUp(int(r.Bytes), r.Align)
		}
	}
	copyWeights := huge && !opt.MapWeights && wBytes > 0
	if copyWeights {
		avail, ok := sysmem.Available()
		copyWeights = ok && int64(wBytes) <= avail/2
	}
	var weights, other []byte
	var err error
	if copyWeights {
		if opt.Log != nil && wBytes >= copyNoteBytes {
			opt.Log("cpu: copying %s of weights into huge-page memory (--mmap keeps them in the mapped pack)", sysmem.Bytes(int64(wBytes)))
		}
		if weights, err = t.arena(wBytes); err != nil {
			return nil, err
		}
	}
	if huge && oBytes >= hugePage {
		if other, err = t.arena(oBytes); err != nil {
			return nil, err
		}
	}
	regions := make([][]byte, len(g.Regions))
	for i, r := range g.Regions {
		w, isWeight := b.Weights[r.Name]
		switch {
		case isWeight && weights == nil:
			regions[i] = w
		case isWeight:
			regions[i], weights = carve(weights, len(w), r.Align)
			if err := copyMapped(regions[i], w); err != nil {
				return nil, fmt.Errorf("cpu: weights region %s: %w", r.Name, err)
			}
		case other == nil:
			regions[i] = make([]byte, r.Bytes)
		default:
			regions[i], other = carve(other, int(r.Bytes), r.Align)
		}
	}
	return regions, nil
}

// copyNoteBytes is the size of weights from which the copy, a second or
// more on a slow disk or VM, is worth a line on the log.
const copyNoteBytes = 256 << 20

// arena allocates n bytes of huge-page memory that Close releases.
func (t *Tier) arena(n int) ([]byte, error) {
	b, free, err := allocHuge(n)
	if err != nil {
		return nil, err
	}
	t.release = append(t.release, free)
	return b, nil
}

// alignUp rounds n up to a multiple of align (at least 64, a cache line;
// plan alignments are powers of two).
func alignUp(n int, align int64) int {
	a := max(64, int(align))
	return (n + a - 1) &^ (a - 1)
}

// carve takes n bytes from the front of an arena laid out by alignUp and
// returns them and the rest.
func carve(arena []byte, n int, align int64) (region, rest []byte) {
	return arena[:n:n], arena[alignUp(n, align):]
}

// copyMapped copies from a mapped file, turning the fault of a file
// truncated under its mapping into an error.
func copyMapped(dst, src []byte) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("reading the weights pack failed (%v): was the file truncated or changed while mapped?", r)
		}
	}()
	copy(dst, src)
	return nil
}
