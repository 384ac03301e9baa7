package cuda_test

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zrtdev/zrt/format/lebin"
	"github.com/zrtdev/zrt/kernels"
	kcuda "github.com/zrtdev/zrt/kernels/cuda"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
)

// TestKernelQ8KVAttentionStages runs the q8_0 decode attention at heads of
// 128 and 256, whose warps copy each chunk's rows into stages in shared
// memory (kernels/cuda/faq.cuh's staged walk), with the shared memory for
// no stage (the register walk) and one to four stages a warp (those the
// device holds): all must give the same bits (one order of arithmetic), and the launch's
// own, T-CPU's outputs within q8AttnTolerance. The cases: the qwen3 0.6B
// shape's one-row step over 20k keys (split), the llama 7B shape's (one
// head a block), four heads a block, heads of 256 with a soft cap, a
// window and sinks, and a window that starts chunks mid-page beside short
// rows (chunks over two pages, chunks of fewer keys than a warp takes).
func TestKernelQ8KVAttentionStages(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(45))
	const nLayer, layer = 2, 1
	cases := []q8AttnCase{
		{"qwen06-ctx20000", "flash_attn", 16, 8, 128, q8Layout(0, 0), []krow{{19999, 0, 1}}, 0, 0, false},
		{"llama7b-ctx6000", "flash_attn", 32, 32, 128, q8Layout(128, 64), []krow{{5999, 0, 1}}, 0, 0, false},
		{"gqa4-few", "flash_attn", 32, 8, 128, q8Layout(128, 64), []krow{{3000, 0, 1}, {77, 1, 1}, {1500, 2, 1}}, 0, 0, false},
		{"ext-hd256-all", "flash_attn_ext", 8, 4, 256, q8Layout(256, 64), []krow{{4000, 0, 1}, {9, 1, 1}}, 30, 2500, true},
		{"ext-window-midpage", "flash_attn_ext", 16, 8, 128, q8Layout(0, 0), []krow{{2999, 0, 1}, {40, 1, 1}, {700, 2, 1}}, 0, 1001, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ext := c.family == "flash_attn_ext"
			inst := kvInstance(t, c.family, c.kv)
			scale := float32(1 / math.Sqrt(float64(c.hd)))
			spec := []uint32{nLayer, uint32(c.nHead), uint32(c.nKV), uint32(c.hd), fbits(scale)}
			if ext {
				spec = append(spec, fbits(c.softcap), c.window)
			}
			push := []uint32{layer}
			l, err := kcuda.Shape(inst, push, spec, len(c.rows), false)
			if err != nil {
				t.Fatal(err)
			}
			w := l.Block[0] / 32
			if l.Shared <= kcuda.AttnShared(true, uint32(c.nHead), uint32(c.nKV), uint32(c.hd), w, 0) {
				t.Fatalf("launch %+v: no stages for heads of %d", l, c.hd)
			}
			lay := kernels.KVLayout{Slots: nLayer, Width: c.nKV * c.hd, Types: c.kv}
			slots, maxPages := len(c.rows), 1
			last := map[uint32]uint32{}
			for _, r := range c.rows {
				maxPages = max(maxPages, (int(r.pos)+kernels.KVPageTokens)/kernels.KVPageTokens)
				last[r.slot] = max(last[r.slot], r.pos)
			}
			perm := rng.Perm(slots * maxPages)
			kv := q8Cache(t, rng, lay, layer, slots, maxPages, perm, last, 3)
			q := randF32(rng, len(c.rows)*c.nHead*c.hd, -3, 3)
			io := ioTable(c.rows, slots, maxPages, perm)
			y := lebin.Float32Bytes(make([]float32, len(c.rows)*c.nHead*c.hd))
			bufs, yi := [][]byte{lebin.Float32Bytes(q), kv, io, y}, 3
			if ext {
				var sinks []byte
				if c.sinks {
					sinks = lebin.Float32Bytes(randF32(rng, c.nHead, -1, 5))
				}
				bufs, yi = [][]byte{lebin.Float32Bytes(q), kv, sinks, io, y}, 4
			}
			got := g.with(t).run(inst, bufs, push, spec, len(c.rows))[yi]
			compareF32(t, inst+" "+c.name+" vs T-CPU", got, cpuRun(t, inst, bufs, push, spec)[yi], q8AttnTolerance)
			if regs, _ := stagesAgree(t, g, inst, true, bufs, push, spec, len(c.rows), yi, w); !bytes.Equal(regs[0], got) {
				compareF32(t, inst+" "+c.name+" no stages", regs[0], got, 0)
				t.Errorf("no stages: other bits than the launch's %d bytes of shared memory", l.Shared)
			}
		})
	}
}

// TestKernelF16KVAttentionStages is TestKernelQ8KVAttentionStages for an
// F16 cache (fa.cuh's staged walk, heads of 128 and 256): at the launch's
// warps and at 8, no stage (the register walk) and one to four stages a
// warp (where the device's shared memory holds them: two at 16 warps do
// not fit) must give the same bits, and the launch's own outputs agree with
// the float64 reference within splitRefTolerance and T-CPU within decode
// attention's 1e-2 (TestKernelFlashAttnSplit's). The cache's other bytes
// are NaN: a stale row read anywhere shows. The cases: the qwen3 0.6B
// shape's one-row step over 20k keys (split), the llama 7B shape's (one
// head a block), four heads a block beside short rows, heads of 256 with
// a soft cap, a window and sinks (two heads a block, whose 16 warps take
// no stage in the launch), a window that starts chunks mid-page, and
// heads of 64, which have no staged walk (stages given: the register
// walk's bits still).
func TestKernelF16KVAttentionStages(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(47))
	type fcase struct {
		name           string
		family         string
		nHead, nKV, hd int
		rows           []krow
		softcap        float32
		window         uint32
		sinks          bool
	}
	for _, c := range []fcase{
		{"qwen06-ctx20000", "flash_attn", 16, 8, 128, []krow{{19999, 0, 1}}, 0, 0, false},
		{"llama7b-ctx6000", "flash_attn", 32, 32, 128, []krow{{5999, 0, 1}}, 0, 0, false},
		{"gqa4-few", "flash_attn", 32, 8, 128, []krow{{3000, 0, 1}, {77, 1, 1}, {1500, 2, 1}}, 0, 0, false},
		{"ext-hd256-all", "flash_attn_ext", 8, 4, 256, []krow{{4000, 0, 1}, {9, 1, 1}}, 30, 2500, true},
		{"ext-window-midpage", "flash_attn_ext", 16, 8, 128, []krow{{2999, 0, 1}, {40, 1, 1}, {700, 2, 1}}, 0, 1001, false},
		{"hd64-few", "flash_attn", 16, 8, 64, []krow{{2500, 0, 1}, {30, 1, 1}}, 0, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ext := c.family == "flash_attn_ext"
			scale := float32(1 / math.Sqrt(float64(c.hd)))
			spec := []uint32{1, uint32(c.nHead), uint32(c.nKV), uint32(c.hd), fbits(scale)}
			if ext {
				spec = append(spec, fbits(c.softcap), c.window)
			}
			push := []uint32{0}
			l, err := kcuda.Shape(c.family, push, spec, len(c.rows), false)
			if err != nil {
				t.Fatal(err)
			}
			w := l.Block[0] / 32
			cache, q, sinks, bufs, yi := attnBuffers(rng, c.nHead, c.nKV, c.hd, c.rows, c.sinks, ext)
			got := g.with(t).run(c.family, bufs, push, spec, len(c.rows))[yi]
			ref := lebin.Float32Bytes(cache.attend(q, c.rows, c.nHead, scale, c.softcap, c.window, sinks))
			compareF32(t, c.name+" vs reference", got, ref, splitRefTolerance)
			compareF32(t, c.name+" vs T-CPU", got, cpuRun(t, c.family, bufs, push, spec)[yi], 1e-2)
			regs, staged := stagesAgree(t, g, c.family, false, bufs, push, spec, len(c.rows), yi, w, 8)
			if !bytes.Equal(regs[0], got) {
				compareF32(t, c.name+" no stages", regs[0], got, 0)
				t.Errorf("no stages: other bits than the launch's %d bytes of shared memory", l.Shared)
			}
			if staged < 2 {
				t.Errorf("%d launches with stages, want at least one at each warp count", staged)
			}
		})
	}
}

// stagesAgree launches a decode attention instance (quant: over a Q8_0
// cache) with each of warps warps a block and 0 to kcuda.AttnMaxStages
// stages a warp (kcuda.AttnShared; those past the device's shared memory
// a block are left out) and fails where one warp count's stages give other bits than
// its register walk's. It returns each warp count's bits without stages
// and how many launches had stages.
func stagesAgree(t *testing.T, g *kgpu, inst string, quant bool, bufs [][]byte, push, spec []uint32, rows, yi int, warps ...uint32) ([][]byte, int) {
	t.Helper()
	dev, err := driver.GetDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	limit, err := dev.Attribute(driver.AttrMaxSharedMemoryPerBlockOptin)
	if err != nil {
		t.Fatal(err)
	}
	var regs [][]byte
	staged := 0
	for _, w := range warps {
		var want []byte
		for st := uint32(0); st <= kcuda.AttnMaxStages; st++ {
			gs := g.with(t)
			gs.threads = 32 * w
			gs.shared = kcuda.AttnShared(quant, spec[1], spec[2], spec[3], w, st)
			if gs.shared > limit {
				continue
			}
			out := gs.run(inst, bufs, push, spec, rows)[yi]
			if st == 0 {
				want = out
				regs = append(regs, out)
				continue
			}
			staged++
			if !bytes.Equal(out, want) {
				compareF32(t, fmt.Sprintf("%s, %d warps, %d stages a warp", inst, w, st), out, want, 0)
				t.Errorf("%d warps, %d stages a warp: other bits than no stages'", w, st)
			}
		}
	}
	return regs, staged
}

var (
	attnSpeed  = flag.Bool("attnspeed", false, "TestDecodeAttentionSpeed: time the decode attention over long caches")
	attnDepths = flag.String("attndepths", "32768,130000", "TestDecodeAttentionSpeed: the cache depths, comma-separated (short ones: a decode step's fixed cost)")
)

// TestDecodeAttentionSpeed times one layer's one-row decode attention (the
// _split entry, as a decode step launches it) over caches of 32768 and
// 130000 keys (-attndepths) at the qwen3 0.6B and llama 7B shapes, F16 and q8_0, each
// as Shape launches it and with 0 to kcuda.AttnMaxStages stages a warp
// and 16, 12 and 8 warps (those within the device's shared memory a
// block), and 8 warps with twice Shape's blocks a head group, and logs each
// launch's time and the bytes of K and V it read a second. It runs only
// with -attnspeed (the caches take gigabytes); every variant's outputs
// must be finite, and the variants of 16 warps the same bits.
func TestDecodeAttentionSpeed(t *testing.T) {
	if !*attnSpeed {
		t.Skip("timing: run with -attnspeed")
	}
	g := newKGPU(t)
	dev, err := driver.GetDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	limit, err := dev.Attribute(driver.AttrMaxSharedMemoryPerBlockOptin)
	if err != nil {
		t.Fatal(err)
	}
	var depths []int
	for _, d := range strings.Split(*attnDepths, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(d))
		if err != nil || n < 1 {
			t.Fatalf("-attndepths: %q is no depth", d)
		}
		depths = append(depths, n)
	}
	rng := rand.New(rand.NewSource(46))
	for _, sh := range []struct {
		name           string
		nHead, nKV, hd int
	}{{"qwen06", 16, 8, 128}, {"llama7b", 32, 32, 128}} {
		for _, depth := range depths {
			for _, quant := range []bool{false, true} {
				kv := kernels.KVTypes{}
				inst := "flash_attn"
				if quant {
					kv = q8Layout(0, 0)
					inst = kvInstance(t, "flash_attn", kv)
				}
				lay := kernels.KVLayout{Slots: 1, Width: sh.nKV * sh.hd, Types: kv}
				maxPages := (depth + kernels.KVPageTokens) / kernels.KVPageTokens
				cache := speedCache(rng, lay, maxPages, quant)
				rows := []krow{{uint32(depth), 0, 1}}
				scale := float32(1 / math.Sqrt(float64(sh.hd)))
				spec := []uint32{1, uint32(sh.nHead), uint32(sh.nKV), uint32(sh.hd), fbits(scale)}
				push := []uint32{0}
				bufs := [][]byte{lebin.Float32Bytes(randF32(rng, sh.nHead*sh.hd, -3, 3)), cache, ioTable(rows, 1, maxPages, rng.Perm(maxPages)), make([]byte, 4*sh.nHead*sh.hd)}
				read := float64(depth+1) * float64(2*lay.Width)
				if quant {
					read *= 34.0 / 32
				} else {
					read *= 2
				}
				base, err := kcuda.Shape(inst, push, spec, 1, false)
				if err != nil {
					t.Fatal(err)
				}
				type variant struct {
					name                  string
					warps, stages, splits uint32
				}
				vs := []variant{{"default", 0, 0, 0}}
				for _, w := range []uint32{16, 12, 8} {
					for st := uint32(0); st <= kcuda.AttnMaxStages; st++ {
						vs = append(vs, variant{"", w, st, 0})
					}
				}
				// Blocks of 8 warps with a stage fit two a multiprocessor:
				// twice the blocks a head group.
				for st := uint32(0); st <= kcuda.AttnMaxStages; st++ {
					vs = append(vs, variant{"", 8, st, min(32, 2*base.Grid[2])})
				}
				var want []byte
				for _, v := range vs {
					l := base
					if v.warps != 0 {
						l.Block[0] = 32 * v.warps
						l.Shared = kcuda.AttnShared(quant, uint32(sh.nHead), uint32(sh.nKV), uint32(sh.hd), v.warps, v.stages)
						if l.Shared > limit {
							continue
						}
					}
					if v.splits != 0 {
						l.Grid[2], l.Staged = v.splits, kcuda.AttnSplitStaged(1, uint32(sh.nHead), uint32(sh.hd), v.splits)
					}
					us, out := timeLaunch(t, g, inst, l, bufs, push, spec, 10)
					for _, x := range lebin.Float32s(out) {
						if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
							t.Fatalf("%s %s d=%d %+v: output %v", sh.name, inst, depth, v, x)
						}
					}
					if v.warps == 16 && want == nil {
						want = out
					} else if v.warps == 16 && !bytes.Equal(out, want) {
						t.Errorf("%s %s d=%d %+v: other bits than no stages'", sh.name, inst, depth, v)
					}
					t.Logf("%-8s %-26s d=%-6d warps=%-2d stages=%d shared=%-6d grid=%v: %8.1f µs a layer, %6.2f TB/s of K and V",
						sh.name, inst, depth, l.Block[0]/32, v.stages, l.Shared, l.Grid, us, read/us/1e6)
				}
			}
		}
	}
}

// speedCache is a one-layer cache of maxPages pages, every value finite:
// F16 values in ±[0.5, 1), or Q8_0 blocks of random quants with a scale
// of 1/256.
func speedCache(rng *rand.Rand, lay kernels.KVLayout, maxPages int, quant bool) []byte {
	b := make([]byte, maxPages*lay.PageBytes())
	rng.Read(b)
	if !quant {
		for i := 0; i+1 < len(b); i += 2 {
			binary.LittleEndian.PutUint16(b[i:], binary.LittleEndian.Uint16(b[i:])&0x83ff|0x3800)
		}
		return b
	}
	// Pages are whole rows of whole blocks (a layer's K rows, then V's),
	// padded to 64 bytes.
	rowBytes := lay.Width / 32 * 34
	for p := range maxPages {
		for r := range 2 * kernels.KVPageTokens {
			row := b[p*lay.PageBytes()+r*rowBytes:]
			for blk := 0; blk < rowBytes; blk += 34 {
				binary.LittleEndian.PutUint16(row[blk:], 0x1c00)
			}
		}
	}
	return b
}

// timeLaunch launches instance's entry of shape l over bufs n+1 times
// (the first to warm up) and returns the mean microseconds of the last n
// and the last buffer's contents after.
func timeLaunch(t *testing.T, g *kgpu, instance string, l kcuda.Launch, bufs [][]byte, push, spec []uint32, n int) (float64, []byte) {
	t.Helper()
	defer g.current()()
	m := g.module(instance)
	defer m.Unload()
	var vals []uint64
	var devs []driver.DevPtr
	defer func() {
		for _, p := range devs {
			driver.MemFree(p)
		}
	}()
	for _, b := range bufs {
		p, err := driver.MemAlloc(len(b) + 16)
		if err != nil {
			t.Fatal(err)
		}
		devs = append(devs, p)
		if err := driver.MemcpyHtoD(p, b); err != nil {
			t.Fatal(err)
		}
		vals = append(vals, uint64(p))
	}
	for _, x := range append(append([]uint32(nil), push...), spec...) {
		vals = append(vals, uint64(x))
	}
	if l.Staged > 0 {
		p, err := driver.MemAlloc(l.Staged)
		if err != nil {
			t.Fatal(err)
		}
		devs = append(devs, p)
		if err := driver.MemsetD8(p, 0, l.Staged); err != nil {
			t.Fatal(err)
		}
		vals = append(vals, uint64(p))
	}
	g.launch(m, instance, l, vals)
	if err := driver.Synchronize(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for range n {
		g.launch(m, instance, l, vals)
	}
	if err := driver.Synchronize(); err != nil {
		t.Fatal(err)
	}
	us := float64(time.Since(start).Microseconds()) / float64(n)
	out := make([]byte, len(bufs[len(bufs)-1]))
	if err := driver.MemcpyDtoH(out, devs[len(bufs)-1]); err != nil {
		t.Fatal(err)
	}
	return us, out
}
