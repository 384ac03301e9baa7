//go:build amd64 && !purego

package quant

// Go side of the AVX2 MXFP4 kernel in mxfp4_amd64.s: bounds-check in Go (so
// a bad size panics instead of reading out of bounds), then hand the pairs
// of blocks to the assembly; an odd last block is added in Go by
// mxfp4Tail, exactly as dotMXFP4 adds it. The kernel runs at every level
// from simdAVX2 up (see iq4_amd64.go for why VNNI would not help).

// dotMXFP4AVX2 is dotMXFP4 with the pairs of blocks in assembly. It is
// bit-identical to dotMXFP4 on every input: the assembly is ggml's AVX2
// sequence itself (VPSIGNB and VPMADDUBSW, so a -128 activation against a
// negative level wraps as dotMXFP4 emulates), the lanes and the float
// order are ggml's, and the block scale comes from e8m0HalfTable.
func dotMXFP4AVX2(n int, w, x []byte) float32 {
	return pairDot(n, w, x, mxfp4Len, func(w, x *byte, np int) float32 {
		return dotMXFP4AVX2Asm(w, x, np, &e8m0HalfTable)
	}, mxfp4Tail)
}

// matVecMXFP4AVX2 is MatVec for MXFP4: out[r] = dotMXFP4AVX2 of weight row
// r (rows of n/32 blocks, one after another) with the activation row x,
// without the per-row indirect call and bounds checks.
func matVecMXFP4AVX2(n int, w, x []byte, out []float32) {
	nb := n / qk
	if nb == 0 {
		clear(out)
		return
	}
	rb := nb * mxfp4Len
	_, _ = w[len(out)*rb-1], x[nb*q8_0Len-1]
	np := nb / 2
	for r := range out {
		var sum float32
		if np > 0 {
			sum = dotMXFP4AVX2Asm(&w[r*rb], &x[0], np, &e8m0HalfTable)
		}
		if nb%2 != 0 {
			sum = mxfp4Tail(w[r*rb+(nb-1)*mxfp4Len:], x[(nb-1)*q8_0Len:], sum)
		}
		out[r] = sum
	}
}

// rowsMXFP4AVX2 is VecDotRows for MXFP4: four activation rows at a time
// through the four-row kernel (each weight block unpacked once), the rest
// one by one; every result is dotMXFP4AVX2's bits.
func rowsMXFP4AVX2(n int, w, x []byte, xStride, rows int, out []float32) {
	nb := n / qk
	out = out[:rows]
	if nb == 0 || rows <= 0 {
		clear(out)
		return
	}
	_, _ = w[nb*mxfp4Len-1], x[(rows-1)*xStride+nb*q8_0Len-1]
	np := nb / 2
	r := 0
	if np > 0 {
		for ; r+4 <= rows; r += 4 {
			dotMXFP4x4AVX2Asm(&w[0], &x[r*xStride], xStride, np, &e8m0HalfTable, &out[r])
			if nb%2 != 0 {
				for i := r; i < r+4; i++ {
					out[i] = mxfp4Tail(w[(nb-1)*mxfp4Len:], x[i*xStride+(nb-1)*q8_0Len:], out[i])
				}
			}
		}
	}
	for ; r < rows; r++ {
		out[r] = dotMXFP4AVX2(n, w, x[r*xStride:])
	}
}

// dotMXFP4x4AVX2Asm writes to out[0..3] dotMXFP4AVX2Asm's result for each
// of the four activation rows at x, stride bytes apart.
//
//go:noescape
func dotMXFP4x4AVX2Asm(w, x *byte, stride, npairs int, scales *[256]float32, out *float32)

// dotMXFP4AVX2Asm returns hsum8(acc1+acc2) over npairs pairs of MXFP4
// blocks at w against Q8_0 blocks at x; scales is e8m0HalfTable.
//
//go:noescape
func dotMXFP4AVX2Asm(w, x *byte, npairs int, scales *[256]float32) float32
