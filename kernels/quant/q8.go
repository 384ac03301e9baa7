package quant

import (
	"encoding/binary"
	"math"
)

// Q8_0 {d f16; qs[32] int8}: value = qs[j]*d.
// Q8_1 {d f16; s f16; qs[32] int8}: value = qs[j]*d, s = d*sum(qs) is kept
// so that dot products with Q4_1/Q5_1 can apply the weight's offset m to
// the whole block at once.

var dequantQ8_0 = dequantBlocks(qk, q8_0Len, func(src []byte, dst []float32) {
	b, y := (*[q8_0Len]byte)(src), (*[qk]float32)(dst)
	d := fp16(b[0:])
	for j := range y {
		y[j] = float32(int8(b[2+j])) * d
	}
})

var dequantQ8_1 = dequantBlocks(qk, q8_1Len, func(src []byte, dst []float32) {
	b, y := (*[q8_1Len]byte)(src), (*[qk]float32)(dst)
	d := fp16(b[0:])
	for j := range y {
		y[j] = float32(int8(b[4+j])) * d
	}
})

// q8Block quantizes one block of 32 activations into qs and returns the
// unrounded scale d and the sum of the quants.
//
// It follows ggml's AVX2 quantize_row_q8_0/q8_1, which is what an x86
// llama.cpp build runs, rather than the scalar _ref functions in two ways:
// the multiplier is id = 127/amax (not 1/d, which can differ by an ulp), and
// x*id is rounded half to even (_mm256_round_ps with _MM_ROUND_NEAREST)
// where the reference uses roundf's half away from zero.
func q8Block(x *[qk]float32, qs *[qk]byte) (d float32, sum int32) {
	var amax float32
	for _, v := range x {
		amax = max(amax, abs32(v))
	}
	d = amax / 127
	var id float32
	if amax != 0 {
		id = 127 / amax
	}
	for j, v := range x {
		q := int32(math.RoundToEven(float64(v * id)))
		qs[j] = byte(int8(q))
		sum += q
	}
	return d, sum
}

func abs32(v float32) float32 {
	return math.Float32frombits(math.Float32bits(v) &^ (1 << 31))
}

var quantQ8_0 = quantBlocks(qk, q8_0Len, func(x []float32, dst []byte) {
	b := (*[q8_0Len]byte)(dst)
	d, _ := q8Block((*[qk]float32)(x), (*[qk]byte)(b[2:]))
	binary.LittleEndian.PutUint16(b[0:], F32ToF16(d))
})

var quantQ8_1 = quantBlocks(qk, q8_1Len, func(x []float32, dst []byte) {
	b := (*[q8_1Len]byte)(dst)
	d, sum := q8Block((*[qk]float32)(x), (*[qk]byte)(b[4:]))
	binary.LittleEndian.PutUint16(b[0:], F32ToF16(d))
	// ggml stores s from the float32 d (before it is rounded to f16).
	binary.LittleEndian.PutUint16(b[2:], F32ToF16(d*float32(sum)))
})

// dotQ8_0 is ggml_vec_dot_q8_0_q8_0: per block an exact int32 sum of the
// 32 products, scaled by d_w*d_x.
var dotQ8_0 = dotBlocks(qk, q8_0Len, q8_0Len, func(w, x []byte, sum float32) float32 {
	a, b := (*[q8_0Len]byte)(w), (*[q8_0Len]byte)(x)
	sumi := dotI8x32((*[qk]byte)(a[2:]), (*[qk]byte)(b[2:]))
	return sum + float32(sumi)*(fp16(a[0:])*fp16(b[0:]))
})

// dotI8x32 returns the sum of the products of two blocks of 32 int8s. Four
// independent accumulators let the CPU overlap the multiply-adds.
func dotI8x32(a, b *[qk]byte) int32 {
	var s0, s1, s2, s3 int32
	for j := 0; j < 8; j++ {
		s0 += int32(int8(a[j])) * int32(int8(b[j]))
		s1 += int32(int8(a[j+8])) * int32(int8(b[j+8]))
		s2 += int32(int8(a[j+16])) * int32(int8(b[j+16]))
		s3 += int32(int8(a[j+24])) * int32(int8(b[j+24]))
	}
	return (s0 + s1) + (s2 + s3)
}
