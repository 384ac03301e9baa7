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
	vec := func(n int) []float32 { return normals(rng, n) }
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

// TestWriteTile checks writeTile (16x16 blocks by transposeF32x16 where
// the CPU has it) against the element-by-element copy, with and without a
// bias, and with outputs split into runs shorter than a block.
func TestWriteTile(t *testing.T) {
	const ib, n = 40, 16
	tile := make([]float32, n*ib, n*ib+16) // gemm's tiles have room past the end
	for i := range tile {
		tile[i] = float32(i) * 0.5
	}
	bias := make([]float32, n)
	for i := range bias {
		bias[i] = float32(i) * 100
	}
	for _, in := range []int{40, 33, 16, 5, 1} {
		for _, split := range []int{16, 6} {
			for _, b := range [][]float32{nil, bias} {
				got := make([]float32, in*n)
				dst := func(ii, jj int) []float32 { return got[ii*n+jj : ii*n+min(n, (jj/split+1)*split)] }
				writeTile(tile, ib, in, n, dst, b)
				for ii := range in {
					for jj := range n {
						want := tile[jj*ib+ii]
						if b != nil {
							want += b[jj]
						}
						if g := got[ii*n+jj]; g != want {
							t.Fatalf("in %d split %d bias %v: [%d][%d] = %v, want %v", in, split, b != nil, ii, jj, g, want)
						}
					}
				}
			}
		}
	}
}

// normals returns n standard normal values from rng.
func normals(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}
