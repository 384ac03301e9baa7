package quant

import "github.com/zrtdev/zrt/format/ggml"

// Q4_K and Q5_K products, in the float orders of ggml's x86 CPU backend
// (the AVX2 build every reference runs).
//
// The integer part is the same everywhere and exact: per 32-element
// sub-block s, the quants' products with the Q8_K activations times the
// 6-bit scale sc[s], and the mins term m[s] times the sub-block's bsums.
// What differs is how those integers become floats:
//
//   - ggml_vec_dot_q4_K_q8_K and ggml_vec_dot_q5_K_q8_K (OrderDot) keep
//     eight int32 lanes per super-block (lane l: elements 4l..4l+3 of each
//     32-element half-chunk), add d·xd times them into eight float lanes
//     with FMAs and reduce those by hsum_float_8. Q4_K's mins go through
//     four float lanes (one per 64-element chunk) of FMAs by -dmin·xd,
//     reduced apart and added last; Q5_K's are one integer per
//     super-block, FMAed into one float.
//   - ggml repacks a Q4_K matrix whose row count is a multiple of eight
//     (q4_K_8x8_q8_K, repack.cpp) and multiplies it by its own GEMV (one
//     activation row: OrderGEMV) and GEMM (rows in fours: OrderGEMM). Per
//     output both keep one float accumulator for the scales and one for
//     the mins, each advanced by an FMA of an exact integer with d·xd
//     (dmin·xd): once per super-block in the GEMV, once per 64-element
//     chunk in the GEMM; the result is their difference.

// Order is a float order of a product, where ggml has more than one for a
// weight type.
type Order uint8

const (
	// OrderDot is ggml_vec_dot_*'s, every type's (VecDot).
	OrderDot Order = iota
	// OrderGEMV is the repacked GEMV's: one activation row (decode).
	OrderGEMV
	// OrderGEMM is the repacked GEMM's: ggml's activation rows in groups
	// of four (a prompt's rows but the last rows%4).
	OrderGEMM
)

// RepackRows is the row count a weight matrix's rows must be a multiple
// of for ggml's CPU backend to repack it.
const RepackRows = 8

// Repacked reports whether ggml's x86 CPU backend repacks a weight
// matrix of type t with rows rows (output features) into its interleaved
// layout, whose products take OrderGEMV and OrderGEMM instead of
// OrderDot: Q4_K matrices of a multiple of RepackRows rows. (ggml also
// repacks Q4_0, IQ4_NL and MXFP4 on x86; T-CPU keeps their OrderDot.)
func Repacked(t ggml.Type, rows int) bool {
	return t == ggml.Q4_K && rows > 0 && rows%RepackRows == 0
}

// k4Block is one Q4_K/Q5_K super-block against a Q8_K block, unpacked:
// the quants in element order, the scales and mins, d·xd and dmin·xd.
type k4Block struct {
	q      [qkK]int32
	sc, mn [8]uint8
	d, dm  float32
}

// load unpacks weight block a (a Q5_K block when q5) and sets d·xd,
// dmin·xd for activations of scale xd.
func (b *k4Block) load(a []byte, q5 bool, xd float32) {
	if q5 {
		blk := (*[q5_KLen]byte)(a)
		unpackQ4K((*[128]byte)(blk[q5KQs:]), &b.q)
		qh := (*[32]byte)(blk[q5KQh:])
		for e := range b.q {
			b.q[e] |= int32(qh[e%32]>>(e/32)&1) << 4
		}
	} else {
		unpackQ4K((*[128]byte)(a[q4KQs:]), &b.q)
	}
	b.sc, b.mn = scaleMinK4((*[12]byte)(a[q4KScales:]))
	b.d = fp16(a[q4KD:]) * xd
	b.dm = fp16(a[q4KDmin:]) * xd
}

// lanes returns the eight int32 lanes of ggml's AVX2 kernels: lane l sums,
// over the four chunks, sc[2c] times elements 64c+4l..64c+4l+3 and
// sc[2c+1] times elements 64c+32+4l..64c+32+4l+3.
func (b *k4Block) lanes(y *[qkK]byte) (ln [8]int32) {
	for c := 0; c < 4; c++ {
		for h := 0; h < 2; h++ {
			s := int32(b.sc[2*c+h])
			base := 64*c + 32*h
			for l := 0; l < 8; l++ {
				var p int32
				for e := base + 4*l; e < base+4*l+4; e++ {
					p += b.q[e] * int32(int8(y[e]))
				}
				ln[l] += s * p
			}
		}
	}
	return ln
}

// chunks returns each 64-element chunk's scaled sum and mins term
// (sub-blocks 2c and 2c+1).
func (b *k4Block) chunks(y *[qkK]byte, bs *[32]byte) (s, m [4]int32) {
	for c := 0; c < 4; c++ {
		for h := 0; h < 2; h++ {
			sb := 2*c + h
			var p int32
			for e := 32 * sb; e < 32*sb+32; e++ {
				p += b.q[e] * int32(int8(y[e]))
			}
			s[c] += int32(b.sc[sb]) * p
			m[c] += int32(b.mn[sb]) * (bsum(bs, 2*sb) + bsum(bs, 2*sb+1))
		}
	}
	return s, m
}

// dotK4 is OrderDot for Q4_K (q5 false) and Q5_K.
func dotK4(n int, w, x []byte, q5 bool) float32 {
	wl := q4_KLen
	if q5 {
		wl = q5_KLen
	}
	nb := n / qkK
	var b k4Block
	var acc [8]float32
	var accm [4]float32 // Q4_K's mins lanes, by +dmin (ggml: -dmin)
	var summs float32   // Q5_K's mins, by +dmin
	for i := 0; i < nb; i++ {
		xd, y, bs := q8KHeader((*[q8_KLen]byte)(x[i*q8_KLen:]))
		b.load(w[i*wl:(i+1)*wl], q5, xd)
		_, m := b.chunks(y, bs)
		if q5 {
			summs = fma32(float32(m[0]+m[1]+m[2]+m[3]), b.dm, summs)
		} else {
			for c := range accm {
				accm[c] = fma32(float32(m[c]), b.dm, accm[c])
			}
		}
		for l, v := range b.lanes(y) {
			acc[l] = fma32(b.d, float32(v), acc[l])
		}
	}
	// ggml adds the negated mins (FMAs by -dmin are the negations of
	// these, exactly), after hsum_float_8 of the lanes.
	if q5 {
		return hsum8(&acc) - summs
	}
	return hsum8(&acc) - ((accm[0] + accm[2]) + (accm[1] + accm[3]))
}

// dotK4Repacked is OrderGEMV (gemm false) or OrderGEMM for Q4_K.
func dotK4Repacked(n int, w, x []byte, gemm bool) float32 {
	nb := n / qkK
	var b k4Block
	var acc, accm float32
	for i := 0; i < nb; i++ {
		xd, y, bs := q8KHeader((*[q8_KLen]byte)(x[i*q8_KLen:]))
		b.load(w[i*q4_KLen:(i+1)*q4_KLen], false, xd)
		s, m := b.chunks(y, bs)
		if gemm {
			for c := range s {
				acc = fma32(float32(s[c]), b.d, acc)
				accm = fma32(float32(m[c]), b.dm, accm)
			}
			continue
		}
		acc = fma32(float32(s[0]+s[1]+s[2]+s[3]), b.d, acc)
		accm = fma32(float32(m[0]+m[1]+m[2]+m[3]), b.dm, accm)
	}
	return acc - accm
}

// dotQ4_K is ggml_vec_dot_q4_K_q8_K (AVX2).
func dotQ4_K(n int, w, x []byte) float32 { return dotK4(n, w, x, false) }

// dotQ5_K is ggml_vec_dot_q5_K_q8_K (AVX2).
func dotQ5_K(n int, w, x []byte) float32 { return dotK4(n, w, x, true) }

// dotQ4_KGEMV is ggml_gemv_q4_K_8x8_q8_K's arithmetic for one output.
func dotQ4_KGEMV(n int, w, x []byte) float32 { return dotK4Repacked(n, w, x, false) }

// dotQ4_KGEMM is ggml_gemm_q4_K_8x8_q8_K's arithmetic for one output.
func dotQ4_KGEMM(n int, w, x []byte) float32 { return dotK4Repacked(n, w, x, true) }
