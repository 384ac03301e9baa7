package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"sync"
	"testing"

	"github.com/zrtdev/zrt/format/ggml"
)

// levelNames names the SIMD levels for subtests and benchmarks.
var levelNames = []string{simdNone: "generic", simdAVX2: "avx2", simdVNNI: "vnni"}

// levels returns every level this CPU can run, lowest first.
func levels() []int {
	var l []int
	for i := simdNone; i <= simdBest; i++ {
		l = append(l, i)
	}
	return l
}

// atLevel runs f with the kernels of the given level installed.
func atLevel(level int, f func()) {
	prev := setSIMDLevel(level)
	defer setSIMDLevel(prev)
	f()
}

// awkwardRow is randomRow with some block scales set to zero or to a
// negative value, so kernels see every sign and the empty block.
func awkwardRow(rng *rand.Rand, t ggml.Type, n int) []byte {
	b := randomRow(rng, t, n)
	ti, _ := t.Info()
	for o := 0; o < len(b); o += ti.BlockBytes {
		for _, f := range scaleFields(t) {
			switch rng.Intn(6) {
			case 0:
				put16(b[o+f:], 0)
			case 1:
				put16(b[o+f:], F32ToF16(-float32(0.5+rng.Float64())))
			}
		}
	}
	return b
}

// quantizedActivations quantizes random activations to vt and, for the
// integer types, writes the extreme int8 values -128 and 127 over some
// quants (keeping Q8_K's bsums consistent, as the format requires): the
// quantizers never produce -128, but the format allows it.
func quantizedActivations(t *testing.T, rng *rand.Rand, vt ggml.Type, n int) []byte {
	t.Helper()
	xq := quantizedRandom(t, rng, vt, n)
	var off, m int // offset of the quants in a block, and their count
	switch vt {
	case ggml.Q8_0:
		off, m = 2, 32
	case ggml.Q8_1:
		return xq // s must stay d*sum(q), which an edit would break
	case ggml.Q8_K:
		off, m = q8KQs, qkK
	default:
		return xq
	}
	vti, _ := vt.Info()
	for o := 0; o < len(xq); o += vti.BlockBytes {
		for k := 0; k < 4; k++ {
			v := int8(-128)
			if rng.Intn(2) == 0 {
				v = 127
			}
			xq[o+off+rng.Intn(m)] = byte(v)
		}
		if rng.Intn(4) == 0 { // a whole block of -128
			for j := 0; j < m; j++ {
				xq[o+off+j] = 0x80
			}
		}
		if vt == ggml.Q8_K {
			for g := 0; g < q8KGroup; g++ {
				var s int
				for l := 0; l < 16; l++ {
					s += int(int8(xq[o+off+16*g+l]))
				}
				binary.LittleEndian.PutUint16(xq[o+q8KBsums+2*g:], uint16(int16(s)))
			}
		}
	}
	return xq
}

// absTerms returns sum |w_i*x_i| over the dequantized rows, plus |m*s| per
// block for the types that add a weight offset times Q8_1's stored sum:
// the scale against which summation-order differences are measured.
func absTerms(t *testing.T, typ ggml.Type, n int, w, xq []byte) float64 {
	t.Helper()
	vt := VecDotType(typ)
	wd := dequant(t, typ, w, n)
	xd := dequant(t, vt, xq, n)
	var mag float64
	for i := range wd {
		mag += math.Abs(float64(wd[i]) * float64(xd[i]))
	}
	if vt == ggml.Q8_1 {
		ti, _ := typ.Info()
		for blk := 0; blk < n/32; blk++ {
			mag += math.Abs(float64(fp16(w[blk*ti.BlockBytes+2:])) * float64(fp16(xq[blk*36+2:])))
		}
	}
	return mag
}

// elementCounts returns the awkward row lengths tried for typ.
func elementCounts(typ ggml.Type) []int {
	ti, _ := typ.Info()
	if ti.BlockSize == 1 {
		return []int{1, 2, 3, 7, 8, 9, 17, 31, 32, 33, 64, 95, 257, 1000}
	}
	var ns []int
	for _, nb := range []int{1, 2, 3, 7, 8, 9, 17} {
		ns = append(ns, nb*ti.BlockSize)
	}
	return ns
}

func TestSIMDMatchesGeneric(t *testing.T) {
	if simdBest == simdNone {
		t.Log("no SIMD level on this CPU; only the generic kernels run")
	}
	rng := rand.New(rand.NewSource(11))
	for _, typ := range weightTypes {
		for _, n := range elementCounts(typ) {
			for trial := 0; trial < 3; trial++ {
				w := awkwardRow(rng, typ, n)
				xq := quantizedActivations(t, rng, VecDotType(typ), n)
				want := genericDot[typ](n, w, xq)
				tol := 1e-5*absTerms(t, typ, n, w, xq) + 1e-30
				for _, l := range levels() {
					atLevel(l, func() {
						got := VecDot(typ, n, w, xq)
						if d := math.Abs(float64(got) - float64(want)); d > tol || math.IsNaN(float64(got)) {
							t.Fatalf("%v n=%d level %s: %v, generic %v (diff %g > %g)", typ, n, levelNames[l], got, want, d, tol)
						}
					})
				}
			}
		}
	}
}

func TestVecDotRowsMatchesVecDot(t *testing.T) {
	rng := rand.New(rand.NewSource(12))
	for _, typ := range weightTypes {
		for _, n := range elementCounts(typ) {
			vt := VecDotType(typ)
			vti, _ := vt.Info()
			xb := n / vti.BlockSize * vti.BlockBytes
			for _, rows := range []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 16, 17} {
				stride := xb + rng.Intn(3)*vti.BlockBytes // rows need not be packed
				w := awkwardRow(rng, typ, n)
				xq := make([]byte, max(rows*stride, 1))
				for r := 0; r < rows; r++ {
					copy(xq[r*stride:], quantizedActivations(t, rng, vt, n))
				}
				for _, l := range levels() {
					atLevel(l, func() {
						out := make([]float32, rows+1)
						out[rows] = 42 // must stay untouched
						VecDotRows(typ, n, w, xq, stride, rows, out)
						if out[rows] != 42 {
							t.Fatalf("%v level %s rows=%d: wrote past rows", typ, levelNames[l], rows)
						}
						for r := 0; r < rows; r++ {
							x := xq[r*stride : r*stride+xb]
							want := VecDot(typ, n, w, x)
							oracle := genericDot[typ](n, w, x)
							tol := 1e-5*absTerms(t, typ, n, w, x) + 1e-30
							if d := math.Abs(float64(out[r]) - float64(want)); d > tol {
								t.Fatalf("%v n=%d level %s rows=%d row %d: VecDotRows %v, VecDot %v", typ, n, levelNames[l], rows, r, out[r], want)
							}
							if d := math.Abs(float64(out[r]) - float64(oracle)); d > tol {
								t.Fatalf("%v n=%d level %s rows=%d row %d: VecDotRows %v, pure Go %v", typ, n, levelNames[l], rows, r, out[r], oracle)
							}
						}
					})
				}
			}
		}
	}
}

// TestMatVecMatchesGeneric checks the many-row kernels against the pure-Go
// dot product of each row, at every level, for awkward row lengths and
// counts, and that nothing past len(out) is written.
func TestMatVecMatchesGeneric(t *testing.T) {
	rng := rand.New(rand.NewSource(13))
	for _, typ := range weightTypes {
		ti, _ := typ.Info()
		for _, n := range elementCounts(typ) {
			rb := n / ti.BlockSize * ti.BlockBytes
			for _, rows := range []int{1, 2, 3, 5, 17} {
				w := make([]byte, rows*rb)
				for r := 0; r < rows; r++ {
					copy(w[r*rb:], awkwardRow(rng, typ, n))
				}
				xq := quantizedActivations(t, rng, VecDotType(typ), n)
				want := make([]float32, rows)
				tol := make([]float64, rows)
				for r := range want {
					want[r] = genericDot[typ](n, w[r*rb:(r+1)*rb], xq)
					tol[r] = 1e-5*absTerms(t, typ, n, w[r*rb:(r+1)*rb], xq) + 1e-30
				}
				for _, l := range levels() {
					atLevel(l, func() {
						out := make([]float32, rows+1)
						out[rows] = 42
						MatVec(typ, n, w, xq, out[:rows])
						if out[rows] != 42 {
							t.Fatalf("%v n=%d level %s rows=%d: wrote past the rows", typ, n, levelNames[l], rows)
						}
						for r := range want {
							if d := math.Abs(float64(out[r]) - float64(want[r])); d > tol[r] || math.IsNaN(float64(out[r])) {
								t.Fatalf("%v n=%d level %s rows=%d row %d: %v, generic %v (diff %g > %g)", typ, n, levelNames[l], rows, r, out[r], want[r], d, tol[r])
							}
							// Q8_0 and Q4_0 keep the one-row kernels' float
							// order (ggml's), so they must agree bitwise; the
							// IQ types run their one-row kernel per row.
							if typ == ggml.Q8_0 || typ == ggml.Q4_0 || typ == ggml.IQ3_S || typ == ggml.IQ4_NL || typ == ggml.IQ4_XS {
								if v := VecDot(typ, n, w[r*rb:(r+1)*rb], xq); v != out[r] {
									t.Fatalf("%v n=%d level %s rows=%d row %d: MatVec %v, VecDot %v", typ, n, levelNames[l], rows, r, out[r], v)
								}
							}
						}
					})
				}
			}
		}
	}
}

// TestQuantizeSIMDBytesIdentical checks that the SIMD activation
// quantizers write exactly the pure-Go bytes: random rows at several
// magnitudes, rows whose largest magnitude occurs with both signs and
// several times (the first one sets the scale), all-zero blocks, signed
// zeros and values on rounding ties.
func TestQuantizeSIMDBytesIdentical(t *testing.T) {
	rng := rand.New(rand.NewSource(14))
	for _, vt := range []ggml.Type{ggml.Q8_0, ggml.Q8_1, ggml.Q8_K} {
		vti, _ := vt.Info()
		for trial := 0; trial < 200; trial++ {
			nb := 1 + rng.Intn(5)
			x := make([]float32, nb*vti.BlockSize)
			scale := float32(math.Pow(10, float64(rng.Intn(12)-6)))
			for i := range x {
				x[i] = float32(rng.NormFloat64()) * scale
			}
			for blk := 0; blk < nb; blk++ {
				b := x[blk*vti.BlockSize : (blk+1)*vti.BlockSize]
				switch rng.Intn(5) {
				case 0: // the largest magnitude several times, both signs
					m := 4 * scale
					for k := 0; k < 3; k++ {
						v := m
						if rng.Intn(2) == 0 {
							v = -m
						}
						b[rng.Intn(len(b))] = v
					}
				case 1:
					clear(b)
					if rng.Intn(2) == 0 {
						b[rng.Intn(len(b))] = float32(math.Copysign(0, -1))
					}
				case 2: // quants on .5 ties: multiples of amax/254
					m := 127 * scale
					for i := range b {
						b[i] = float32(rng.Intn(255)-127) / 2 * scale
					}
					b[0] = m
				}
			}
			want := make([]byte, nb*vti.BlockBytes)
			genericQuant[vt](x, want)
			for _, l := range levels() {
				atLevel(l, func() {
					got := make([]byte, len(want))
					if err := QuantizeRow(vt, x, got); err != nil {
						t.Fatal(err)
					}
					for i := range got {
						if got[i] != want[i] {
							t.Fatalf("%v level %s trial %d: byte %d (block %d) is %#x, generic %#x", vt, levelNames[l], trial, i, i/vti.BlockBytes, got[i], want[i])
						}
					}
				})
			}
		}
	}
}

// TestGenericLevel runs the dequantization cross-check and the allocation
// test with the pure-Go kernels forced, so that the fallback stays tested
// on machines where assembly would otherwise always win.
func TestGenericLevel(t *testing.T) {
	atLevel(simdNone, func() {
		if VecDot(ggml.Q8_0, 32, make([]byte, q8_0Len), make([]byte, q8_0Len)) != 0 {
			t.Fatal("zero blocks")
		}
		t.Run("MatchesDequantized", TestVecDotMatchesDequantized)
		t.Run("DoesNotAllocate", TestVecDotDoesNotAllocate)
	})
	if simdLevel != simdBest {
		t.Fatalf("level %d not restored to %d", simdLevel, simdBest)
	}
}

// TestSIMDLevelsMatchDequantized runs the dequantization cross-check at
// every SIMD level.
func TestSIMDLevelsMatchDequantized(t *testing.T) {
	for _, l := range levels() {
		atLevel(l, func() { t.Run(levelNames[l], TestVecDotMatchesDequantized) })
	}
}

// BenchmarkVecDotLevels compares every SIMD level with the generic
// kernels on n = 4096 rows.
func BenchmarkVecDotLevels(b *testing.B) {
	vecDotRows(b, func(typ ggml.Type, n int, w, xq []byte) {
		for _, l := range levels() {
			atLevel(l, func() { b.Run(fmt.Sprintf("%v/%s", typ, levelNames[l]), benchVecDot(typ, n, w, xq)) })
		}
	})
}

// BenchmarkVecDotRows measures one weight row of 4096 against 16
// activation rows, per row (ns/op divided by 16 compares with VecDot).
func BenchmarkVecDotRows(b *testing.B) {
	const n, rows = 4096, 16
	rng := rand.New(rand.NewSource(7))
	for _, typ := range []ggml.Type{ggml.Q8_0, ggml.Q4_0, ggml.Q4_K, ggml.Q6_K} {
		w := randomRow(rng, typ, n)
		vt := VecDotType(typ)
		vti, _ := vt.Info()
		xb := n / vti.BlockSize * vti.BlockBytes
		xq := make([]byte, rows*xb)
		for r := 0; r < rows; r++ {
			if err := QuantizeRow(vt, randomActivations(rng, n), xq[r*xb:(r+1)*xb]); err != nil {
				b.Fatal(err)
			}
		}
		out := make([]float32, rows)
		for _, l := range levels() {
			b.Run(fmt.Sprintf("%v/%s", typ, levelNames[l]), func(b *testing.B) {
				prev := setSIMDLevel(l)
				defer setSIMDLevel(prev)
				b.SetBytes(int64(len(w)) * rows)
				for b.Loop() {
					VecDotRows(typ, n, w, xq, xb, rows, out)
				}
			})
		}
	}
}

// BenchmarkMatVecStream measures decode's matrix-vector product: many
// consecutive weight rows (n = 768 or 2048, as in small models) against one
// activation row, over 96 MiB of weights so that they stream from memory.
func BenchmarkMatVecStream(b *testing.B) {
	const total = 96 << 20
	rng := rand.New(rand.NewSource(9))
	for _, typ := range []ggml.Type{ggml.Q8_0, ggml.Q4_0, ggml.Q4_K, ggml.Q6_K} {
		for _, n := range []int{768, 2048} {
			ti, _ := typ.Info()
			wb := n / ti.BlockSize * ti.BlockBytes
			rows := total / wb
			w := make([]byte, rows*wb)
			one := randomRow(rng, typ, n)
			for r := 0; r < rows; r++ {
				copy(w[r*wb:], one)
			}
			xq := quantizedRandom(b, rng, VecDotType(typ), n)
			out := make([]float32, rows)
			b.Run(fmt.Sprintf("%v/n=%d/rowwise", typ, n), func(b *testing.B) {
				b.SetBytes(int64(len(w)))
				for b.Loop() {
					for r := range out {
						out[r] = VecDot(typ, n, w[r*wb:(r+1)*wb], xq)
					}
				}
			})
			b.Run(fmt.Sprintf("%v/n=%d/matvec", typ, n), func(b *testing.B) {
				b.SetBytes(int64(len(w)))
				for b.Loop() {
					MatVec(typ, n, w, xq, out)
				}
			})
			// two threads on the two halves, as decode runs it
			b.Run(fmt.Sprintf("%v/n=%d/matvec-2t", typ, n), func(b *testing.B) {
				b.SetBytes(int64(len(w)))
				h := rows / 2
				for b.Loop() {
					var wg sync.WaitGroup
					wg.Add(1)
					go func() {
						defer wg.Done()
						MatVec(typ, n, w[h*wb:], xq, out[h:])
					}()
					MatVec(typ, n, w, xq, out[:h])
					wg.Wait()
				}
			})
			// the same rows from cache: the kernel's compute bound
			const cached = 256 << 10
			b.Run(fmt.Sprintf("%v/n=%d/matvec-L2", typ, n), func(b *testing.B) {
				m := cached / wb
				b.SetBytes(int64(m * wb))
				for b.Loop() {
					MatVec(typ, n, w[:m*wb], xq, out[:m])
				}
			})
		}
	}
}

// TestQuantizeF16Levels checks the SIMD F16 conversion against F32ToF16
// on every exponent (subnormal, overflowing and special results), random
// mantissas, the rounding ties of each exponent, and row lengths that
// leave a tail.
func TestQuantizeF16Levels(t *testing.T) {
	rng := rand.New(rand.NewSource(15))
	var x []float32
	for e := uint32(0); e < 256; e++ {
		for s := uint32(0); s < 2; s++ {
			for _, m := range []uint32{0, 1, 0x7fffff, 0x1000, 0x0fff, 0x1fff, 0x2000, 0x3000, 0x400000, uint32(rng.Int31n(1 << 23))} {
				x = append(x, math.Float32frombits(s<<31|e<<23|m))
			}
		}
	}
	for range 20000 {
		x = append(x, math.Float32frombits(rng.Uint32()))
	}
	for _, n := range []int{len(x), len(x) - 3, 7, 1} {
		want := make([]byte, 2*n)
		for i, v := range x[:n] {
			binary.LittleEndian.PutUint16(want[2*i:], F32ToF16(v))
		}
		for _, l := range levels() {
			atLevel(l, func() {
				got := make([]byte, 2*n)
				if err := QuantizeRow(ggml.F16, x[:n], got); err != nil {
					t.Fatal(err)
				}
				for i := 0; i < n; i++ {
					if g, w := binary.LittleEndian.Uint16(got[2*i:]), binary.LittleEndian.Uint16(want[2*i:]); g != w {
						t.Fatalf("level %s: %#08x → %#04x, F32ToF16 gives %#04x", levelNames[l], math.Float32bits(x[i]), g, w)
					}
				}
			})
		}
	}
}
