package cuda_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/lebin"
	"github.com/zrtdev/zrt/kernels"
	kcuda "github.com/zrtdev/zrt/kernels/cuda"
	"github.com/zrtdev/zrt/kernels/quant"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
	"github.com/zrtdev/zrt/runtime/sequence"
)

// The split decode attention (the _split entries of flash_attn and
// flash_attn_ext: flash decoding across blocks, kernels/cuda/fa.cuh) over
// long caches. Every test here has Split in its name:
// `go test ./runtime/cuda -run Split` runs them.

// splitRefTolerance bounds T-CUDA's F16-cache attention against
// longCache.attend, the float64 reference over the same F16 keys and
// values and the query rounded to F16 as the kernel rounds it: what
// differs is F32 rounding (scores, expf, the running sums over up to 32k
// keys), about 1e-6 of outputs that average values in ±1. The values'
// mean drifts with the position by ±0.6, so a range of 512 keys lost,
// counted twice or weighed with another range's maximum moves the
// outputs of a 32k cache by 1e-3 or more.
const splitRefTolerance = 1e-4

// longCache is a one-layer F16 cache for the split tests: a slot per slot
// of the rows, its pages scattered (perm), every slot's positions up to
// its last row holding K in ±1 and V in ±1 around a mean that drifts with
// the position; every other cache value is NaN (stale bytes, which must
// not reach any output).
type longCache struct {
	nKV, hd, maxPages int
	perm              []int
	kv                []byte
}

func newLongCache(rng *rand.Rand, nKV, hd int, rows []krow) *longCache {
	slots, maxPages := 1, 1
	last := map[int]int{}
	for _, r := range rows {
		slots = max(slots, int(r.slot)+1)
		maxPages = max(maxPages, (int(r.pos)+kernels.KVPageTokens)/kernels.KVPageTokens)
		last[int(r.slot)] = max(last[int(r.slot)], int(r.pos))
	}
	kvDim := nKV * hd
	c := &longCache{nKV: nKV, hd: hd, maxPages: maxPages, perm: rng.Perm(slots * maxPages)}
	c.kv = make([]byte, slots*maxPages*kernels.KVPageBytes(1, kvDim))
	for i := 0; i < len(c.kv); i += 2 {
		binary.LittleEndian.PutUint16(c.kv[i:], 0x7e00)
	}
	drift := make([]float32, kvDim)
	for s := range slots {
		hi, ok := last[s]
		if !ok {
			continue
		}
		for p := 0; p <= hi; p++ {
			for e := range drift {
				drift[e] = 0.6 * float32(math.Sin(2*math.Pi*float64(p)/1500+0.3*float64(e)))
			}
			k, v := c.row(s, p, 0), c.row(s, p, 1)
			for e := range kvDim {
				binary.LittleEndian.PutUint16(k[2*e:], quant.F32ToF16(2*rng.Float32()-1))
				binary.LittleEndian.PutUint16(v[2*e:], quant.F32ToF16(drift[e]+0.4*(2*rng.Float32()-1)))
			}
		}
	}
	return c
}

// row is the bytes of slot's K (which 0) or V (1) row at position t.
func (c *longCache) row(slot, t, which int) []byte {
	kvDim := c.nKV * c.hd
	page := c.perm[slot*c.maxPages+t/kernels.KVPageTokens]
	off := page*kernels.KVPageBytes(1, kvDim) + (which*kernels.KVPageTokens+t%kernels.KVPageTokens)*kvDim*2
	return c.kv[off : off+2*kvDim]
}

// attend is the reference: each row's attention over its slot's keys in
// float64, the query rounded to F16 (a decode row's), scores scale·q·k
// (softcap·tanh(scale·q·k/softcap) with a cap), the keys from
// pos−window+1 with a window, head h's sink (sinks non-nil) a key with no
// value.
// attnBuffers makes a long F16 cache over rows, the rows' queries and
// (withSinks) per-head sink logits, and the attention kernel's buffers in
// its entry's order (ext takes the sinks before the I/O table); yi is the
// output's index.
func attnBuffers(rng *rand.Rand, nHead, nKV, hd int, rows []krow, withSinks, ext bool) (cache *longCache, q, sinks []float32, bufs [][]byte, yi int) {
	cache = newLongCache(rng, nKV, hd, rows)
	q = randF32(rng, len(rows)*nHead*hd, -3, 3)
	var sinkBytes []byte
	if withSinks {
		sinks = randF32(rng, nHead, -1, 5)
		sinkBytes = lebin.Float32Bytes(sinks)
	}
	io := ioTable(rows, len(cache.perm)/cache.maxPages, cache.maxPages, cache.perm)
	y := lebin.Float32Bytes(make([]float32, len(rows)*nHead*hd))
	if ext {
		return cache, q, sinks, [][]byte{lebin.Float32Bytes(q), cache.kv, sinkBytes, io, y}, 4
	}
	return cache, q, sinks, [][]byte{lebin.Float32Bytes(q), cache.kv, io, y}, 3
}

func (c *longCache) attend(q []float32, rows []krow, nHead int, scale, softcap float32, window uint32, sinks []float32) []float32 {
	hd, group := c.hd, nHead/c.nKV
	out := make([]float32, len(rows)*nHead*hd)
	f16 := func(b []byte, e int) float64 { return float64(quant.F16ToF32(binary.LittleEndian.Uint16(b[2*e:]))) }
	for ri, r := range rows {
		pos, first := int(r.pos), 0
		if window != 0 && pos+1 > int(window) {
			first = pos + 1 - int(window)
		}
		for kvh := range c.nKV {
			qs := make([][]float64, group)
			s := make([][]float64, group)
			for g := range group {
				qs[g] = make([]float64, hd)
				for e := range hd {
					qs[g][e] = float64(quant.F16ToF32(quant.F32ToF16(q[(ri*nHead+kvh*group+g)*hd+e])))
				}
				s[g] = make([]float64, pos+1-first)
			}
			for t := first; t <= pos; t++ {
				k := c.row(int(r.slot), t, 0)
				for g := range group {
					dot := 0.0
					for e := range hd {
						dot += qs[g][e] * f16(k, kvh*hd+e)
					}
					if softcap != 0 {
						s[g][t-first] = float64(softcap) * math.Tanh(dot*float64(scale)/float64(softcap))
					} else {
						s[g][t-first] = dot * float64(scale)
					}
				}
			}
			for g := range group {
				h := kvh*group + g
				m := math.Inf(-1)
				for _, x := range s[g] {
					m = math.Max(m, x)
				}
				if sinks != nil {
					m = math.Max(m, float64(sinks[h]))
				}
				l := 0.0
				for i, x := range s[g] {
					s[g][i] = math.Exp(x - m)
					l += s[g][i]
				}
				if sinks != nil {
					l += math.Exp(float64(sinks[h]) - m)
				}
				o := make([]float64, hd)
				for t := first; t <= pos; t++ {
					v := c.row(int(r.slot), t, 1)
					for e := range hd {
						o[e] += s[g][t-first] * f16(v, kvh*hd+e)
					}
				}
				for e := range hd {
					out[(ri*nHead+h)*hd+e] = float32(o[e] / l)
				}
			}
		}
	}
	return out
}

// TestKernelFlashAttnSplit runs the split decode attention of F16 caches
// of 4k to 32k keys — the qwen3 0.6B shape's heads (16 on 8 KV heads) of
// 128 and of 64, the llama 7B's (32 of 128, one a KV head), a step of
// four rows of different lengths (one short enough not to be split), and
// flash_attn_ext with a soft cap, a window and sinks, and with a window
// of fewer keys than a range — against the float64 reference
// (splitRefTolerance) and T-CPU (decode attention's 1e-2: T-CPU
// accumulates values in F16, TestKernelFlashAttnExt), twice (the same
// bits: the ranges merge in a fixed order, and the counters the first run
// leaves are zero again), and against the unsplit main entry: a row the
// split leaves whole has its bits.
func TestKernelFlashAttnSplit(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(43))
	type scase struct {
		name           string
		family         string
		nHead, nKV, hd int
		rows           []krow
		softcap        float32
		window         uint32
		sinks          bool
	}
	one := func(n uint32) []krow { return []krow{{n - 1, 0, 1}} }
	few := []krow{{12000, 0, 1}, {5000, 1, 1}, {300, 2, 1}, {8191, 3, 1}}
	var cases []scase
	for _, hd := range []int{128, 64} {
		for _, n := range []uint32{4096, 16384, 32768} {
			cases = append(cases, scase{fmt.Sprintf("gqa16-8-hd%d-ctx%d", hd, n), "flash_attn", 16, 8, hd, one(n), 0, 0, false})
		}
	}
	cases = append(cases,
		scase{"gqa16-8-hd128-few", "flash_attn", 16, 8, 128, few, 0, 0, false},
		scase{"mha32-hd128-ctx16384", "flash_attn", 32, 32, 128, one(16384), 0, 0, false},
		scase{"ext-all-gqa16-8-hd128-ctx32768", "flash_attn_ext", 16, 8, 128, one(32768), 50, 20000, true},
		scase{"ext-sinks-gqa8-2-hd256-few", "flash_attn_ext", 8, 2, 256, few, 0, 0, true},
		scase{"ext-window300-gqa16-8-hd128-ctx9000", "flash_attn_ext", 16, 8, 128, one(9000), 0, 300, false},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := g.with(t)
			ext := c.family == "flash_attn_ext"
			push := []uint32{0}
			scale := float32(1 / math.Sqrt(float64(c.hd)))
			spec := []uint32{1, uint32(c.nHead), uint32(c.nKV), uint32(c.hd), fbits(scale)}
			if ext {
				spec = append(spec, fbits(c.softcap), c.window)
			}
			l, err := kcuda.Shape(c.family, push, spec, len(c.rows), false)
			if err != nil || l.Entry != kcuda.EntrySplit || l.Grid[2] < 2 {
				t.Fatalf("launch %+v, %v: want the _split entry", l, err)
			}
			cache, q, sinks, bufs, yi := attnBuffers(rng, c.nHead, c.nKV, c.hd, c.rows, c.sinks, ext)
			got := g.run(c.family, bufs, push, spec, len(c.rows))[yi]
			if again := g.run(c.family, bufs, push, spec, len(c.rows))[yi]; !bytes.Equal(got, again) {
				compareF32(t, "second run", again, got, 0)
				t.Fatal("two runs of the split attention differ")
			}
			ref := lebin.Float32Bytes(cache.attend(q, c.rows, c.nHead, scale, c.softcap, c.window, sinks))
			compareF32(t, c.name+" vs reference", got, ref, splitRefTolerance)
			compareF32(t, c.name+" vs T-CPU", got, cpuRun(t, c.family, bufs, push, spec)[yi], 1e-2)
			main := g.with(t)
			main.entry = new(kcuda.EntryPoint) // EntryMain: one block per head group and row
			whole := main.run(c.family, bufs, push, spec, len(c.rows))[yi]
			compareF32(t, c.name+" unsplit vs reference", whole, ref, splitRefTolerance)
			rowBytes := 4 * c.nHead * c.hd
			for ri, r := range c.rows {
				first := 0
				if c.window != 0 && int(r.pos)+1 > int(c.window) {
					first = int(r.pos) + 1 - int(c.window)
				}
				if int(r.pos)+1-first > 1024 { // kcuda's faSplitMin: split
					continue
				}
				if a, b := got[ri*rowBytes:(ri+1)*rowBytes], whole[ri*rowBytes:(ri+1)*rowBytes]; !bytes.Equal(a, b) {
					compareF32(t, fmt.Sprintf("row %d (%d keys), split launch vs unsplit", ri, int(r.pos)+1-first), a, b, 0)
					t.Errorf("row %d: a row of at most 1024 keys has other bits in the split launch", ri)
				}
			}
		})
	}
}

// q8AttnCase is a q8_0 decode attention launch of the kernel tests: the
// family's entry, the head layout, the KV types and the rows, with
// flash_attn_ext's soft cap, window and sinks.
type q8AttnCase struct {
	name           string
	family         string
	nHead, nKV, hd int
	kv             kernels.KVTypes
	rows           []krow
	softcap        float32
	window         uint32
	sinks          bool
}

// TestKernelQ8KVAttentionSplit is TestKernelFlashAttnSplit for q8_0
// caches (faq.cuh's body): flash_attn's and flash_attn_ext's q8_0
// instances over caches T-CPU wrote, against T-CPU's q8_0 attention
// within q8AttnTolerance (the same quantized query and integer scores,
// values accumulated in F32 by both), twice for the same bits, and a row
// too short to split against the unsplit main entry, to the bit.
func TestKernelQ8KVAttentionSplit(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(44))
	few := []krow{{9000, 0, 1}, {300, 1, 1}, {4100, 2, 1}}
	cases := []q8AttnCase{
		{"rk128-gqa16-8-ctx4096", "flash_attn", 16, 8, 128, q8Layout(128, 64), []krow{{4095, 0, 1}}, 0, 0, false},
		{"rk128-gqa16-8-ctx32768", "flash_attn", 16, 8, 128, q8Layout(128, 64), []krow{{32767, 0, 1}}, 0, 0, false},
		{"rk64-gqa16-8-hd64-few", "flash_attn", 16, 8, 64, q8Layout(64, 64), few, 0, 0, false},
		{"plain-gqa16-8-hd128-few", "flash_attn", 16, 8, 128, q8Layout(0, 0), few, 0, 0, false},
		{"ext-all-rk256-gqa8-4-ctx16384", "flash_attn_ext", 8, 4, 256, q8Layout(256, 64), []krow{{16383, 0, 1}}, 30, 10000, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { splitAttn(t, g.with(t), rng, c, q8AttnTolerance) })
	}
}

// splitAttn runs case c of the split decode attention over a cache of
// c.kv's types that T-CPU wrote: against T-CPU within tol, twice for the
// same bits, and against the unsplit main entry (within tol, and to the
// bit for a row too short to split).
func splitAttn(t *testing.T, g *kgpu, rng *rand.Rand, c q8AttnCase, tol float64) {
	const nLayer, layer = 1, 0
	ext := c.family == "flash_attn_ext"
	inst := kvInstance(t, c.family, c.kv)
	push := []uint32{layer}
	scale := float32(1 / math.Sqrt(float64(c.hd)))
	spec := []uint32{nLayer, uint32(c.nHead), uint32(c.nKV), uint32(c.hd), fbits(scale)}
	if ext {
		spec = append(spec, fbits(c.softcap), c.window)
	}
	l, err := kcuda.Shape(inst, push, spec, len(c.rows), false)
	if err != nil || l.Entry != kcuda.EntrySplit || l.Grid[2] < 2 {
		t.Fatalf("launch %+v, %v: want the _split entry", l, err)
	}
	lay := kernels.KVLayout{Slots: nLayer, Width: c.nKV * c.hd, Types: c.kv}
	slots, maxPages := len(c.rows), 1
	last := map[uint32]uint32{}
	for _, r := range c.rows {
		slots = max(slots, int(r.slot)+1)
		maxPages = max(maxPages, (int(r.pos)+kernels.KVPageTokens)/kernels.KVPageTokens)
		last[r.slot] = max(last[r.slot], r.pos)
	}
	perm := rng.Perm(slots * maxPages)
	kv := q8Cache(t, rng, lay, layer, slots, maxPages, perm, last, 3)
	q := randF32(rng, len(c.rows)*c.nHead*c.hd, -3, 3)
	var sinks []byte
	if c.sinks {
		sinks = lebin.Float32Bytes(randF32(rng, c.nHead, -1, 5))
	}
	io := ioTable(c.rows, slots, maxPages, perm)
	y := lebin.Float32Bytes(make([]float32, len(c.rows)*c.nHead*c.hd))
	bufs, yi := [][]byte{lebin.Float32Bytes(q), kv, io, y}, 3
	if ext {
		bufs, yi = [][]byte{lebin.Float32Bytes(q), kv, sinks, io, y}, 4
	}
	got := g.run(inst, bufs, push, spec, len(c.rows))[yi]
	if again := g.run(inst, bufs, push, spec, len(c.rows))[yi]; !bytes.Equal(got, again) {
		compareF32(t, "second run", again, got, 0)
		t.Fatal("two runs of the split attention differ")
	}
	compareF32(t, inst+" "+c.name+" vs T-CPU", got, cpuRun(t, inst, bufs, push, spec)[yi], tol)
	main := g.with(t)
	main.entry = new(kcuda.EntryPoint) // EntryMain: one block per head group and row
	whole := main.run(inst, bufs, push, spec, len(c.rows))[yi]
	compareF32(t, inst+" "+c.name+" split vs unsplit", got, whole, tol)
	rowBytes := 4 * c.nHead * c.hd
	for ri, r := range c.rows {
		if r.pos+1 > 1024 || c.window != 0 { // kcuda's faSplitMin: split
			continue
		}
		if a, b := got[ri*rowBytes:(ri+1)*rowBytes], whole[ri*rowBytes:(ri+1)*rowBytes]; !bytes.Equal(a, b) {
			compareF32(t, fmt.Sprintf("row %d, split launch vs unsplit", ri), a, b, 0)
			t.Errorf("row %d: a row of at most 1024 keys has other bits in the split launch", ri)
		}
	}
}

// TestDecodeSplitWithCPU decodes a 2 000-token sequence of a qwen3 (GQA,
// a 4k context) one token a step on T-CUDA, whose captured one-row decode
// graph is replayed at every length (the split attention's ranges, 1 to
// 4 of its 32 blocks a head group, follow the length on the device), and
// on T-CPU: every step's logits within the parity suite's relTolerance
// of T-CPU's. A second sequence over the same tokens, in another slot and
// other pages, replays the graph to the same bits at every step.
func TestDecodeSplitWithCPU(t *testing.T) {
	if _, err := driver.Probe(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	shape := synth.Shape{Arch: "qwen3", Layers: 2, Embd: 256, Heads: 8, HeadsKV: 4, HeadDim: 64, FF: 512, Vocab: 320, Context: 4096,
		Type: ggml.Q8_0, Seed: 43}
	const config = "max_slots = 2\ndecode_slots = [1]\n"
	gpu := openPool(t, compileSynth(t, shape, "cuda:sm_90", config), runtime.Options{Tier: "cuda"})
	defer gpu.Close()
	cpu := openPool(t, compileSynth(t, shape, "cpu", config), runtime.Options{Tier: "cpu"})
	defer cpu.Close()
	ctx := context.Background()
	const n = 2000
	toks := make([]int32, n)
	for i := range toks {
		toks[i] = int32(2 + (i*131+i*i*7)%300)
	}
	seq := func(p *sequence.Pool) *sequence.Sequence {
		s, err := p.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b, c := seq(gpu), seq(gpu), seq(cpu)
	defer a.Release()
	defer b.Release()
	defer c.Release()
	worst, at := 0.0, 0
	for i, tok := range toks {
		got, err := a.Decode(ctx, tok)
		if err != nil {
			t.Fatal(err)
		}
		got = append([]float32(nil), got...)
		again, err := b.Decode(ctx, tok)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, again) {
			t.Fatalf("step %d (%d keys): a second sequence's logits differ", i, i+1)
		}
		want, err := c.Decode(ctx, tok)
		if err != nil {
			t.Fatal(err)
		}
		scale := 1.0
		for _, v := range want {
			scale = math.Max(scale, math.Abs(float64(v)))
		}
		for j := range want {
			d := math.Abs(float64(got[j])-float64(want[j])) / scale
			if !(d <= relTolerance) { // NaN fails too
				t.Fatalf("step %d (%d keys): logit %d: %v on T-CUDA, %v on T-CPU", i, i+1, j, got[j], want[j])
			}
			if d > worst {
				worst, at = d, i
			}
		}
	}
	t.Logf("worst difference %.3g of the largest logit, at step %d", worst, at)
}
