//go:build amd64 && !purego

package cpu

// The AVX-512 micro-kernels of the F16 prompt products (tinyblas_amd64.s);
// they give tinyBLASDot's bits. tinyBLASSIMDOK gates them (AVX-512 F:
// VCVTPH2PS and VCVTPS2PH on ZMM registers, FMA, the 32 registers the
// widest tile keeps its accumulators in).
var tinyBLASSIMDOK = siluSIMDOK

//go:noescape
func tinyBLAS4x1AVX512(w *uint16, ldw int, x *float32, ldx int, k int, out *float32)

//go:noescape
func tinyBLAS4x2AVX512(w *uint16, ldw int, x *float32, ldx int, k int, out *float32)

//go:noescape
func tinyBLAS4x3AVX512(w *uint16, ldw int, x *float32, ldx int, k int, out *float32)

//go:noescape
func tinyBLAS4x4AVX512(w *uint16, ldw int, x *float32, ldx int, k int, out *float32)

//go:noescape
func tinyBLAS4x5AVX512(w *uint16, ldw int, x *float32, ldx int, k int, out *float32)

//go:noescape
func tinyBLAS4x6AVX512(w *uint16, ldw int, x *float32, ldx int, k int, out *float32)

//go:noescape
func roundF16AVX512(x *float32, n int)

// tinyBLASTiles holds the micro-kernels by activation rows (index n-1).
var tinyBLASTiles = [tinyBLASRows]func(w *uint16, ldw int, x *float32, ldx int, k int, out *float32){
	tinyBLAS4x1AVX512, tinyBLAS4x2AVX512, tinyBLAS4x3AVX512,
	tinyBLAS4x4AVX512, tinyBLAS4x5AVX512, tinyBLAS4x6AVX512,
}
