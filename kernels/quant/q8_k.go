package quant

import (
	"encoding/binary"
	"math"
)

// Q8_K {d float32; qs[256] int8; bsums[16] int16}: value = qs[j]*d. It only
// holds activations for the k-quant dot products; bsums[g] is the sum of
// qs[16g:16g+16], which lets a dot product apply a weight sub-block's min
// without touching the quants again.

const (
	q8KQs    = 4        // offset of qs
	q8KBsums = 4 + qkK  // offset of bsums
	q8KGroup = qkK / 16 // number of bsums
)

var dequantQ8_K = dequantBlocks(qkK, q8_KLen, func(src []byte, dst []float32) {
	b := (*[q8_KLen]byte)(src)
	y := (*[qkK]float32)(dst)
	d := math.Float32frombits(binary.LittleEndian.Uint32(b[0:]))
	for j := range y {
		y[j] = d * float32(int8(b[q8KQs+j]))
	}
})

// nearestInt rounds to nearest, ties to even, exactly as ggml's nearest_int:
// adding 1.5*2^23 leaves the rounded integer in the low mantissa bits.
// Valid for |f| <= 2^22-1, far beyond the ±127 used here.
func nearestInt(f float32) int32 {
	v := f + 12582912
	return int32(math.Float32bits(v)&0x7fffff) - 0x400000
}

// quantQ8_K is quantize_row_q8_K_ref, which x86 builds run as is: scale by
// -127/max where max is the first element of largest magnitude (sign kept),
// so that element maps to -127 and nothing exceeds 127; d = 1/iscale is
// stored as float32. An all-zero block gets d = 0, zero quants and (unlike
// ggml, which leaves them unwritten) zero bsums.
var quantQ8_K = quantBlocks(qkK, q8_KLen, func(x []float32, dst []byte) {
	v := (*[qkK]float32)(x)
	b := (*[q8_KLen]byte)(dst)
	var amax, mx float32
	for _, f := range v {
		if a := abs32(f); a > amax {
			amax, mx = a, f
		}
	}
	if amax == 0 {
		clear(b[:])
		return
	}
	iscale := -127 / mx
	for g := 0; g < q8KGroup; g++ {
		var s int32
		for l := 0; l < 16; l++ {
			q := min(127, nearestInt(iscale*v[16*g+l]))
			b[q8KQs+16*g+l] = byte(int8(q))
			s += q
		}
		binary.LittleEndian.PutUint16(b[q8KBsums+2*g:], uint16(int16(s)))
	}
	binary.LittleEndian.PutUint32(b[0:], math.Float32bits(1/iscale))
})

// q8KHeader returns a Q8_K block's scale, its quants and its bsums.
func q8KHeader(b *[q8_KLen]byte) (d float32, y *[qkK]byte, bs *[32]byte) {
	return math.Float32frombits(binary.LittleEndian.Uint32(b[0:])), (*[qkK]byte)(b[q8KQs:]), (*[32]byte)(b[q8KBsums:])
}

// bsum returns bsums[g] of a Q8_K block.
func bsum(bs *[32]byte, g int) int32 {
	return int32(int16(binary.LittleEndian.Uint16(bs[2*g&31:])))
}
