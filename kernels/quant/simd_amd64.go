//go:build amd64 && !purego

package quant

import (
	"golang.org/x/sys/cpu"

	"github.com/zrtdev/zrt/format/ggml"
)

// The amd64 kernels live in simd_amd64.s. Each works on whole blocks of
// one row and returns the same value as the pure-Go dot product of the same
// type up to float32 summation order: every per-block (or per-sub-block)
// integer sum is computed exactly, and only the float combination of those
// sums with the block scales is reordered (and uses fused multiply-adds).
//
// The one-row kernel of a type and level defines its bits: the multi-row
// kernels (VecDotRows' groups of four or eight activation rows, the
// prepared groups) and the many-row MatVec kernels give every row exactly
// the one-row kernel's operations in its order (the same exact int32
// lanes, the same fused multiply-adds, the same final HSUM reduction,
// only done for several rows at once), so each result is bit-identical
// to VecDot's on that row, however many rows are computed together.
//
// Two instruction-set levels exist:
//
//   - simdAVX2 needs AVX2, FMA and F16C (Haswell, Zen 1 and later). The
//     int8 products use VPMADDUBSW (u8×s8 pairs → int16) and VPMADDWD, in
//     forms whose operand ranges cannot saturate (see each kernel).
//   - simdVNNI additionally needs AVX-512 F/BW/VL/VNNI and replaces the
//     Q4_0/Q8_0 multiply chains with VPDPBUSD (u8×s8 quads → int32, no
//     saturation). The k-quants stay on the AVX2 sequence at this level:
//     their per-sub-block scales are applied by the VPMADDWD that follows
//     VPMADDUBSW for free, whereas VPDPBUSD would need an extra VPMULLD per
//     sub-block, so VNNI saves nothing there. The four- and eight-row Q4_K
//     kernels of this level do use AVX-512 (EVEX forms of the same
//     instructions): Y16-Y31 hold a super-block's unpacked quants and
//     scales for all the rows.
//
// IQ4_NL and IQ4_XS (iq4_amd64.s) and MXFP4 (mxfp4_amd64.s) have AVX2
// kernels only, used at both levels; unlike the others they keep ggml's
// float order exactly and so are bit-identical to their pure-Go kernels.
// So do Q4_K and Q5_K (k4.go): their vec_dot order and Q4_K's two
// repacked orders (Order), whose eight-row and many-row kernels exist
// for the repacked orders only (Q4_K's OrderDot is for the rare matrices
// ggml does not repack, and has a four-row kernel only).
// IQ3_S has no assembly: its pure-Go kernel (iq3.go) runs at every level.
//
// AMX is never used: it faults on the machines this runs on.

// Levels of SIMD support, in increasing order.
const (
	simdNone = iota
	simdAVX2
	simdVNNI
)

// simdBest is the best level this CPU supports.
var simdBest = func() int {
	x := &cpu.X86
	if !x.HasAVX2 || !x.HasFMA || !x.HasF16C {
		return simdNone
	}
	if x.HasAVX512F && x.HasAVX512BW && x.HasAVX512VL && x.HasAVX512VNNI {
		return simdVNNI
	}
	return simdAVX2
}()

// simdKernels returns the kernels for the given level, indexed by type; a
// nil entry keeps the pure-Go kernel.
func simdKernels(level int) (tab simdTable) {
	if level < simdAVX2 {
		return
	}
	dot, rows, mv := &tab.dot, &tab.rows, &tab.matVec
	dot[ggml.F32] = floatDot(4, dotF32x32, dotF32)
	dot[ggml.F16] = floatDot(2, dotF16x32, dotF16)
	dot[ggml.Q4_K] = blockDot(qkK, q4_KLen, q8_KLen, dotQ4_KAVX2Asm)
	tab.q4kOrder[OrderGEMV-1].dot = blockDot(qkK, q4_KLen, q8_KLen, dotQ4_KGEMVAVX2Asm)
	tab.q4kOrder[OrderGEMM-1].dot = blockDot(qkK, q4_KLen, q8_KLen, dotQ4_KGEMMAVX2Asm)
	dot[ggml.Q5_K] = blockDot(qkK, q5_KLen, q8_KLen, dotQ5_KAVX2Asm)
	dot[ggml.Q6_K] = blockDot(qkK, q6_KLen, q8_KLen, dotQ6_KAVX2Asm)
	dot[ggml.IQ4_NL] = dotIQ4_NLAVX2 // iq4_amd64.go; AVX2 at every level
	dot[ggml.IQ4_XS] = blockDot(qkK, iq4_XSLen, q8_KLen, dotIQ4_XSAVX2Asm)
	dot[ggml.MXFP4] = dotMXFP4AVX2 // mxfp4_amd64.go; AVX2 at every level
	mv[ggml.MXFP4] = matVecMXFP4AVX2
	rows[ggml.MXFP4] = rowsMXFP4AVX2
	tab.quant[ggml.F16] = quantF16AVX2 // F16C, which every AVX2 CPU has
	if level >= simdVNNI {
		dot[ggml.Q8_0] = blockDot(qk, q8_0Len, q8_0Len, dotQ8_0VNNIAsm)
		dot[ggml.Q4_0] = blockDot(qk, q4_0Len, q8_0Len, dotQ4_0VNNIAsm)
		tab.prep[ggml.Q8_0] = &prepQ8_0x8
		// The eight- and four-row kernels load and prepare (unpack the
		// scales, mins and quants of) each weight block once per group.
		rows[ggml.Q8_0] = blockRows(qk, q8_0Len, q8_0Len, dotQ8_0x8VNNIAsm, dotQ8_0x4VNNIAsm, dotQ8_0VNNIAsm)
		tab.q4kOrder[OrderGEMV-1].rows = blockRows(qkK, q4_KLen, q8_KLen, dotQ4_KGEMVx8Asm, dotQ4_KGEMVx4Asm, dotQ4_KGEMVAVX2Asm)
		tab.q4kOrder[OrderGEMM-1].rows = blockRows(qkK, q4_KLen, q8_KLen, dotQ4_KGEMMx8Asm, dotQ4_KGEMMx4Asm, dotQ4_KGEMMAVX2Asm)
		// Q4_K in vec_dot's order (OrderDot, for the matrices ggml does
		// not repack, such as a tied output of an odd vocabulary): four
		// rows at a time with each weight block prepared once.
		rows[ggml.Q4_K] = blockRows(qkK, q4_KLen, q8_KLen, nil, dotQ4_KDotx4Asm, dotQ4_KAVX2Asm)
		rows[ggml.Q6_K] = blockRows(qkK, q6_KLen, q8_KLen, dotQ6_Kx8Asm, dotQ6_Kx4Asm, dotQ6_KAVX2Asm)
		// The AVX-512 many-row kernels: each row's result is the one-row
		// kernel's of the level, bit for bit.
		tab.q4kOrder[OrderGEMV-1].matVec = blockMatVec(qkK, q4_KLen, q8_KLen, matVecQ4_KGEMVAsm)
		tab.q4kI8 = dotQ4KInterleavedVNNI
		tab.q4kI8MV = func(n int, g, xq []byte, out []float32) {
			dotQ4_KGEMVi8MAsm(&g[0], &xq[0], n/qkK, len(out)/Q4KInterleaveRows, &out[0])
		}
		mv[ggml.Q6_K] = blockMatVec(qkK, q6_KLen, q8_KLen, matVecQ6_KAsm)
		mv[ggml.Q8_0] = blockMatVec(qk, q8_0Len, q8_0Len, matVecQ8_0Asm)
		mv[ggml.Q4_0] = blockMatVec(qk, q4_0Len, q8_0Len, matVecQ4_0Asm)
		// quantQ8_K and quantQ8_0 in AVX-512, byte for byte.
		tab.quant[ggml.Q8_K] = blockQuant(qkK, q8_KLen, quantQ8_KAsm)
		tab.quant[ggml.Q8_0] = blockQuant(qk, q8_0Len, quantQ8_0Asm)
	} else {
		dot[ggml.Q8_0] = blockDot(qk, q8_0Len, q8_0Len, dotQ8_0AVX2Asm)
		dot[ggml.Q4_0] = blockDot(qk, q4_0Len, q8_0Len, dotQ4_0AVX2Asm)
	}
	return
}

// ---- wrappers: bounds-check in Go (so a bad size panics instead of
// reading out of bounds), then hand whole blocks to the assembly.

// floatDot is a float dot kernel (elements of size bytes) on the
// elements up to the last multiple of 32, the rest by tail in Go.
func floatDot(size int, kernel func(w, x *byte, n int) float32, tail func(n int, w, x []byte) float32) func(n int, w, x []byte) float32 {
	return func(n int, w, x []byte) float32 {
		w, x = w[:size*n], x[:size*n]
		m := n &^ 31
		var s float32
		if m > 0 {
			s = kernel(&w[0], &x[0], m)
		}
		if m < n {
			s += tail(n-m, w[size*m:], x[size*m:])
		}
		return s
	}
}

// prepQ8_0x8 is the eight-row Q8_0 VNNI kernel on prepared groups: per
// block, the eight rows' quants XORed with 0x80 (the unsigned operand of
// VPDPBUSD; 32 bytes a row, row after row) and then their f16 scales as
// eight float32 (exact conversions, what VCVTPH2PS gives), q80PrepBlock
// bytes in all.
// Its dot2 is the sixteen-row form (dotQ8_0x16PrepAsm), which shares the
// weight block's work between two groups, and its dot2W the same on
// prepared weight rows (withQ80Weights).
var prepQ8_0x8 = withQ80Weights(withDot2(prepKernel{
	groupBytes: func(n int) int { return n / qk * q80PrepBlock },
	prepare: func(n int, xq []byte, xStride int, dst []byte) {
		nb := n / qk
		if nb == 0 {
			return
		}
		_ = dst[nb*q80PrepBlock-1]
		_ = xq[7*xStride+nb*q8_0Len-1]
		prepQ8_0RowsAsm(&xq[0], xStride, nb, &dst[0])
	},
	dot: prepDot(qk, q8_0Len, q80PrepBlock, dotQ8_0x8PrepAsm),
}, dotQ8_0x16Prep))

// dotQ8_0x16Prep is dotQ8_0x16PrepAsm on two prepared groups, bounds
// checked here.
func dotQ8_0x16Prep(n int, w, xp []byte, out []float32) {
	nb := n / qk
	if nb == 0 {
		clear(out[:16])
		return
	}
	_ = w[nb*q8_0Len-1]
	_ = xp[2*nb*q80PrepBlock-1]
	_ = out[15]
	dotQ8_0x16PrepAsm(&w[0], &xp[0], nb, &out[0])
}

// q80PrepWBlock is a Q8_0 weight block as prepQ8_0WeightsAsm lays it out
// for dotQ8_0x16PrepWRowsAsm: its quants, the eight dwords of the VNNI
// correction that dotQ8_0x16PrepAsm computes from them, and its scale as
// a float32.
const q80PrepWBlock = 32 + 32 + 4

// withQ80Weights returns the Q8_0 prepared kernel k with prepared weight
// rows: prepQ8_0WeightsAsm lays them out, dotQ8_0x16PrepWRowsAsm reads
// them, several rows a call, with dotQ8_0x16PrepAsm's bits.
func withQ80Weights(k prepKernel) prepKernel {
	k.wBytes = func(n int) int { return n / qk * q80PrepWBlock }
	k.prepW = func(n int, w []byte, rows int, dst []byte) {
		nb := n / qk
		if nb == 0 || rows <= 0 {
			return
		}
		_ = w[rows*nb*q8_0Len-1]
		_ = dst[rows*nb*q80PrepWBlock-1]
		prepQ8_0WeightsAsm(&w[0], rows*nb, &dst[0])
	}
	k.dot2W = func(n int, wp, xp []byte, rows int, out []float32, outStride int) {
		nb := n / qk
		if rows <= 0 {
			return
		}
		if nb == 0 {
			for j := 0; j < rows; j++ {
				clear(out[j*outStride : j*outStride+16])
			}
			return
		}
		_ = wp[rows*nb*q80PrepWBlock-1]
		_ = xp[2*nb*q80PrepBlock-1]
		_ = out[(rows-1)*outStride+15]
		dotQ8_0x16PrepWRowsAsm(&wp[0], &xp[0], nb, rows, &out[0], outStride)
	}
	return k
}

// withDot2 returns k with its two-group kernel set to dot2.
func withDot2(k prepKernel, dot2 func(n int, w, xp []byte, out []float32)) prepKernel {
	k.dot2 = dot2
	return k
}

// blockDot is a one-row dot kernel on nb whole blocks of bs elements
// (wLen bytes a weight block, xLen an activation block), its bounds
// checked here.
func blockDot(bs, wLen, xLen int, kernel func(w, x *byte, nb int) float32) func(n int, w, x []byte) float32 {
	return func(n int, w, x []byte) float32 {
		nb := n / bs
		if nb == 0 {
			return 0
		}
		_, _ = w[nb*wLen-1], x[nb*xLen-1]
		return kernel(&w[0], &x[0], nb)
	}
}

// blockRows runs the eight-row kernel x8 over groups of eight activation
// rows (none where x8 is nil), the four-row x4 over groups of four and
// the one-row one over what is left (blocks as blockDot's). All three
// give every row the one-row kernel's bits, so which rows take which
// kernel does not matter.
func blockRows(bs, wLen, xLen int, x8, x4 func(w, x *byte, stride, nb int, out *float32), one func(w, x *byte, nb int) float32) rowsFunc {
	return func(n int, w, x []byte, xStride, rows int, out []float32) {
		nb := n / bs
		if nb == 0 || rows <= 0 {
			clear(out[:rows])
			return
		}
		_ = w[nb*wLen-1]
		_ = x[(rows-1)*xStride+nb*xLen-1]
		out = out[:rows]
		r := 0
		for ; x8 != nil && r+8 <= rows; r += 8 {
			x8(&w[0], &x[r*xStride], xStride, nb, &out[r])
		}
		for ; r+4 <= rows; r += 4 {
			x4(&w[0], &x[r*xStride], xStride, nb, &out[r])
		}
		for ; r < rows; r++ {
			out[r] = one(&w[0], &x[r*xStride], nb)
		}
	}
}

// blockMatVec runs a many-row kernel over all the rows of w in one call
// (blocks as blockDot's).
func blockMatVec(bs, wLen, xLen int, kernel func(w, x *byte, nb, rows int, out *float32)) matVecFunc {
	return func(n int, w, x []byte, out []float32) {
		nb := n / bs
		if nb == 0 {
			clear(out)
			return
		}
		_ = w[len(out)*nb*wLen-1]
		_ = x[nb*xLen-1]
		kernel(&w[0], &x[0], nb, len(out), &out[0])
	}
}

// blockQuant is an activation quantizer on whole blocks of bs values
// (dLen bytes a quantized block), its bounds checked here.
func blockQuant(bs, dLen int, kernel func(x *float32, dst *byte, nb int)) func(x []float32, dst []byte) {
	return func(x []float32, dst []byte) {
		nb := len(x) / bs
		if nb == 0 {
			return
		}
		_ = x[nb*bs-1]
		_ = dst[nb*dLen-1]
		kernel(&x[0], &dst[0], nb)
	}
}

// prepDot is the dot of a prepKernel: kernel on nb whole blocks of bs
// elements (wLen bytes a weight block, pLen a prepared one), its bounds
// checked once here.
func prepDot(bs, wLen, pLen int, kernel func(w, xp *byte, nb int, out *float32)) func(n int, w, xp []byte, out []float32) {
	return func(n int, w, xp []byte, out []float32) {
		nb := n / bs
		if nb == 0 {
			clear(out[:8])
			return
		}
		_ = w[nb*wLen-1]
		_ = xp[nb*pLen-1]
		_ = out[7]
		kernel(&w[0], &xp[0], nb, &out[0])
	}
}

// q80PrepBlock is the size of one block of a prepared Q8_0 group.
const q80PrepBlock = 8*qk + 8*4

// Assembly kernels (ABI0). Pointers address the first block; nb counts
// blocks (n counts elements for the float kernels and is a multiple of
// 32). The callers above guarantee the memory is there.

//go:noescape
func dotF32x32(w, x *byte, n int) float32

//go:noescape
func dotF16x32(w, x *byte, n int) float32

//go:noescape
func dotQ8_0VNNIAsm(w, x *byte, nb int) float32

//go:noescape
func dotQ8_0x4VNNIAsm(w, x *byte, stride, nb int, out *float32)

//go:noescape
func dotQ8_0x8VNNIAsm(w, x *byte, stride, nb int, out *float32)

//go:noescape
func dotQ8_0x8PrepAsm(w, xp *byte, nb int, out *float32)

//go:noescape
func dotQ8_0x16PrepAsm(w, xp *byte, nb int, out *float32)

//go:noescape
func dotQ8_0x16PrepWRowsAsm(wp, xp *byte, nb, rows int, out *float32, outStride int)

//go:noescape
func prepQ8_0WeightsAsm(w *byte, nb int, wp *byte)

//go:noescape
func prepQ8_0RowsAsm(xq *byte, stride, nb int, xp *byte)

//go:noescape
func dotQ8_0AVX2Asm(w, x *byte, nb int) float32

//go:noescape
func dotQ4_0VNNIAsm(w, x *byte, nb int) float32

//go:noescape
func dotQ4_0AVX2Asm(w, x *byte, nb int) float32

//go:noescape
func dotQ4_KAVX2Asm(w, x *byte, nb int) float32

//go:noescape
func dotQ4_KGEMVAVX2Asm(w, x *byte, nb int) float32

//go:noescape
func dotQ4_KGEMMAVX2Asm(w, x *byte, nb int) float32

// quantF16AVX2 is quantF16 eight values at a time (VCVTPS2PH), the tail
// in Go: the same IEEE rounding, so the same bytes.
func quantF16AVX2(x []float32, dst []byte) {
	n := len(x) &^ 7
	if n > 0 {
		_ = dst[2*n-1]
		quantF16AVX2Asm(&x[0], &dst[0], n)
	}
	quantF16(x[n:], dst[2*n:])
}

//go:noescape
func quantF16AVX2Asm(x *float32, dst *byte, n int)

//go:noescape
func dotQ4_KGEMMx4Asm(w, x *byte, stride, nb int, out *float32)

//go:noescape
func dotQ4_KGEMMx8Asm(w, x *byte, stride, nb int, out *float32)

//go:noescape
func dotQ4_KGEMVx4Asm(w, x *byte, stride, nb int, out *float32)

//go:noescape
func dotQ4_KGEMVx8Asm(w, x *byte, stride, nb int, out *float32)

//go:noescape
func dotQ6_Kx4Asm(w, x *byte, stride, nb int, out *float32)

//go:noescape
func dotQ6_Kx8Asm(w, x *byte, stride, nb int, out *float32)

//go:noescape
func dotQ5_KAVX2Asm(w, x *byte, nb int) float32

//go:noescape
func dotQ6_KAVX2Asm(w, x *byte, nb int) float32

//go:noescape
func matVecQ4_KGEMVAsm(w, x *byte, nb, rows int, out *float32)

//go:noescape
func matVecQ6_KAsm(w, x *byte, nb, rows int, out *float32)

//go:noescape
func matVecQ8_0Asm(w, x *byte, nb, rows int, out *float32)

//go:noescape
func matVecQ4_0Asm(w, x *byte, nb, rows int, out *float32)

//go:noescape
func quantQ8_KAsm(x *float32, dst *byte, nb int)

//go:noescape
func quantQ8_0Asm(x *float32, dst *byte, nb int)

// q4kI8Kernel is an interleaved Q4_K kernel (VPDPBUSD, one float lane
// per weight row) on rows activation rows at a time.
type q4kI8Kernel struct {
	rows int
	run  func(w, x *byte, stride, nb int, out *float32)
}

// q4kI8Kernels are each order's interleaved Q4_K kernels, widest first
// (indexed by Order-1): every row's result is the order's one-row
// kernel's, however many rows a kernel takes.
var q4kI8Kernels = [2][]q4kI8Kernel{
	OrderGEMV - 1: {{4, dotQ4_KGEMVi8x4Asm}, {2, dotQ4_KGEMVi8x2Asm}, {1, dotQ4_KGEMVi8x1Asm}},
	OrderGEMM - 1: {{4, dotQ4_KGEMMi8x4Asm}, {1, dotQ4_KGEMMi8x1Asm}},
}

// dotQ4KInterleavedVNNI runs order o's interleaved Q4_K kernels
// (q4kI8Kernels) on the rows, each as wide as the rows left allow;
// arguments checked by VecDotQ4KInterleaved.
func dotQ4KInterleavedVNNI(o Order, n int, g, xq []byte, xStride, rows int, out []float32) {
	nb := n / qkK
	r := 0
	for _, k := range q4kI8Kernels[o-1] {
		for ; r+k.rows <= rows; r += k.rows {
			k.run(&g[0], &xq[r*xStride], xStride, nb, &out[8*r])
		}
	}
}

//go:noescape
func dotQ4_KGEMMi8x4Asm(w, x *byte, stride, nb int, out *float32)

//go:noescape
func dotQ4_KGEMMi8x1Asm(w, x *byte, stride, nb int, out *float32)

//go:noescape
func dotQ4_KGEMVi8x4Asm(w, x *byte, stride, nb int, out *float32)

//go:noescape
func dotQ4_KGEMVi8x2Asm(w, x *byte, stride, nb int, out *float32)

//go:noescape
func dotQ4_KGEMVi8x1Asm(w, x *byte, stride, nb int, out *float32)

//go:noescape
func dotQ4_KGEMVi8MAsm(w, x *byte, nb, groups int, out *float32)

//go:noescape
func dotQ4_KDotx4Asm(w, x *byte, stride, nb int, out *float32)
