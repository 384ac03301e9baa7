package cuda_test

import (
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/lebin"
	"github.com/zrtdev/zrt/kernels"
	kcuda "github.com/zrtdev/zrt/kernels/cuda"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
	"github.com/zrtdev/zrt/runtime/sequence"
	"github.com/zrtdev/zrt/runtime/tiers"
)

var (
	attnSweep      = flag.Bool("attnsweep", false, "TestDecodeAttentionSweep: time every candidate geometry of the split decode attention")
	attnSweepCSV   = flag.String("attnsweep.csv", "", "TestDecodeAttentionSweep: also write every timing to this CSV file")
	attnSweepOnly  = flag.String("attnsweep.only", "", "TestDecodeAttentionSweep: only the shapes named (qwen06,llama7b,llama7b-tp2: a rank's heads of the llama 7B shape at TP=2), comma-separated")
	attnSweepDepth = flag.String("attnsweep.depths", "32768,130000", "TestDecodeAttentionSweep: the rows' keys, comma-separated")
	attnSweepLays  = flag.Int("attnsweep.layers", 1, "TestDecodeAttentionSweep: layers a page holds (the bundle's: a layer's rows lie a page apart); past 1, F16 caches only, the last layer timed")
)

// sweepWarps, sweepSplits: the candidate geometries' warps a block and
// blocks a head group (kcuda.AttnGeometry); every stage count from 0 to
// kcuda.AttnMaxStages is tried with each, those the geometry's check or
// the device's shared memory refuse left out.
var (
	sweepWarps  = []uint32{4, 8, 12, 16}
	sweepSplits = []uint32{4, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32}
)

// sweepTime is one geometry's time at one shape, cache and depth.
type sweepTime struct {
	geo kcuda.AttnGeometry
	us  float64
	rel float64 // worst relative difference from the chosen geometry's outputs
}

// TestDecodeAttentionSweep times one layer's one-row split decode
// attention over caches of 32768 and 130000 keys (-attnsweep.depths) at
// the qwen3 0.6B and llama 7B shapes, F16 and q8_0, under every candidate
// geometry (sweepWarps × sweepSplits × 0 to 4 stages a warp) and logs,
// per shape, cache and depth, the geometry Shape chooses (a table row or
// the rule's), the fastest dozen, and then per shape and cache the
// geometries fastest over both depths (the geometric mean of their times
// over the chosen one's): the numbers kernels/cuda's attnTable is set
// from. It runs only with -attnsweep (the caches take gigabytes). Every
// geometry's outputs must be finite and within 1e-4 of the chosen one's
// (the order of the sums differs; a lost or doubled range moves them by
// 1e-3 or more: splitRefTolerance).
func TestDecodeAttentionSweep(t *testing.T) {
	if !*attnSweep {
		t.Skip("timing: run with -attnsweep")
	}
	g := newKGPU(t)
	defer g.current()()
	dev, err := driver.GetDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	limit, err := dev.Attribute(driver.AttrMaxSharedMemoryPerBlockOptin)
	if err != nil {
		t.Fatal(err)
	}
	sms, err := dev.Attribute(driver.AttrMultiprocessorCount)
	if err != nil {
		t.Fatal(err)
	}
	var depths []int
	for _, s := range strings.Split(*attnSweepDepth, ",") {
		var d int
		if _, err := fmt.Sscan(s, &d); err != nil || d < 1 {
			t.Fatalf("-attnsweep.depths: %q is not a count of keys", s)
		}
		depths = append(depths, d)
	}
	var csv strings.Builder
	csv.WriteString("shape,kv,depth,warps,splits,stages,shared,us,rel,chosen\n")
	t.Logf("device: %d multiprocessors, %d bytes of shared memory a block", sms, limit)
	rng := rand.New(rand.NewSource(48))
	for _, sh := range []struct {
		name           string
		nHead, nKV, hd int
	}{{"qwen06", 16, 8, 128}, {"llama7b", 32, 32, 128}, {"llama7b-tp2", 16, 16, 128}} {
		if *attnSweepOnly != "" && !slices.Contains(strings.Split(*attnSweepOnly, ","), sh.name) {
			continue
		}
		layers := max(*attnSweepLays, 1)
		for _, quant := range []bool{false, true} {
			if quant && layers > 1 {
				continue // speedCache fills one layer's q8_0 rows
			}
			kv := kernels.KVTypes{}
			inst, kvName := "flash_attn", "f16"
			if quant {
				kv, kvName = q8Layout(0, 0), "q8_0"
				inst = kvInstance(t, "flash_attn", kv)
			}
			scale := float32(1 / math.Sqrt(float64(sh.hd)))
			spec := []uint32{uint32(layers), uint32(sh.nHead), uint32(sh.nKV), uint32(sh.hd), fbits(scale)}
			chosen, table, err := kcuda.AttnChosen(inst, spec, 1)
			if err != nil {
				t.Fatal(err)
			}
			byDepth := map[int][]sweepTime{}
			for _, depth := range depths {
				lay := kernels.KVLayout{Slots: layers, Width: sh.nKV * sh.hd, Types: kv}
				maxPages := (depth + kernels.KVPageTokens) / kernels.KVPageTokens
				rows := []krow{{uint32(depth), 0, 1}}
				bufs := [][]byte{lebin.Float32Bytes(randF32(rng, sh.nHead*sh.hd, -3, 3)), speedCache(rng, lay, maxPages, quant),
					ioTable(rows, 1, maxPages, rng.Perm(maxPages)), make([]byte, 4*sh.nHead*sh.hd)}
				s := newSweepLaunches(t, g, inst, bufs, uint32(layers-1), spec)
				ref := s.time(chosen, 1)
				var ts []sweepTime
				for _, w := range sweepWarps {
					for _, z := range sweepSplits {
						for st := uint32(0); st <= kcuda.AttnMaxStages; st++ {
							geo := kcuda.AttnGeometry{Warps: w, Splits: z, Stages: st}
							l, err := kcuda.AttnSplitLaunch(inst, spec, 1, geo)
							if err != nil || l.Shared > limit {
								continue
							}
							r := s.time(geo, 20)
							rel := maxRelDiff(r.out, ref.out)
							if math.IsNaN(rel) || rel > 1e-4 {
								t.Errorf("%s %s d=%d %+v: outputs differ from the chosen geometry's by %.3g", sh.name, kvName, depth, geo, rel)
							}
							ts = append(ts, sweepTime{geo, r.us, rel})
							fmt.Fprintf(&csv, "%s,%s,%d,%d,%d,%d,%d,%.2f,%.3g,%v\n", sh.name, kvName, depth, w, z, st, l.Shared, r.us, rel, geo == chosen)
						}
					}
				}
				again := s.time(chosen, 20) // the chosen one last too: drift over the sweep
				s.free()
				slices.SortFunc(ts, func(a, b sweepTime) int { return cmpF(a.us, b.us) })
				byDepth[depth] = ts
				read := float64(depth+1) * float64(2*sh.nKV*sh.hd) * 2
				if quant {
					read = float64(depth+1) * float64(2*sh.nKV*sh.hd) * 34 / 32
				}
				at := slices.IndexFunc(ts, func(x sweepTime) bool { return x.geo == chosen })
				chosenUS := math.NaN()
				if at >= 0 {
					chosenUS = ts[at].us
				}
				t.Logf("%s %s d=%d, %d layers a page: chosen %s (table row %v): %.1f µs (%.2f TB/s; again at the end %.1f), rank %d of %d",
					sh.name, kvName, depth, layers, geoName(chosen), table, chosenUS, read/chosenUS/1e6, again.us, at+1, len(ts))
				for i, x := range ts[:min(12, len(ts))] {
					t.Logf("  #%-2d %-16s %8.1f µs  %.3fx the chosen  %.2f TB/s  rel %.2g", i+1, geoName(x.geo), x.us, x.us/chosenUS, read/x.us/1e6, x.rel)
				}
			}
			// Over every depth: each geometry's geometric mean of its time
			// over the chosen one's.
			score := map[kcuda.AttnGeometry][]float64{}
			for _, ts := range byDepth {
				base := math.NaN()
				for _, x := range ts {
					if x.geo == chosen {
						base = x.us
					}
				}
				for _, x := range ts {
					score[x.geo] = append(score[x.geo], x.us/base)
				}
			}
			type ranked struct {
				geo  kcuda.AttnGeometry
				mean float64
				each []float64
			}
			var rs []ranked
			for geo, v := range score {
				if len(v) != len(byDepth) {
					continue
				}
				l := 0.0
				for _, x := range v {
					l += math.Log(x)
				}
				rs = append(rs, ranked{geo, math.Exp(l / float64(len(v))), v})
			}
			slices.SortFunc(rs, func(a, b ranked) int { return cmpF(a.mean, b.mean) })
			t.Logf("%s %s (%d layers a page) over depths %v: geometric mean of time / the chosen %s's (each depth's ratio):", sh.name, kvName, layers, depths, geoName(chosen))
			for i, r := range rs[:min(8, len(rs))] {
				t.Logf("  #%-2d %-16s %.3f  %.3f", i+1, geoName(r.geo), r.mean, r.each)
			}
		}
	}
	if *attnSweepCSV != "" {
		if err := os.WriteFile(*attnSweepCSV, []byte(csv.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

func geoName(g kcuda.AttnGeometry) string { return g.String() }

func cmpF(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// maxRelDiff is compareF32's measure: the largest |a−b| / max(1, |b|)
// of two F32 buffers, NaN where either has a NaN or an infinity.
func maxRelDiff(a, b []byte) float64 {
	x, y := lebin.Float32s(a), lebin.Float32s(b)
	worst := 0.0
	for i := range y {
		d := math.Abs(float64(x[i])-float64(y[i])) / math.Max(1, math.Abs(float64(y[i])))
		if math.IsNaN(d) || math.IsInf(d, 0) {
			return math.NaN()
		}
		worst = max(worst, d)
	}
	return worst
}

// sweepLaunches is one decode attention's buffers on the device, uploaded
// once for every geometry the sweep times, and the module of its
// instance.
type sweepLaunches struct {
	t          *testing.T
	g          *kgpu
	inst       string
	spec       []uint32
	m          driver.Module
	devs       []driver.DevPtr
	vals       []uint64
	outLen     int
	staged     driver.DevPtr
	stagedSize int
}

func newSweepLaunches(t *testing.T, g *kgpu, inst string, bufs [][]byte, layer uint32, spec []uint32) *sweepLaunches {
	t.Helper()
	s := &sweepLaunches{t: t, g: g, inst: inst, spec: spec, m: g.module(inst), outLen: len(bufs[len(bufs)-1])}
	for _, b := range bufs {
		p, err := driver.MemAlloc(len(b) + 16)
		if err != nil {
			t.Fatal(err)
		}
		s.devs = append(s.devs, p)
		if err := driver.MemcpyHtoD(p, b); err != nil {
			t.Fatal(err)
		}
		s.vals = append(s.vals, uint64(p))
	}
	for _, x := range append([]uint32{layer}, spec...) {
		s.vals = append(s.vals, uint64(x))
	}
	return s
}

// sweepResult is one geometry's mean µs a launch and its outputs.
type sweepResult struct {
	us  float64
	out []byte
}

// time launches geometry geo once to warm up, then n times, and returns
// the mean µs of the n (CUDA events around them) and the outputs.
func (s *sweepLaunches) time(geo kcuda.AttnGeometry, n int) sweepResult {
	t := s.t
	t.Helper()
	l, err := kcuda.AttnSplitLaunch(s.inst, s.spec, 1, geo)
	if err != nil {
		t.Fatal(err)
	}
	if l.Staged > s.stagedSize { // zeroed once: the kernels leave their counters at zero
		if s.staged != 0 {
			driver.MemFree(s.staged)
		}
		if s.staged, err = driver.MemAlloc(l.Staged); err != nil {
			t.Fatal(err)
		}
		if err := driver.MemsetD8(s.staged, 0, l.Staged); err != nil {
			t.Fatal(err)
		}
		s.stagedSize = l.Staged
	}
	vals := append(slices.Clone(s.vals), uint64(s.staged))
	s.g.launch(s.m, s.inst, l, vals)
	if err := driver.Synchronize(); err != nil {
		t.Fatalf("%+v: %v", geo, err)
	}
	start, err := driver.NewEvent(0)
	if err != nil {
		t.Fatal(err)
	}
	defer start.Destroy()
	stop, err := driver.NewEvent(0)
	if err != nil {
		t.Fatal(err)
	}
	defer stop.Destroy()
	wall := time.Now()
	if err := start.Record(0); err != nil {
		t.Fatal(err)
	}
	for range n {
		s.g.launch(s.m, s.inst, l, vals)
	}
	if err := stop.Record(0); err != nil {
		t.Fatal(err)
	}
	if err := driver.Synchronize(); err != nil {
		t.Fatal(err)
	}
	us := float64(time.Since(wall).Microseconds()) / float64(n)
	if ms, err := stop.Elapsed(start); err == nil {
		us = float64(ms) * 1000 / float64(n)
	}
	out := make([]byte, s.outLen)
	if err := driver.MemcpyDtoH(out, s.devs[len(s.devs)-1]); err != nil {
		t.Fatal(err)
	}
	return sweepResult{us, out}
}

func (s *sweepLaunches) free() {
	for _, p := range s.devs {
		driver.MemFree(p)
	}
	if s.staged != 0 {
		driver.MemFree(s.staged)
	}
	s.m.Unload()
}

// TestDecodeAttnGeometryOption decodes 1 300 tokens of a qwen3 (GQA, a
// 4k context) one a step twice on T-CUDA: with the split decode
// attention's geometry Shape chooses and with Options.AttnGeometry's
// (8 warps, 8 blocks a head group: the sweep's candidates, timed end to
// end): every step's logits agree within the parity suite's
// relTolerance (the softmax's sums in another order), past 1 024 keys
// too, where the rows split. A geometry the kernel cannot run (one warp
// cannot load a head of 64; 64 blocks are past the merge's 32), or text
// that is no geometry, fails Open with an error naming it.
func TestDecodeAttnGeometryOption(t *testing.T) {
	if _, err := driver.Probe(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	shape := synth.Shape{Arch: "qwen3", Layers: 2, Embd: 256, Heads: 8, HeadsKV: 4, HeadDim: 64, FF: 512, Vocab: 320, Context: 4096,
		Type: ggml.Q8_0, Seed: 49}
	dir := compileSynth(t, shape, "cuda:sm_90", "max_slots = 1\ndecode_slots = [1]\n")
	for _, bad := range []struct{ geo, want string }{{"w1z8st0", "1 warps"}, {"w8z64st0", "64 blocks"}, {"eight", "geometry"}} {
		if p, err := sequence.Open(dir, runtime.Options{Tier: "cuda", CUDA: tiers.CUDAOptions{AttnGeometry: bad.geo}}); err == nil {
			p.Close()
			t.Errorf("AttnGeometry %q: opened", bad.geo)
		} else if !strings.Contains(err.Error(), bad.want) {
			t.Errorf("AttnGeometry %q: %v, want an error naming %q", bad.geo, err, bad.want)
		}
	}
	base := openPool(t, dir, runtime.Options{Tier: "cuda"})
	defer base.Close()
	other := openPool(t, dir, runtime.Options{Tier: "cuda", CUDA: tiers.CUDAOptions{AttnGeometry: "w8z8st0"}})
	defer other.Close()
	ctx := context.Background()
	a, err := base.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	b, err := other.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	worst, at, same := 0.0, 0, 0
	for i := range 1300 {
		tok := int32(2 + (i*131+i*i*7)%300)
		want, err := a.Decode(ctx, tok)
		if err != nil {
			t.Fatal(err)
		}
		want = slices.Clone(want)
		got, err := b.Decode(ctx, tok)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Equal(got, want) {
			same++
		}
		scale := 1.0
		for _, v := range want {
			scale = math.Max(scale, math.Abs(float64(v)))
		}
		for j := range want {
			d := math.Abs(float64(got[j])-float64(want[j])) / scale
			if !(d <= relTolerance) {
				t.Fatalf("step %d (%d keys): logit %d: %v with w8z8st0, %v with Shape's geometry", i, i+1, j, got[j], want[j])
			}
			if d > worst {
				worst, at = d, i
			}
		}
	}
	t.Logf("worst difference %.3g of the largest logit, at step %d; %d of 1300 steps the same bits", worst, at, same)
}
