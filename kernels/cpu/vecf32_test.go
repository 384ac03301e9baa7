package cpu

import (
	"math"
	"math/rand"
	"slices"
	"testing"
)

// The AVX-512 forms of the DeltaNet's vector ops give the Go code's bits.
func TestVecF32SIMDMatchesGo(t *testing.T) {
	if !vecSIMDOK {
		t.Skip("no AVX-512 on this CPU")
	}
	defer func(v bool) { vecUseSIMD = v }(vecUseSIMD)
	rng := rand.New(rand.NewSource(5))
	vec := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		return x
	}
	for _, n := range []int{1, 15, 16, 17, 63, 64, 65, 128, 200, 256} {
		x, y, v := vec(n), vec(n), float32(rng.NormFloat64())
		var dot [2]float32
		var mad, scale [2][]float32
		for i, simd := range []bool{false, true} {
			vecUseSIMD = simd
			dot[i] = dotF32(x, y)
			mad[i], scale[i] = slices.Clone(y), slices.Clone(y)
			madF32(mad[i], x, v)
			scaleF32(scale[i], v)
		}
		if math.Float32bits(dot[0]) != math.Float32bits(dot[1]) {
			t.Errorf("n %d: dot %v (Go) vs %v (AVX-512)", n, dot[0], dot[1])
		}
		if !slices.Equal(mad[0], mad[1]) || !slices.Equal(scale[0], scale[1]) {
			t.Errorf("n %d: mad or scale differ between Go and AVX-512", n)
		}
	}
}
