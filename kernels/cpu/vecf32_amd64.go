//go:build amd64 && !purego

package cpu

// AVX-512 forms of ggml's F32 vector ops for the gated DeltaNet
// (vecf32_amd64.s); they give the pure-Go code's bits. vecSIMDOK gates
// them (AVX-512 F).
var vecSIMDOK = siluSIMDOK

//go:noescape
func dotF32AVX512(x, y *float32, np int, out *[16]float32)

//go:noescape
func madF32AVX512(y, x *float32, v float32, n int)

//go:noescape
func scaleF32AVX512(y *float32, v float32, n int)

//go:noescape
func transposeF32x16(dst *[16]*float32, src *float32, stride int)
