package t1

import (
	"fmt"
	"runtime"
	"time"

	"github.com/zrtdev/zrt/runtime/amd/kfd"
)

// Ring writes PM4 packets into a compute queue's ring buffer: a power of
// two of dwords the CP reads from its read pointer up to the write
// pointer, both counted in dwords since the queue started (never wrapped;
// the ring index is the pointer modulo its size).
type Ring struct {
	buf, ptrs *kfd.Mem
	n         uint64 // dwords
	w         uint64
	db        kfd.Doorbell
	// Timeout bounds the wait for ring space.
	Timeout time.Duration
}

// NewRing writes into buf (the queue's ring) and ptrs (its read and write
// pointers, kfd.ReadPtrOff and kfd.WritePtrOff) and rings db.
func NewRing(buf, ptrs *kfd.Mem, db kfd.Doorbell) *Ring {
	return &Ring{buf: buf, ptrs: ptrs, n: buf.Size / 4, w: ptrs.Load64(kfd.WritePtrOff), db: db, Timeout: 10 * time.Second}
}

// Dwords is the ring's capacity.
func (r *Ring) Dwords() uint64 { return r.n }

// WritePointer is the write pointer after the last submission.
func (r *Ring) WritePointer() uint64 { return r.w }

// Submit copies a stream of type-3 packets into the ring — each packet's
// body first and its header last, so a CP that is already running never
// sees a header whose body is not there yet — then publishes the write
// pointer and rings the doorbell with it.
func (r *Ring) Submit(words []uint32) error {
	n := uint64(len(words))
	if n == 0 {
		return nil
	}
	if n > r.n {
		return fmt.Errorf("t1: submission of %d dwords does not fit the %d-dword ring", n, r.n)
	}
	deadline := time.Now().Add(r.Timeout)
	for r.w+n-r.ptrs.Load64(kfd.ReadPtrOff) > r.n {
		if time.Now().After(deadline) {
			return fmt.Errorf("t1: no ring space for %d dwords within %v: the CP is stuck at read pointer %#x (write pointer %#x)", n, r.Timeout, r.ptrs.Load64(kfd.ReadPtrOff), r.w)
		}
		runtime.Gosched()
	}
	mask := r.n - 1
	for i := 0; i < len(words); {
		h := words[i]
		cnt := int(h>>16&0x3FFF) + 1
		if h>>30 != 3 || i+1+cnt > len(words) {
			return fmt.Errorf("t1: dword %d: %#08x is not the header of a type-3 packet inside the stream", i, h)
		}
		for j := i + 1; j <= i+cnt; j++ {
			r.buf.Store32(4*((r.w+uint64(j))&mask), words[j])
		}
		r.buf.Store32(4*((r.w+uint64(i))&mask), h)
		i += 1 + cnt
	}
	r.w += n
	r.ptrs.Store64(kfd.WritePtrOff, r.w)
	return r.db.Ring(r.w)
}
