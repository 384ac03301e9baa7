//go:build amd64 && !purego

package quant

// Go sides of the AVX2 IQ4 kernels in iq4_amd64.s: bounds-check in Go (so a
// bad size panics instead of reading out of bounds), then hand whole blocks
// to the assembly. Both run at every level from simdAVX2 up; VNNI would save
// nothing here, since the levels come from a table lookup and the integer
// sums already take one VPMADDWD per 16 elements.

// dotIQ4_NLAVX2 is dotIQ4_NL with the pairs of blocks in assembly and an
// odd last block added in Go, exactly as dotIQ4_NL adds it.
func dotIQ4_NLAVX2(n int, w, x []byte) float32 {
	nb := n / qk
	if nb == 0 {
		return 0
	}
	_, _ = w[nb*iq4_NLLen-1], x[nb*q8_0Len-1]
	var sum float32
	if np := nb / 2; np > 0 {
		sum = dotIQ4_NLAVX2Asm(&w[0], &x[0], np)
	}
	if nb%2 != 0 {
		sum = iq4NLTail((*[iq4_NLLen]byte)(w[(nb-1)*iq4_NLLen:]), (*[q8_0Len]byte)(x[(nb-1)*q8_0Len:]), sum)
	}
	return sum
}

//go:noescape
func dotIQ4_NLAVX2Asm(w, x *byte, npairs int) float32

//go:noescape
func dotIQ4_XSAVX2Asm(w, x *byte, nb int) float32
