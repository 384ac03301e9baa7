package cuda_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/lebin"
	"github.com/zrtdev/zrt/kernels"
	kcuda "github.com/zrtdev/zrt/kernels/cuda"
	"github.com/zrtdev/zrt/kernels/quant"
)

// Kernel-level parity of T-CUDA's q8_0 KV cache (cache_type_k = cache_type_v
// = "q8_0"; the instances of kernels/cuda's KVLayouts) with T-CPU's: every
// test here has Q8KV in its name, so `go test ./runtime/cuda -run Q8KV`
// runs them all (TestParityQ8KVWithCPU, in parity_test.go, compiles the
// shared models).

// q8Layout is the q8_0 cache rotated by rotK and rotV (0: not rotated).
func q8Layout(rotK, rotV int) kernels.KVTypes {
	return kernels.KVTypes{K: ggml.Q8_0, V: ggml.Q8_0, RotK: rotK, RotV: rotV}
}

// kvInstance is family's instance for the cache kv.
func kvInstance(t *testing.T, family string, kv kernels.KVTypes) string {
	t.Helper()
	return kernels.KVInstanceName(mustLookup(t, family), kv)
}

// q8Block is one Q8_0 block of a cache: where it is and what it holds.
type q8Block struct {
	page, which, tok, block int
	d                       float32
	qs                      [32]int8
}

func (b q8Block) String() string {
	return fmt.Sprintf("page %d %s row %d block %d: scale %g quants %v", b.page, [2]string{"K", "V"}[b.which], b.tok, b.block, b.d, b.qs)
}

// q8Blocks walks the blocks of layer's rows in a cache of nPages pages of
// layout lay, calling f with each block of a (and the same block of b).
func q8Blocks(lay kernels.KVLayout, layer, nPages int, a, b []byte, f func(x, y q8Block)) {
	blocks := lay.Width / 32
	for page := range nPages {
		for which := range 2 {
			for tok := range kernels.KVPageTokens {
				off := lay.Offset(page, layer, which, tok)
				for bl := range blocks {
					o := off + bl*34
					x, y := q8Block{page: page, which: which, tok: tok, block: bl}, q8Block{page: page, which: which, tok: tok, block: bl}
					x.d = quant.F16ToF32(binary.LittleEndian.Uint16(a[o:]))
					y.d = quant.F16ToF32(binary.LittleEndian.Uint16(b[o:]))
					for j := range 32 {
						x.qs[j], y.qs[j] = int8(a[o+2+j]), int8(b[o+2+j])
					}
					f(x, y)
				}
			}
		}
	}
}

// compareQ8Cache holds got's bytes to want's, the cache of nPages pages
// of layout lay (T-CPU's, the oracle). exact demands the same bytes
// (the same rotation and rounding of the same F32 input); otherwise each
// value of layer's rows may differ by one quantization step (the larger
// of the two blocks' scales), as when the inputs themselves differ in
// their last bits. The report names the first blocks that differ.
func compareQ8Cache(t *testing.T, what string, lay kernels.KVLayout, layer, nPages int, got, want []byte, exact bool) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: cache of %d bytes, want %d", what, len(got), len(want))
	}
	if exact {
		diff := 0
		for i := range got {
			if got[i] != want[i] {
				diff++
			}
		}
		if diff == 0 {
			t.Logf("%s: the cache's %d bytes are T-CPU's", what, len(got))
			return
		}
		t.Errorf("%s: %d of the cache's %d bytes differ from T-CPU's (want the same bits)", what, diff, len(got))
	}
	shown, same, total, worst := 0, 0, 0, 0.0
	q8Blocks(lay, layer, nPages, got, want, func(g, w q8Block) {
		total++
		if g.d == w.d && g.qs == w.qs {
			same++
			return
		}
		step := math.Max(float64(g.d), float64(w.d))
		bad := exact || math.IsNaN(float64(g.d)) != math.IsNaN(float64(w.d))
		for j := range 32 {
			d := math.Abs(float64(g.qs[j])*float64(g.d) - float64(w.qs[j])*float64(w.d))
			worst = math.Max(worst, d/math.Max(step, 1e-30))
			if d > 1.001*step || (g.d == w.d && math.Abs(float64(g.qs[j])-float64(w.qs[j])) > 1) {
				bad = true
			}
		}
		if bad && shown < 5 {
			shown++
			t.Errorf("%s: %v\n\twant %v", what, g, w)
		}
	})
	if !exact && shown == 0 {
		t.Logf("%s: %d of %d blocks are T-CPU's bytes, the others within %.3g quantization steps", what, same, total, worst)
	}
	if exact && shown == 0 {
		t.Errorf("%s: the differing bytes are outside layer %d's rows (the kernel wrote where it should not)", what, layer)
	}
}

// q8WriteRows are rows of a decode and prefill step for the write tests:
// several slots, two rows in one page, positions at page starts and ends.
var q8WriteRows = []krow{{0, 0, 1}, {15, 1, 1}, {16, 1, 1}, {17, 1, 1}, {300, 2, 1}, {767, 0, 1}, {40, 3, 1}}

// q8Values are n activations in ±scale with what a quantizer must get
// right: an outlier, a block of zeros, and a block whose products with
// 127/amax fall on halves (rounded to even).
func q8Values(rng *rand.Rand, n int, scale float32) []float32 {
	x := randF32(rng, n, -scale, scale)
	if n >= 96 {
		x[5] = 40 * scale
		for j := 32; j < 64; j++ {
			x[j] = 0
		}
		x[64] = 127
		for j := 65; j < 96; j++ {
			x[j] = float32(j-80) + 0.5
		}
	}
	return x
}

// TestKernelQ8KVWrite holds kv_write's q8_0 instances (each rotation) to
// T-CPU's bytes: the same Walsh-Hadamard rotation (tinyBLAS's order of
// FMAs) and the same Q8_0 rounding (127/amax, half to even, F16 scale) of
// the same F32 rows give the same cache. The cache's other bytes keep
// their stale 0xAB.
func TestKernelQ8KVWrite(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(21))
	const nLayer, layer, slots, maxPages = 3, 1, 4, 48
	for _, c := range []struct {
		name  string
		kvDim int
		kv    kernels.KVTypes
	}{
		{"plain-96x2", 192, q8Layout(0, 0)},
		{"rk64-64x4", 256, q8Layout(64, 64)},
		{"rk128-128x2", 256, q8Layout(128, 64)},
		{"rk128-128x8", 1024, q8Layout(128, 64)},
		{"rk256-256x2", 512, q8Layout(256, 64)},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := g.with(t)
			rows := len(q8WriteRows)
			lay := kernels.KVLayout{Slots: nLayer, Width: c.kvDim, Types: c.kv}
			nPages := slots * maxPages
			kv := make([]byte, nPages*lay.PageBytes())
			for i := range kv {
				kv[i] = 0xab
			}
			k, v := q8Values(rng, rows*c.kvDim, 3), q8Values(rng, rows*c.kvDim, 1)
			io := ioTable(q8WriteRows, slots, maxPages, rng.Perm(nPages))
			bufs := [][]byte{lebin.Float32Bytes(k), lebin.Float32Bytes(v), io, kv}
			push, spec := []uint32{layer, uint32(c.kvDim)}, []uint32{nLayer}
			inst := kvInstance(t, "kv_write", c.kv)
			got, want := g.vsCPU(inst, bufs, push, spec, rows)
			compareQ8Cache(t, inst, lay, layer, nPages, got[3], want[3], true)
		})
	}
}

// TestKernelQ8KVRopeWrite runs the fused rope-and-write families' q8_0
// instances (rope_kv_write, rms_norm_rope_kv_write; decode and prefill
// rows) against T-CPU: Q roped (and normed) in place within 1e-5, and the
// cache within one quantization step of T-CPU's (the two tiers' rope may
// differ in the last bit of a value, which can move its quant by one;
// the rotation and rounding themselves are kv_write's, held to the bit by
// TestKernelQ8KVWrite).
func TestKernelQ8KVRopeWrite(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(22))
	const nLayer, layer, slots, maxPages = 2, 1, 4, 48
	for _, c := range []struct {
		name       string
		nHead, nKV int
		hd, nRot   int
		neox       uint32
		kv         kernels.KVTypes
		rows       int // 0: q8WriteRows (decode); else a prompt of that many rows
	}{
		{"rk128-gqa", 8, 2, 128, 128, 0, q8Layout(128, 64), 0},
		{"rk64-neox-partial", 6, 2, 64, 32, 1, q8Layout(64, 64), 0},
		{"plain96", 4, 4, 96, 96, 1, q8Layout(0, 0), 0},
		{"rk256-prefill", 4, 2, 256, 256, 1, q8Layout(256, 64), 70},
	} {
		for _, family := range []string{"rope_kv_write", "rms_norm_rope_kv_write"} {
			t.Run(family+"/"+c.name, func(t *testing.T) {
				g := g.with(t)
				rows := q8WriteRows
				if c.rows > 0 {
					rows = nil
					for i := range c.rows {
						rows = append(rows, krow{uint32(100 + i), 2, kernels.RowPrompt | kernels.RowLongPrompt})
					}
				}
				kvDim := c.nKV * c.hd
				lay := kernels.KVLayout{Slots: nLayer, Width: kvDim, Types: c.kv}
				nPages := slots * maxPages
				kv := make([]byte, nPages*lay.PageBytes())
				for i := range kv {
					kv[i] = 0xab
				}
				q := randF32(rng, len(rows)*c.nHead*c.hd, -2, 2)
				k, v := q8Values(rng, len(rows)*kvDim, 2), q8Values(rng, len(rows)*kvDim, 1)
				io := ioTable(rows, slots, maxPages, rng.Perm(nPages))
				spec := []uint32{nLayer, uint32(c.nHead), uint32(c.nKV), uint32(c.hd), uint32(c.nRot), c.neox, fbits(10000), fbits(1)}
				bufs := [][]byte{lebin.Float32Bytes(q), lebin.Float32Bytes(k), lebin.Float32Bytes(v), io, kv}
				qi, kvi := 0, 4
				if family == "rms_norm_rope_kv_write" {
					spec = append(spec, fbits(1e-6))
					wq, wk := randF32(rng, c.hd, 0.5, 1.5), randF32(rng, c.hd, 0.5, 1.5)
					bufs = [][]byte{lebin.Float32Bytes(q), lebin.Float32Bytes(k), lebin.Float32Bytes(v), lebin.Float32Bytes(wq), lebin.Float32Bytes(wk), io, kv}
					kvi = 6
				}
				push := []uint32{layer}
				inst := kvInstance(t, family, c.kv)
				got, want := g.vsCPU(inst, bufs, push, spec, len(rows))
				compareF32(t, inst+" q", got[qi], want[qi], 1e-5)
				compareQ8Cache(t, inst, lay, layer, nPages, got[kvi], want[kvi], false)
			})
		}
	}
}

// q8Cache returns a cache of slots·maxPages pages (pages of slot s
// scattered by perm) of layout lay whose layer holds, for every slot's
// positions up to last[slot], K and V rows written by T-CPU's kv_write
// (random values in ±kScale and ±1); every other block of the cache has a
// NaN scale (stale bytes, which attention must never read).
func q8Cache(t *testing.T, rng *rand.Rand, lay kernels.KVLayout, layer, slots, maxPages int, perm []int, last map[uint32]uint32, kScale float32) []byte {
	t.Helper()
	kv := make([]byte, slots*maxPages*lay.PageBytes())
	for i := range kv {
		kv[i] = 0xff // an F16 scale of 0xffff: NaN
	}
	var rows []krow
	for s := range slots {
		if hi, ok := last[uint32(s)]; ok {
			for p := uint32(0); p <= hi; p++ {
				rows = append(rows, krow{p, uint32(s), 0})
			}
		}
	}
	k := randF32(rng, len(rows)*lay.Width, -kScale, kScale)
	v := randF32(rng, len(rows)*lay.Width, -1, 1)
	io := ioTable(rows, slots, maxPages, perm)
	out := cpuRun(t, kernels.KVInstanceName(mustLookup(t, "kv_write"), lay.Types), [][]byte{lebin.Float32Bytes(k), lebin.Float32Bytes(v), io, kv},
		[]uint32{uint32(layer), uint32(lay.Width)}, []uint32{uint32(lay.Slots)})
	return out[3]
}

// q8AttnTolerance bounds T-CUDA's q8_0-cache attention against T-CPU's,
// relative to max(1, |want|). Both rotate and quantize the query to the
// same bits and take the same exact integer block sums, scaled alike, and
// both accumulate values in F32 (T-CPU's VKQ32): what differs is the
// order of the softmax's sums (warps' online states merged, against one
// pass) and expf's last bits, about 1e-6 of outputs that average values
// in ±1. A misplaced row, block or rotation moves them by 1e-2 or more.
const q8AttnTolerance = 1e-4

// TestKernelQ8KVAttention holds flash_attn's and flash_attn_ext's q8_0
// instances (each rotation; grouped and ungrouped heads; decode, mixed
// and 70-row prefill steps; a soft cap, a window and sinks) to T-CPU's
// q8_0-cache attention (ggml's one_chunk) within q8AttnTolerance, over
// caches T-CPU wrote; and flash_attn to flash_attn_ext without
// extensions, to the bit (one body).
func TestKernelQ8KVAttention(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(23))
	const nLayer, layer, maxPages = 2, 1, 48
	decode := []krow{{700, 0, 1}}
	mixed := []krow{{5, 0, 1}, {130, 1, 1}, {300, 2, 1}, {31, 3, 1}}
	many := []krow{}
	for i := range 24 {
		many = append(many, krow{uint32(3 + 29*i), uint32(i % 4), 1})
	}
	var prefill []krow
	for i := range 70 { // a prefill variant: still the one decode entry
		prefill = append(prefill, krow{uint32(200 + i), 1, kernels.RowPrompt | kernels.RowLongPrompt})
	}
	type acase struct {
		name       string
		nHead, nKV int
		hd         int
		kv         kernels.KVTypes
		rows       []krow
		softcap    float32
		window     uint32
		sinks      bool
		qScale     float32
	}
	cases := []acase{
		{"rk128-gqa4-decode", 8, 2, 128, q8Layout(128, 64), decode, 0, 0, false, 1},
		{"rk128-mha-many", 16, 16, 128, q8Layout(128, 64), many, 0, 0, false, 1},
		{"rk64-gqa3-mixed", 12, 4, 64, q8Layout(64, 64), mixed, 0, 0, false, 3},
		{"rk256-gqa2-mixed", 4, 2, 256, q8Layout(256, 64), mixed, 0, 0, false, 1},
		{"plain96-mha-mixed", 4, 4, 96, q8Layout(0, 0), mixed, 0, 0, false, 2},
		{"plain160-gqa2-decode", 4, 2, 160, q8Layout(0, 0), decode, 0, 0, false, 1},
		{"rk128-gqa4-prefill", 8, 2, 128, q8Layout(128, 64), prefill, 0, 0, false, 1},
		{"softcap-rk128-mixed", 8, 2, 128, q8Layout(128, 64), mixed, 50, 0, false, 3},
		{"window-rk64-decode", 8, 4, 64, q8Layout(64, 64), decode, 0, 37, false, 1},
		{"sinks-rk128-mixed", 8, 2, 128, q8Layout(128, 64), mixed, 0, 0, true, 1},
		{"all-rk256-decode", 8, 4, 256, q8Layout(256, 64), decode, 30, 513, true, 3},
		{"all-rk128-prefill", 8, 2, 128, q8Layout(128, 64), prefill, 50, 64, true, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := g.with(t)
			kvDim := c.nKV * c.hd
			lay := kernels.KVLayout{Slots: nLayer, Width: kvDim, Types: c.kv}
			slots := 4
			perm := rng.Perm(slots * maxPages)
			last := map[uint32]uint32{}
			for _, r := range c.rows {
				last[r.slot] = max(last[r.slot], r.pos)
			}
			kv := q8Cache(t, rng, lay, layer, slots, maxPages, perm, last, c.qScale)
			q := randF32(rng, len(c.rows)*c.nHead*c.hd, -c.qScale, c.qScale)
			y := make([]float32, len(c.rows)*c.nHead*c.hd)
			var sinks []byte
			if c.sinks {
				sinks = lebin.Float32Bytes(randF32(rng, c.nHead, -1, 5))
			}
			io := ioTable(c.rows, slots, maxPages, perm)
			scale := float32(1 / math.Sqrt(float64(c.hd)))
			push := []uint32{layer}
			spec := []uint32{nLayer, uint32(c.nHead), uint32(c.nKV), uint32(c.hd), fbits(scale), fbits(c.softcap), c.window}
			ext := kvInstance(t, "flash_attn_ext", c.kv)
			bufs := [][]byte{lebin.Float32Bytes(q), kv, sinks, io, lebin.Float32Bytes(y)}
			got, want := g.vsCPU(ext, bufs, push, spec, len(c.rows))
			compareF32(t, ext+" "+c.name, got[4], want[4], q8AttnTolerance)
			if c.softcap == 0 && c.window == 0 && !c.sinks {
				// flash_attn: the same body, unless a prefill step takes
				// the tensor-core tile (TestKernelQ8KVAttentionTile's).
				plain := kvInstance(t, "flash_attn", c.kv)
				if l, err := kcuda.Shape(plain, push, spec[:5], len(c.rows), len(c.rows) >= 64); err != nil || l.Entry == kcuda.EntryTile {
					return
				}
				pb := [][]byte{bufs[0], kv, io, bufs[4]}
				gotPlain := g.run(plain, pb, push, spec[:5], len(c.rows))
				compareF32(t, plain+" vs "+ext, gotPlain[3], got[4], 0)
				compareF32(t, plain+" vs T-CPU", gotPlain[3], cpuRun(t, plain, pb, push, spec[:5])[3], q8AttnTolerance)
			}
		})
	}
}

// TestKernelQ8KVAttentionTile runs flash_attn's tensor-core prefill tile
// over q8_0 caches (heads of 64 and 128, rotated and not; one long
// prompt; prompts of three slots meeting inside a warp's 16 rows beside
// decode rows, which flash_attn_rest takes) against T-CPU's q8_0
// attention. The tile rounds the rotated query, the dequantized K and V
// and P to F16 for the tensor cores, as the F16 tile rounds Q and P
// (TestKernelFlashAttnTile): a few 1e-3 of outputs that average values in
// ±1, held to 1e-2. Stale cache blocks (NaN scales) past every slot's
// last position must not reach any output. The deep cases are chunks of
// prompts far into their context: blocks starting mid-page, many tiles.
func TestKernelQ8KVAttentionTile(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(24))
	const nLayer, layer = 2, 1
	long, mixed := tileRows()
	for _, c := range []struct {
		name       string
		nHead, nKV int
		hd         int
		kv         kernels.KVTypes
		rows       []krow
	}{
		{"long-rk128", 8, 2, 128, q8Layout(128, 64), long},
		{"long-rk64", 12, 4, 64, q8Layout(64, 64), long},
		{"mixed-rk128", 16, 8, 128, q8Layout(128, 64), mixed},
		{"mixed-rk64-mha", 4, 4, 64, q8Layout(64, 64), mixed},
		{"mixed-plain128", 8, 2, 128, q8Layout(0, 0), mixed},
		{"deep-rk128", 16, 8, 128, q8Layout(128, 64), longPrompt(1, 1500, 200)},
		{"deep-plain64", 8, 2, 64, q8Layout(0, 0), longPrompt(0, 1001, 130)},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := g.with(t)
			inst := kvInstance(t, "flash_attn", c.kv)
			push, spec := []uint32{layer}, []uint32{nLayer, uint32(c.nHead), uint32(c.nKV), uint32(c.hd), fbits(float32(1 / math.Sqrt(float64(c.hd))))}
			if l, err := kcuda.Shape(inst, push, spec, len(c.rows), true); err != nil || l.Entry != kcuda.EntryTile || l.Rest == nil {
				t.Fatalf("launch %+v, %v: want the tile entry with _rest", l, err)
			}
			slots, maxPages := 5, 48
			for _, r := range c.rows {
				maxPages = max(maxPages, int(r.pos)/kernels.KVPageTokens+1)
			}
			lay := kernels.KVLayout{Slots: nLayer, Width: c.nKV * c.hd, Types: c.kv}
			perm := rng.Perm(slots * maxPages)
			last := map[uint32]uint32{}
			for _, r := range c.rows {
				last[r.slot] = max(last[r.slot], r.pos)
			}
			kv := q8Cache(t, rng, lay, layer, slots, maxPages, perm, last, 1)
			q := randF32(rng, len(c.rows)*c.nHead*c.hd, -1, 1)
			y := make([]float32, len(c.rows)*c.nHead*c.hd)
			bufs := [][]byte{lebin.Float32Bytes(q), kv, ioTable(c.rows, slots, maxPages, perm), lebin.Float32Bytes(y)}
			got, want := g.vsCPU(inst, bufs, push, spec, len(c.rows))
			compareF32(t, inst+" tile "+c.name, got[3], want[3], 1e-2)
			one := g.with(t) // the blocks of a launch of many (TestKernelFlashAttnTile)
			one.threads = 128
			got = one.run(inst, bufs, push, spec, len(c.rows))
			compareF32(t, inst+" tile, unsplit blocks, "+c.name, got[3], want[3], 1e-2)
		})
	}
}
