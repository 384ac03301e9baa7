//go:build !amd64 || purego

package cpu

// Without the amd64 kernels the F32 vector ops run in Go only.
const vecSIMDOK = false

func dotF32AVX512(x, y *float32, np int, out *[16]float32)        { panic("no SIMD") }
func madF32AVX512(y, x *float32, v float32, n int)                { panic("no SIMD") }
func scaleF32AVX512(y *float32, v float32, n int)                 { panic("no SIMD") }
func transposeF32x16(dst *[16]*float32, src *float32, stride int) { panic("no SIMD") }
