package quant

import "github.com/zrtdev/zrt/format/ggml"

// rowsFunc is the multi-row form of a kernel's dot product: out[r] is the
// dot product of the weight row w with the activation row at x[r*xStride:].
type rowsFunc func(n int, w, x []byte, xStride, rows int, out []float32)

var (
	// genericDot keeps the pure-Go dot products, captured before any SIMD
	// kernel replaces them in the table, so that the level can be lowered
	// again (tests force the fallback with setSIMDLevel(simdNone)).
	genericDot [maxType]func(n int, w, x []byte) float32
	// rowsKernels holds the multi-row kernels of the current level; a nil
	// entry means VecDotRows loops over the type's dot product.
	rowsKernels [maxType]rowsFunc
	// simdLevel is the level installed now.
	simdLevel = simdNone
)

// installSIMD records the pure-Go kernels and installs the best SIMD
// kernels the CPU supports. The kernel table's init calls it last.
func installSIMD() {
	for t := range kernels {
		genericDot[t] = kernels[t].dot
	}
	setSIMDLevel(simdBest)
}

// setSIMDLevel installs the kernels of the given level (capped at what the
// CPU supports) and returns the previous level. It is not safe to call
// while dot products run; tests use it to exercise every path.
func setSIMDLevel(level int) int {
	prev := simdLevel
	level = min(level, simdBest)
	dot, rows := simdKernels(level)
	for t := range kernels {
		kernels[t].dot = genericDot[t]
		if dot[t] != nil && genericDot[t] != nil {
			kernels[t].dot = dot[t]
		}
	}
	rowsKernels = rows
	simdLevel = level
	return prev
}

// VecDotRows computes out[r] = VecDot(t, n, w, xq[r*xStride:]) for r <
// rows: one weight row against several activation rows, each quantized to
// VecDotType(t) and starting xStride bytes after the previous one. Where a
// multi-row kernel exists the weight row is loaded and unpacked once per
// group of rows instead of once per row, which is what prefill wants. The
// results equal VecDot's up to float32 summation order. As with VecDot,
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
