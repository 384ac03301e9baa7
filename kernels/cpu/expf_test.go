package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestExpf holds expf to float32(math.Exp) (correctly rounded in
// practice) and expfs to expf, bit for bit, on a sweep of float32 inputs
// and the edges.
func TestExpf(t *testing.T) {
	xs := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 88.72, 88.73, -87.3, -103.9, -104,
		-110, -1e6, 100, 1e6, float32(math.Inf(-1)), float32(math.Inf(1)), 1e-30, -1e-30}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1 << 16 {
		xs = append(xs, float32(rng.Float64()*220-115), math.Float32frombits(rng.Uint32()))
	}
	for _, x := range xs {
		if x != x {
			continue // NaN: both give NaN, payloads aside
		}
		if want := float32(math.Exp(float64(x))); expf(x) != want {
			t.Errorf("expf(%v) = %v, want %v", x, expf(x), want)
		}
	}
	if !faSIMDOK {
		t.Skip("no AVX-512: expfs is not used")
	}
	xs = xs[:len(xs)&^7]
	got := append([]float32(nil), xs...)
	expfs(&got[0], len(got))
	for i, x := range xs {
		want := expf(x)
		if math.Float32bits(got[i]) != math.Float32bits(want) && !(want != want && got[i] != got[i]) {
			t.Fatalf("expfs(%v) = %v, expf gives %v", x, got[i], want)
		}
	}
}

// TestExp: Exp gives expf's bits for every length, the SIMD part and the
// scalar rest alike.
func TestExp(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for n := range 40 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.Float64()*120 - 110)
		}
		got := append([]float32(nil), x...)
		Exp(got)
		for i := range x {
			if math.Float32bits(got[i]) != math.Float32bits(expf(x[i])) {
				t.Fatalf("n=%d: Exp(%v)[%d] = %v, expf %v", n, x[i], i, got[i], expf(x[i]))
			}
		}
	}
}
