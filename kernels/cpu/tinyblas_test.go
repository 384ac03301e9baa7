package cpu

import (
	"math"
	"testing"
)

// TestTinyBLASDot holds tinyBLASDot to tinyBLAS's own arithmetic: the
// expected bits are what _mm512_fmadd_ps over 16 lanes and GCC's
// _mm512_reduce_add_ps give (computed once on an AVX-512 machine) for
// the same pseudo-random vectors, of 1 to 16 lane steps.
func TestTinyBLASDot(t *testing.T) {
	want := []struct {
		k    int
		bits uint32
	}{{16, 0x402b90f8}, {64, 0xbf1d9318}, {112, 0xc070df42}, {160, 0xbf05dc12}, {208, 0xc04dc5b8}, {256, 0x40c3d58b}}
	s := uint64(12345)
	next := func(div float32) float32 {
		s = s*6364136223846793005 + 1442695040888963407
		return float32(int(s>>40)%2001-1000) / div
	}
	for _, c := range want {
		w, x := make([]float32, c.k), make([]float32, c.k)
		for i := range w {
			w[i], x[i] = next(997), next(991)
		}
		if got := math.Float32bits(tinyBLASDot(w, x)); got != c.bits {
			t.Errorf("k %d: %#08x (%v), tinyBLAS %#08x (%v)", c.k, got, math.Float32frombits(got), c.bits, math.Float32frombits(c.bits))
		}
	}
}
