package cpu

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/kernels/quant"
)

// Packs holds the repacked forms of a tier's weight matrices: Q4_K
// matrices that ggml repacks (quant.Repacked) interleaved in groups of
// eight weight rows (quant.InterleaveQ4K), each derived once, the first
// time a product needs it, and kept as long as the tier, as ggml repacks
// into block_q4_Kx8 once at load. Without them every product would
// interleave its weight again (a prompt's GEMM rows shared that cost; a
// decode step's one row could not, and took the slower row-by-row GEMV).
//
// Memory: a pack takes 1184/1152 of its matrix's bytes, on top of the
// matrix itself, which stays: the same weight bytes may serve kernels
// that read them as rows (a tied embedding's lookup, the tail of a
// product not taking the packs), and the tier cannot tell which at load.
// For a Q4_K_M model that is about as much again as its Q4_K matrices
// (the Q6_K ones are not repacked).
//
// Only matrices inside the weight regions the Packs was made with are
// packed: their bytes never change, so the address identifies the matrix.
type Packs struct {
	weights [][]byte
	alloc   func(n int) ([]byte, error)

	mu  sync.Mutex
	q4k map[packKey][]byte
	// out holds each worker's results of the products on the packs
	// (a result array of a kernel's own would escape to the heap on
	// every call, through the quant kernels' indirect calls).
	out [][]float32
}

// packKey names a packed matrix: its first byte, row length and rows.
type packKey struct {
	w    *byte
	k, n int
}

// NewPacks returns the packs of a tier whose weight regions are weights
// (read-only for the tier's life). alloc, when non-nil, gives the memory
// of each pack (the tier's huge-page arenas); nil takes it from the Go
// heap.
func NewPacks(weights [][]byte, alloc func(n int) ([]byte, error)) *Packs {
	if alloc == nil {
		alloc = func(n int) ([]byte, error) { return make([]byte, n), nil }
	}
	return &Packs{weights: weights, alloc: alloc, q4k: map[packKey][]byte{}}
}

// q4kGroups returns the interleaved groups of the n Q4_K rows of k
// elements at w (quant.Q4KGroupBytes(k) bytes a group of eight, in row
// order), building them on first use with a's workers; nil when w is not
// in a weight region, n is not whole groups, or the CPU has no kernel on
// interleaved groups (then the products read the rows as stored).
func (p *Packs) q4kGroups(a *Args, t ggml.Type, w []byte, k, n int) ([]byte, error) {
	if p == nil || t != ggml.Q4_K || n%quant.Q4KInterleaveRows != 0 || !quant.Q4KInterleavedFast() {
		return nil, nil
	}
	wb := rowBytes(t, k)
	if len(w) < n*wb || !p.inWeights(w[:n*wb]) {
		return nil, nil
	}
	key := packKey{&w[0], k, n}
	p.mu.Lock()
	defer p.mu.Unlock()
	if g, ok := p.q4k[key]; ok {
		return g, nil
	}
	gb := quant.Q4KGroupBytes(k)
	ng := n / quant.Q4KInterleaveRows
	g, err := p.alloc(ng * gb)
	if err != nil {
		return nil, fmt.Errorf("cpu: memory for the interleaved Q4_K matrix of %dx%d: %w", n, k, err)
	}
	g = g[:ng*gb]
	rb := quant.Q4KInterleaveRows * wb
	if err := a.Pool.For(ng, 1, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			if err := quant.InterleaveQ4K(k, w[i*rb:(i+1)*rb], g[i*gb:(i+1)*gb]); err != nil {
				panic(err) // sizes checked above
			}
		}
	}); err != nil {
		return nil, err
	}
	p.q4k[key] = g
	return g, nil
}

// results returns a buffer of gemmTileRows×8 results per worker, for
// threads workers; worker w of a Pool.For alone uses the w-th.
func (p *Packs) results(threads int) [][]float32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.out) < threads {
		p.out = append(p.out, make([]float32, gemmTileRows*quant.Q4KInterleaveRows))
	}
	return p.out
}

// inWeights says whether b lies within one of the weight regions.
func (p *Packs) inWeights(b []byte) bool {
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	hi := lo + uintptr(len(b))
	for _, r := range p.weights {
		if len(r) == 0 {
			continue
		}
		rlo := uintptr(unsafe.Pointer(unsafe.SliceData(r)))
		if lo >= rlo && hi <= rlo+uintptr(len(r)) {
			return true
		}
	}
	return false
}
