package cpu

import (
	"math"
	"sync"

	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/kernels/quant"
)

// geglu is gelu(gate)·up row by row, as ggml_vec_geglu_f32 computes it
// on a GGML_GELU_FP16 build (every x86 one): GELU looked up in a table of
// F16 values indexed by the F16 rounding of the gate, outside ±10 taken
// as 0 and x.
//
// The gates are rounded to F16 a chunk at a time by the F16 quantizer
// (SIMD where the CPU has it, the same rounding as quant.F32ToF16), and
// the table holds the F16 results already widened to float32.
func geglu(a *Args) error {
	g, u, r, y := f32s(a.Bufs[0]), f32s(a.Bufs[1]), req(a.Bufs[2]), f32s(a.Bufs[3])
	n := int(a.Push[0])
	tab := geluTable()
	return a.Pool.For(r.rows()*n, 1024, func(_, lo, hi int) {
		var h [256]uint16
		for c := lo; c < hi; c += len(h) {
			e := min(hi, c+len(h))
			toF16(h[:e-c], g[c:e])
			for i := c; i < e; i++ {
				switch x := g[i]; {
				case x <= -10:
					y[i] = 0 * u[i]
				case x >= 10:
					y[i] = x * u[i]
				default:
					y[i] = tab[h[i-c]] * u[i]
				}
			}
		}
	})
}

// geluTable is ggml_table_gelu_f16 widened to float32: for each F16 bit
// pattern h, the F16 rounding of gelu(h). Built once, on first use
// (65 536 tanh), then only read.
var geluTable = sync.OnceValue(func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for h := range t {
		t[h] = quant.F16ToF32(quant.F32ToF16(geluTanh(quant.F16ToF32(uint16(h)))))
	}
	return &t
})

// geluTanh is ggml_gelu_f32, GELU's tanh approximation in float32.
func geluTanh(x float32) float32 {
	const (
		coefA       = float32(0.044715)
		sqrt2OverPi = float32(0.79788456080286535587989211986876)
	)
	return 0.5 * x * (1 + tanhf(sqrt2OverPi*x*(1+coefA*x*x)))
}

// scale multiplies the active rows by a constant, as ggml_scale does.
func scale(a *Args) error {
	x, r := f32s(a.Bufs[0]), req(a.Bufs[1])
	f := math.Float32frombits(a.Spec[0])
	x = x[:r.rows()*int(a.Push[0])]
	for i := range x {
		x[i] *= f
	}
	return nil
}

// logitSoftcap is cap·tanh(x/cap) in place over the logits of each row
// that asks for them, as the three ggml ops gemma's graph builds it from
// compute it: a scale by 1/cap (rounded to float32), tanhf, a scale by
// cap.
func logitSoftcap(a *Args) error {
	logits, r := f32s(a.Bufs[0]), req(a.Bufs[1])
	nv := int(a.Push[0])
	c := math.Float32frombits(a.Spec[0])
	inv := 1 / c
	for i := range r.rows() {
		if r.row(i, kernels.IORowFlags)&kernels.RowWantsLogits == 0 {
			continue
		}
		s := int(r.row(i, kernels.IORowSlot))
		l := logits[s*nv : (s+1)*nv]
		if err := a.Pool.For(nv, 4096, func(_, lo, hi int) {
			for j := lo; j < hi; j++ {
				l[j] = tanhf(l[j]*inv) * c
			}
		}); err != nil {
			return err
		}
	}
	return nil
}

// attnTemp scales each row in place by its position's attention
// temperature, 1 + temp_scale·ln(⌊pos/floor⌋ + 1), computed as
// llama.cpp's llm_graph_input_attn_temp does: the quotient and floor in
// float32, the logarithm and the rest in float64, rounded to float32.
func attnTemp(a *Args) error {
	x, r := f32s(a.Bufs[0]), req(a.Bufs[1])
	n := int(a.Push[0])
	t, floor := math.Float32frombits(a.Spec[0]), float32(a.Spec[1])
	for i := range r.rows() {
		pos := float32(r.row(i, kernels.IORowPos))
		q := float32(math.Floor(float64(pos / floor)))
		f := float32(math.Log(float64(q)+1)*float64(t) + 1)
		row := x[i*n : (i+1)*n]
		for j := range row {
			row[j] *= f
		}
	}
	return nil
}

// copyCols copies columns off..off+cols of each row of x (stride columns
// a row) into y.
func copyCols(a *Args) error {
	x, r, y := f32s(a.Bufs[0]), req(a.Bufs[1]), f32s(a.Bufs[2])
	cols, off, stride := int(a.Push[0]), int(a.Push[1]), int(a.Spec[0])
	for i := range r.rows() {
		copy(y[i*cols:(i+1)*cols], x[i*stride+off:i*stride+off+cols])
	}
	return nil
}

// zero clears cols columns of each active row of y.
func zero(a *Args) error {
	y, r := f32s(a.Bufs[0]), req(a.Bufs[1])
	clear(y[:r.rows()*int(a.Push[0])])
	return nil
}

// mulVec multiplies each active row of x by w, column by column.
func mulVec(a *Args) error {
	x, w, r := f32s(a.Bufs[0]), f32s(a.Bufs[1]), req(a.Bufs[2])
	cols := int(a.Push[0])
	w = w[:cols]
	for i := range r.rows() {
		for j, v := range w {
			x[i*cols+j] *= v
		}
	}
	return nil
}
