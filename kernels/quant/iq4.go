package quant

import (
	"encoding/binary"
	"math"
)

// The non-linear 4-bit i-quants store 4-bit indices into kvaluesIQ4NL, a
// table of 16 int8 levels spaced more densely near zero (where trained
// weights concentrate) than Q4_0's uniform q-8.
//
// IQ4_NL {d f16; qs[16]}: element j (j < 16) is the low nibble of qs[j],
// element j+16 the high nibble (Q4_0's layout); value = d*kvalues[q].
//
// IQ4_XS {d f16; scales_h u16; scales_l[4]; qs[128]}: eight sub-blocks of
// 32 elements, sub-block s laid out as an IQ4_NL block's nibbles at
// qs[16s:16s+16]. Its 6-bit scale is ls = lo | hi<<4 with lo the nibble s%2
// of scales_l[s/2] and hi the bit pair s of scales_h; value =
// d*(ls-32)*kvalues[q].
//
// The dot products pair IQ4_NL with Q8_0 and IQ4_XS with Q8_K, as ggml's
// CPU backend does. Their integer sums are exact; their float combination
// follows ggml's AVX2 kernels (ggml_vec_dot_iq4_nl_q8_0,
// ggml_vec_dot_iq4_xs_q8_K in ggml-cpu/arch/x86/quants.c) lane for lane:
// see iq4Lanes and hsum8. The AVX2 kernels (iq4_amd64.s) are the same
// order in vector registers, so the pure-Go kernels here, which emulate the
// lanes, are bit-identical to them and are what runs without AVX2.
//
// That is exactly what an x86 llama.cpp build runs for IQ4_XS. For IQ4_NL it
// is what runs on matrices whose row count is not a multiple of 8: the
// others ggml repacks at load time (iq4_nl_8x8, ggml-cpu/repack.cpp), and
// those kernels add each output's per-block sums in block order, one fused
// add per block, rather than in eight lanes. As for Q4_0, which ggml
// repacks the same way, we keep the vec_dot order: the integer sums are the
// same either way and the two orders differ by float32 rounding only.

// kvaluesIQ4NL is ggml's kvalues_iq4nl, the levels a 4-bit index selects.
var kvaluesIQ4NL = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// Byte offsets inside an IQ4_XS block.
const (
	iq4XSD, iq4XSScalesH, iq4XSScalesL, iq4XSQs = 0, 2, 4, 8
)

var dequantIQ4_NL = dequantBlocks(qk, iq4_NLLen, func(src []byte, dst []float32) {
	b := (*[iq4_NLLen]byte)(src)
	y := (*[qk]float32)(dst)
	d := fp16(b[0:])
	for j := 0; j < qk/2; j++ {
		q := b[2+j]
		y[j] = d * float32(kvaluesIQ4NL[q&15])
		y[j+16] = d * float32(kvaluesIQ4NL[q>>4])
	}
})

// scaleIQ4XS returns sub-block s's scale of an IQ4_XS block with its bias
// of 32 removed (ggml's ls - 32).
func scaleIQ4XS(b *[iq4_XSLen]byte, s int) int32 {
	sh := binary.LittleEndian.Uint16(b[iq4XSScalesH:])
	lo := b[iq4XSScalesL+s/2] >> (4 * (s % 2)) & 15
	hi := byte(sh>>(2*s)) & 3
	return int32(lo|hi<<4) - 32
}

var dequantIQ4_XS = dequantBlocks(qkK, iq4_XSLen, func(src []byte, dst []float32) {
	b := (*[iq4_XSLen]byte)(src)
	y := (*[qkK]float32)(dst)
	d := fp16(b[iq4XSD:])
	for s := 0; s < qkK/32; s++ {
		// ggml rounds d*(ls-32) to float32 once per sub-block and then
		// scales the level by it.
		dl := d * float32(scaleIQ4XS(b, s))
		q := (*[16]byte)(b[iq4XSQs+16*s:])
		ys := (*[32]float32)(y[32*s:])
		for j := 0; j < 16; j++ {
			ys[j] = dl * float32(kvaluesIQ4NL[q[j]&15])
			ys[j+16] = dl * float32(kvaluesIQ4NL[q[j]>>4])
		}
	}
})

// iq4Lanes returns the eight int32 lanes that ggml's AVX2 kernels hold for
// one 32-element block of nibbles q against 32 int8 activations y: the
// levels are looked up into one 256-bit register (low nibbles in its low
// half, high nibbles in its high half, i.e. elements in order), multiplied
// with y in adjacent pairs (VPMADDUBSW via mul_add_epi8) and pairs of pairs
// (VPMADDWD), so lane k is the sum of the products of elements 4k..4k+3.
// The sums are exact: ggml's pair sums cannot saturate because both the
// levels and quantized activations stay within ±127.
func iq4Lanes(q *[16]byte, y *[qk]byte) (l [8]int32) {
	for k := 0; k < 4; k++ {
		var lo, hi int32
		for j := 4 * k; j < 4*k+4; j++ {
			v := q[j]
			lo += int32(kvaluesIQ4NL[v&15]) * int32(int8(y[j]))
			hi += int32(kvaluesIQ4NL[v>>4]) * int32(int8(y[j+16]))
		}
		l[k], l[k+4] = lo, hi
	}
	return l
}

// hsum8 is ggml's hsum_float_8: the upper four lanes are added to the lower
// four, then lanes 2,3 to 0,1, then lane 1 to lane 0.
func hsum8(a *[8]float32) float32 {
	return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))
}

// fma32 is a float32 fused multiply-add, a*b+c rounded once, as
// VFMADD231PS computes it lane by lane. The float32 product is exact in
// float64; the float64 sum is then rounded to odd (the neighbour with an
// odd last bit when the sum is inexact, found from the exact error of the
// addition), and rounding a round-to-odd result with 29 spare bits to
// float32 gives the correctly rounded a*b+c. (math.FMA on the float64s
// would round twice, which differs on rare ties.)
func fma32(a, b, c float32) float32 {
	p := float64(a) * float64(b)
	cc := float64(c)
	s := p + cc
	// TwoSum: e is the exact error of s = p + cc.
	bv := s - p
	e := (p - (s - bv)) + (cc - bv)
	if e != 0 && !math.IsInf(s, 0) && !math.IsNaN(s) {
		bits := math.Float64bits(s)
		if bits&1 == 0 {
			// Step one ulp toward the exact value: up in magnitude when the
			// error has the sign of s, down otherwise.
			if (e > 0) == (s > 0) {
				bits++
			} else {
				bits--
			}
			s = math.Float64frombits(bits)
		}
	}
	return float32(s)
}

// dotIQ4_NL is ggml_vec_dot_iq4_nl_q8_0's AVX2 form: blocks in pairs, the
// even block of each pair into one eight-lane accumulator and the odd one
// into another, each lane acc = fma(d_x*d_w, float(lane), acc); then the
// two accumulators are added lane-wise and reduced by hsum8. An odd last
// block is added after the reduction as sum + d*float(sumi), fused as
// GCC/Clang contract it (ggml builds as gnu11 with FMA enabled).
func dotIQ4_NL(n int, w, x []byte) float32 {
	return dotPairs(n, w, x, iq4_NLLen, func(a, b []byte) ([8]int32, float32) {
		return iq4Lanes((*[16]byte)(a[2:]), (*[qk]byte)(b[2:])), fp16(b[0:]) * fp16(a[0:])
	}, iq4NLTail)
}

// dotPairs is the float part of ggml's AVX2 dot products of a row of n
// elements in 32-element blocks of size bytes (w) against Q8_0 (x), for
// IQ4_NL and MXFP4: the blocks in pairs, the even block of each pair into
// one eight-lane accumulator and the odd one into another, each lane
// acc = fma(d, float(lane), acc) with block giving a block's lanes and d;
// then the two accumulators added lane-wise and reduced by hsum8, and an
// odd last block added by tail.
func dotPairs(n int, w, x []byte, size int, block func(a, b []byte) ([8]int32, float32), tail func(a, b []byte, sum float32) float32) float32 {
	nb := n / qk
	w = w[:nb*size]
	x = x[:nb*q8_0Len]
	var acc1, acc2 [8]float32
	ib := 0
	for ; ib+1 < nb; ib += 2 {
		l0, d0 := block(w[ib*size:], x[ib*q8_0Len:])
		l1, d1 := block(w[(ib+1)*size:], x[(ib+1)*q8_0Len:])
		for k := range acc1 {
			acc1[k] = fma32(d0, float32(l0[k]), acc1[k])
			acc2[k] = fma32(d1, float32(l1[k]), acc2[k])
		}
	}
	var t [8]float32
	for k := range t {
		t[k] = acc1[k] + acc2[k]
	}
	sum := hsum8(&t)
	if ib < nb {
		sum = tail(w[ib*size:], x[ib*q8_0Len:], sum)
	}
	return sum
}

// iq4NLTail adds the odd last block of an IQ4_NL row (a) times its Q8_0
// activations (b) to sum the way ggml's scalar tail loop does, after the
// vector part's reduction: sum + (d_x*d_w)*float(sumi), fused.
func iq4NLTail(wb, xb []byte, sum float32) float32 {
	a, b := (*[iq4_NLLen]byte)(wb), (*[q8_0Len]byte)(xb)
	l := iq4Lanes((*[16]byte)(a[2:]), (*[qk]byte)(b[2:]))
	var sumi int32
	for _, v := range l {
		sumi += v
	}
	return fma32(fp16(b[0:])*fp16(a[0:]), float32(sumi), sum)
}

// dotIQ4_XS is ggml_vec_dot_iq4_xs_q8_K's AVX2 form: per super-block the
// eight sub-blocks' lanes (iq4Lanes) are weighted by their scales and
// added as int32 (exact), then one eight-lane accumulator takes
// acc = fma(d_w*d_x, float(lane), acc); hsum8 reduces it at the end.
func dotIQ4_XS(n int, w, x []byte) float32 {
	nb := n / qkK
	w = w[:nb*iq4_XSLen]
	x = x[:nb*q8_KLen]
	var acc [8]float32
	for i := 0; i < nb; i++ {
		a := (*[iq4_XSLen]byte)(w[i*iq4_XSLen:])
		xd, y, _ := q8KHeader((*[q8_KLen]byte)(x[i*q8_KLen:]))
		var lanes [8]int32
		for s := 0; s < qkK/32; s++ {
			ls := scaleIQ4XS(a, s)
			l := iq4Lanes((*[16]byte)(a[iq4XSQs+16*s:]), (*[qk]byte)(y[32*s:]))
			for k := range lanes {
				lanes[k] += ls * l[k]
			}
		}
		d := fp16(a[iq4XSD:]) * xd
		for k := range acc {
			acc[k] = fma32(d, float32(lanes[k]), acc[k])
		}
	}
	return hsum8(&acc)
}

// Compile-time check that the IQ4_XS offsets add up to the block size.
var _ = [1]struct{}{}[iq4XSQs+qkK/2-iq4_XSLen]
