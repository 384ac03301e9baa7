package quant

import (
	"fmt"
	"math"
)

// MXFP4 is the OCP microscaling FP4 format as ggml stores it (gpt-oss
// ships its expert matrices in it):
//
//	MXFP4 {uint8 e; qs[16]}  17 bytes / 32
//
// e is an E8M0 scale: a bare biased exponent, 2^(e-127), no sign and no
// mantissa. Each nibble is an E2M1 value (sign, two exponent bits, one
// mantissa bit) that ggml decodes through kvaluesMXFP4, which holds twice
// the E2M1 values so that they are integers; the scale is halved to make
// up for it (e8m0Half). Element j (j < 16) is the low nibble of qs[j],
// element j+16 the high nibble (Q4_0's layout); value =
// float(kvalues[q]) * e8m0Half(e), exactly as dequantize_row_mxfp4.
//
// The dot product pairs MXFP4 with Q8_0 (type_traits_cpu's vec_dot_type)
// and follows ggml_vec_dot_mxfp4_q8_0's AVX2 form (ggml-cpu/arch/x86/
// quants.c; AVX-512 builds take the same path), which is IQ4_NL's kernel
// with another table and another block scale: blocks in pairs, eight int32
// lanes per block (mxfp4Lanes), one FMA per lane into one of two
// accumulators, hsum8 of their sum, and an odd last block added by the
// scalar tail. See dotIQ4_NL for the float order; the integer parts are
// exact.
//
// As for IQ4_NL, an x86 llama.cpp build repacks MXFP4 matrices whose row
// count is a multiple of 8 (mxfp4_8x8, ggml-cpu/repack.cpp), whose kernels
// add the per-block products in block order instead; the integer sums are
// the same and the two orders differ by float32 rounding only. We keep the
// vec_dot order, which is what runs on the other matrices.

// kvaluesMXFP4 is ggml's kvalues_mxfp4: twice the E2M1 value of each
// nibble (sign bit 3, so index 8 is -0).
var kvaluesMXFP4 = [16]int8{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}

// e8m0HalfTable is ggml_e8m0_to_fp32_half for every e (the table
// ggml-cpu's x86 build reads, ggml_table_f32_e8m0_half): 2^(e-128), with
// e = 0 and 1 the subnormals 2^-128 and 2^-127. e = 255, which ggml's row
// validation rejects as NaN, decodes as 2^127 like every other exponent.
var e8m0HalfTable = func() (t [256]float32) {
	for e := range t {
		if e < 2 {
			t[e] = math.Float32frombits(0x00200000 << e)
		} else {
			t[e] = math.Float32frombits(uint32(e-1) << 23)
		}
	}
	return t
}()

var dequantMXFP4 = dequantBlocks(qk, mxfp4Len, func(src []byte, dst []float32) {
	b := (*[mxfp4Len]byte)(src)
	y := (*[qk]float32)(dst)
	d := e8m0HalfTable[b[0]]
	for j := 0; j < qk/2; j++ {
		q := b[1+j]
		y[j] = float32(kvaluesMXFP4[q&15]) * d
		y[j+16] = float32(kvaluesMXFP4[q>>4]) * d
	}
})

// mxfp4Lanes returns the eight int32 lanes ggml's AVX2 kernel holds for one
// block of nibbles q against 32 int8 activations y, lane k being the sum of
// the products of elements 4k..4k+3 (low nibbles in lanes 0..3, high
// nibbles in lanes 4..7; see iq4Lanes). The products are mul_add_epi8's:
// |level| times y with the level's sign applied by VPSIGNB, whose negation
// of -128 wraps to -128. Q8_0 activations from ggml's (and our) quantizer
// never hold -128, so real rows never meet the wrap; it is kept so that the
// kernel is ggml's on every byte pattern. No pair sum can saturate: at most
// 2*12*128 in magnitude.
func mxfp4Lanes(q *[16]byte, y *[qk]byte) (l [8]int32) {
	for k := 0; k < 4; k++ {
		var lo, hi int32
		for j := 4 * k; j < 4*k+4; j++ {
			v := q[j]
			lo += mxfp4Product(v&15, y[j])
			hi += mxfp4Product(v>>4, y[j+16])
		}
		l[k], l[k+4] = lo, hi
	}
	return l
}

// mxfp4Product is one VPSIGNB/VPMADDUBSW product of nibble v's level with
// the activation byte y (see mxfp4Lanes).
func mxfp4Product(v, y byte) int32 {
	lv := kvaluesMXFP4[v]
	s := int8(y)
	if lv < 0 {
		s = -s // int8: -(-128) wraps to -128, as VPSIGNB's does
		lv = -lv
	}
	return int32(lv) * int32(s)
}

// mxfp4Scale is the block scale of ggml's kernel: the activation block's
// f16 d times the weight's halved E8M0 scale, rounded to float32.
func mxfp4Scale(a *[mxfp4Len]byte, b *[q8_0Len]byte) float32 {
	return float32(fp16(b[0:]) * e8m0HalfTable[a[0]])
}

// dotMXFP4 is ggml_vec_dot_mxfp4_q8_0's AVX2 form: blocks in pairs, the
// even block of each pair into one eight-lane accumulator and the odd one
// into another, acc = fma(d, float(lane), acc) lane by lane; then the two
// accumulators are added lane-wise and reduced by hsum8, and an odd last
// block is added by mxfp4Tail.
func dotMXFP4(n int, w, x []byte) float32 {
	return dotPairs(n, w, x, mxfp4Len, func(a, b []byte) ([8]int32, float32) {
		return mxfp4Lanes((*[16]byte)(a[1:]), (*[qk]byte)(b[2:])), mxfp4Scale((*[mxfp4Len]byte)(a), (*[q8_0Len]byte)(b))
	}, mxfp4Tail)
}

// mxfp4Tail adds the odd last block of an MXFP4 row (a) times its Q8_0
// activations (b) to sum as ggml's scalar tail loop does: plain int
// products (no VPSIGNB wrap), sumi1 over the low nibbles plus sumi2 over
// the high ones, then sum + d*float(sumi1+sumi2), fused as GCC and Clang
// contract it.
func mxfp4Tail(wb, xb []byte, sum float32) float32 {
	a, b := (*[mxfp4Len]byte)(wb), (*[q8_0Len]byte)(xb)
	var sumi int32
	for j := 0; j < qk/2; j++ {
		v := a[1+j]
		sumi += int32(kvaluesMXFP4[v&15])*int32(int8(b[2+j])) + int32(kvaluesMXFP4[v>>4])*int32(int8(b[2+j+16]))
	}
	return fma32(mxfp4Scale(a, b), float32(sumi), sum)
}

// QuantizeMXFP4 encodes the weights x as MXFP4 into dst the way ggml's
// quantize_row_mxfp4_ref does (llama-quantize's MXFP4 path, which takes no
// importance matrix): per block of 32, e = floor(log2f(amax)) - 2 + 127
// (0 for an all-zero block), and each element becomes the first of the 16
// levels, times e8m0Half(e), nearest to it. len(x) must be a multiple of
// 32 and dst must hold the row's bytes.
func QuantizeMXFP4(x []float32, dst []byte) error {
	if len(x)%qk != 0 {
		return fmt.Errorf("quant: MXFP4 row of %d elements is not a multiple of the block size %d", len(x), qk)
	}
	if nb := len(x) / qk * mxfp4Len; len(dst) < nb {
		return fmt.Errorf("quant: MXFP4 row of %d elements needs %d bytes, have %d", len(x), nb, len(dst))
	}
	for i := 0; i < len(x); i += qk {
		xs := (*[qk]float32)(x[i:])
		b := (*[mxfp4Len]byte)(dst[i/qk*mxfp4Len:])
		var amax float32
		for _, v := range xs {
			if a := float32(math.Abs(float64(v))); amax < a {
				amax = a
			}
		}
		e := mxfp4Exponent(amax)
		d := e8m0HalfTable[e]
		b[0] = e
		for j := 0; j < qk/2; j++ {
			b[1+j] = mxfp4Nearest(xs[j], d) | mxfp4Nearest(xs[j+16], d)<<4
		}
	}
	return nil
}

// mxfp4Exponent is ggml's block exponent for the absolute maximum amax:
// (uint8_t)(floorf(log2f(amax)) - 2 + 127), 0 when amax is 0.
//
// glibc's log2f is not correctly rounded, but floor only cares whether
// it rounds amax just below a power of two up to the integer: the float32
// rounding of the float64 log2 does so for exactly the same inputs as
// glibc 2.36's log2f on x86-64, checked over every positive finite
// float32 (in 7456 of them the floor is one more than amax's exponent).
// The C conversion to uint8_t of a value out of its range is undefined;
// x86 converts to int32 (CVTTSS2SI) and keeps the low byte, which we
// follow: an amax below 2^-125 wraps (2^-149 gives 232), and +Inf, whose
// conversion is 0x80000000, gives 0.
func mxfp4Exponent(amax float32) uint8 {
	if !(amax > 0) {
		return 0
	}
	if math.IsInf(float64(amax), 1) {
		return 0
	}
	l := float32(math.Log2(float64(amax)))
	return uint8(int32(math.Floor(float64(l))) - 2 + 127)
}

// mxfp4Nearest is ggml's best_index_mxfp4: the index of the first level
// (in table order) whose error |float32(kvalues[i])*d - x|, computed in
// float32, is least. The product is exact (a small integer times a power
// of two), so a fused multiply-subtract gives the same errors.
func mxfp4Nearest(x, d float32) byte {
	best := 0
	bestErr := float32(math.Abs(float64(float32(float32(kvaluesMXFP4[0])*d) - x)))
	for i := 1; i < 16; i++ {
		err := float32(math.Abs(float64(float32(float32(kvaluesMXFP4[i])*d) - x)))
		if err < bestErr {
			best, bestErr = i, err
		}
	}
	return byte(best)
}
