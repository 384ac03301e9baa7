//go:build !amd64 || purego

package cpu

// Without the amd64 kernel SiLU runs the pure-Go emulation only.
const siluSIMDOK = false

func swigluAVX512(y, gate, up *float32, nb int) { panic("no SIMD") }
