//go:build amd64 && !purego

package cpu

import "golang.org/x/sys/cpu"

// siluSIMDOK says whether this CPU runs swigluAVX512 (AVX-512 F: FMA,
// VSCALEFPS, mask registers).
var siluSIMDOK = cpu.X86.HasAVX512F

// swigluAVX512 sets y[i] = ggml_v_silu(g[i]) * u[i] for nb blocks of 16.
//
//go:noescape
func swigluAVX512(y, gate, up *float32, nb int)
