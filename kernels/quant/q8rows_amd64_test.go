//go:build amd64 && !purego

package quant

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/zrtdev/zrt/format/ggml"
)

// TestQ8_0x8MatchesX4 checks that the eight-row Q8_0 kernel's results are
// bit-identical to the four-row kernel's on the same rows (the promise
// that keeps prefill's float order independent of the grouping), and
// within tolerance of the pure-Go oracle, for 1..17 blocks, with extreme
// quants (-128 included) and awkward strides.
func TestQ8_0x8MatchesX4(t *testing.T) {
	if simdBest < simdVNNI {
		t.Skip("no VNNI")
	}
	eightRows(t, 5, func(nb, trial, n, stride int, w, xq []byte) {
		xb := nb * q8_0Len
		var got, want [9]float32
		got[8], want[8] = 42, 42
		dotQ8_0x8VNNIAsm(&w[0], &xq[0], stride, nb, &got[0])
		dotQ8_0x4VNNIAsm(&w[0], &xq[0], stride, nb, &want[0])
		dotQ8_0x4VNNIAsm(&w[0], &xq[4*stride], stride, nb, &want[4])
		if got != want {
			t.Fatalf("nb=%d trial %d: eight-row %v, four-row %v", nb, trial, got, want)
		}
		for r := 0; r < 8; r++ {
			x := xq[r*stride : r*stride+xb]
			oracle := genericDot[ggml.Q8_0](n, w, x)
			tol := 1e-5*absTerms(t, ggml.Q8_0, n, w, x) + 1e-30
			if d := math.Abs(float64(got[r]) - float64(oracle)); d > tol {
				t.Fatalf("nb=%d row %d: eight-row %v, pure Go %v", nb, r, got[r], oracle)
			}
		}
	})
}

// eightRows calls check with one Q8_0 weight row of 1..17 blocks against
// eight quantized activation rows stride bytes apart (strides a few
// blocks longer than a row), four trials each from seed; the first trial's
// quants are all -128, the exactness edge.
func eightRows(t *testing.T, seed int64, check func(nb, trial, n, stride int, w, xq []byte)) {
	rng := rand.New(rand.NewSource(seed))
	for nb := 1; nb <= 17; nb++ {
		n := nb * qk
		xb := nb * q8_0Len
		for trial := 0; trial < 4; trial++ {
			stride := xb + rng.Intn(3)*q8_0Len
			w := awkwardRow(rng, ggml.Q8_0, n)
			xq := make([]byte, 8*stride)
			for r := 0; r < 8; r++ {
				copy(xq[r*stride:], quantizedActivations(t, rng, ggml.Q8_0, n))
			}
			if trial == 0 {
				for r := 0; r < 8; r++ {
					for b := 0; b < nb; b++ {
						for i := 0; i < qk; i++ {
							xq[r*stride+b*q8_0Len+2+i] = 0x80
						}
					}
				}
			}
			check(nb, trial, n, stride, w, xq)
		}
	}
}

// BenchmarkQ8_0RowKernels compares the four- and eight-row Q8_0 kernels
// on one weight row of n against 16 activation rows (ns/op per 16 rows).
func BenchmarkQ8_0RowKernels(b *testing.B) {
	if simdBest < simdVNNI {
		b.Skip("no VNNI")
	}
	for _, n := range []int{768, 2048, 4096} {
		const rows = 16
		rng := rand.New(rand.NewSource(3))
		nb := n / qk
		w := randomRow(rng, ggml.Q8_0, n)
		xb := nb * q8_0Len
		xq := make([]byte, rows*xb)
		for r := 0; r < rows; r++ {
			if err := QuantizeRow(ggml.Q8_0, randomActivations(rng, n), xq[r*xb:(r+1)*xb]); err != nil {
				b.Fatal(err)
			}
		}
		out := make([]float32, rows)
		b.Run(fmt.Sprintf("x4/n=%d", n), func(b *testing.B) {
			for b.Loop() {
				for r := 0; r < rows; r += 4 {
					dotQ8_0x4VNNIAsm(&w[0], &xq[r*xb], xb, nb, &out[r])
				}
			}
		})
		b.Run(fmt.Sprintf("x8/n=%d", n), func(b *testing.B) {
			for b.Loop() {
				for r := 0; r < rows; r += 8 {
					dotQ8_0x8VNNIAsm(&w[0], &xq[r*xb], xb, nb, &out[r])
				}
			}
		})
	}
}

// TestQ8_0PreparedMatchesX8 checks that the prepared-group Q8_0 kernel's
// results are bit-identical to the eight-row kernel's on the rows the
// group was prepared from, for 1..17 blocks, extreme quants and awkward
// strides, and that no level below VNNI offers it.
func TestQ8_0PreparedMatchesX8(t *testing.T) {
	for _, l := range levels() {
		atLevel(l, func() {
			if got := PrepGroupBytes(ggml.Q8_0, 64); (got > 0) != (l >= simdVNNI) {
				t.Fatalf("level %s: PrepGroupBytes %d", levelNames[l], got)
			}
		})
	}
	if simdBest < simdVNNI {
		t.Skip("no VNNI")
	}
	eightRows(t, 7, func(nb, trial, n, stride int, w, xq []byte) {
		xp := make([]byte, PrepGroupBytes(ggml.Q8_0, n))
		PrepareRows(ggml.Q8_0, n, xq, stride, xp)
		got, want := make([]float32, 9), make([]float32, 9)
		got[8], want[8] = 42, 42
		VecDotPrepared(ggml.Q8_0, n, w, xp, got)
		dotQ8_0x8VNNIAsm(&w[0], &xq[0], stride, nb, &want[0])
		for r := range got {
			if math.Float32bits(got[r]) != math.Float32bits(want[r]) {
				t.Fatalf("nb=%d trial %d: prepared %v, eight-row %v", nb, trial, got, want)
			}
		}
	})
}

// TestQ8_0Prepared2MatchesPrepared checks that the sixteen-row prepared
// kernel (two groups in one pass) gives each group's rows the bits of the
// eight-row prepared kernel, for 1..17 blocks and extreme quants, and
// writes no further than its sixteen outputs.
func TestQ8_0Prepared2MatchesPrepared(t *testing.T) {
	if simdBest < simdVNNI {
		t.Skip("no VNNI")
	}
	rng := rand.New(rand.NewSource(11))
	eightRows(t, 13, func(nb, trial, n, stride int, w, xq []byte) {
		// the second group: the first's rows in another order, one row
		// fresh, so that the two groups differ
		xq2 := make([]byte, len(xq))
		for r := 0; r < 8; r++ {
			copy(xq2[r*stride:(r+1)*stride], xq[(7-r)*stride:(8-r)*stride])
		}
		copy(xq2[3*stride:], quantizedActivations(t, rng, ggml.Q8_0, n))
		g := PrepGroupBytes(ggml.Q8_0, n)
		xp := make([]byte, 2*g)
		PrepareRows(ggml.Q8_0, n, xq, stride, xp[:g])
		PrepareRows(ggml.Q8_0, n, xq2, stride, xp[g:])
		got, want := make([]float32, 17), make([]float32, 17)
		got[16], want[16] = 42, 42
		VecDotPrepared2(ggml.Q8_0, n, w, xp, got)
		VecDotPrepared(ggml.Q8_0, n, w, xp[:g], want[:8])
		VecDotPrepared(ggml.Q8_0, n, w, xp[g:], want[8:16])
		for r := range got {
			if math.Float32bits(got[r]) != math.Float32bits(want[r]) {
				t.Fatalf("nb=%d trial %d: sixteen-row %v, eight-row %v", nb, trial, got, want)
			}
		}
	})
}

// TestQ8_0PreparedWeightsMatch checks that the sixteen-row kernel on
// prepared weight rows gives the bits of the one on the rows themselves,
// for 1..17 blocks, awkward weights (quants of -128 and 127, scales of
// every magnitude) and extreme activations, with three rows prepared and
// computed in one call each, and that no level below VNNI offers it.
func TestQ8_0PreparedWeightsMatch(t *testing.T) {
	for _, l := range levels() {
		atLevel(l, func() {
			if got := PrepWeightBytes(ggml.Q8_0, 64); (got > 0) != (l >= simdVNNI) {
				t.Fatalf("level %s: PrepWeightBytes %d", levelNames[l], got)
			}
		})
	}
	if simdBest < simdVNNI {
		t.Skip("no VNNI")
	}
	rng := rand.New(rand.NewSource(17))
	eightRows(t, 19, func(nb, trial, n, stride int, w, xq []byte) {
		g := PrepGroupBytes(ggml.Q8_0, n)
		xp := make([]byte, 2*g)
		PrepareRows(ggml.Q8_0, n, xq, stride, xp[:g])
		xq2 := make([]byte, len(xq))
		for r := 0; r < 8; r++ {
			copy(xq2[r*stride:], quantizedActivations(t, rng, ggml.Q8_0, n))
		}
		PrepareRows(ggml.Q8_0, n, xq2, stride, xp[g:])
		rows := append(append(awkwardRow(rng, ggml.Q8_0, n), awkwardRow(rng, ggml.Q8_0, n)...), w...)
		wb := PrepWeightBytes(ggml.Q8_0, n)
		wp := make([]byte, 3*wb+1)
		wp[3*wb] = 42
		PrepareWeights(ggml.Q8_0, n, rows, 3, wp)
		if wp[3*wb] != 42 {
			t.Fatalf("nb=%d: PrepareWeights wrote past its rows", nb)
		}
		// The three rows in one call, their outputs 19 floats apart (the
		// last three of each stride untouched).
		const ostride = 19
		got, want := make([]float32, 3*ostride), make([]float32, 3*ostride)
		for i := range got {
			got[i], want[i] = 42, 42
		}
		VecDotPrepared2W(ggml.Q8_0, n, wp, xp, 3, got, ostride)
		for j := 0; j < 3; j++ {
			VecDotPrepared2(ggml.Q8_0, n, rows[j*nb*q8_0Len:], xp, want[j*ostride:j*ostride+16])
		}
		for r := range got {
			if math.Float32bits(got[r]) != math.Float32bits(want[r]) {
				t.Fatalf("nb=%d trial %d: prepared weights %v, weights %v", nb, trial, got, want)
			}
		}
	})
}

// BenchmarkPrepared is the eight-row kernel of each type that has
// prepared groups, on them (the preparation not counted): sixteen
// activation rows against one weight row.
func BenchmarkPrepared(b *testing.B) {
	if simdBest < simdVNNI {
		b.Skip("no VNNI")
	}
	for _, typ := range []ggml.Type{ggml.Q8_0} {
		vt := VecDotType(typ)
		for _, n := range []int{1024, 4096} {
			const rows = 16
			rng := rand.New(rand.NewSource(3))
			w := randomRow(rng, typ, n)
			rb, err := vt.RowBytes(int64(n))
			if err != nil {
				b.Fatal(err)
			}
			xb := int(rb)
			xq := make([]byte, rows*xb)
			for r := 0; r < rows; r++ {
				if err := QuantizeRow(vt, randomActivations(rng, n), xq[r*xb:(r+1)*xb]); err != nil {
					b.Fatal(err)
				}
			}
			g := PrepGroupBytes(typ, n)
			xp := make([]byte, rows/8*g)
			for r := 0; r < rows; r += 8 {
				PrepareRows(typ, n, xq[r*xb:], xb, xp[r/8*g:])
			}
			out := make([]float32, rows)
			b.Run(fmt.Sprintf("%v/n=%d", typ, n), func(b *testing.B) {
				for b.Loop() {
					for r := 0; r < rows; r += 8 {
						VecDotPrepared(typ, n, w, xp[r/8*g:], out[r:])
					}
				}
			})
			b.Run(fmt.Sprintf("%v/x16/n=%d", typ, n), func(b *testing.B) {
				for b.Loop() {
					VecDotPrepared2(typ, n, w, xp, out)
				}
			})
		}
	}
}
