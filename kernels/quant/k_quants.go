package quant

// The k-quants pack 256 elements in a super-block with one or two f16 super
// scales and small per-sub-block scales (and mins). All pair with Q8_K
// activations. Every dot product below computes, per super-block, exact
// int32 sums of quant*activation per sub-block, weights them by the integer
// sub-block scales, and combines them as ggml's ggml_vec_dot_*_q8_K:
//
//	sum += d*x.d*sumi - dmin*x.d*summs
//
// where summs (the mins term) comes from Q8_K's bsums. Element e of a
// super-block belongs to sub-block e/16 (Q2_K, Q3_K, Q6_K) or e/32 (Q4_K,
// Q5_K).

// Byte offsets inside each block type.
const (
	q2KScales, q2KQs, q2KD, q2KDmin  = 0, 16, 80, 82
	q3KHmask, q3KQs, q3KScales, q3KD = 0, 32, 96, 108
	q4KD, q4KDmin, q4KScales, q4KQs  = 0, 2, 4, 16
	q5KD, q5KDmin, q5KScales, q5KQh  = 0, 2, 4, 16
	q5KQs                            = 48
	q6KQl, q6KQh, q6KScales, q6KD    = 0, 128, 192, 208
)

// scaleMinK4 unpacks the 12 scale bytes of Q4_K/Q5_K into eight 6-bit
// scales and eight 6-bit mins (ggml's get_scale_min_k4): sub-blocks 0..3
// keep theirs in the low six bits of bytes 0..3 (scales) and 4..7 (mins);
// sub-blocks 4..7 keep the low four bits in the nibbles of bytes 8..11 and
// the top two bits in the top bits of bytes 0..3 (scales) and 4..7 (mins).
func scaleMinK4(s *[12]byte) (sc, mn [8]uint8) {
	for j := 0; j < 4; j++ {
		sc[j] = s[j] & 63
		mn[j] = s[j+4] & 63
		sc[j+4] = s[j+8]&15 | (s[j]>>6)<<4
		mn[j+4] = s[j+8]>>4 | (s[j+4]>>6)<<4
	}
	return sc, mn
}

// scalesQ3K unpacks the 12 scale bytes of Q3_K into sixteen 6-bit scales
// and removes their bias of 32. The low four bits of scale j are a nibble of
// byte j%8 (low nibble for j < 8); the top two bits are bit pair j/4 of byte
// 8 + j%4.
func scalesQ3K(s *[12]byte) (sc [16]int32) {
	for j := 0; j < 4; j++ {
		h := s[8+j]
		sc[j] = int32(s[j]&15|(h&3)<<4) - 32
		sc[j+4] = int32(s[j+4]&15|(h>>2&3)<<4) - 32
		sc[j+8] = int32(s[j]>>4|(h>>4&3)<<4) - 32
		sc[j+12] = int32(s[j+4]>>4|(h>>6)<<4) - 32
	}
	return sc
}

// ---- dequantization: unpack each super-block to integer quants, then
// scale them with ggml's float expressions in ggml's order.

// unpackQ2K writes the 2-bit quants of a Q2_K block in element order: the
// 64 qs bytes are two chunks of 32, and bit pair j of chunk byte l is element
// 128*chunk + 32*j + l.
func unpackQ2K(qs *[64]byte, out *[qkK]int32) {
	for c := 0; c < 2; c++ {
		for l := 0; l < 32; l++ {
			v := qs[32*c+l]
			for j := 0; j < 4; j++ {
				out[128*c+32*j+l] = int32(v >> (2 * j) & 3)
			}
		}
	}
}

var dequantQ2_K = dequantBlocks(qkK, q2_KLen, func(src []byte, dst []float32) {
	var q [qkK]int32
	b := (*[q2_KLen]byte)(src)
	y := (*[qkK]float32)(dst)
	d, dmin := fp16(b[q2KD:]), fp16(b[q2KDmin:])
	unpackQ2K((*[64]byte)(b[q2KQs:]), &q)
	for s := 0; s < 16; s++ {
		sc := b[q2KScales+s]
		dl, ml := d*float32(sc&15), dmin*float32(sc>>4)
		for l := 16 * s; l < 16*s+16; l++ {
			y[l] = dl*float32(q[l]) - ml
		}
	}
})

var dequantQ3_K = dequantBlocks(qkK, q3_KLen, func(src []byte, dst []float32) {
	var q [qkK]int32
	b := (*[q3_KLen]byte)(src)
	y := (*[qkK]float32)(dst)
	d := fp16(b[q3KD:])
	// The low two bits are laid out as in Q2_K; element e's third bit is
	// bit e/32 of hmask[e%32], and a clear bit means "subtract 4".
	unpackQ2K((*[64]byte)(b[q3KQs:]), &q)
	hm := (*[32]byte)(b[q3KHmask:])
	for e := range q {
		if hm[e%32]>>(e/32)&1 == 0 {
			q[e] -= 4
		}
	}
	sc := scalesQ3K((*[12]byte)(b[q3KScales:]))
	for s := 0; s < 16; s++ {
		dl := d * float32(sc[s])
		for l := 16 * s; l < 16*s+16; l++ {
			y[l] = dl * float32(q[l])
		}
	}
})

// unpackQ4K writes the nibbles of 128 qs bytes in element order: chunk c of
// 32 bytes holds elements 64c..64c+31 in its low nibbles and 64c+32..64c+63
// in its high nibbles.
func unpackQ4K(qs *[128]byte, out *[qkK]int32) {
	for c := 0; c < 4; c++ {
		for l := 0; l < 32; l++ {
			v := qs[32*c+l]
			out[64*c+l] = int32(v & 15)
			out[64*c+32+l] = int32(v >> 4)
		}
	}
}

// dequantK4 scales quants by the 6-bit scales and mins of Q4_K/Q5_K.
func dequantK4(q *[qkK]int32, scales *[12]byte, d, dmin float32, y *[qkK]float32) {
	sc, mn := scaleMinK4(scales)
	for s := 0; s < 8; s++ {
		ds, ms := d*float32(sc[s]), dmin*float32(mn[s])
		for l := 32 * s; l < 32*s+32; l++ {
			y[l] = ds*float32(q[l]) - ms
		}
	}
}

var dequantQ4_K = dequantBlocks(qkK, q4_KLen, func(src []byte, dst []float32) {
	var q [qkK]int32
	b := (*[q4_KLen]byte)(src)
	unpackQ4K((*[128]byte)(b[q4KQs:]), &q)
	dequantK4(&q, (*[12]byte)(b[q4KScales:]), fp16(b[q4KD:]), fp16(b[q4KDmin:]), (*[qkK]float32)(dst))
})

var dequantQ5_K = dequantBlocks(qkK, q5_KLen, func(src []byte, dst []float32) {
	var q [qkK]int32
	b := (*[q5_KLen]byte)(src)
	unpackQ4K((*[128]byte)(b[q5KQs:]), &q)
	// Element e's fifth bit is bit e/32 of qh[e%32].
	qh := (*[32]byte)(b[q5KQh:])
	for e := range q {
		q[e] |= int32(qh[e%32]>>(e/32)&1) << 4
	}
	dequantK4(&q, (*[12]byte)(b[q5KScales:]), fp16(b[q5KD:]), fp16(b[q5KDmin:]), (*[qkK]float32)(dst))
})

var dequantQ6_K = dequantBlocks(qkK, q6_KLen, func(src []byte, dst []float32) {
	b := (*[q6_KLen]byte)(src)
	y := (*[qkK]float32)(dst)
	d := fp16(b[q6KD:])
	// Each half of 128 elements uses 64 ql bytes and 32 qh bytes: ql
	// byte l (l < 64) gives elements l (low nibble) and l+64 (high
	// nibble); qh byte l (l < 32) gives the top two bits of elements l,
	// l+32, l+64, l+96 in its four bit pairs.
	for h := 0; h < 2; h++ {
		for e := 0; e < 128; e++ {
			l := e % 64
			v := b[q6KQl+64*h+l]
			if e >= 64 {
				v >>= 4
			}
			hb := b[q6KQh+32*h+e%32] >> (2 * (e / 32)) & 3
			q := int32(v&15|hb<<4) - 32
			s := int8(b[q6KScales+(128*h+e)/16])
			y[128*h+e] = d * float32(s) * float32(q)
		}
	}
})

// ---- dot products. The helpers work on fixed-size array views so the
// compiler drops bounds checks, and keep four independent accumulators.

// q2Half returns, for 16 bytes of 2-bit quants, the four sums
// a_j = sum_l ((q[l]>>2j)&3) * y[32j+l].
func q2Half(q *[16]byte, y *[112]byte) (a0, a1, a2, a3 int32) {
	for l := 0; l < 16; l++ {
		v := q[l]
		a0 += int32(v&3) * int32(int8(y[l]))
		a1 += int32(v>>2&3) * int32(int8(y[l+32]))
		a2 += int32(v>>4&3) * int32(int8(y[l+64]))
		a3 += int32(v>>6) * int32(int8(y[l+96]))
	}
	return
}

// dotQ2_K is ggml_vec_dot_q2_K_q8_K.
var dotQ2_K = dotBlocks(qkK, q2_KLen, q8_KLen, func(w, x []byte, sum float32) float32 {
	a := (*[q2_KLen]byte)(w)
	xd, y, bs := q8KHeader((*[q8_KLen]byte)(x))
	sc := (*[16]byte)(a[q2KScales:])
	var summs, isum int32
	for j := 0; j < 16; j++ {
		summs += bsum(bs, j) * int32(sc[j]>>4)
	}
	for c := 0; c < 2; c++ {
		q := a[q2KQs+32*c:]
		yc := y[128*c:]
		// Sub-block 8c+2j is bit pair j of q[0:16], 8c+2j+1 of q[16:32].
		a0, a1, a2, a3 := q2Half((*[16]byte)(q), (*[112]byte)(yc))
		b0, b1, b2, b3 := q2Half((*[16]byte)(q[16:]), (*[112]byte)(yc[16:]))
		s := (*[8]byte)(sc[8*c:])
		isum += int32(s[0]&15)*a0 + int32(s[1]&15)*b0 +
			int32(s[2]&15)*a1 + int32(s[3]&15)*b1 +
			int32(s[4]&15)*a2 + int32(s[5]&15)*b2 +
			int32(s[6]&15)*a3 + int32(s[7]&15)*b3
	}
	dall := xd * fp16(a[q2KD:])
	dmin := xd * fp16(a[q2KDmin:])
	return sum + (dall*float32(isum) - dmin*float32(summs))
})

// q3Half is q2Half for Q3_K: bit hs+j of hm[l] is the third bit of the
// quant in bit pair j, and the 3-bit quant is biased by 4.
func q3Half(q, hm *[16]byte, hs uint, y *[112]byte) (a0, a1, a2, a3 int32) {
	for l := 0; l < 16; l++ {
		v := q[l]
		h := hm[l] >> hs
		a0 += (int32(v&3|(h&1)<<2) - 4) * int32(int8(y[l]))
		a1 += (int32(v>>2&3|(h>>1&1)<<2) - 4) * int32(int8(y[l+32]))
		a2 += (int32(v>>4&3|(h>>2&1)<<2) - 4) * int32(int8(y[l+64]))
		a3 += (int32(v>>6|(h>>3&1)<<2) - 4) * int32(int8(y[l+96]))
	}
	return
}

// dotQ3_K is ggml_vec_dot_q3_K_q8_K (no mins: the bias is in the quants).
var dotQ3_K = dotBlocks(qkK, q3_KLen, q8_KLen, func(w, x []byte, sum float32) float32 {
	a := (*[q3_KLen]byte)(w)
	xd, y, _ := q8KHeader((*[q8_KLen]byte)(x))
	sc := scalesQ3K((*[12]byte)(a[q3KScales:]))
	hm := a[q3KHmask:]
	var isum int32
	for c := 0; c < 2; c++ {
		q := a[q3KQs+32*c:]
		yc := y[128*c:]
		hs := uint(4 * c)
		a0, a1, a2, a3 := q3Half((*[16]byte)(q), (*[16]byte)(hm), hs, (*[112]byte)(yc))
		b0, b1, b2, b3 := q3Half((*[16]byte)(q[16:]), (*[16]byte)(hm[16:]), hs, (*[112]byte)(yc[16:]))
		s := (*[8]int32)(sc[8*c:])
		isum += s[0]*a0 + s[1]*b0 + s[2]*a1 + s[3]*b1 +
			s[4]*a2 + s[5]*b2 + s[6]*a3 + s[7]*b3
	}
	return sum + (fp16(a[q3KD:])*xd)*float32(isum)
})

// q6Half returns the eight 16-element sub-block sums of one 128-element
// half of a Q6_K block: s[k+2p] for quarter p (elements 32p..32p+31) and
// k = 0 for its first 16 elements, 1 for the rest.
func q6Half(ql *[64]byte, qh *[32]byte, y *[128]byte) (s [8]int32) {
	s[0], s[2], s[4], s[6] = q6Quarters(ql, qh, y, 0)
	s[1], s[3], s[5], s[7] = q6Quarters(ql, qh, y, 16)
	return s
}

// q6Quarters returns, for the 16 elements from l0 of each quarter of a
// Q6_K half, the four sums of quant times activation.
func q6Quarters(ql *[64]byte, qh *[32]byte, y *[128]byte, l0 int) (a0, a1, a2, a3 int32) {
	for l := l0; l < l0+16; l++ {
		lo, hi, h := ql[l], ql[l+32], qh[l]
		a0 += (int32(lo&15|(h&3)<<4) - 32) * int32(int8(y[l]))
		a1 += (int32(hi&15|(h>>2&3)<<4) - 32) * int32(int8(y[l+32]))
		a2 += (int32(lo>>4|(h>>4&3)<<4) - 32) * int32(int8(y[l+64]))
		a3 += (int32(hi>>4|(h>>6)<<4) - 32) * int32(int8(y[l+96]))
	}
	return a0, a1, a2, a3
}

// dotQ6_K is ggml_vec_dot_q6_K_q8_K (signed scales, no mins).
var dotQ6_K = dotBlocks(qkK, q6_KLen, q8_KLen, func(w, x []byte, sum float32) float32 {
	a := (*[q6_KLen]byte)(w)
	xd, y, _ := q8KHeader((*[q8_KLen]byte)(x))
	var isum int32
	for h := 0; h < 2; h++ {
		s := q6Half((*[64]byte)(a[q6KQl+64*h:]), (*[32]byte)(a[q6KQh+32*h:]), (*[128]byte)(y[128*h:]))
		sc := (*[8]byte)(a[q6KScales+8*h:])
		for j, v := range s {
			isum += int32(int8(sc[j])) * v
		}
	}
	return sum + (fp16(a[q6KD:])*xd)*float32(isum)
})

// Compile-time checks that the offsets above add up to the block sizes.
var _ = [1]struct{}{}[q2KDmin+2-q2_KLen]
var _ = [1]struct{}{}[q3KD+2-q3_KLen]
var _ = [1]struct{}{}[q4KQs+128-q4_KLen]
var _ = [1]struct{}{}[q5KQs+128-q5_KLen]
var _ = [1]struct{}{}[q6KD+2-q6_KLen]
