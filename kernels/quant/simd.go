package quant

// The amd64 assembly (simd_amd64.s, iq4_amd64.s, mxfp4_amd64.s) is written
// by ./gen from its kernel tables.
//go:generate go run ./gen -dir .

import "github.com/zrtdev/zrt/format/ggml"

// rowsFunc is the multi-row form of a kernel's dot product: out[r] is the
// dot product of the weight row w with the activation row at x[r*xStride:].
type rowsFunc func(n int, w, x []byte, xStride, rows int, out []float32)

// matVecFunc is the many-weight-rows form: out[r] is the dot product of
// the weight row at w[r*rowBytes:] with the activation row x.
type matVecFunc func(n int, w, x []byte, out []float32)

// simdTable is one level's kernels, indexed by type; a nil entry keeps the
// pure-Go kernel (or the loop over it).
type simdTable struct {
	dot    [maxType]func(n int, w, x []byte) float32
	rows   [maxType]rowsFunc
	matVec [maxType]matVecFunc
	// quant replaces activation quantizers; the bytes must stay identical
	quant [maxType]func(x []float32, dst []byte)
	// prep holds the prepared-group kernels (see PrepGroupBytes)
	prep [maxType]*prepKernel
	// q4kOrder holds Q4_K's OrderGEMV and OrderGEMM kernels (index
	// order-1); nil entries keep the pure-Go ones
	q4kOrder [2]orderKernels
	// q4kI8 is the kernel on interleaved Q4_K groups (nil: none)
	q4kI8 q4kInterleavedKernel
	// q4kI8MV is the one-row GEMV over many interleaved Q4_K groups
	// (nil: q4kI8 group by group)
	q4kI8MV q4kInterleavedMatVec
}

// orderKernels are the kernels of one Order of a type: the dot product
// and its multi-row and many-weight-rows forms (nil: loops over dot).
type orderKernels struct {
	dot    func(n int, w, x []byte) float32
	rows   rowsFunc
	matVec matVecFunc
}

// prepKernel is a type's prepared-group form of its multi-row kernel:
// groupBytes(n) bytes hold PrepRows activation rows of n elements in the
// layout prepare writes, and dot computes PrepRows outputs from them,
// bit-identical to the type's rowsFunc on the same rows.
type prepKernel struct {
	groupBytes func(n int) int
	prepare    func(n int, xq []byte, xStride int, dst []byte)
	dot        func(n int, w, xp []byte, out []float32)
	// dot2, where set, computes 2*PrepRows outputs from two consecutive
	// groups at once, each bit-identical to dot's.
	dot2 func(n int, w, xp []byte, out []float32)
	// wBytes, where set, is the size of a weight row of n elements as
	// prepW lays it out, which dot2W reads in place of the row: the same
	// bits as dot2, with the work dot2 repeats on each weight block for
	// every pair of groups done once. dot2W takes rows prepared rows
	// (consecutive in wp), row j's outputs at out[j*outStride:].
	wBytes func(n int) int
	prepW  func(n int, w []byte, rows int, dst []byte)
	dot2W  func(n int, wp, xp []byte, rows int, out []float32, outStride int)
}

var (
	// genericDot keeps the pure-Go dot products, captured before any SIMD
	// kernel replaces them in the table, so that the level can be lowered
	// again (tests force the fallback with setSIMDLevel(simdNone)).
	genericDot [maxType]func(n int, w, x []byte) float32
	// genericQuant keeps the pure-Go activation quantizers the same way.
	genericQuant [maxType]func(x []float32, dst []byte)
	// rowsKernels holds the multi-row kernels of the current level; a nil
	// entry means VecDotRows loops over the type's dot product.
	rowsKernels [maxType]rowsFunc
	// matVecKernels holds the many-row kernels of the current level; a nil
	// entry means MatVec loops over the type's dot product.
	matVecKernels [maxType]matVecFunc
	// prepKernels holds the prepared-group kernels of the current level.
	prepKernels [maxType]*prepKernel
	// q4kOrders holds Q4_K's OrderGEMV and OrderGEMM kernels of the
	// current level (index order-1).
	q4kOrders [2]orderKernels
	// q4kInterleaved is the interleaved Q4_K kernel of the current level.
	q4kInterleaved q4kInterleavedKernel
	// q4kInterleavedMV is the one-row GEMV over many interleaved Q4_K
	// groups of the current level.
	q4kInterleavedMV q4kInterleavedMatVec
	// simdLevel is the level installed now.
	simdLevel = simdNone
)

// genericQ4KOrders are the pure-Go OrderGEMV and OrderGEMM dot products.
var genericQ4KOrders = [2]func(n int, w, x []byte) float32{dotQ4_KGEMV, dotQ4_KGEMM}

// installSIMD records the pure-Go kernels and installs the best SIMD
// kernels the CPU supports. The kernel table's init calls it last.
func installSIMD() {
	for t := range kernels {
		genericDot[t] = kernels[t].dot
		genericQuant[t] = kernels[t].quant
	}
	setSIMDLevel(simdBest)
}

// setSIMDLevel installs the kernels of the given level (capped at what the
// CPU supports) and returns the previous level. It is not safe to call
// while dot products run; tests use it to exercise every path.
func setSIMDLevel(level int) int {
	prev := simdLevel
	level = min(level, simdBest)
	tab := simdKernels(level)
	for t := range kernels {
		kernels[t].dot = genericDot[t]
		if tab.dot[t] != nil && genericDot[t] != nil {
			kernels[t].dot = tab.dot[t]
		}
		kernels[t].quant = genericQuant[t]
		if tab.quant[t] != nil && genericQuant[t] != nil {
			kernels[t].quant = tab.quant[t]
		}
	}
	rowsKernels = tab.rows
	matVecKernels = tab.matVec
	for o, k := range tab.q4kOrder {
		if k.dot == nil {
			k.dot = genericQ4KOrders[o]
		}
		q4kOrders[o] = k
	}
	prepKernels = tab.prep
	q4kInterleaved = tab.q4kI8
	q4kInterleavedMV = tab.q4kI8MV
	simdLevel = level
	return prev
}

// VecDotRows computes out[r] = VecDot(t, n, w, xq[r*xStride:]) for r <
// rows: one weight row against several activation rows, each quantized to
// VecDotType(t) and starting xStride bytes after the previous one. Where a
// multi-row kernel exists the weight row is loaded and unpacked once per
// group of rows instead of once per row, which is what prefill wants. Each
// result is bit-identical to VecDot's on that row, however many rows are
// computed together (batch invariance). As with VecDot,
// sizes are the caller's to check (CheckVecDot on the last row, and
// len(out) >= rows); invalid ones may panic. It does not allocate.
func VecDotRows(t ggml.Type, n int, w []byte, xq []byte, xStride int, rows int, out []float32) {
	if f := rowsKernels[t]; f != nil {
		f(n, w, xq, xStride, rows, out)
		return
	}
	dot := kernels[t].dot
	out = out[:rows]
	for r := range out {
		out[r] = dot(n, w, xq[r*xStride:])
	}
}

// MatVec computes out[r] = VecDot(t, n, w[r*rb:], xq) for r < len(out),
// where rb is the byte size of an n-element row of t: consecutive weight
// rows against one activation row, the matrix-vector product of decode.
// The weight rows are read as one sequential stream, and where a kernel
// exists the whole range runs in one call, without a call per row. Each
// result is bit-identical to VecDot's on that row. Sizes are the
// caller's to check (CheckVecDot for one row, and len(w) >= len(out)*rb);
// invalid ones may panic. It does not allocate.
func MatVec(t ggml.Type, n int, w []byte, xq []byte, out []float32) {
	if len(out) == 0 {
		return
	}
	if f := matVecKernels[t]; f != nil {
		f(n, w, xq, out)
		return
	}
	k := &kernels[t]
	rb := n / k.blockSize * k.blockBytes
	dot := k.dot
	for r := range out {
		out[r] = dot(n, w[r*rb:(r+1)*rb], xq)
	}
}

// PrepRows is the number of activation rows in a prepared group.
const PrepRows = 8

// PrepGroupBytes returns the size of one prepared group of PrepRows
// activation rows of n elements for weight type t, or 0 where the current
// level has no prepared kernel for t. A prepared group holds the work a
// multi-row kernel would otherwise redo for every weight row (for Q8_0:
// the quants' sign flip and the f16 scales' conversion), done once by
// PrepareRows.
func PrepGroupBytes(t ggml.Type, n int) int {
	if k := prepKernels[t]; k != nil {
		return k.groupBytes(n)
	}
	return 0
}

// PrepareRows writes the prepared group of the PrepRows activation rows
// at xq[r*xStride:] (quantized to VecDotType(t)) into dst, which holds
// PrepGroupBytes(t, n) bytes. Only valid where PrepGroupBytes(t, n) > 0.
func PrepareRows(t ggml.Type, n int, xq []byte, xStride int, dst []byte) {
	prepKernels[t].prepare(n, xq, xStride, dst)
}

// VecDotPrepared computes out[r] for r < PrepRows from a prepared group:
// bit-identical to VecDotRows(t, n, w, xq, xStride, PrepRows, out) on the
// rows it was prepared from. Only valid where PrepGroupBytes(t, n) > 0.
func VecDotPrepared(t ggml.Type, n int, w, xp []byte, out []float32) {
	prepKernels[t].dot(n, w, xp, out)
}

// VecDotPrepared2 computes out[r] for r < 2*PrepRows from two consecutive
// prepared groups (xp holds 2*PrepGroupBytes(t, n) bytes): the same bits
// as VecDotPrepared on each group, in one pass over the weight row where
// the level has such a kernel. Only valid where PrepGroupBytes(t, n) > 0.
func VecDotPrepared2(t ggml.Type, n int, w, xp []byte, out []float32) {
	k := prepKernels[t]
	if k.dot2 != nil {
		k.dot2(n, w, xp, out)
		return
	}
	g := k.groupBytes(n)
	k.dot(n, w, xp[:g], out[:PrepRows])
	k.dot(n, w, xp[g:2*g], out[PrepRows:2*PrepRows])
}

// PrepWeightBytes returns the size of one weight row of n elements of t
// laid out by PrepareWeights for VecDotPrepared2W, or 0 where the current
// level has no such kernel. A prefill that runs many groups of rows
// against each weight row prepares the rows once for all of them.
func PrepWeightBytes(t ggml.Type, n int) int {
	if k := prepKernels[t]; k != nil && k.wBytes != nil {
		return k.wBytes(n)
	}
	return 0
}

// PrepareWeights writes the rows consecutive weight rows at w (of n
// elements each) into dst as VecDotPrepared2W reads them,
// PrepWeightBytes(t, n) bytes a row. Only valid where that is > 0.
func PrepareWeights(t ggml.Type, n int, w []byte, rows int, dst []byte) {
	prepKernels[t].prepW(n, w, rows, dst)
}

// VecDotPrepared2W is VecDotPrepared2 on each of rows weight rows as
// PrepareWeights laid them out (wp, one after another), row j's
// 2*PrepRows outputs at out[j*outStride:]: the same bits, in one call.
// Only valid where PrepWeightBytes(t, n) > 0.
func VecDotPrepared2W(t ggml.Type, n int, wp, xp []byte, rows int, out []float32, outStride int) {
	prepKernels[t].dot2W(n, wp, xp, rows, out, outStride)
}

// VecDotOrder is VecDot in order o: for a type ggml repacks (Q4_K, see
// Repacked) OrderGEMV and OrderGEMM give its repacked kernels'
// arithmetic; every other type and OrderDot give VecDot's.
func VecDotOrder(t ggml.Type, o Order, n int, w, xq []byte) float32 {
	if o == OrderDot || t != ggml.Q4_K || int(o) > len(q4kOrders) {
		return VecDot(t, n, w, xq)
	}
	return q4kOrders[o-1].dot(n, w, xq)
}

// VecDotRowsOrder is VecDotRows in order o: each result bit-identical to
// VecDotOrder's on that row.
func VecDotRowsOrder(t ggml.Type, o Order, n int, w []byte, xq []byte, xStride int, rows int, out []float32) {
	if o == OrderDot || t != ggml.Q4_K || int(o) > len(q4kOrders) {
		VecDotRows(t, n, w, xq, xStride, rows, out)
		return
	}
	k := &q4kOrders[o-1]
	if k.rows != nil {
		k.rows(n, w, xq, xStride, rows, out)
		return
	}
	out = out[:rows]
	for r := range out {
		out[r] = k.dot(n, w, xq[r*xStride:])
	}
}

// MatVecOrder is MatVec in order o: each result bit-identical to
// VecDotOrder's on that weight row.
func MatVecOrder(t ggml.Type, o Order, n int, w []byte, xq []byte, out []float32) {
	if o == OrderDot || t != ggml.Q4_K || int(o) > len(q4kOrders) {
		MatVec(t, n, w, xq, out)
		return
	}
	if len(out) == 0 {
		return
	}
	k := &q4kOrders[o-1]
	if k.matVec != nil {
		k.matVec(n, w, xq, out)
		return
	}
	rb := n / qkK * q4_KLen
	for r := range out {
		out[r] = k.dot(n, w[r*rb:(r+1)*rb], xq)
	}
}
