//go:build amd64 && !purego

package cpu

import "golang.org/x/sys/cpu"

// The micro-kernels of the F16 prompt products (tinyblas_amd64.s for
// AVX-512 F, tinyblas_avx2_amd64.s for AVX2 with FMA and F16C); both give
// tinyBLASDot's bits.

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

//go:noescape
func tinyBLAS4x1AVX2(w *uint16, ldw int, x *float32, ldx int, k int, out *float32)

//go:noescape
func tinyBLAS4x2AVX2(w *uint16, ldw int, x *float32, ldx int, k int, out *float32)

//go:noescape
func tinyBLAS4x3AVX2(w *uint16, ldw int, x *float32, ldx int, k int, out *float32)

//go:noescape
func tinyBLAS4x4AVX2(w *uint16, ldw int, x *float32, ldx int, k int, out *float32)

//go:noescape
func tinyBLAS4x5AVX2(w *uint16, ldw int, x *float32, ldx int, k int, out *float32)

//go:noescape
func tinyBLAS4x6AVX2(w *uint16, ldw int, x *float32, ldx int, k int, out *float32)

//go:noescape
func roundF16AVX2(x *float32, n int)

// tinyBLASSets returns the micro-kernel sets this CPU runs, the fastest
// first: AVX-512 F (the 32 ZMM registers the widest tile keeps its
// accumulators in), then AVX2 with FMA and F16C.
func tinyBLASSets() []*tinyBLASKernels {
	var s []*tinyBLASKernels
	if cpu.X86.HasAVX512F {
		s = append(s, &tinyBLASKernels{"avx512", [tinyBLASRows]tinyBLASTile{
			tinyBLAS4x1AVX512, tinyBLAS4x2AVX512, tinyBLAS4x3AVX512,
			tinyBLAS4x4AVX512, tinyBLAS4x5AVX512, tinyBLAS4x6AVX512,
		}, roundF16AVX512})
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C {
		s = append(s, &tinyBLASKernels{"avx2", [tinyBLASRows]tinyBLASTile{
			tinyBLAS4x1AVX2, tinyBLAS4x2AVX2, tinyBLAS4x3AVX2,
			tinyBLAS4x4AVX2, tinyBLAS4x5AVX2, tinyBLAS4x6AVX2,
		}, roundF16AVX2})
	}
	return s
}
