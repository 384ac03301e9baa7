package quant

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/zrtdev/zrt/format/ggml"
)

// k4Case is a Q4_K or Q5_K product in one order, with its pure-Go oracle.
type k4Case struct {
	typ    ggml.Type
	order  Order
	oracle func(n int, w, x []byte) float32
}

var k4Cases = []k4Case{
	{ggml.Q4_K, OrderDot, dotQ4_K},
	{ggml.Q5_K, OrderDot, dotQ5_K},
	{ggml.Q4_K, OrderGEMV, dotQ4_KGEMV},
	{ggml.Q4_K, OrderGEMM, dotQ4_KGEMM},
}

// TestK4OrdersBitwise holds every Q4_K/Q5_K kernel — one row, several
// activation rows, several weight rows, at every level — to its order's
// pure-Go kernel bit for bit: the assembly must keep ggml's float order,
// not only come close to it.
func TestK4OrdersBitwise(t *testing.T) {
	rng := rand.New(rand.NewSource(45))
	for _, c := range k4Cases {
		ti, _ := c.typ.Info()
		for _, nb := range []int{1, 2, 3, 7, 9} {
			n := nb * qkK
			rb := nb * ti.BlockBytes
			const nw, nx = 11, 13
			w := make([]byte, nw*rb)
			for r := 0; r < nw; r++ {
				copy(w[r*rb:], awkwardRow(rng, c.typ, n))
			}
			xb := nb * q8_KLen
			xq := make([]byte, nx*xb)
			for r := 0; r < nx; r++ {
				copy(xq[r*xb:], quantizedActivations(t, rng, ggml.Q8_K, n))
			}
			for _, l := range levels() {
				atLevel(l, func() {
					for r := 0; r < nw; r++ {
						wr := w[r*rb : (r+1)*rb]
						for i := 0; i < nx; i++ {
							x := xq[i*xb : (i+1)*xb]
							want := c.oracle(n, wr, x)
							if got := VecDotOrder(c.typ, c.order, n, wr, x); math.Float32bits(got) != math.Float32bits(want) {
								t.Fatalf("%v order %d nb=%d level %s: VecDotOrder %v, pure Go %v", c.typ, c.order, nb, levelNames[l], got, want)
							}
						}
						for _, rows := range []int{1, 3, 4, 5, 8, 9, 12, 13} {
							out := make([]float32, rows+1)
							out[rows] = 42
							VecDotRowsOrder(c.typ, c.order, n, wr, xq, xb, rows, out)
							if out[rows] != 42 {
								t.Fatalf("%v order %d level %s: VecDotRowsOrder wrote past %d rows", c.typ, c.order, levelNames[l], rows)
							}
							for i := 0; i < rows; i++ {
								if want := c.oracle(n, wr, xq[i*xb:(i+1)*xb]); math.Float32bits(out[i]) != math.Float32bits(want) {
									t.Fatalf("%v order %d nb=%d level %s rows=%d row %d: VecDotRowsOrder %v, pure Go %v", c.typ, c.order, nb, levelNames[l], rows, i, out[i], want)
								}
							}
						}
					}
					for i := 0; i < nx; i++ {
						x := xq[i*xb : (i+1)*xb]
						out := make([]float32, nw+1)
						out[nw] = 42
						MatVecOrder(c.typ, c.order, n, w, x, out[:nw])
						if out[nw] != 42 {
							t.Fatalf("%v order %d level %s: MatVecOrder wrote past its rows", c.typ, c.order, levelNames[l])
						}
						for r := 0; r < nw; r++ {
							if want := c.oracle(n, w[r*rb:(r+1)*rb], x); math.Float32bits(out[r]) != math.Float32bits(want) {
								t.Fatalf("%v order %d nb=%d level %s weight row %d: MatVecOrder %v, pure Go %v", c.typ, c.order, nb, levelNames[l], r, out[r], want)
							}
						}
					}
				})
			}
		}
	}
}

// TestK4OrdersDiffer checks that the three Q4_K orders are three
// arithmetics (each a few ulps from the others on most rows, not
// accidentally one), and that Repacked names the matrices ggml repacks.
func TestK4OrdersDiffer(t *testing.T) {
	rng := rand.New(rand.NewSource(46))
	n := 8 * qkK
	differ := map[[2]int]int{}
	for trial := 0; trial < 200; trial++ {
		w := randomRow(rng, ggml.Q4_K, n)
		x := quantizedActivations(t, rng, ggml.Q8_K, n)
		v := [3]float32{dotQ4_K(n, w, x), dotQ4_KGEMV(n, w, x), dotQ4_KGEMM(n, w, x)}
		for a := 0; a < 3; a++ {
			for b := a + 1; b < 3; b++ {
				if v[a] != v[b] {
					differ[[2]int{a, b}]++
				}
			}
		}
	}
	for _, p := range [][2]int{{0, 1}, {0, 2}, {1, 2}} {
		if differ[p] < 20 {
			t.Errorf("orders %d and %d differ on %d of 200 rows only", p[0], p[1], differ[p])
		}
	}
	for _, c := range []struct {
		typ  ggml.Type
		rows int
		want bool
	}{{ggml.Q4_K, 256, true}, {ggml.Q4_K, 8, true}, {ggml.Q4_K, 12, false}, {ggml.Q4_K, 0, false}, {ggml.Q5_K, 256, false}, {ggml.Q6_K, 256, false}} {
		if got := Repacked(c.typ, c.rows); got != c.want {
			t.Errorf("Repacked(%v, %d) = %v, want %v", c.typ, c.rows, got, c.want)
		}
	}
}

// TestQ4KInterleavedBitwise holds the kernels on interleaved Q4_K groups
// (the pure-Go one and every level's) to OrderGEMM's pure-Go kernel on
// each original weight row, bit for bit, for row counts that exercise
// the four-row kernel and the one-row tail.
func TestQ4KInterleavedBitwise(t *testing.T) {
	rng := rand.New(rand.NewSource(46))
	for _, nb := range []int{1, 2, 3, 7} {
		n := nb * qkK
		rb := nb * q4_KLen
		w := make([]byte, Q4KInterleaveRows*rb)
		for r := 0; r < Q4KInterleaveRows; r++ {
			copy(w[r*rb:], awkwardRow(rng, ggml.Q4_K, n))
		}
		g := make([]byte, Q4KGroupBytes(n))
		if err := InterleaveQ4K(n, w, g); err != nil {
			t.Fatal(err)
		}
		const nx = 11
		xb := nb*q8_KLen + 4 // strided rows
		xq := make([]byte, nx*xb)
		for r := 0; r < nx; r++ {
			copy(xq[r*xb:], quantizedActivations(t, rng, ggml.Q8_K, n))
		}
		check := func(name string, o Order, rows int, out []float32) {
			oracle := dotQ4_KGEMM
			if o == OrderGEMV {
				oracle = dotQ4_KGEMV
			}
			for r := 0; r < rows; r++ {
				for j := 0; j < Q4KInterleaveRows; j++ {
					want := oracle(n, w[j*rb:(j+1)*rb], xq[r*xb:])
					if got := out[8*r+j]; math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("%s order %d nb=%d rows=%d: activation row %d, weight row %d: %v, pure Go %v", name, o, nb, rows, r, j, got, want)
					}
				}
			}
			if out[8*rows] != 42 {
				t.Fatalf("%s nb=%d rows=%d wrote past its rows", name, nb, rows)
			}
		}
		for _, o := range []Order{OrderGEMM, OrderGEMV} {
			for _, rows := range []int{1, 2, 3, 4, 5, 9, 11} {
				out := make([]float32, 8*rows+1)
				out[8*rows] = 42
				dotQ4KInterleavedGo(o, n, g, xq, xb, rows, out)
				check("pure Go", o, rows, out)
				for _, l := range levels() {
					atLevel(l, func() {
						out := make([]float32, 8*rows+1)
						out[8*rows] = 42
						if err := VecDotQ4KInterleaved(o, n, g, xq, xb, rows, out); err != nil {
							t.Fatal(err)
						}
						check(levelNames[l], o, rows, out)
					})
				}
			}
		}
		if err := VecDotQ4KInterleaved(OrderDot, n, g, xq, xb, 1, make([]float32, 8)); err == nil {
			t.Fatal("VecDotQ4KInterleaved in OrderDot: no error")
		}
	}
	if err := InterleaveQ4K(100, nil, nil); err == nil {
		t.Fatal("InterleaveQ4K of 100-element rows: no error")
	}
	if err := InterleaveQ4K(qkK, make([]byte, q4_KLen), make([]byte, Q4KInterleaveBlock)); err == nil {
		t.Fatal("InterleaveQ4K of one row for eight: no error")
	}
}

// TestMatVecQ4KInterleaved holds the one-row GEMV over many interleaved
// groups (every level's) to the repacked GEMV's pure-Go kernel on each
// original weight row, bit for bit, and refuses outputs that are not
// whole groups or groups shorter than their count.
func TestMatVecQ4KInterleaved(t *testing.T) {
	rng := rand.New(rand.NewSource(47))
	for _, nb := range []int{1, 3, 12} {
		for _, ng := range []int{1, 2, 5} {
			n := nb * qkK
			rb := nb * q4_KLen
			rows := ng * Q4KInterleaveRows
			w := make([]byte, rows*rb)
			for r := 0; r < rows; r++ {
				copy(w[r*rb:], awkwardRow(rng, ggml.Q4_K, n))
			}
			gb := Q4KGroupBytes(n)
			g := make([]byte, ng*gb)
			for i := 0; i < ng; i++ {
				if err := InterleaveQ4K(n, w[i*Q4KInterleaveRows*rb:], g[i*gb:]); err != nil {
					t.Fatal(err)
				}
			}
			xq := quantizedActivations(t, rng, ggml.Q8_K, n)
			for _, l := range levels() {
				atLevel(l, func() {
					out := make([]float32, rows+1)
					out[rows] = 42
					if err := MatVecQ4KInterleaved(n, g, xq, out[:rows]); err != nil {
						t.Fatal(err)
					}
					for j := 0; j < rows; j++ {
						want := dotQ4_KGEMV(n, w[j*rb:(j+1)*rb], xq)
						if got := out[j]; math.Float32bits(got) != math.Float32bits(want) {
							t.Fatalf("%s nb=%d groups=%d: weight row %d: %v, pure Go %v", levelNames[l], nb, ng, j, got, want)
						}
					}
					if out[rows] != 42 {
						t.Fatalf("%s nb=%d groups=%d wrote past its outputs", levelNames[l], nb, ng)
					}
				})
			}
			if err := MatVecQ4KInterleaved(n, g, xq, make([]float32, rows+3)); err == nil {
				t.Fatal("MatVecQ4KInterleaved of outputs not whole groups: no error")
			}
			if err := MatVecQ4KInterleaved(n, g[:len(g)-1], xq, make([]float32, rows)); err == nil {
				t.Fatal("MatVecQ4KInterleaved of a short group: no error")
			}
		}
	}
}

// BenchmarkQ4KInterleaved measures a tile in each repacked order: 16
// weight rows of n against 16 activation rows, by the multi-row kernels on
// the original rows and by interleaving the rows (included) and the
// kernels on interleaved groups.
func BenchmarkQ4KInterleaved(b *testing.B) {
	const rows, wrows = 16, 16
	rng := rand.New(rand.NewSource(8))
	for _, n := range []int{1024, 3072} {
		rb := n / qkK * q4_KLen
		w := make([]byte, wrows*rb)
		for r := 0; r < wrows; r++ {
			copy(w[r*rb:], randomRow(rng, ggml.Q4_K, n))
		}
		xb := n / qkK * q8_KLen
		xq := make([]byte, rows*xb)
		for r := 0; r < rows; r++ {
			if err := QuantizeRow(ggml.Q8_K, randomActivations(rng, n), xq[r*xb:(r+1)*xb]); err != nil {
				b.Fatal(err)
			}
		}
		out := make([]float32, rows*Q4KInterleaveRows)
		g := make([]byte, Q4KGroupBytes(n))
		for _, o := range []Order{OrderGEMM, OrderGEMV} {
			b.Run(fmt.Sprintf("n=%d/order=%d/rows", n, o), func(b *testing.B) {
				for b.Loop() {
					for j := 0; j < wrows; j++ {
						VecDotRowsOrder(ggml.Q4_K, o, n, w[j*rb:(j+1)*rb], xq, xb, rows, out)
					}
				}
			})
			b.Run(fmt.Sprintf("n=%d/order=%d/interleaved", n, o), func(b *testing.B) {
				for b.Loop() {
					for j := 0; j < wrows; j += Q4KInterleaveRows {
						if err := InterleaveQ4K(n, w[j*rb:], g); err != nil {
							b.Fatal(err)
						}
						if err := VecDotQ4KInterleaved(o, n, g, xq, xb, rows, out); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}

// BenchmarkQ4KGEMVOneRow times single-sequence decode's product in the
// repacked GEMV's order: the many-row kernel on the rows as stored
// against the one-row kernel on groups interleaved beforehand (once, as
// at load).
func BenchmarkQ4KGEMVOneRow(b *testing.B) {
	const wrows = 256
	rng := rand.New(rand.NewSource(9))
	for _, n := range []int{768, 1024, 3072} {
		rb := n / qkK * q4_KLen
		w := make([]byte, wrows*rb)
		for r := 0; r < wrows; r++ {
			copy(w[r*rb:], randomRow(rng, ggml.Q4_K, n))
		}
		xq := make([]byte, n/qkK*q8_KLen)
		if err := QuantizeRow(ggml.Q8_K, randomActivations(rng, n), xq); err != nil {
			b.Fatal(err)
		}
		out := make([]float32, wrows)
		gb := Q4KGroupBytes(n)
		g := make([]byte, wrows/Q4KInterleaveRows*gb)
		for j := 0; j < wrows; j += Q4KInterleaveRows {
			if err := InterleaveQ4K(n, w[j*rb:], g[j/Q4KInterleaveRows*gb:]); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("n=%d/rows", n), func(b *testing.B) {
			b.SetBytes(int64(len(w)))
			for b.Loop() {
				MatVecOrder(ggml.Q4_K, OrderGEMV, n, w, xq, out)
			}
		})
		b.Run(fmt.Sprintf("n=%d/interleaved-matvec", n), func(b *testing.B) {
			b.SetBytes(int64(len(w)))
			for b.Loop() {
				if err := MatVecQ4KInterleaved(n, g, xq, out); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("n=%d/interleaved", n), func(b *testing.B) {
			b.SetBytes(int64(len(w)))
			for b.Loop() {
				for j := 0; j < wrows; j += Q4KInterleaveRows {
					if err := VecDotQ4KInterleaved(OrderGEMV, n, g[j/Q4KInterleaveRows*gb:][:gb], xq, len(xq), 1, out[j:j+Q4KInterleaveRows]); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
