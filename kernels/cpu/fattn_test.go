package cpu

import (
	"bytes"
	"fmt"
	"math"
	"math/rand"
	"testing"
	"unsafe"

	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/kernels/quant"
)

// faCase is one flash-attention dispatch: rows query rows of slots whose
// positions run from start (row i of slot s at start[s]+i/len(start)).
type faCase struct {
	hd, nHead, nHeadKV, rows int
	start                    []int // per slot: the first row's position
	// flash_attn_ext's extensions, none by default.
	window  int
	softcap float32
	sinks   bool
}

// runFA runs flash_attn on random data for c, with the SIMD kernels on or
// off, and returns the output.
func runFA(t *testing.T, c faCase, simd bool, seed int64) []float32 {
	return runFAThreads(t, c, simd, seed, 2)
}

// runFAThreads is runFA on a pool of threads workers.
func runFAThreads(t *testing.T, c faCase, simd bool, seed int64, threads int) []float32 {
	t.Helper()
	rng := rand.New(rand.NewSource(seed))
	const nLayer, layer = 2, 1
	kvDim := c.nHeadKV * c.hd
	slots := len(c.start)
	maxPos := 0
	for _, s := range c.start {
		maxPos = max(maxPos, s+(c.rows+slots-1)/slots)
	}
	maxPages := maxPos/kernels.KVPageTokens + 1
	nPages := slots * maxPages
	kv := make([]byte, nPages*kernels.KVPageBytes(nLayer, kvDim))
	h := u16s(kv)
	for i := range h {
		h[i] = quant.F32ToF16(float32(rng.NormFloat64()))
	}
	table := kernels.RequestTable{Rows: c.rows, Slots: slots, MaxPages: maxPages}
	io := make([]uint32, table.Words())
	io[kernels.IOWordRows] = uint32(c.rows)
	io[kernels.IOWordMaxPages] = uint32(maxPages)
	pt := table.PageTable()
	io[kernels.IOWordPageTable] = uint32(pt)
	perm := rng.Perm(nPages) // pages scattered
	for i := range slots * maxPages {
		io[pt+i] = uint32(perm[i])
	}
	// A slot's rows are its request's whole prompt when there are several
	// (long from kernels.LongPromptRows on), a decode row when one.
	perSlot := make([]int, slots)
	for i := range c.rows {
		perSlot[i%slots]++
	}
	for i := range c.rows {
		s := i % slots
		base := kernels.IOWordRowBase + i*kernels.IORowWords
		io[base+kernels.IORowSlot] = uint32(s)
		io[base+kernels.IORowPos] = uint32(c.start[s] + i/slots)
		if n := perSlot[s]; n > 1 {
			io[base+kernels.IORowFlags] = kernels.RowPrompt
			if n >= kernels.LongPromptRows {
				io[base+kernels.IORowFlags] |= kernels.RowLongPrompt
			}
		}
	}
	q := make([]float32, c.rows*c.nHead*c.hd)
	for i := range q {
		q[i] = float32(rng.NormFloat64() * 2)
	}
	y := make([]float32, len(q))
	scale := float32(1 / math.Sqrt(float64(c.hd)))
	prev := faUseSIMD
	faUseSIMD = simd
	defer func() { faUseSIMD = prev }()
	pool := NewPool(threads)
	defer pool.Close()
	a := &Args{
		Bufs: [][]byte{f32bytes(q), kv, u32bytes(io), f32bytes(y)},
		Push: []uint32{layer},
		Spec: []uint32{nLayer, uint32(c.nHead), uint32(c.nHeadKV), uint32(c.hd), math.Float32bits(scale)},
		Pool: pool,
	}
	if threads > 1 {
		// Scratch left full of NaNs by an earlier kernel: split rows'
		// parts come from it, and must be written before they are read
		// (the one-thread run, the reference, gets fresh scratch).
		work := bytes.Repeat([]byte{0xff}, 1<<20)
		a.Work = &work
	}
	if c.window == 0 && c.softcap == 0 && !c.sinks {
		if err := flashAttn(newKVCache(kernels.F16KV), a); err != nil {
			t.Fatal(err)
		}
		return y
	}
	var sinks []byte
	if c.sinks {
		s := make([]float32, c.nHead)
		for i := range s {
			s[i] = float32(rng.NormFloat64() * 2)
		}
		sinks = f32bytes(s)
	}
	a.Bufs = [][]byte{a.Bufs[0], kv, sinks, a.Bufs[2], a.Bufs[3]}
	a.Spec = append(a.Spec, math.Float32bits(c.softcap), uint32(c.window))
	if err := flashAttnExt(newKVCache(kernels.F16KV), a); err != nil {
		t.Fatal(err)
	}
	return y
}

func f32bytes(x []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
}

func u32bytes(x []uint32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
}

// TestFlashAttnSIMD checks that the AVX-512 kernels give the pure-Go
// code's bits on every path (one_chunk, split, tiled), for head sizes that
// are and are not multiples of the 64-wide groups, ragged tiles and pages,
// and batches mixing slots.
func TestFlashAttnSIMD(t *testing.T) {
	if !faSIMDOK {
		t.Skip("no AVX-512")
	}
	var cases []faCase
	for _, hd := range []int{16, 48, 64, 80, 128, 40} {
		cases = append(cases,
			faCase{hd: hd, nHead: 4, nHeadKV: 2, rows: 1, start: []int{0}},
			faCase{hd: hd, nHead: 4, nHeadKV: 2, rows: 1, start: []int{37}},
			faCase{hd: hd, nHead: 4, nHeadKV: 1, rows: 1, start: []int{255}},
			faCase{hd: hd, nHead: 4, nHeadKV: 2, rows: 1, start: []int{300}},  // split, second chunk short
			faCase{hd: hd, nHead: 2, nHeadKV: 2, rows: 1, start: []int{700}},  // split over 768
			faCase{hd: hd, nHead: 6, nHeadKV: 2, rows: 3, start: []int{5}},    // one_chunk, several rows
			faCase{hd: hd, nHead: 4, nHeadKV: 2, rows: 64, start: []int{0}},   // tiled, one tile per row at most
			faCase{hd: hd, nHead: 6, nHeadKV: 3, rows: 70, start: []int{100}}, // tiled, ragged
			faCase{hd: hd, nHead: 4, nHeadKV: 2, rows: 131, start: []int{0, 9}},
		)
	}
	// flash_attn_ext's tiled rows: windows that start inside a tile, on a
	// tile's edge and before the first key; soft-capping; sinks.
	for _, hd := range []int{64, 128} {
		cases = append(cases,
			faCase{hd: hd, nHead: 4, nHeadKV: 2, rows: 140, start: []int{100}, window: 37},
			faCase{hd: hd, nHead: 4, nHeadKV: 1, rows: 70, start: []int{0}, window: 64},
			faCase{hd: hd, nHead: 4, nHeadKV: 2, rows: 131, start: []int{0, 300}, window: 200, softcap: 50},
			faCase{hd: hd, nHead: 4, nHeadKV: 2, rows: 64, start: []int{40}, softcap: 30, sinks: true},
			faCase{hd: hd, nHead: 8, nHeadKV: 2, rows: 96, start: []int{250}, window: 128, sinks: true},
		)
	}
	// Split decode rows whose query heads share a KV head run as one item
	// a group, tile by tile (groupChunk): chunks of several tiles, a
	// ragged last tile, head sizes with a scalar tail, a window starting
	// inside a tile, soft-capping and sinks.
	cases = append(cases,
		faCase{hd: 64, nHead: 12, nHeadKV: 2, rows: 1, start: []int{3000}},
		faCase{hd: 80, nHead: 6, nHeadKV: 2, rows: 1, start: []int{1500}},
		faCase{hd: 128, nHead: 8, nHeadKV: 1, rows: 2, start: []int{1100, 2600}},
		faCase{hd: 64, nHead: 4, nHeadKV: 2, rows: 1, start: []int{2000}, window: 900, softcap: 30, sinks: true},
		faCase{hd: 64, nHead: 10, nHeadKV: 2, rows: 1, start: []int{1000}},  // groups of 5: three heads, then two
		faCase{hd: 48, nHead: 8, nHeadKV: 2, rows: 1, start: []int{900}},    // groups of 4: two and two, 16-wide columns only
		faCase{hd: 128, nHead: 14, nHeadKV: 2, rows: 1, start: []int{1300}}, // groups of 7: scores six heads, then one
		faCase{hd: 64, nHead: 14, nHeadKV: 1, rows: 1, start: []int{1234}},  // a group of 14: scores 6, 6, 2
	)
	for i, c := range cases {
		t.Run(fmt.Sprintf("%d_hd%d_h%d-%d_rows%d_start%v_w%d_cap%v_sinks%v", i, c.hd, c.nHead, c.nHeadKV, c.rows, c.start, c.window, c.softcap, c.sinks), func(t *testing.T) {
			want := runFA(t, c, false, int64(i))
			got := runFA(t, c, true, int64(i))
			for j := range want {
				if math.Float32bits(want[j]) != math.Float32bits(got[j]) {
					t.Fatalf("y[%d] = %v (SIMD), want %v (Go)", j, got[j], want[j])
				}
			}
		})
	}
}

// TestFlashAttnThreads holds flash attention's bits to be those of one
// thread on any number of threads: decode rows over long caches, whose
// split-KV chunks run as separate work items and are merged afterwards,
// alone and beside other slots' rows and prompts, with the SIMD kernels
// and without.
func TestFlashAttnThreads(t *testing.T) {
	cases := []faCase{
		{hd: 64, nHead: 4, nHeadKV: 2, rows: 1, start: []int{5000}},
		{hd: 64, nHead: 2, nHeadKV: 1, rows: 3, start: []int{600, 2000, 40}},          // split, split, one_chunk
		{hd: 128, nHead: 4, nHeadKV: 4, rows: 2, start: []int{1500, 511}},             // split over 1536 and 512
		{hd: 64, nHead: 4, nHeadKV: 2, rows: 2, start: []int{3000, 900}, window: 700}, // a window inside the first chunk
		{hd: 64, nHead: 4, nHeadKV: 2, rows: 1, start: []int{1000}, sinks: true, softcap: 20},
		{hd: 48, nHead: 3, nHeadKV: 1, rows: 1, start: []int{777}},
	}
	for i, c := range cases {
		for _, simd := range []bool{false, true} {
			if simd && !faSIMDOK {
				continue
			}
			t.Run(fmt.Sprintf("%d_simd%v", i, simd), func(t *testing.T) {
				want := runFAThreads(t, c, simd, int64(i), 1)
				for _, threads := range []int{2, 3, 8} {
					got := runFAThreads(t, c, simd, int64(i), threads)
					for j := range want {
						if math.Float32bits(want[j]) != math.Float32bits(got[j]) {
							t.Fatalf("%d threads: y[%d] = %v, one thread %v", threads, j, got[j], want[j])
						}
					}
				}
			})
		}
	}
}

// TestOnlineCoefsSIMD: faCoefs (through onlineCoefs) gives the pure-Go
// loop's coefficients, maximum and sum bit for bit, for runs with many
// new maxima, ties, zeros and ones that start from -Inf or a running
// state, and lengths off the 16-key blocks.
func TestOnlineCoefsSIMD(t *testing.T) {
	if !faSIMDOK {
		t.Skip("no AVX-512")
	}
	rng := rand.New(rand.NewSource(7))
	for trial := range 400 {
		n := 1 + rng.Intn(300)
		sc := make([]float32, n)
		for j := range sc {
			switch trial % 4 {
			case 0:
				sc[j] = float32(rng.NormFloat64() * 8)
			case 1: // rising: a new maximum at most keys
				sc[j] = float32(j)*0.25 + float32(rng.NormFloat64())
			case 2: // ties and zeros
				sc[j] = float32(rng.Intn(3)-1) * 0.5
			default:
				sc[j] = float32(rng.NormFloat64() * 100)
			}
		}
		o := faOpts{scale: float32(0.05 + rng.Float64())}
		m, s := float32(math.Inf(-1)), float32(0)
		if trial%3 == 1 {
			m, s = float32(rng.NormFloat64()*4), float32(1+rng.Float64()*100)
		}
		want, got := append([]float32(nil), sc...), append([]float32(nil), sc...)
		wc, gc := make([]float32, 2*n), make([]float32, 2*n)
		nm := make([]bool, n)
		wm, ws := onlineCoefs(want, wc, nm, m, s, &o, false)
		gm, gs := onlineCoefs(got, gc, nm, m, s, &o, true)
		if math.Float32bits(wm) != math.Float32bits(gm) || math.Float32bits(ws) != math.Float32bits(gs) {
			t.Fatalf("trial %d (n %d): M, S = %v, %v (SIMD), want %v, %v", trial, n, gm, gs, wm, ws)
		}
		for j := range wc {
			if math.Float32bits(wc[j]) != math.Float32bits(gc[j]) {
				t.Fatalf("trial %d (n %d): coef[%d] = %v (SIMD), want %v", trial, n, j, gc[j], wc[j])
			}
		}
	}
}
