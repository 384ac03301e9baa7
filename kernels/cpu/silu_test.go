package cpu

import (
	"math"
	"math/rand"
	"testing"
)

// TestSwigluRowMatchesEmulation checks the AVX-512 SiLU kernel against the
// lane-by-lane Go emulation of ggml_v_silu (and the scalar tail) on random
// values, the saturation range, signed zeros and awkward widths.
func TestSwigluRowMatchesEmulation(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 87, -87, 88.5, -88.5, 103, -103, 104, -104,
		130, -130, 140, -140, 200, -200, 1e10, -1e10, 1e-40, -1e-40, float32(math.Inf(1)), float32(math.Inf(-1))}
	inexact := 0
	defer func() { t.Logf("%d outputs differ in the last place from the emulation", inexact) }()
	for _, n := range []int{1, 15, 16, 17, 31, 32, 48, 100, 2048, 3072} {
		g, u := make([]float32, n), make([]float32, n)
		for i := range g {
			switch i % 4 {
			case 0:
				g[i] = float32(rng.NormFloat64() * 4)
			case 1:
				g[i] = special[rng.Intn(len(special))]
			default:
				g[i] = float32(rng.NormFloat64() * 40)
			}
			u[i] = float32(rng.NormFloat64())
		}
		y := make([]float32, n+1)
		y[n] = 42
		swigluRow(y[:n], g, u)
		if y[n] != 42 {
			t.Fatalf("n=%d: wrote past the row", n)
		}
		v := n &^ 15
		for i := 0; i < n; i++ {
			want := siluTail(g[i]) * u[i]
			if i < v {
				want = siluV(g[i]) * u[i]
			}
			if y[i] != want && !(want != want && y[i] != y[i]) {
				inexact++
				d := math.Abs(float64(y[i]) - float64(want))
				// float64-emulated FMAs may round twice: allow 2 ulps
				if d > 2*float64(ulp(want)) {
					t.Fatalf("n=%d i=%d g=%v: got %v, want %v", n, i, g[i], y[i], want)
				}
			}
		}
	}
}

func ulp(x float32) float32 {
	b := math.Float32bits(float32(math.Abs(float64(x))))
	return math.Float32frombits(b+1) - math.Float32frombits(b)
}
