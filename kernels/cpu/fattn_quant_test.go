package cpu

import (
	"bytes"
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/kernels/quant"
)

// quantCase is a cache of types kt holding positions 0..n-1 of one slot,
// written through kv_write, and queries at chosen positions.
type quantCase struct {
	kt                 kernels.KVTypes
	hd, nHead, nHeadKV int
	n                  int // cached positions
	window             int
	softcap            float32
	sinks              bool
}

// quantFixture is a written cache and what wrote it.
type quantFixture struct {
	c        quantCase
	k, v     []float32 // n rows of kvDim, as written
	kv, io   []byte
	maxPages int
	pool     *Pool
	flags    uint32 // the rows' flags (kernels.RowPrompt, …)
}

const quantLayers, quantLayer = 3, 1

func newQuantFixture(t testing.TB, c quantCase, rng *rand.Rand) *quantFixture {
	t.Helper()
	kvDim := c.nHeadKV * c.hd
	f := &quantFixture{c: c, maxPages: c.n/kernels.KVPageTokens + 1, pool: NewPool(2)}
	t.Cleanup(f.pool.Close)
	lay := kernels.KVLayout{Slots: quantLayers, Width: kvDim, Types: c.kt}
	f.kv = make([]byte, f.maxPages*lay.PageBytes())
	f.k, f.v = make([]float32, c.n*kvDim), make([]float32, c.n*kvDim)
	for i := range f.k {
		f.k[i], f.v[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
	}
	// Pages in reverse, so a page-table slip shows.
	table := kernels.RequestTable{Rows: c.n, Slots: 1, MaxPages: f.maxPages}
	io := make([]uint32, table.Words())
	io[kernels.IOWordMaxPages], io[kernels.IOWordPageTable] = uint32(f.maxPages), uint32(table.PageTable())
	for p := range f.maxPages {
		io[table.PageTable()+p] = uint32(f.maxPages - 1 - p)
	}
	io[kernels.IOWordRows] = uint32(c.n)
	for i := range c.n {
		io[kernels.IOWordRowBase+i*kernels.IORowWords+kernels.IORowPos] = uint32(i)
	}
	f.io = u32bytes(io)
	a := &Args{Bufs: [][]byte{f32bytes(f.k), f32bytes(f.v), f.io, f.kv}, Push: []uint32{quantLayer, uint32(kvDim)},
		Spec: []uint32{quantLayers}, Pool: f.pool}
	if err := kvWrite(newKVCache(c.kt), a); err != nil {
		t.Fatal(err)
	}
	return f
}

// attend runs flash attention for queries q (rows of nHead×hd) at
// positions pos, all in one dispatch, and returns the output.
func (f *quantFixture) attend(t testing.TB, q []float32, pos []int, sinks []float32) []float32 {
	t.Helper()
	c := f.c
	io := append([]uint32(nil), u32s(f.io)...)
	io[kernels.IOWordRows] = uint32(len(pos))
	for i, p := range pos {
		base := kernels.IOWordRowBase + i*kernels.IORowWords
		io[base+kernels.IORowPos], io[base+kernels.IORowSlot], io[base+kernels.IORowFlags] = uint32(p), 0, f.flags
	}
	y := make([]float32, len(q))
	scale := float32(1 / math.Sqrt(float64(c.hd)))
	a := &Args{Bufs: [][]byte{f32bytes(q), f.kv, u32bytes(io), f32bytes(y)}, Push: []uint32{quantLayer},
		Spec: []uint32{quantLayers, uint32(c.nHead), uint32(c.nHeadKV), uint32(c.hd), math.Float32bits(scale)}, Pool: f.pool}
	var err error
	if c.window == 0 && c.softcap == 0 && sinks == nil {
		err = flashAttn(newKVCache(c.kt), a)
	} else {
		var sb []byte
		if sinks != nil {
			sb = f32bytes(sinks)
		}
		a.Bufs = [][]byte{a.Bufs[0], f.kv, sb, a.Bufs[2], a.Bufs[3]}
		a.Spec = append(a.Spec, math.Float32bits(c.softcap), uint32(c.window))
		err = flashAttnExt(newKVCache(c.kt), a)
	}
	if err != nil {
		t.Fatal(err)
	}
	return y
}

// rotated is x rotated in runs of n by llama.cpp's Walsh-Hadamard matrix
// (n = 0: x itself), in float64.
func rotated(x []float32, n int) []float32 {
	if n == 0 {
		return x
	}
	h := hadamard(n)
	out := make([]float32, len(x))
	for o := 0; o < len(x); o += n {
		for i := range n {
			var sum float64
			for j := range n {
				sum += float64(h[i*n+j]) * float64(x[o+j])
			}
			out[o+i] = float32(sum)
		}
	}
	return out
}

// quantizeKV writes x as a cache row of type typ: the FP8 quantizer
// for fp8_e4m3, ggml's for the others.
func quantizeKV(typ ggml.Type, x []float32, b []byte) error {
	if typ == kernels.FP8E4M3 {
		return quant.QuantizeFP8Row(x, b)
	}
	return quant.QuantizeRow(typ, x, b)
}

// roundTrip is x as a cache of type t holds it: quantized, then read back.
func roundTrip(t *testing.T, typ ggml.Type, x []float32) []float64 {
	t.Helper()
	b := make([]byte, kernels.KVRowBytes(typ, len(x)))
	if err := quantizeKV(typ, x, b); err != nil {
		t.Fatal(err)
	}
	y := make([]float32, len(x))
	var err error
	if typ == kernels.FP8E4M3 {
		err = quant.DequantizeFP8Row(b, y)
	} else {
		err = quant.Dequantize(typ, b, y)
	}
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float64, len(x))
	for i, v := range y {
		out[i] = float64(v)
	}
	return out
}

// reference is the attention of one query head in float64 over the
// cache's own values (K and V as the cache holds them, the query rounded
// to K's dot-product type as ggml rounds it).
func (f *quantFixture) reference(t *testing.T, q []float32, h, pos int, sinks []float32) []float64 {
	c := f.c
	kvDim, kvh := c.nHeadKV*c.hd, h/(c.nHead/c.nHeadKV)
	qt := roundTrip(t, c.kt.K, rotated(q, c.kt.RotK))
	if c.kt.K == kernels.FP8E4M3 { // the query stays F32
		for d, x := range q {
			qt[d] = float64(x)
		}
	}
	scale := 1 / math.Sqrt(float64(c.hd))
	first := 0
	if c.window > 0 {
		first = max(0, pos-c.window+1)
	}
	var scores []float64
	mx := math.Inf(-1)
	for p := first; p <= pos; p++ {
		k := roundTrip(t, c.kt.K, rotated(f.k[p*kvDim+kvh*c.hd:p*kvDim+(kvh+1)*c.hd], c.kt.RotK))
		var dot float64
		for d := range k {
			dot += k[d] * qt[d]
		}
		s := dot * float64(float32(scale))
		if c.softcap != 0 {
			s = float64(c.softcap) * math.Tanh(s/float64(c.softcap))
		}
		scores = append(scores, s)
		mx = max(mx, s)
	}
	if sinks != nil {
		mx = max(mx, float64(sinks[h]))
	}
	out := make([]float64, c.hd)
	var sum float64
	for j, s := range scores {
		e := math.Exp(s - mx)
		sum += e
		v := roundTrip(t, c.kt.V, rotated(f.v[(first+j)*kvDim+kvh*c.hd:(first+j)*kvDim+(kvh+1)*c.hd], c.kt.RotV))
		for d := range out {
			out[d] += e * v[d]
		}
	}
	if sinks != nil {
		sum += math.Exp(float64(sinks[h]) - mx)
	}
	for d := range out {
		out[d] /= sum
	}
	if c.kt.RotV > 0 {
		// The output comes back through the same (self-inverse) rotation.
		o32 := make([]float32, len(out))
		for d, v := range out {
			o32[d] = float32(v)
		}
		for d, v := range rotated(o32, c.kt.RotV) {
			out[d] = float64(v)
		}
	}
	return out
}

// TestKVWriteQ8_0 holds the cache's rows to llama.cpp's block layout: each
// K and V row of each position is quantize_row_q8_0 of the row, where
// kernels.KVLayout puts it, and nothing else in the page is written.
func TestKVWriteQ8_0(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, kt := range []kernels.KVTypes{{K: ggml.Q8_0, V: ggml.Q8_0}, {K: ggml.Q8_0, V: ggml.F16}, {K: ggml.F16, V: ggml.Q8_0},
		{K: kernels.FP8E4M3, V: kernels.FP8E4M3}, {K: kernels.FP8E4M3, V: ggml.Q8_0}} {
		c := quantCase{kt: kt, hd: 64, nHead: 4, nHeadKV: 2, n: 40}
		f := newQuantFixture(t, c, rng)
		kvDim := c.nHeadKV * c.hd
		lay := kernels.KVLayout{Slots: quantLayers, Width: kvDim, Types: kt}
		written := make([]bool, len(f.kv))
		for p := range c.n {
			page := f.maxPages - 1 - p/kernels.KVPageTokens
			for which, typ := range []ggml.Type{kt.K, kt.V} {
				src := f.k
				if which == 1 {
					src = f.v
				}
				want := make([]byte, kernels.KVRowBytes(typ, kvDim))
				if err := quantizeKV(typ, src[p*kvDim:(p+1)*kvDim], want); err != nil {
					t.Fatal(err)
				}
				off := lay.Offset(page, quantLayer, which, p%kernels.KVPageTokens)
				if got := f.kv[off : off+len(want)]; !bytes.Equal(got, want) {
					t.Fatalf("%v: position %d, %s row differs from quantize_row", kt, p, [2]string{"K", "V"}[which])
				}
				for i := off; i < off+len(want); i++ {
					written[i] = true
				}
			}
		}
		for i, b := range f.kv {
			if b != 0 && !written[i] {
				t.Fatalf("%v: byte %d written outside the rows", kt, i)
			}
		}
	}
	// A width of 16 is no whole q8_0 block: refused, not misplaced.
	pool := NewPool(1)
	defer pool.Close()
	a := &Args{Bufs: [][]byte{make([]byte, 64), make([]byte, 64), make([]byte, 64), make([]byte, 1024)}, Push: []uint32{0, 16},
		Spec: []uint32{1}, Pool: pool}
	if err := kvWrite(newKVCache(kernels.KVTypes{K: ggml.Q8_0, V: ggml.Q8_0}), a); err == nil {
		t.Errorf("kv_write of 16-wide q8_0 rows accepted")
	}
	a.Push[1] = 32 // a whole q8_0 block, no whole FP8 one
	if err := kvWrite(newKVCache(kernels.KVTypes{K: kernels.FP8E4M3, V: kernels.FP8E4M3}), a); err == nil {
		t.Errorf("kv_write of 32-wide fp8_e4m3 rows accepted")
	}
}

// TestFlashAttnQuant checks attention over quantized caches against a
// float64 softmax over the values the cache holds (the query rounded as
// ggml rounds it): the kernel's only error is float32 arithmetic. It also
// holds each row's result to be the same bits whichever rows share its
// dispatch (batch invariance).
func TestFlashAttnQuant(t *testing.T) {
	q8 := kernels.KVTypes{K: ggml.Q8_0, V: ggml.Q8_0}
	fp8 := kernels.KVTypes{K: kernels.FP8E4M3, V: kernels.FP8E4M3}
	cases := []quantCase{
		{kt: q8, hd: 64, nHead: 4, nHeadKV: 2, n: 50},
		{kt: q8, hd: 128, nHead: 8, nHeadKV: 2, n: 300},
		{kt: q8, hd: 32, nHead: 2, nHeadKV: 2, n: 20},
		{kt: q8, hd: 96, nHead: 3, nHeadKV: 1, n: 45},
		{kt: kernels.KVTypes{K: ggml.Q8_0, V: ggml.F16}, hd: 64, nHead: 4, nHeadKV: 4, n: 40},
		{kt: kernels.KVTypes{K: ggml.F16, V: ggml.Q8_0}, hd: 64, nHead: 4, nHeadKV: 1, n: 40},
		{kt: q8, hd: 64, nHead: 4, nHeadKV: 2, n: 90, window: 17, softcap: 30, sinks: true},
		// Rotated as llama.cpp rotates a quantized cache.
		{kt: kernels.KVTypes{K: ggml.Q8_0, V: ggml.Q8_0, RotK: 128, RotV: 64}, hd: 128, nHead: 4, nHeadKV: 2, n: 70},
		{kt: kernels.KVTypes{K: ggml.Q8_0, V: ggml.Q8_0, RotK: 64, RotV: 64}, hd: 64, nHead: 4, nHeadKV: 4, n: 40, window: 9, sinks: true},
		{kt: kernels.KVTypes{K: ggml.F16, V: ggml.Q8_0, RotV: 64}, hd: 128, nHead: 2, nHeadKV: 1, n: 30},
		// FP8 (E4M3 with a float32 scale a 64-value block).
		{kt: fp8, hd: 64, nHead: 4, nHeadKV: 2, n: 50},
		{kt: fp8, hd: 128, nHead: 8, nHeadKV: 2, n: 300},
		{kt: fp8, hd: 64, nHead: 4, nHeadKV: 2, n: 90, window: 17, softcap: 30, sinks: true},
		{kt: kernels.KVTypes{K: kernels.FP8E4M3, V: ggml.F16}, hd: 64, nHead: 4, nHeadKV: 4, n: 40},
		{kt: kernels.KVTypes{K: ggml.Q8_0, V: kernels.FP8E4M3}, hd: 64, nHead: 4, nHeadKV: 1, n: 40},
	}
	for ci, c := range cases {
		t.Run(fmt.Sprintf("%d_%v_hd%d", ci, c.kt, c.hd), func(t *testing.T) {
			rng := rand.New(rand.NewSource(int64(ci)))
			f := newQuantFixture(t, c, rng)
			pos := []int{0, 1, c.n / 3, c.n - 1, 15, 16}
			q := make([]float32, len(pos)*c.nHead*c.hd)
			for i := range q {
				q[i] = float32(rng.NormFloat64() * 2)
			}
			var sinks []float32
			if c.sinks {
				sinks = make([]float32, c.nHead)
				for i := range sinks {
					sinks[i] = float32(rng.NormFloat64())
				}
			}
			y := f.attend(t, q, pos, sinks)
			// F16 accumulation (an F16 V) rounds each update to 11 bits.
			tol := 2e-5
			if c.kt.V == ggml.F16 {
				tol = 4e-3
			}
			for i, p := range pos {
				for h := range c.nHead {
					o := (i*c.nHead + h) * c.hd
					want := f.reference(t, q[o:o+c.hd], h, p, sinks)
					for d, w := range want {
						if got := float64(y[o+d]); math.Abs(got-w) > tol*(1+math.Abs(w)) {
							t.Fatalf("row at %d, head %d, dim %d: %v, want %v", p, h, d, got, w)
						}
					}
				}
			}
			// The AVX-512 kernels give the Go code's bits.
			if faSIMDOK {
				faUseSIMD = false
				slow := f.attend(t, q, pos, sinks)
				faUseSIMD = true
				for d, v := range slow {
					if math.Float32bits(v) != math.Float32bits(y[d]) {
						t.Fatalf("y[%d] = %v (SIMD), want %v (Go)", d, y[d], v)
					}
				}
			}
			// One row alone gives the bits it gave among the others.
			i := 2
			one := f.attend(t, q[i*c.nHead*c.hd:(i+1)*c.nHead*c.hd], pos[i:i+1], sinks)
			for d, v := range one {
				if math.Float32bits(v) != math.Float32bits(y[i*c.nHead*c.hd+d]) {
					t.Fatalf("row at %d alone: y[%d] = %v, batched %v", pos[i], d, v, y[i*c.nHead*c.hd+d])
				}
			}
		})
	}
}

// TestHadamard holds the rotation to what makes it one: orthonormal and
// its own inverse (a row rotated twice comes back to within float
// rounding), the first row all +1/√n.
func TestHadamard(t *testing.T) {
	for _, n := range []int{64, 128, 256} {
		h := hadamard(n)
		for i := range n {
			for j := range n {
				var dot float64
				for k := range n {
					dot += float64(h[i*n+k]) * float64(h[j*n+k])
				}
				if want := map[bool]float64{true: 1, false: 0}[i == j]; math.Abs(dot-want) > 1e-5 {
					t.Fatalf("n %d: row %d · row %d = %v", n, i, j, dot)
				}
			}
		}
		if h[n-1] != float32(1/math.Sqrt(float64(n))) {
			t.Errorf("n %d: h[0][n-1] = %v", n, h[n-1])
		}
		rng := rand.New(rand.NewSource(int64(n)))
		x := make([]float32, 2*n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		y := append([]float32(nil), x...)
		tmp := make([]float32, n)
		rotate(h, n, y, tmp)
		rotate(h, n, y, tmp)
		for i := range x {
			if math.Abs(float64(y[i]-x[i])) > 1e-5 {
				t.Fatalf("n %d: x[%d] = %v rotated twice is %v", n, i, x[i], y[i])
			}
		}
	}
}

// BenchmarkFlashAttnPrompt times flash attention for a prompt's last
// rows (the 110M shape's heads) over an F16 and a Q8_0 cache: the
// quantized cache runs one_chunk per row where F16 runs the tiled path.
func BenchmarkFlashAttnPrompt(b *testing.B) {
	for _, kt := range []kernels.KVTypes{kernels.F16KV, {K: ggml.Q8_0, V: ggml.Q8_0}} {
		b.Run(kt.String(), func(b *testing.B) {
			const n, rows = 1024, 64
			c := quantCase{kt: kt, hd: 64, nHead: 12, nHeadKV: 12, n: n}
			rng := rand.New(rand.NewSource(1))
			f := newQuantFixture(b, c, rng)
			pos := make([]int, rows)
			for i := range pos {
				pos[i] = n - rows + i
			}
			q := make([]float32, rows*c.nHead*c.hd)
			for i := range q {
				q[i] = float32(rng.NormFloat64())
			}
			f.flags = kernels.RowPrompt | kernels.RowLongPrompt
			b.ResetTimer()
			for range b.N {
				f.attend(b, q, pos, nil)
			}
		})
	}
}

// TestRotateSIMD holds faRotate to rotate's Go arithmetic bit for bit,
// over random matrices (the Walsh-Hadamard ones have too few distinct
// entries to show a slip in the lanes' order).
func TestRotateSIMD(t *testing.T) {
	if !faSIMDOK {
		t.Skip("no AVX-512")
	}
	rng := rand.New(rand.NewSource(3))
	for _, n := range []int{16, 64, 128} {
		h := make([]float32, n*n)
		for i := range h {
			h[i] = float32(rng.NormFloat64())
		}
		x := make([]float32, 3*n)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * 10)
		}
		tmp := make([]float32, n)
		want, got := append([]float32(nil), x...), append([]float32(nil), x...)
		faUseSIMD = false
		rotate(h, n, want, tmp)
		faUseSIMD = true
		rotate(h, n, got, tmp)
		for i := range want {
			if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
				t.Fatalf("n %d: x[%d] = %v (SIMD), want %v (Go)", n, i, got[i], want[i])
			}
		}
	}
}

// BenchmarkFlashAttnDecode times one decode row's attention (the 110M
// shape's heads, with 12 KV heads and with 2 as zrtc synth makes it)
// over 8192 and 32768 cached positions: the split-KV path for F16 (per
// query head, or per group of heads sharing a KV head), one_chunk for
// Q8_0.
func BenchmarkFlashAttnDecode(b *testing.B) {
	for _, bc := range []struct {
		kt         kernels.KVTypes
		nHeadKV, n int
	}{
		{kernels.F16KV, 12, 8192}, {kernels.KVTypes{K: ggml.Q8_0, V: ggml.Q8_0}, 12, 8192},
		{kernels.F16KV, 2, 8192}, {kernels.F16KV, 2, 32768},
	} {
		b.Run(fmt.Sprintf("%v/kv%d/n%d", bc.kt, bc.nHeadKV, bc.n), func(b *testing.B) {
			kt, n := bc.kt, bc.n
			c := quantCase{kt: kt, hd: 64, nHead: 12, nHeadKV: bc.nHeadKV, n: n}
			rng := rand.New(rand.NewSource(1))
			f := newQuantFixture(b, c, rng)
			q := make([]float32, c.nHead*c.hd)
			for i := range q {
				q[i] = float32(rng.NormFloat64())
			}
			b.ResetTimer()
			for range b.N {
				f.attend(b, q, []int{n - 1}, nil)
			}
		})
	}
}
