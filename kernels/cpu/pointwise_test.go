package cpu

import (
	"math"
	"math/rand"
	"testing"

	"github.com/zrtdev/zrt/kernels/quant"
)

// geglu is ggml_vec_geglu_f32 on a GGML_GELU_FP16 build: outside ±10, 0
// and x; inside, gelu of the gate rounded to F16 with the result rounded
// to F16, times up. The kernel's chunked conversion and table must give
// exactly that, for any row length (ragged chunks) and special values.
func TestGegluTable(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	const rows, cols = 3, 1000
	g, u := make([]float32, rows*cols), make([]float32, rows*cols)
	for i := range g {
		g[i], u[i] = float32(rng.NormFloat64()*6), float32(rng.NormFloat64())
	}
	copy(g, []float32{-10, 10, -9.999, 9.999, 0, float32(math.Copysign(0, -1)), 65504, -70000, float32(math.Inf(1)), float32(math.NaN()), 1e-8})
	y := make([]float32, rows*cols)
	pool := NewPool(2)
	defer pool.Close()
	rt := make([]uint32, 8)
	rt[0] = rows
	if err := geglu(&Args{Bufs: [][]byte{f32bytes(g), f32bytes(u), u32bytes(rt), f32bytes(y)}, Push: []uint32{cols}, Pool: pool}); err != nil {
		t.Fatal(err)
	}
	for i, x := range g {
		var want float32
		switch {
		case x <= -10:
			want = 0 * u[i]
		case x >= 10:
			want = x * u[i]
		default:
			want = quant.F16ToF32(quant.F32ToF16(geluTanh(quant.F16ToF32(quant.F32ToF16(x))))) * u[i]
		}
		if math.Float32bits(y[i]) != math.Float32bits(want) && !(want != want && y[i] != y[i]) {
			t.Fatalf("geglu(%v, %v) = %v, want %v", x, u[i], y[i], want)
		}
	}
}
