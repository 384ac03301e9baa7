//go:build amd64 && !purego

package quant

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/zrtdev/zrt/format/ggml"
)

// mxfp4Activations is a Q8_0 row from quantizedActivations (which writes
// some -128 and 127 over the quants) with, now and then, a whole block of
// -128 or 127 or of bytes drawn uniformly (every int8, -128 included),
// and the f16 scale now and then 0, negative or subnormal.
func mxfp4Activations(t *testing.T, rng *rand.Rand, n int) []byte {
	xq := quantizedActivations(t, rng, ggml.Q8_0, n)
	for o := 0; o < len(xq); o += q8_0Len {
		q := xq[o+2 : o+q8_0Len]
		switch rng.Intn(8) {
		case 0:
			for j := range q {
				q[j] = 0x80
			}
		case 1:
			for j := range q {
				q[j] = 127
			}
		case 2:
			rng.Read(q)
		}
		switch rng.Intn(10) {
		case 0:
			put16(xq[o:], 0)
		case 1:
			put16(xq[o:], F32ToF16(-float32(0.001+rng.Float64())))
		case 2:
			put16(xq[o:], uint16(1+rng.Intn(0x3ff))) // subnormal
		}
	}
	return xq
}

// sameBits reports whether a and b are the same float32 bits, NaNs
// included (both kernels make x86's default NaN, 0xffc00000, from
// Inf-Inf and 0*Inf, and propagate it the same way).
func sameBits(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b)
}

// TestMXFP4AVX2Bitwise holds the assembly kernel (directly and through
// VecDot at every SIMD level) to dotMXFP4's exact bits on random rows of
// 1..300 blocks: odd and even block counts, every exponent byte (0, 1, 254
// and 255 included), every nibble value, and -128/127 activations.
func TestMXFP4AVX2Bitwise(t *testing.T) {
	if simdBest < simdAVX2 {
		t.Skip("no AVX2")
	}
	rng := rand.New(rand.NewSource(77))
	nans := 0
	for nb := 1; nb <= 300; nb++ {
		trials := 4
		if nb > 40 {
			trials = 1
		}
		for trial := 0; trial < trials; trial++ {
			n := nb * qk
			w := mxfp4Row(rng, n)
			if trial == 0 && nb <= 8 {
				// the edge exponents in every position of short rows
				for o, i := 0, 0; o < len(w); o, i = o+mxfp4Len, i+1 {
					w[o] = []byte{0, 1, 2, 254, 255}[(i+nb)%5]
				}
			}
			xq := mxfp4Activations(t, rng, n)
			if trial%2 == 1 || nb > 40 {
				// Keep the sum finite so that its bits are compared: an
				// exponent of 240 and up meets a subnormal activation
				// scale (2^127 * 2^-24 * 6144 * 32 blocks stays finite).
				for ib := 0; ib < nb; ib++ {
					if w[ib*mxfp4Len] >= 240 {
						put16(xq[ib*q8_0Len:], uint16(1+rng.Intn(0x3ff)))
					}
				}
			}
			want := dotMXFP4(n, w, xq)
			if want != want {
				nans++
			}
			if got := dotMXFP4AVX2(n, w, xq); !sameBits(got, want) {
				t.Fatalf("nb=%d trial %d: assembly %v (%#x), dotMXFP4 %v (%#x)", nb, trial, got, math.Float32bits(got), want, math.Float32bits(want))
			}
			for _, l := range levels() {
				atLevel(l, func() {
					if got := VecDot(ggml.MXFP4, n, w, xq); !sameBits(got, want) {
						t.Fatalf("nb=%d level %s: VecDot %v, dotMXFP4 %v", nb, levelNames[l], got, want)
					}
				})
			}
		}
	}
	t.Logf("%d NaN results", nans)
}

// TestMXFP4AVX2Exhaustive runs every nibble value against every
// activation byte in both halves of the block, paired with blocks of each
// exponent, so that each (level, y) product, the VPSIGNB wrap of -128
// included, goes through the assembly.
func TestMXFP4AVX2Exhaustive(t *testing.T) {
	if simdBest < simdAVX2 {
		t.Skip("no AVX2")
	}
	const nb = 2
	w := make([]byte, nb*mxfp4Len)
	xq := make([]byte, nb*q8_0Len)
	put16(xq, h1)
	put16(xq[q8_0Len:], F32ToF16(0.375))
	exps := make([]int, 256)
	for e := range exps {
		exps[e] = e
	}
	if testing.Short() {
		exps = []int{0, 1, 2, 127, 128, 254, 255}
	}
	for _, e := range exps {
		w[0], w[mxfp4Len] = byte(e), byte(255-e)
		for v := 0; v < 16; v++ {
			for y := 0; y < 256; y++ {
				for j := 0; j < 16; j++ {
					// one nibble of interest per lane, the others spread
					w[1+j] = byte(v) | byte(15-v)<<4
					w[mxfp4Len+1+j] = byte((v+j)&15) | byte(v)<<4
					xq[2+j] = byte(y + 37*j)
					xq[2+16+j] = byte(y)
					xq[q8_0Len+2+j] = byte(y)
					xq[q8_0Len+2+16+j] = byte(y - j)
				}
				want := dotMXFP4(nb*qk, w, xq)
				if got := dotMXFP4AVX2(nb*qk, w, xq); !sameBits(got, want) {
					t.Fatalf("e=%d v=%d y=%d: assembly %v, dotMXFP4 %v", e, v, y, got, want)
				}
			}
		}
	}
}

// TestMXFP4MatVecBitwise holds MatVec (the matVec kernel where the level
// has one) to dotMXFP4 row by row, bit for bit, at every SIMD level.
func TestMXFP4MatVecBitwise(t *testing.T) {
	rng := rand.New(rand.NewSource(78))
	for _, nb := range []int{1, 2, 5, 90, 91} {
		n := nb * qk
		rb := nb * mxfp4Len
		const rows = 13
		w := make([]byte, rows*rb)
		for r := 0; r < rows; r++ {
			copy(w[r*rb:], mxfp4Row(rng, n))
		}
		xq := mxfp4Activations(t, rng, n)
		for _, l := range levels() {
			atLevel(l, func() {
				out := make([]float32, rows)
				MatVec(ggml.MXFP4, n, w, xq, out)
				for r := range out {
					if want := dotMXFP4(n, w[r*rb:(r+1)*rb], xq); !sameBits(out[r], want) {
						t.Fatalf("nb=%d level %s row %d: MatVec %v, dotMXFP4 %v", nb, levelNames[l], r, out[r], want)
					}
				}
			})
		}
	}
}

// BenchmarkMXFP4Dot compares dotMXFP4 with the assembly on one row of
// 2880 elements (gpt-oss-20b's hidden size).
func BenchmarkMXFP4Dot(b *testing.B) {
	rng := rand.New(rand.NewSource(79))
	const n = 2880
	w := mxfp4Row(rng, n)
	for o := 0; o < len(w); o += mxfp4Len {
		w[o] = byte(118 + rng.Intn(16))
	}
	xq := make([]byte, n/qk*q8_0Len)
	if err := QuantizeRow(ggml.Q8_0, randomActivations(rng, n), xq); err != nil {
		b.Fatal(err)
	}
	var sink float32
	b.Run("go", func(b *testing.B) {
		b.SetBytes(int64(len(w)))
		for i := 0; i < b.N; i++ {
			sink += dotMXFP4(n, w, xq)
		}
	})
	if simdBest >= simdAVX2 {
		b.Run("avx2", func(b *testing.B) {
			b.SetBytes(int64(len(w)))
			for i := 0; i < b.N; i++ {
				sink += dotMXFP4AVX2(n, w, xq)
			}
		})
	}
	_ = sink
}

// BenchmarkMXFP4MatVec times MatVec over 2880 rows of 2880 elements at
// each level.
func BenchmarkMXFP4MatVec(b *testing.B) {
	rng := rand.New(rand.NewSource(80))
	const n, rows = 2880, 2880
	rb := n / qk * mxfp4Len
	w := make([]byte, rows*rb)
	for r := 0; r < rows; r++ {
		copy(w[r*rb:], mxfp4Row(rng, n))
	}
	for o := 0; o < len(w); o += mxfp4Len {
		w[o] = byte(118 + rng.Intn(16))
	}
	xq := make([]byte, n/qk*q8_0Len)
	if err := QuantizeRow(ggml.Q8_0, randomActivations(rng, n), xq); err != nil {
		b.Fatal(err)
	}
	out := make([]float32, rows)
	for _, l := range levels() {
		b.Run(fmt.Sprint(levelNames[l]), func(b *testing.B) {
			atLevel(l, func() {
				b.SetBytes(int64(len(w)))
				for i := 0; i < b.N; i++ {
					MatVec(ggml.MXFP4, n, w, xq, out)
				}
			})
		})
	}
}
