package cpu

import (
	"math"
	"math/rand"
	"testing"

	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/kernels/quant"
)

// TestGemmRowsLikeOne: every row of a Q8_0 prefill gemm has the bits of
// its one-row dot product, whether its group of activation rows went
// through the prepared weight rows (enough groups: gemmPrepWeightGroups
// and more), the plain sixteen-row kernel (fewer), the eight-row one (an
// odd group) or the rows past the last group, however the two workers
// split the features and for rows of one block to many.
func TestGemmRowsLikeOne(t *testing.T) {
	rng := rand.New(rand.NewSource(29))
	for _, k := range []int{32, 96, 768} {
		for _, rows := range []int{8*gemmPrepWeightGroups + 13, 8*gemmPrepWeightGroups - 8, 8*gemmPrepWeightGroups + 8, 23} {
			const n = 37
			w := make([]byte, n*k/32*34)
			for i := 0; i < len(w); i += 34 {
				// scales of every magnitude, quants of the whole range
				h := quant.F32ToF16(float32(math.Ldexp(rng.Float64()+0.5, rng.Intn(20)-14)))
				w[i], w[i+1] = byte(h), byte(h>>8)
				for j := 2; j < 34; j++ {
					w[i+j] = byte(rng.Intn(256))
				}
			}
			x := normals(rng, rows*k)
			out := make([]float32, rows*n)
			pool := NewPool(2)
			var work []byte
			err := gemm(&Args{Pool: pool, Work: &work}, ggml.Q8_0, x, w, rows, k, n,
				func(i, j int) []float32 { return out[i*n+j : (i+1)*n] }, nil, nil)
			pool.Close()
			if err != nil {
				t.Fatal(err)
			}
			xq := make([]byte, k/32*34)
			for i := 0; i < rows; i++ {
				if err := quant.QuantizeRow(ggml.Q8_0, x[i*k:(i+1)*k], xq); err != nil {
					t.Fatal(err)
				}
				for j := 0; j < n; j++ {
					want := quant.VecDot(ggml.Q8_0, k, w[j*k/32*34:(j+1)*k/32*34], xq)
					if got := out[i*n+j]; math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("k %d, %d rows: row %d feature %d: %v, want %v", k, rows, i, j, got, want)
					}
				}
			}
		}
	}
}

// TestGemmKeptRowsLikeOne: a product over some of its rows (keep: the
// rows of a mixed step that want logits) gives each kept row its one-row
// dot product's bits, through the multi-row kernels, and leaves the other
// rows' outputs alone, for a block type with eight- and four-row kernels
// (Q6_K) and one with prepared groups (Q8_0).
func TestGemmKeptRowsLikeOne(t *testing.T) {
	rng := rand.New(rand.NewSource(31))
	types := []struct {
		t         ggml.Type
		elems     int // a block's elements
		bytes     int // a block's bytes
		scaleAt   int // the byte of its F16 scale
		scaleBits int // the scale's exponent spread
	}{
		{ggml.Q8_0, 32, 34, 0, 20},
		{ggml.Q6_K, 256, 210, 208, 12},
	}
	for _, ty := range types {
		for _, keepEvery := range []int{1, 3, 29, 1000} {
			const k, rows, n = 768, 29, 37
			w := make([]byte, n*k/ty.elems*ty.bytes)
			for i := range w {
				w[i] = byte(rng.Intn(256))
			}
			for i := ty.scaleAt; i < len(w); i += ty.bytes {
				h := quant.F32ToF16(float32(math.Ldexp(rng.Float64()+0.5, rng.Intn(ty.scaleBits)-ty.scaleBits/2-4)))
				w[i], w[i+1] = byte(h), byte(h>>8)
			}
			keep := func(i int) bool { return i%keepEvery == 0 && i != 28 }
			x := normals(rng, rows*k)
			out := make([]float32, rows*n)
			for i := range out {
				out[i] = float32(math.NaN())
			}
			pool := NewPool(2)
			var work []byte
			err := gemm(&Args{Pool: pool, Work: &work}, ty.t, x, w, rows, k, n,
				func(i, j int) []float32 { return out[i*n+j : (i+1)*n] }, nil, keep)
			pool.Close()
			if err != nil {
				t.Fatal(err)
			}
			vt := quant.VecDotType(ty.t)
			xq := make([]byte, rowBytes(vt, k))
			wb := rowBytes(ty.t, k)
			for i := 0; i < rows; i++ {
				if !keep(i) {
					for j := 0; j < n; j++ {
						if got := out[i*n+j]; !math.IsNaN(float64(got)) {
							t.Fatalf("%v, keep every %d: row %d is not kept but feature %d got %v", ty.t, keepEvery, i, j, got)
						}
					}
					continue
				}
				if err := quant.QuantizeRow(vt, x[i*k:(i+1)*k], xq); err != nil {
					t.Fatal(err)
				}
				for j := 0; j < n; j++ {
					want := quant.VecDot(ty.t, k, w[j*wb:(j+1)*wb], xq)
					if got := out[i*n+j]; math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("%v, keep every %d: row %d feature %d: %v, want %v", ty.t, keepEvery, i, j, got, want)
					}
				}
			}
		}
	}
}
