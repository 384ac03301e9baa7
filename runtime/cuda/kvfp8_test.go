package cuda_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/zrtdev/zrt/format/lebin"
	"github.com/zrtdev/zrt/internal/conformance"
	"github.com/zrtdev/zrt/kernels"
	kcuda "github.com/zrtdev/zrt/kernels/cuda"
	"github.com/zrtdev/zrt/kernels/cuda/ptx"
	"github.com/zrtdev/zrt/kernels/quant"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
)

// Kernel-level parity of T-CUDA's FP8 KV cache (cache_type_k = cache_type_v
// = "fp8_e4m3": blocks of 64 E4M3 codes after a float32 scale,
// kernels/quant/fp8.go) with T-CPU's, the reference: every test here has
// FP8KV in its name, so `go test ./runtime/cuda -run FP8KV` runs them all
// (TestParityFP8KVWithCPU compiles the shared models). The kernels code
// E4M3 in integer operations (kv.cuh), so the sm_80 PTX (which cuda:sm_89
// carries) runs them as sm_90's does: ZRT_PTX_ARCH=sm_80 tests it.

// fp8Layout is the FP8 cache (never rotated).
var fp8Layout = kernels.KVTypes{K: kernels.FP8E4M3, V: kernels.FP8E4M3}

// fp8AttnTolerance bounds T-CUDA's FP8-cache attention against T-CPU's,
// relative to max(1, |want|). Both decode V to the same F32 values and
// accumulate in F32 with fused products; a score is T-CPU's products of
// the F32 query with the decoded K values, but T-CUDA scales each block's
// sum of the codes' products once (kv.cuh's e4m3x2) where T-CPU scales
// each value. What differs is that and the order of the sums (a lane's
// block of 64 products, then the head's blocks, where T-CPU takes the
// head in one pass; the warps' online softmax states merged) and expf's
// last bits: about 1e-6 of outputs that average values in ±1, with scores
// of a few units, growing with the keys (measured on an H200, round 27:
// at most 1.4e-6 in TestKernelFP8KVAttention, 3.8e-5 at the llama 7B
// shape's 32768 keys in TestKernelFP8KVAttentionSplit). A misdecoded
// code or a misplaced row or block moves them by 1e-2 or more.
const fp8AttnTolerance = 1e-4

// fp8Values are n activations in ±scale with what the encoder must get
// right: an outlier in block 0; a block of zeros (1); a block whose
// largest magnitude is 448 (2: scale 1, inverse 1, so the codes are the
// values' own) holding ties between codes (to even), subnormal codes and
// their ties, values under half the smallest subnormal and negative
// zero; and the same values over 64 (3: inverse 64, still ties).
func fp8Values(rng *rand.Rand, n int, scale float32) []float32 {
	x := randF32(rng, n, -scale, scale)
	ties := []float32{448, 1.0625, 1.1875, -1.3125, 432, -424, 0.015625, 0.0146484375, 3.0 / 1024, 5.0 / 1024,
		1.0 / 1024, -1.0 / 2048, float32(math.Copysign(0, -1)), 0.001953125, 240, 0.5 + 1.0/32, 7.0 / 512, -0.0029296875}
	for b := 0; b*64 < n && b < 4; b++ {
		blk := x[64*b : 64*b+64]
		switch b {
		case 0:
			blk[5] = 40 * scale
		case 1:
			clear(blk)
		case 2, 3:
			for j := range blk {
				v := float32(j-32) / 7
				if j < len(ties) {
					v = ties[j]
				}
				if b == 3 {
					v /= 64
				}
				blk[j] = v
			}
		}
	}
	return x
}

// compareFP8Cache holds got's bytes to want's, a cache of nPages pages of
// layout lay (T-CPU's, the oracle). exact demands the same bytes;
// otherwise each decoded value of layer's rows may differ by one code
// step of the larger of the two blocks (an E4M3 step is 1/8 of the
// value's power of two, at most 32/448 of the block's scale), as when the
// inputs differ in their last bits. The report names the first blocks
// that differ.
func compareFP8Cache(t *testing.T, what string, lay kernels.KVLayout, layer, nPages int, got, want []byte, exact bool) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: cache of %d bytes, want %d", what, len(got), len(want))
	}
	if exact && bytes.Equal(got, want) {
		t.Logf("%s: the cache's %d bytes are T-CPU's", what, len(got))
		return
	}
	shown, same, total, worst := 0, 0, 0, 0.0
	var gv, wv [quant.FP8Block]float32
	for page := range nPages {
		for which := range 2 {
			for tok := range kernels.KVPageTokens {
				off := lay.Offset(page, layer, which, tok)
				for bl := range lay.Width / quant.FP8Block {
					o := off + bl*quant.FP8BlockBytes
					g, w := got[o:o+quant.FP8BlockBytes], want[o:o+quant.FP8BlockBytes]
					total++
					if bytes.Equal(g, w) {
						same++
						continue
					}
					if err := quant.DequantizeFP8Row(g, gv[:]); err != nil {
						t.Fatal(err)
					}
					if err := quant.DequantizeFP8Row(w, wv[:]); err != nil {
						t.Fatal(err)
					}
					gs, ws := math.Float32frombits(binary.LittleEndian.Uint32(g)), math.Float32frombits(binary.LittleEndian.Uint32(w))
					sc := math.Max(float64(gs), float64(ws))
					bad := exact || math.IsNaN(float64(gs)) != math.IsNaN(float64(ws))
					for j := range quant.FP8Block {
						d := math.Abs(float64(gv[j]) - float64(wv[j]))
						step := e4m3Step(math.Max(math.Abs(float64(gv[j])), math.Abs(float64(wv[j])))/math.Max(sc, 1e-30)) * sc
						worst = math.Max(worst, d/math.Max(step, 1e-30))
						if d > 1.001*step {
							bad = true
						}
					}
					if bad && shown < 5 {
						shown++
						t.Errorf("%s: page %d %s row %d block %d: scale %g codes % x\n\twant scale %g codes % x", what, page, [2]string{"K", "V"}[which], tok, bl,
							gs, g[4:], ws, w[4:])
					}
				}
			}
		}
	}
	if exact && shown == 0 {
		t.Errorf("%s: the cache differs from T-CPU's outside layer %d's rows (the kernel wrote where it should not)", what, layer)
	}
	if !exact && shown == 0 {
		t.Logf("%s: %d of %d blocks are T-CPU's bytes, the others within %.3g code steps", what, same, total, worst)
	}
}

// e4m3Step is the gap between E4M3 codes around the magnitude c: 2^-9
// among the subnormals, else an eighth of c's power of two.
func e4m3Step(c float64) float64 {
	if c < 1.0/64 {
		return 1.0 / 512
	}
	return math.Ldexp(1, int(math.Floor(math.Log2(c)))-3)
}

// TestKernelFP8KVWrite holds kv_write's FP8 instance to T-CPU's bytes
// (quant.QuantizeFP8Row: scale amax/448, codes rounded to nearest, ties
// to even, subnormals included): the kernel's integer E4M3 encoder must
// be the Go encoder bit for bit. The cache's other bytes keep their
// stale 0xAB.
func TestKernelFP8KVWrite(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(61))
	const nLayer, layer, slots, maxPages = 3, 1, 4, 48
	for _, c := range []struct {
		name  string
		kvDim int
		scale float32
	}{
		{"64x3", 192, 3},
		{"128x2", 256, 1},
		{"128x8", 1024, 5},
		{"256x2-tiny", 512, 1e-3},
		{"128x32", 4096, 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := g.with(t)
			rows := len(q8WriteRows)
			lay := kernels.KVLayout{Slots: nLayer, Width: c.kvDim, Types: fp8Layout}
			nPages := slots * maxPages
			kv := make([]byte, nPages*lay.PageBytes())
			for i := range kv {
				kv[i] = 0xab
			}
			k, v := fp8Values(rng, rows*c.kvDim, c.scale), fp8Values(rng, rows*c.kvDim, 1)
			io := ioTable(q8WriteRows, slots, maxPages, rng.Perm(nPages))
			bufs := [][]byte{lebin.Float32Bytes(k), lebin.Float32Bytes(v), io, kv}
			push, spec := []uint32{layer, uint32(c.kvDim)}, []uint32{nLayer}
			inst := kvInstance(t, "kv_write", fp8Layout)
			got, want := g.vsCPU(inst, bufs, push, spec, rows)
			compareFP8Cache(t, inst, lay, layer, nPages, got[3], want[3], true)
		})
	}
}

// TestKernelFP8KVRopeWrite runs the fused rope-and-write families' FP8
// instances (rope_kv_write, rms_norm_rope_kv_write; decode and prefill
// rows) against T-CPU: Q roped (and normed) in place within 1e-5, and the
// cache within one code step of T-CPU's (the tiers' rope may differ in a
// value's last bit, which can move its code; the encoding itself is
// kv_write's, held to the bit by TestKernelFP8KVWrite).
func TestKernelFP8KVRopeWrite(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(62))
	const nLayer, layer, slots, maxPages = 2, 1, 4, 48
	for _, c := range []struct {
		name       string
		nHead, nKV int
		hd, nRot   int
		neox       uint32
		rows       int // 0: q8WriteRows (decode); else a prompt of that many rows
	}{
		{"gqa-128", 8, 2, 128, 128, 0, 0},
		{"neox-partial-64", 6, 2, 64, 32, 1, 0},
		{"prefill-256", 4, 2, 256, 256, 1, 70},
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
				lay := kernels.KVLayout{Slots: nLayer, Width: kvDim, Types: fp8Layout}
				nPages := slots * maxPages
				kv := make([]byte, nPages*lay.PageBytes())
				for i := range kv {
					kv[i] = 0xab
				}
				q := randF32(rng, len(rows)*c.nHead*c.hd, -2, 2)
				k, v := fp8Values(rng, len(rows)*kvDim, 2), fp8Values(rng, len(rows)*kvDim, 1)
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
				inst := kvInstance(t, family, fp8Layout)
				got, want := g.vsCPU(inst, bufs, push, spec, len(rows))
				compareF32(t, inst+" q", got[qi], want[qi], 1e-5)
				compareFP8Cache(t, inst, lay, layer, nPages, got[kvi], want[kvi], false)
			})
		}
	}
}

// TestKernelFP8KVAttention holds flash_attn's and flash_attn_ext's FP8
// instances (heads of 64, 128 and 256; grouped and ungrouped heads;
// decode, mixed and 70-row prefill steps on the decode entry; a soft cap,
// a window and sinks) to T-CPU's FP8-cache attention within
// fp8AttnTolerance, over caches T-CPU wrote (stale blocks NaN); and
// flash_attn to flash_attn_ext without extensions, to the bit (one body).
func TestKernelFP8KVAttention(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(63))
	const nLayer, layer, maxPages = 2, 1, 48
	decode := []krow{{700, 0, 1}}
	mixed := []krow{{5, 0, 1}, {130, 1, 1}, {300, 2, 1}, {31, 3, 1}}
	many := []krow{}
	for i := range 24 {
		many = append(many, krow{uint32(3 + 29*i), uint32(i % 4), 1})
	}
	var prefill []krow
	for i := range 70 {
		prefill = append(prefill, krow{uint32(200 + i), 1, kernels.RowPrompt | kernels.RowLongPrompt})
	}
	for _, c := range []struct {
		name       string
		nHead, nKV int
		hd         int
		rows       []krow
		softcap    float32
		window     uint32
		sinks      bool
		qScale     float32
	}{
		{"gqa4-128-decode", 8, 2, 128, decode, 0, 0, false, 1},
		{"mha-128-many", 16, 16, 128, many, 0, 0, false, 1},
		{"gqa3-64-mixed", 12, 4, 64, mixed, 0, 0, false, 3},
		{"gqa2-256-mixed", 4, 2, 256, mixed, 0, 0, false, 1},
		{"mha-192-mixed", 4, 4, 192, mixed, 0, 0, false, 2},
		{"gqa4-128-prefill", 8, 2, 128, prefill, 0, 0, false, 1},
		{"softcap-128-mixed", 8, 2, 128, mixed, 50, 0, false, 3},
		{"window-64-decode", 8, 4, 64, decode, 0, 37, false, 1},
		{"sinks-128-mixed", 8, 2, 128, mixed, 0, 0, true, 1},
		{"all-256-decode", 8, 4, 256, decode, 30, 513, true, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := g.with(t)
			kvDim := c.nKV * c.hd
			lay := kernels.KVLayout{Slots: nLayer, Width: kvDim, Types: fp8Layout}
			slots := 4
			perm := rng.Perm(slots * maxPages)
			last := map[uint32]uint32{}
			for _, r := range c.rows {
				last[r.slot] = max(last[r.slot], r.pos)
			}
			kv := q8Cache(t, rng, lay, layer, slots, maxPages, perm, last, c.qScale) // T-CPU's kv_write for lay's types
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
			ext := kvInstance(t, "flash_attn_ext", fp8Layout)
			bufs := [][]byte{lebin.Float32Bytes(q), kv, sinks, io, lebin.Float32Bytes(y)}
			got, want := g.vsCPU(ext, bufs, push, spec, len(c.rows))
			compareF32(t, ext+" "+c.name, got[4], want[4], fp8AttnTolerance)
			if c.softcap == 0 && c.window == 0 && !c.sinks {
				plain := kvInstance(t, "flash_attn", fp8Layout)
				if l, err := kcuda.Shape(plain, push, spec[:5], len(c.rows), len(c.rows) >= 64); err != nil || l.Entry == kcuda.EntryTile {
					return
				}
				pb := [][]byte{bufs[0], kv, io, bufs[4]}
				gotPlain := g.run(plain, pb, push, spec[:5], len(c.rows))
				compareF32(t, plain+" vs "+ext, gotPlain[3], got[4], 0)
			}
		})
	}
}

// TestKernelFP8KVAttentionSplit runs the decode attention's _split entry
// (flash decoding across blocks) over FP8 caches T-CPU wrote: against
// T-CPU within fp8AttnTolerance, twice for the same bits, against the
// unsplit main entry within fp8AttnTolerance, and a row too short to
// split to the bit. The long rows are the llama 7B shape's heads at
// depths 4096 and 32768.
func TestKernelFP8KVAttentionSplit(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(64))
	few := []krow{{9000, 0, 1}, {300, 1, 1}, {4100, 2, 1}}
	for _, c := range []q8AttnCase{
		{"gqa16-8-ctx4096", "flash_attn", 16, 8, 128, fp8Layout, []krow{{4095, 0, 1}}, 0, 0, false},
		{"mha32-ctx32768", "flash_attn", 32, 32, 128, fp8Layout, []krow{{32767, 0, 1}}, 0, 0, false},
		{"gqa16-8-hd64-few", "flash_attn", 16, 8, 64, fp8Layout, few, 0, 0, false},
		{"ext-all-hd256-gqa8-4-ctx16384", "flash_attn_ext", 8, 4, 256, fp8Layout, []krow{{16383, 0, 1}}, 30, 10000, true},
	} {
		t.Run(c.name, func(t *testing.T) { splitAttn(t, g.with(t), rng, c, fp8AttnTolerance) })
	}
}

// TestKernelFP8KVAttentionTile runs flash_attn's tensor-core prefill tile
// over FP8 caches (heads of 64 and 128; one long prompt; prompts of three
// slots meeting inside a warp's 16 rows beside decode rows, which
// flash_attn_rest takes; deep chunks) against T-CPU's FP8 attention. The
// tile rounds the query, the decoded K and V and P to F16 for the tensor
// cores, as the F16 and q8_0 tiles do (TestKernelQ8KVAttentionTile): a
// few 1e-3 of outputs that average values in ±1, held to 1e-2 (measured
// on an H200: at most 3.9e-4). Stale blocks (NaN scales) must not reach
// any output.
func TestKernelFP8KVAttentionTile(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(65))
	const nLayer, layer = 2, 1
	long, mixed := tileRows()
	for _, c := range []struct {
		name       string
		nHead, nKV int
		hd         int
		rows       []krow
	}{
		{"long-128", 8, 2, 128, long},
		{"long-64", 12, 4, 64, long},
		{"mixed-128", 16, 8, 128, mixed},
		{"mixed-64-mha", 4, 4, 64, mixed},
		{"deep-128", 16, 8, 128, longPrompt(1, 1500, 200)},
		{"deep-64", 8, 2, 64, longPrompt(0, 1001, 130)},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := g.with(t)
			inst := kvInstance(t, "flash_attn", fp8Layout)
			push, spec := []uint32{layer}, []uint32{nLayer, uint32(c.nHead), uint32(c.nKV), uint32(c.hd), fbits(float32(1 / math.Sqrt(float64(c.hd))))}
			if l, err := kcuda.Shape(inst, push, spec, len(c.rows), true); err != nil || l.Entry != kcuda.EntryTile || l.Rest == nil {
				t.Fatalf("launch %+v, %v: want the tile entry with _rest", l, err)
			}
			slots, maxPages := 5, 48
			for _, r := range c.rows {
				maxPages = max(maxPages, int(r.pos)/kernels.KVPageTokens+1)
			}
			lay := kernels.KVLayout{Slots: nLayer, Width: c.nKV * c.hd, Types: fp8Layout}
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
			one := g.with(t)
			one.threads = 128
			got = one.run(inst, bufs, push, spec, len(c.rows))
			compareF32(t, inst+" tile, unsplit blocks, "+c.name, got[3], want[3], 1e-2)
		})
	}
}

// fp8KVConfig is the model config of an FP8 KV cache.
const fp8KVConfig = "cache_type_k = \"fp8_e4m3\"\ncache_type_v = \"fp8_e4m3\"\n"

// fp8RelTolerance bounds step 0's logits of T-CUDA with an FP8 cache
// against T-CPU with its own FP8 cache (the reference, itself held to
// llama.cpp's F16-cache runs by runtime/cpu's TestParityFP8KV). The
// tiers write the same bytes from the same K and V rows
// (TestKernelFP8KVWrite), but their matrix products differ as in
// TestParityWithCPU (relTolerance), and a K or V value that lies near the
// midpoint of two E4M3 codes may take the other code: a step of up to
// 1/16 of the value (a Q8_0 step is 1/254 of the block's largest), so
// the caches of the two tiers differ in a few values by more than a
// q8_0 cache's do. Larger than relTolerance by that; a misdecoded code
// or a misplaced row moves logits by whole units.
const fp8RelTolerance = 0.1

// TestParityFP8KVWithCPU runs the conformance suite on T-CUDA with an FP8
// KV cache: every shared model compiled for cuda:sm_90 and cuda:sm_89
// (compute_80 PTX: the kernels code E4M3 in integer operations) with
// fp8KVConfig, teacher-forced against T-CPU compiled with the same
// config, within fp8RelTolerance. Models zrtc refuses an FP8 cache for
// (heads that are no whole 64-value blocks) are skipped, naming why; a
// PTX archive without the FP8 instances fails here rather than skipping
// every model.
func TestParityFP8KVWithCPU(t *testing.T) {
	info, err := driver.Probe()
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	if info.Major < 8 || info.Major == 8 && info.Minor < 9 {
		t.Skipf("%s: an FP8 cache needs compute capability 8.9 or later", info)
	}
	t.Logf("device: %s", info)
	for _, target := range []string{"cuda:sm_90", "cuda:sm_89"} {
		t.Run(target, func(t *testing.T) {
			requireFP8KVPTX(t, ptx.TargetArch(target))
			conformance.Run(t, conformance.Tier{Target: target, Options: runtime.Options{Tier: "cuda"}, OracleThreads: 8, RelTolerance: fp8RelTolerance,
				RoutedSpikes: 2, Config: fp8KVConfig, OracleConfig: fp8KVConfig})
		})
	}
}

// requireFP8KVPTX fails the test unless arch's PTX for the FP8 cache is at
// hand: in $ZRT_PTX_DIR where set, else in the embedded archive.
func requireFP8KVPTX(t *testing.T, arch string) {
	t.Helper()
	if dir := os.Getenv("ZRT_PTX_DIR"); dir != "" {
		name := kernels.KVInstanceName(mustLookup(t, "flash_attn"), fp8Layout)
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(ptx.File(arch, name)))); err != nil {
			t.Fatalf("ZRT_PTX_DIR lacks the FP8 cache's kernels: %v (run kernels/cuda/build_ptx.sh after make generate)", err)
		}
		return
	}
	if !slices.Contains(ptx.KVLayouts(arch), fp8Layout) {
		t.Fatalf("the embedded PTX archive has no %s kernels for the FP8 cache: rebuild it (kernels/cuda/build_ptx.sh, then go run ./kernels/cuda/gen -pack) or set ZRT_PTX_DIR", arch)
	}
}
