package quant

// IQ3_S {d f16; qs[64]; qh[8]; signs[32]; scales[4]} packs 256 elements as
// eight sub-blocks of 32, each eight groups of four. Group g of sub-block s
// is the point iq3sGrid[qs[8s+g] | (bit g of qh[s])<<8]: four magnitudes 1,
// 3, …, 15 (element 4g+j in byte j). Element e of sub-block s is negative
// when bit e%8 of signs[4s+e/8] is set. The sub-block's 4-bit scale sc is
// nibble s%2 of scales[s/2] and weighs it by the odd factor 1+2*sc, so
// value = d*(1+2*sc) * magnitude * sign.
//
// The dot product pairs IQ3_S with Q8_K, as ggml's CPU backend does, and
// follows ggml's reference C, ggml_vec_dot_iq3_s_q8_K_generic
// (ggml-cpu/quants.c): an exact int32 sum per sub-block, weighted by the
// sub-block's factor and added into an exact int32 per super-block; then one
// float per super-block, sum = fma(d_w*d_x, float(bsum), sum) (GCC and Clang
// contract the C's sum += d*bsum into a fused multiply-add when ggml is built
// with FMA, as it is for x86). An x86 AVX2 build of llama.cpp instead keeps
// eight int32 lanes per super-block and adds them with hsum_float_8 at the
// end; the integers are the same, so the two differ by float32 rounding
// only.

// Byte offsets inside an IQ3_S block.
const (
	iq3SD, iq3SQs, iq3SQh, iq3SSigns, iq3SScales = 0, 2, 66, 74, 106
)

// iq3SFactor returns sub-block s's scale factor 1+2*sc of an IQ3_S block
// (ggml's ls = 2*sc+1, an odd number 1..31: the format has no zero scale).
func iq3SFactor(b *[iq3_SLen]byte, s int) int32 {
	return 1 + 2*int32(b[iq3SScales+s/2]>>(4*(s%2))&15)
}

// iq3SPoint returns the grid point of group g of sub-block s: its eight
// low index bits are a qs byte, the ninth a bit of the sub-block's qh byte.
func iq3SPoint(b *[iq3_SLen]byte, s, g int) uint32 {
	idx := uint32(b[iq3SQs+8*s+g]) | uint32(b[iq3SQh+s]>>g&1)<<8
	return iq3sGrid[idx]
}

var dequantIQ3_S = dequantBlocks(qkK, iq3_SLen, func(src []byte, dst []float32) {
	b := (*[iq3_SLen]byte)(src)
	y := (*[qkK]float32)(dst)
	d := fp16(b[iq3SD:])
	for s := 0; s < qkK/32; s++ {
		// ggml rounds d*(1+2*sc) to float32 once per sub-block, then
		// scales each magnitude by it. Its multiply by -1.f for a set
		// sign bit is a negation as GCC compiles it (the two differ only
		// in a NaN's sign bit), so negate.
		db := d * float32(iq3SFactor(b, s))
		signs := (*[4]byte)(b[iq3SSigns+4*s:])
		ys := (*[32]float32)(y[32*s:])
		for g := 0; g < 8; g++ {
			p := iq3SPoint(b, s, g)
			for j := 0; j < 4; j++ {
				e := 4*g + j
				v := db * float32(byte(p>>(8*j)))
				if signs[e/8]>>(e%8)&1 != 0 {
					v = -v
				}
				ys[e] = v
			}
		}
	}
})

// iq3SSubSum returns the exact sum, over sub-block s of an IQ3_S block, of
// signed magnitude times int8 activation (ggml's sumi before the scale).
// Products are at most 15*128 and there are 32 of them: no overflow.
func iq3SSubSum(b *[iq3_SLen]byte, s int, y *[32]byte) int32 {
	signs := (*[4]byte)(b[iq3SSigns+4*s:])
	var sum int32
	for g := 0; g < 8; g++ {
		p := iq3SPoint(b, s, g)
		for j := 0; j < 4; j++ {
			e := 4*g + j
			v := int32(byte(p>>(8*j))) * int32(int8(y[e]))
			if signs[e/8]>>(e%8)&1 != 0 {
				v = -v
			}
			sum += v
		}
	}
	return sum
}

// dotIQ3_S is ggml_vec_dot_iq3_s_q8_K_generic: per super-block an exact
// int32 bsum of factor-weighted sub-block sums (|bsum| < 8*31*32*15*128,
// under 2^24, so its float conversion is exact too), then
// sum = fma(d_w*d_x, float(bsum), sum).
var dotIQ3_S = dotBlocks(qkK, iq3_SLen, q8_KLen, func(w, x []byte, sum float32) float32 {
	a := (*[iq3_SLen]byte)(w)
	xd, y, _ := q8KHeader((*[q8_KLen]byte)(x))
	var bsum int32
	for s := 0; s < qkK/32; s++ {
		bsum += iq3SFactor(a, s) * iq3SSubSum(a, s, (*[32]byte)(y[32*s:]))
	}
	return fma32(fp16(a[iq3SD:])*xd, float32(bsum), sum)
})

// Compile-time check that the IQ3_S offsets add up to the block size.
var _ = [1]struct{}{}[iq3SScales+qkK/64-iq3_SLen]
