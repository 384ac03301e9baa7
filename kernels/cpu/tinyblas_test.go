package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"testing"
	"unsafe"

	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/kernels/quant"
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

// randHalves returns n random F16 values as their bits: mostly normals
// over the whole exponent range, some subnormals, zeros and the largest
// finite values, the inputs whose products stretch float32 the most.
func randHalves(rng *rand.Rand, n int) []uint16 {
	h := make([]uint16, n)
	for i := range h {
		sign := uint16(rng.Intn(2)) << 15
		switch p := rng.Intn(20); {
		case p == 0:
			h[i] = sign | uint16(rng.Intn(0x400)) // subnormal or zero
		case p == 1:
			h[i] = sign | 0x7bff // ±65504
		case p < 10:
			h[i] = sign | uint16(rng.Intn(0x7c00)) // any finite
		default:
			h[i] = quant.F32ToF16(float32(rng.NormFloat64())) // weight-like
		}
	}
	return h
}

func halvesF32(h []uint16) []float32 {
	f := make([]float32, len(h))
	for i, v := range h {
		f[i] = quant.F16ToF32(v)
	}
	return f
}

// TestTinyBLASDotF16: on F16 values the multiply-then-add form gives the
// fused form's bits.
func TestTinyBLASDotF16(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for _, k := range []int{16, 48, 768, 2048} {
		for round := 0; round < 200; round++ {
			w, x := halvesF32(randHalves(rng, k)), halvesF32(randHalves(rng, k))
			got, want := tinyBLASDotF16(w, x), tinyBLASDot(w, x)
			if math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("k %d round %d: %v, fused %v", k, round, got, want)
			}
		}
	}
}

// TestTinyBLASTiles: every micro-tile of every kernel set this CPU runs
// gives tinyBLASDot's bits for each of its outputs, and so does
// tinyBLASTileGo, with rows strided wider than k.
func TestTinyBLASTiles(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	for _, k := range []int{16, 64, 784} {
		const m = 4
		ldw, ldx := k+24, k+16 // in elements
		wh := randHalves(rng, m*ldw)
		wb := make([]byte, 2*len(wh))
		for i, v := range wh {
			binary.LittleEndian.PutUint16(wb[2*i:], v)
		}
		wf := halvesF32(wh)
		wk := make([]float32, m*k) // the weight rows packed, as gemmTinyBLAS converts them
		for r := 0; r < m; r++ {
			copy(wk[r*k:(r+1)*k], wf[r*ldw:])
		}
		x := halvesF32(randHalves(rng, tinyBLASRows*ldx))
		xk := make([]float32, tinyBLASRows*k)
		for r := 0; r < tinyBLASRows; r++ {
			copy(xk[r*k:(r+1)*k], x[r*ldx:])
		}
		for n := 1; n <= tinyBLASRows; n++ {
			outs := map[string][]float32{"go": make([]float32, 4*tinyBLASRows)}
			tinyBLASTileGo(wk, xk[:n*k], k, outs["go"][:4*n])
			for _, ks := range tinyBLASSets() {
				out := make([]float32, 4*tinyBLASRows)
				ks.tiles[n-1]((*uint16)(unsafe.Pointer(&wb[0])), 2*ldw, &x[0], 4*ldx, k, &out[0])
				outs[ks.name] = out
			}
			for name, out := range outs {
				for r := 0; r < n; r++ {
					for j := 0; j < m; j++ {
						want := tinyBLASDot(wk[j*k:(j+1)*k], xk[r*k:(r+1)*k])
						if got := out[4*r+j]; math.Float32bits(got) != math.Float32bits(want) {
							t.Errorf("%s k %d n %d: output (%d, %d) %v, tinyBLASDot %v", name, k, n, r, j, got, want)
						}
					}
				}
				for i := 4 * n; i < len(out); i++ {
					if out[i] != 0 {
						t.Fatalf("%s k %d n %d: the tile wrote out[%d], past its %d outputs", name, k, n, i, 4*n)
					}
				}
			}
		}
	}
}

// TestRoundF16: every kernel set's rounding gives quant.F32ToF16's bits
// (and back through F16ToF32) for every kind of float32: normals in and
// out of F16's range, halfway cases, subnormal results, infinities and
// NaNs.
func TestRoundF16(t *testing.T) {
	if len(tinyBLASSets()) == 0 {
		t.Skip("no AVX2 or AVX-512 on this CPU")
	}
	rng := rand.New(rand.NewSource(3))
	src := []float32{0, float32(math.Copysign(0, -1)), 65504, 65519.99, 65520, -65520, 0x1p-24, 0x1p-25, 0x1.8p-25, 0x1p-26, 0x1.002p0, 0x1.003p0,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.Float32frombits(0x7f812345), math.Float32frombits(0xffc00001), math.Float32frombits(1)}
	for len(src)%16 != 0 || len(src) < 1<<14 {
		src = append(src, math.Float32frombits(rng.Uint32()), float32(rng.NormFloat64())*float32(math.Pow(2, float64(rng.Intn(50)-30))))
	}
	src = src[:len(src)&^15]
	want := make([]float32, len(src))
	roundF16(nil, want, src)
	for _, ks := range tinyBLASSets() {
		got := make([]float32, len(src))
		roundF16(ks, got, src)
		for i, v := range src {
			if g, w := math.Float32bits(got[i]), math.Float32bits(want[i]); g != w {
				t.Fatalf("%s: %v (%#08x): %#08x, Go %#08x", ks.name, v, math.Float32bits(v), g, w)
			}
		}
	}
}

// TestGemmTinyBLAS: an F16 product of prompt and decode rows gives each
// prompt row tinyBLASDot's bits on its F16-rounded activations (plus the
// bias) and each decode row vec_dot_f16's, on every kernel set's
// micro-tiles and the Go ones alike, whatever the number of prompt rows (several blocks
// of activation rows, partial micro-tiles), however the workers split
// the features, and with outputs split into arrays at a feature that is
// not a multiple of four.
func TestGemmTinyBLAS(t *testing.T) {
	defer func(ks *tinyBLASKernels) { tinyBLASUse = ks }(tinyBLASUse)
	rng := rand.New(rand.NewSource(13))
	const split = 6
	for _, c := range []struct{ k, n int }{{64, 28}, {1024, 28}, {64, 100}} {
		k, n := c.k, c.n
		for _, prompts := range []int{1, 2, 7, 13, 61} {
			for _, ks := range append(tinyBLASSets(), nil) {
				tinyBLASUse = ks
				name := "go"
				if ks != nil {
					name = ks.name
				}
				rows := prompts + 2
				w := make([]byte, 2*n*k)
				for i, v := range randHalves(rng, n*k) {
					binary.LittleEndian.PutUint16(w[2*i:], v)
				}
				x := normals(rng, rows*k)
				bias := normals(rng, n)
				io := make([]uint32, kernels.IOWordRowBase+rows*kernels.IORowWords)
				io[kernels.IOWordRows] = uint32(rows)
				for i := 0; i < prompts; i++ {
					io[kernels.IOWordRowBase+(i+1)*kernels.IORowWords+kernels.IORowFlags] = kernels.RowPrompt
				}
				// row 0 and the last row decode
				lo, hi := make([]float32, rows*split), make([]float32, rows*(n-split))
				dst := func(i, j int) []float32 {
					if j < split {
						return lo[i*split+j : (i+1)*split]
					}
					return hi[i*(n-split)+j-split : (i+1)*(n-split)]
				}
				pool := NewPool(2)
				var work []byte
				a := &Args{Pool: pool, Work: &work}
				err := gemmPrompt(a, ggml.F16, x, w, req(u32bytes(io)), k, n, false, dst, bias)
				pool.Close()
				if err != nil {
					t.Fatal(err)
				}
				wf := make([]float32, k)
				xh := make([]float32, k)
				xq := make([]byte, 2*k)
				for i := 0; i < rows; i++ {
					prompt := i > 0 && i <= prompts
					for c, v := range x[i*k : (i+1)*k] {
						xh[c] = quant.F16ToF32(quant.F32ToF16(v))
					}
					if err := quant.QuantizeRow(ggml.F16, x[i*k:(i+1)*k], xq); err != nil {
						t.Fatal(err)
					}
					for j := 0; j < n; j++ {
						var want float32
						if prompt {
							for c := range wf {
								wf[c] = quant.F16ToF32(binary.LittleEndian.Uint16(w[2*(j*k+c):]))
							}
							want = tinyBLASDot(wf, xh) + bias[j]
						} else {
							want = quant.VecDot(ggml.F16, k, w[2*j*k:2*(j+1)*k], xq) + bias[j]
						}
						if got := dst(i, j)[0]; math.Float32bits(got) != math.Float32bits(want) {
							t.Fatalf("%s: k %d, %d prompt rows: row %d (prompt %v) feature %d: %v, want %v", name, k, prompts, i, prompt, j, got, want)
						}
					}
				}
			}
		}
	}
}

// BenchmarkGemmTinyBLAS times an F16 prompt product of the 110M llama
// shape's FFN (k 768, n 2048) on one thread, on every kernel set's
// micro-tiles and on the Go ones, in GFLOP/s.
func BenchmarkGemmTinyBLAS(b *testing.B) {
	defer func(ks *tinyBLASKernels) { tinyBLASUse = ks }(tinyBLASUse)
	const k, n = 768, 2048
	rng := rand.New(rand.NewSource(1))
	w := make([]byte, 2*n*k)
	for i, v := range randHalves(rng, n*k) {
		binary.LittleEndian.PutUint16(w[2*i:], v)
	}
	for _, ks := range append(tinyBLASSets(), nil) {
		set := "go"
		if ks != nil {
			set = ks.name
		}
		for _, rows := range []int{32, 128} {
			b.Run(fmt.Sprintf("rows=%d/%s", rows, set), func(b *testing.B) {
				tinyBLASUse = ks
				x := normals(rng, rows*k)
				y := make([]float32, rows*n)
				io := make([]uint32, kernels.IOWordRowBase+rows*kernels.IORowWords)
				io[kernels.IOWordRows] = uint32(rows)
				for i := 0; i < rows; i++ {
					io[kernels.IOWordRowBase+i*kernels.IORowWords+kernels.IORowFlags] = kernels.RowPrompt
				}
				pool := NewPool(1)
				defer pool.Close()
				var work []byte
				a := &Args{Bufs: [][]byte{f32bytes(x), w, nil, u32bytes(io), f32bytes(y)}, Push: []uint32{k, n}, Pool: pool, Work: &work}
				b.ResetTimer()
				for b.Loop() {
					if err := matmul(ggml.F16, a); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(2*float64(rows*k*n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
