package cpu

import (
	"encoding/binary"
	"math"
	"math/rand"
	"testing"

	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/kernels/quant"
)

// TestMatmulRepackedOrders: a Q4_K product whose output features are a
// multiple of eight (a matrix ggml repacks) gives each row the bits of
// the repacked kernel llama.cpp would run it through — the GEMM for a
// prompt's rows but its tail, the GEMV for the tail, decode rows and a
// lone row — and one of another width keeps vec_dot's order; the same
// with the matrix interleaved once in the tier's Packs (every product
// after the first reusing it), and with Packs whose weight regions do not
// hold the matrix (not packed).
func TestMatmulRepackedOrders(t *testing.T) {
	rng := rand.New(rand.NewSource(45))
	const k = 512
	// rows: 64 prompt rows in the GEMM (several of gemmRepacked's row
	// blocks), three in the tail, two decode rows
	var flags []uint32
	for i := 0; i < 64; i++ {
		flags = append(flags, kernels.RowPrompt)
	}
	flags = append(flags, kernels.RowPrompt|kernels.RowPromptTail, kernels.RowPrompt|kernels.RowPromptTail, kernels.RowPrompt|kernels.RowPromptTail, 0, 0)
	for _, n := range []int{24, 20, 64} {
		for _, fl := range [][]uint32{flags, flags[:1], {0}} { // all, a lone prompt row, a lone decode row
			rows := len(fl)
			for _, packs := range []string{"none", "packs", "other"} {
				w := make([]byte, n*rowBytes(ggml.Q4_K, k))
				rng.Read(w)
				for b := 0; b < len(w); b += 144 {
					binary.LittleEndian.PutUint16(w[b:], quant.F32ToF16(rng.Float32()*0.01))
					binary.LittleEndian.PutUint16(w[b+2:], quant.F32ToF16(rng.Float32()*0.01))
				}
				x := make([]float32, rows*k)
				for i := range x {
					x[i] = float32(rng.NormFloat64())
				}
				io := make([]uint32, kernels.IOWordRowBase+rows*kernels.IORowWords)
				io[kernels.IOWordRows] = uint32(rows)
				for i := 0; i < rows; i++ {
					io[kernels.IOWordRowBase+i*kernels.IORowWords+kernels.IORowFlags] = fl[i]
				}
				y := make([]float32, rows*n)
				pool := NewPool(2)
				var work []byte
				var pk *Packs
				switch packs {
				case "packs":
					pk = NewPacks([][]byte{make([]byte, 10), w}, nil)
				case "other":
					pk = NewPacks([][]byte{w[:len(w)-1]}, nil)
				}
				a := &Args{Bufs: [][]byte{f32bytes(x), w, nil, u32bytes(io), f32bytes(y)},
					Push: []uint32{k, uint32(n)}, Pool: pool, Work: &work, Packs: pk}
				err := matmul(ggml.Q4_K, a)
				if err == nil && pk != nil {
					// again: the pack (or its absence) kept from the first
					clear(y)
					err = matmul(ggml.Q4_K, a)
				}
				pool.Close()
				if err != nil {
					t.Fatal(err)
				}
				if pk != nil {
					packed := len(pk.q4k)
					want := 0
					if packs == "packs" && n%8 == 0 && quant.Q4KInterleavedFast() {
						want = 1
					}
					if packed != want {
						t.Fatalf("n=%d rows=%d packs %s: %d matrices packed, want %d", n, rows, packs, packed, want)
					}
				}
				rb := rowBytes(ggml.Q4_K, k)
				for i := 0; i < rows; i++ {
					xq := make([]byte, rowBytes(ggml.Q8_K, k))
					if err := quant.QuantizeRow(ggml.Q8_K, x[i*k:(i+1)*k], xq); err != nil {
						t.Fatal(err)
					}
					o := quant.OrderDot
					switch {
					case n%8 != 0:
					case fl[i]&(kernels.RowPrompt|kernels.RowPromptTail) == kernels.RowPrompt:
						o = quant.OrderGEMM
					default:
						o = quant.OrderGEMV
					}
					for j := 0; j < n; j++ {
						want := quant.VecDotOrder(ggml.Q4_K, o, k, w[j*rb:(j+1)*rb], xq)
						if got := y[i*n+j]; math.Float32bits(got) != math.Float32bits(want) {
							t.Fatalf("n=%d rows=%d packs %s row %d (flags %d) feature %d: %v, order %d gives %v", n, rows, packs, i, fl[i], j, got, o, want)
						}
					}
				}
			}
		}
	}
}
