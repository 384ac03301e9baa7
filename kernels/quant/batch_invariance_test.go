package quant

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/zrtdev/zrt/format/ggml"
)

// batchRow is awkwardRow with every block scale finite and moderate: for
// MXFP4 the E8M0 exponent byte (which randomRow leaves random) is kept
// near 2^0, so no dot product overflows.
func batchRow(rng *rand.Rand, typ ggml.Type, n int) []byte {
	b := awkwardRow(rng, typ, n)
	if typ == ggml.MXFP4 {
		ti, _ := typ.Info()
		for o := 0; o < len(b); o += ti.BlockBytes {
			b[o] = byte(118 + rng.Intn(16))
		}
	}
	return b
}

// batchLengths returns the row lengths TestBatchInvariance tries for typ:
// one block, a few blocks, and 2880 elements (gpt-oss's hidden size) where
// the block size divides it.
func batchLengths(typ ggml.Type) []int {
	ti, _ := typ.Info()
	bs := ti.BlockSize
	ns := []int{bs, 3 * bs, 9 * bs}
	if bs == 1 {
		ns = []int{1, 3, 37, 256}
	}
	if 2880%bs == 0 {
		ns = append(ns, 2880)
	}
	return ns
}

// TestBatchInvariance holds every multi-row path to the one-row kernel bit
// for bit, for every weight type at every SIMD level: VecDotRows for 1..17
// activation rows (so each row is computed by the eight-row, four-row and
// one-row kernels in turn, depending on the count), the prepared groups
// where the level has them, and MatVec for 1..17 weight rows. A row's
// result must not depend on how many rows are computed with it.
func TestBatchInvariance(t *testing.T) {
	const maxRows = 17
	rng := rand.New(rand.NewSource(21))
	for _, typ := range WeightTypes() {
		ti, _ := typ.Info()
		vt := VecDotType(typ)
		vti, _ := vt.Info()
		for _, n := range batchLengths(typ) {
			for trial := 0; trial < 3; trial++ {
				rb := n / ti.BlockSize * ti.BlockBytes
				xb := n / vti.BlockSize * vti.BlockBytes
				stride := xb + rng.Intn(3)*vti.BlockBytes // rows need not be packed
				w := make([]byte, maxRows*rb)             // MatVec's weight rows; row 0 for the rest
				for r := 0; r < maxRows; r++ {
					copy(w[r*rb:], batchRow(rng, typ, n))
				}
				xq := make([]byte, maxRows*stride)
				for r := 0; r < maxRows; r++ {
					copy(xq[r*stride:], quantizedActivations(t, rng, vt, n))
				}
				w0 := w[:rb]
				for _, l := range levels() {
					atLevel(l, func() {
						name := fmt.Sprintf("%v n=%d trial %d level %s", typ, n, trial, levelNames[l])
						same := func(what string, rows, r int, got, want float32) {
							t.Helper()
							if math.Float32bits(got) != math.Float32bits(want) {
								t.Fatalf("%s: %s rows=%d row %d: %v (%#08x), VecDot %v (%#08x)",
									name, what, rows, r, got, math.Float32bits(got), want, math.Float32bits(want))
							}
						}

						// one weight row against maxRows activation rows
						want := make([]float32, maxRows)
						for r := range want {
							want[r] = VecDot(typ, n, w0, xq[r*stride:r*stride+xb])
							if math.IsNaN(float64(want[r])) || math.IsInf(float64(want[r]), 0) {
								t.Fatalf("%s row %d: VecDot %v", name, r, want[r])
							}
						}
						out := make([]float32, maxRows+1)
						for rows := 1; rows <= maxRows; rows++ {
							for r := range out {
								out[r] = 42
							}
							VecDotRows(typ, n, w0, xq, stride, rows, out)
							if out[rows] != 42 {
								t.Fatalf("%s: VecDotRows rows=%d wrote past the rows", name, rows)
							}
							for r := 0; r < rows; r++ {
								same("VecDotRows", rows, r, out[r], want[r])
							}
						}

						// prepared groups of PrepRows rows
						if gb := PrepGroupBytes(typ, n); gb > 0 {
							xp := make([]byte, gb)
							for g := 0; g+PrepRows <= maxRows; g += PrepRows {
								PrepareRows(typ, n, xq[g*stride:], stride, xp)
								VecDotPrepared(typ, n, w0, xp, out[:PrepRows])
								for r := 0; r < PrepRows; r++ {
									same("VecDotPrepared", PrepRows, g+r, out[r], want[g+r])
								}
							}
						}

						// maxRows weight rows against one activation row, from
						// every starting row
						x0 := xq[:xb]
						wantMV := make([]float32, maxRows)
						for r := range wantMV {
							wantMV[r] = VecDot(typ, n, w[r*rb:(r+1)*rb], x0)
						}
						for start := 0; start < maxRows; start++ {
							for rows := 1; start+rows <= maxRows; rows++ {
								out[rows] = 42
								MatVec(typ, n, w[start*rb:], x0, out[:rows])
								if out[rows] != 42 {
									t.Fatalf("%s: MatVec rows=%d wrote past the rows", name, rows)
								}
								for r := 0; r < rows; r++ {
									same(fmt.Sprintf("MatVec from %d", start), rows, r, out[r], wantMV[start+r])
								}
							}
						}
					})
				}
			}
		}
	}
}
