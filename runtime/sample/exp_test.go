package sample

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestExpNeg: expNeg is math.Exp within 1e-15 relative (a few units in the last place) over (-708, 0],
// exactly 1 at 0, and 0 below -708 and for NaN.
func TestExpNeg(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	xs := []float64{0, -1e-300, -math.Ln2, -1, -0.5, -708, -707.9, -1e-9}
	for range 200_000 {
		xs = append(xs, -rng.Float64()*708, -rng.Float64()*3, -rng.ExpFloat64())
	}
	for _, x := range xs {
		got, want := expNeg(x), math.Exp(x)
		if math.Abs(got-want) > 1e-15*want {
			t.Fatalf("expNeg(%v) = %v, math.Exp %v (relative %.2e)", x, got, want, math.Abs(got-want)/want)
		}
	}
	if expNeg(0) != 1 {
		t.Errorf("expNeg(0) = %v", expNeg(0))
	}
	for _, x := range []float64{-709, -1e6, math.Inf(-1), math.NaN()} {
		if got := expNeg(x); got != 0 {
			t.Errorf("expNeg(%v) = %v, want 0", x, got)
		}
	}
}

func BenchmarkExpNeg(b *testing.B) {
	xs := make([]float64, 4096)
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range xs {
		xs[i] = -rng.Float64() * 20
	}
	s := 0.0
	b.Run("expNeg", func(b *testing.B) {
		for range b.N {
			for _, x := range xs {
				s += expNeg(x)
			}
		}
	})
	b.Run("math.Exp", func(b *testing.B) {
		for range b.N {
			for _, x := range xs {
				s += math.Exp(x)
			}
		}
	})
	_ = s
}
