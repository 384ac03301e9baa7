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
