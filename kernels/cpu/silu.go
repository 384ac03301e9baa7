package cpu

import "math"

// SiLU as ggml's CPU backend computes it. ggml_vec_swiglu_f32 (AVX-512
// build) runs ggml_v_silu on 16 lanes at a time: x / (1 + e^-x) with e^-x
// from ggml_v_expf, a polynomial approximation (ARM optimized-routines,
// at most 1.45 ulp + 0.5), and a tail shorter than 16 with libm expf.
// siluRow follows that split per row, so outputs match llama.cpp's bit
// for bit where the vector path is the assembly kernel (silu_amd64.s);
// elsewhere siluV emulates it in Go with vExpf.

// siluV is ggml_v_silu on one lane.
func siluV(x float32) float32 {
	return x / (1 + vExpf(0-x))
}

// siluTail is ggml_silu_f32, the scalar tail: x/(1+expf(-x)), with expf
// correctly rounded (glibc's is, to within its documented error).
func siluTail(x float32) float32 {
	return x / (1 + float32(math.Exp(float64(-x))))
}

// siluOnes is the up operand of swigluRow for a plain SiLU: x·1 is x.
var siluOnes = func() (o [64]float32) {
	for i := range o {
		o[i] = 1
	}
	return
}()

// siluInPlace is ggml_vec_silu_f32 over y (at most 64 elements), as
// swigluRow with an up of ones: 16-lane groups from y's start, the tail
// scalar. Where y is part of a row, it must start on a group of the row.
func siluInPlace(y []float32) { swigluRow(y, y, siluOnes[:len(y)]) }

// swigluRow sets y[i] = silu(g[i]) * u[i] over one row, as
// ggml_vec_swiglu_f32 does.
func swigluRow(y, g, u []float32) {
	n := len(y)
	g, u = g[:n], u[:n]
	v := n &^ 15
	if v > 0 && siluSIMDOK {
		swigluAVX512(&y[0], &g[0], &u[0], v/16)
	} else {
		for i := 0; i < v; i++ {
			y[i] = siluV(g[i]) * u[i]
		}
	}
	for i := v; i < n; i++ {
		y[i] = siluTail(g[i]) * u[i]
	}
}
