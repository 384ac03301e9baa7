//go:build amd64 && !purego

package quant

// Go sides of the AVX2 IQ4 kernels in iq4_amd64.s: bounds-check in Go (so a
// bad size panics instead of reading out of bounds), then hand whole blocks
// to the assembly. Both run at every level from simdAVX2 up; VNNI would save
// nothing here, since the levels come from a table lookup and the integer
// sums already take one VPMADDWD per 16 elements.

// dotIQ4_NLAVX2 is dotIQ4_NL with the pairs of blocks in assembly.
func dotIQ4_NLAVX2(n int, w, x []byte) float32 {
	return pairDot(n, w, x, iq4_NLLen, dotIQ4_NLAVX2Asm, iq4NLTail)
}

// pairDot is dotPairs (blocks of size bytes against Q8_0) with the pairs
// of blocks in the assembly kernel and an odd last block added in Go by
// tail, exactly as dotPairs adds it.
func pairDot(n int, w, x []byte, size int, kernel func(w, x *byte, np int) float32, tail func(wb, xb []byte, sum float32) float32) float32 {
	nb := n / qk
	if nb == 0 {
		return 0
	}
	_, _ = w[nb*size-1], x[nb*q8_0Len-1]
	var sum float32
	if np := nb / 2; np > 0 {
		sum = kernel(&w[0], &x[0], np)
	}
	if nb%2 != 0 {
		sum = tail(w[(nb-1)*size:], x[(nb-1)*q8_0Len:], sum)
	}
	return sum
}

//go:noescape
func dotIQ4_NLAVX2Asm(w, x *byte, npairs int) float32

//go:noescape
func dotIQ4_XSAVX2Asm(w, x *byte, nb int) float32
