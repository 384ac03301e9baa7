//go:build !amd64 || purego

package cpu

// Without the amd64 kernels the F16 prompt products run in Go only.
const tinyBLASSIMDOK = false

var tinyBLASTiles [tinyBLASRows]func(w *uint16, ldw int, x *float32, ldx int, k int, out *float32)

func roundF16AVX512(x *float32, n int) { panic("no SIMD") }
