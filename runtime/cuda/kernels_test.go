package cuda_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"os"
	goruntime "runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/lebin"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/kernels/cpu"
	kcuda "github.com/zrtdev/zrt/kernels/cuda"
	"github.com/zrtdev/zrt/kernels/cuda/ptx"
	"github.com/zrtdev/zrt/kernels/quant"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
)

// Kernel-level parity: single T-CUDA kernels launched on random inputs and
// compared with their T-CPU implementation (the oracle), without a model.
// The PTX is the embedded one, or $ZRT_PTX_DIR's.

// kgpu is a device context for the kernel tests.
type kgpu struct {
	t      *testing.T
	ctx    driver.Context
	params []byte // pinned parameter scratch
	// staging is the tensor-core tiles' staging buffer, kept from launch
	// to launch as the tier keeps it: what one launch leaves there (its
	// records, split-k's partials) must not upset the next.
	staging *staging
	// entry, when set, replaces the entry point Shape picks; replacing
	// the _split entry launches the unsplit grid (one block per head
	// group and row, no staging buffer).
	entry *kcuda.EntryPoint
	// threads, when not 0, replaces the launch's threads a block: the
	// flash_attn tile's blocks come in two sizes (kcuda's fatSplit), and
	// a test's few rows would otherwise only ever see the larger.
	threads uint32
	// shared, when not 0, replaces the launch's shared memory: the decode
	// attention kernels take as many stages a warp as they are given
	// (kcuda.AttnShared).
	shared int
	// oneRow launches kcuda.OneRowShape's launch (with _rows4) in place
	// of Shape's.
	oneRow bool
}

// staging is a device buffer of n bytes, zeroed when allocated.
type staging struct {
	p driver.DevPtr
	n int
}

func newKGPU(t *testing.T) *kgpu {
	t.Helper()
	if _, err := driver.Probe(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	dev, err := driver.GetDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := dev.PrimaryContext()
	if err != nil {
		t.Fatal(err)
	}
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	if err := ctx.SetCurrent(); err != nil {
		t.Fatal(err)
	}
	g := &kgpu{t: t, ctx: ctx, staging: &staging{}}
	if g.params, err = driver.MemHostAlloc(4096); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		goruntime.LockOSThread()
		defer goruntime.UnlockOSThread()
		ctx.SetCurrent()
		if g.staging.p != 0 {
			driver.MemFree(g.staging.p)
		}
		driver.MemFreeHost(g.params)
	})
	return g
}

// with is g for a subtest's t.
func (g *kgpu) with(t *testing.T) *kgpu { c := *g; c.t = t; return &c }

// run launches instance once (the entry Shape picks) over bufs (nil: a
// null pointer) for a variant of rows rows, a prefill variant from 64
// rows, and returns every buffer's contents after.
// It runs on the calling goroutine's thread, made current to the context
// (subtests run on goroutines of their own).
func (g *kgpu) run(instance string, bufs [][]byte, push, spec []uint32, rows int) [][]byte {
	g.t.Helper()
	return g.runAs(instance, bufs, push, spec, rows, rows >= 64)
}

// current locks the calling goroutine to its thread and makes g's
// context current there (subtests run on goroutines of their own); the
// caller defers the function it returns, which unlocks the thread.
func (g *kgpu) current() func() {
	g.t.Helper()
	goruntime.LockOSThread()
	if err := g.ctx.SetCurrent(); err != nil {
		goruntime.UnlockOSThread()
		g.t.Fatal(err)
	}
	return goruntime.UnlockOSThread
}

// module loads instance's PTX (ZRT_PTX_DIR's, else the embedded
// archive's) into the current context.
func (g *kgpu) module(instance string) driver.Module {
	g.t.Helper()
	src, err := ptx.Source(testArch(), instance, os.Getenv("ZRT_PTX_DIR"))
	if err != nil {
		g.t.Fatal(err)
	}
	m, err := driver.ModuleLoadData(src)
	if err != nil {
		g.t.Fatalf("%s: %v", instance, err)
	}
	return m
}

// runAs is run for a prefill or a decode variant of rows rows.
func (g *kgpu) runAs(instance string, bufs [][]byte, push, spec []uint32, rows int, prefill bool) [][]byte {
	t := g.t
	t.Helper()
	defer g.current()()
	m := g.module(instance)
	defer m.Unload()
	shape, err := kcuda.Shape(instance, push, spec, rows, prefill)
	if g.oneRow {
		shape, err = kcuda.OneRowShape(instance, push, spec, rows, true)
	}
	if err != nil {
		t.Fatal(err)
	}
	if g.entry != nil {
		if shape.Entry == kcuda.EntrySplit && *g.entry != kcuda.EntrySplit {
			shape.Grid[2], shape.Staged = 1, 0
		}
		shape.Entry = *g.entry
	}
	if g.threads != 0 {
		shape.Block[0] = g.threads
	}
	if g.shared != 0 {
		shape.Shared = g.shared
	}
	var vals []uint64
	var devs []driver.DevPtr
	for _, b := range bufs {
		if b == nil {
			vals = append(vals, 0)
			devs = append(devs, 0)
			continue
		}
		p, err := driver.MemAlloc(max(len(b), 256) + 16) // the tier's regionSlack
		if err != nil {
			t.Fatal(err)
		}
		if err := driver.MemcpyHtoD(p, b); err != nil {
			t.Fatal(err)
		}
		vals = append(vals, uint64(p))
		devs = append(devs, p)
	}
	for _, x := range append(append([]uint32(nil), push...), spec...) {
		vals = append(vals, uint64(x))
	}
	if shape.Staged > 0 { // the staging buffer, and the stage launch first where there is one, as Walk makes it
		st := g.staging
		if st.n < shape.Staged { // grown as the tier sizes it: for the largest launch, zeroed
			if st.p != 0 {
				driver.MemFree(st.p)
			}
			p, err := driver.MemAlloc(shape.Staged)
			if err != nil {
				t.Fatal(err)
			}
			*st = staging{p, shape.Staged}
			if err := driver.MemsetD8(p, 0, shape.Staged); err != nil {
				t.Fatal(err)
			}
		}
		vals = append(vals, uint64(st.p))
		if shape.Stage != nil {
			g.launch(m, instance, *shape.Stage, vals)
		}
	}
	g.launch(m, instance, shape, vals)
	if shape.Rest != nil && g.entry == nil { // the tile's other rows, as Walk launches them
		g.launch(m, instance, *shape.Rest, vals)
	}
	if err := driver.Synchronize(); err != nil {
		t.Fatalf("%s: %v", instance, err)
	}
	out := make([][]byte, len(bufs))
	for i, b := range bufs {
		if b == nil {
			continue
		}
		out[i] = make([]byte, len(b))
		if err := driver.MemcpyDtoH(out[i], devs[i]); err != nil {
			t.Fatal(err)
		}
		driver.MemFree(devs[i])
	}
	return out
}

// launch launches instance's entry of shape in m with the parameter
// values vals (8-byte slots: the kernels read pointers and u32s from them).
func (g *kgpu) launch(m driver.Module, instance string, shape kcuda.Launch, vals []uint64) {
	t := g.t
	t.Helper()
	f, err := m.Function(kcuda.Entry(instance) + shape.Entry.Suffix())
	if err != nil {
		t.Fatal(err)
	}
	if shape.Shared > 48<<10 { // past the default, as the tier allows it
		if err := f.SetAttribute(driver.FuncAttrMaxDynamicSharedSize, shape.Shared); err != nil {
			t.Fatal(err)
		}
	}
	n := len(vals)
	base := unsafe.Pointer(&g.params[0])
	vs := unsafe.Slice((*uint64)(base), n)
	ptrs := unsafe.Slice((*unsafe.Pointer)(unsafe.Add(base, 8*n)), n)
	for i, v := range vals {
		vs[i] = v
		ptrs[i] = unsafe.Pointer(&vs[i])
	}
	if err := f.Launch(shape.Grid, shape.Block, shape.Shared, 0, unsafe.Pointer(&ptrs[0])); err != nil {
		t.Fatal(err)
	}
}

// matchCPU runs instance on the GPU and on T-CPU (vsCPU) and holds buffer
// out of the GPU's result to T-CPU's within tol.
func (g *kgpu) matchCPU(instance string, bufs [][]byte, push, spec []uint32, rows, out int, tol float64) {
	g.t.Helper()
	got, want := g.vsCPU(instance, bufs, push, spec, rows)
	compareF32(g.t, instance, got[out], want[out], tol)
}

// vsCPU runs instance on the GPU (run) and T-CPU's kernel of the name
// (cpuRun) over copies of the same buffers and returns both results.
func (g *kgpu) vsCPU(instance string, bufs [][]byte, push, spec []uint32, rows int) (got, want [][]byte) {
	g.t.Helper()
	return g.run(instance, bufs, push, spec, rows), cpuRun(g.t, instance, bufs, push, spec)
}

// cpuRun runs T-CPU's kernel on copies of bufs and returns them.
func cpuRun(t *testing.T, instance string, bufs [][]byte, push, spec []uint32) [][]byte {
	t.Helper()
	fn, err := cpu.Bind(instance)
	if err != nil {
		t.Fatal(err)
	}
	cp := make([][]byte, len(bufs))
	for i, b := range bufs {
		if b != nil {
			cp[i] = append([]byte(nil), b...)
		}
	}
	pool := cpu.NewPool(4)
	defer pool.Close()
	var work []byte
	if err := fn(&cpu.Args{Bufs: cp, Push: push, Spec: spec, Pool: pool, Work: &work}); err != nil {
		t.Fatal(err)
	}
	return cp
}

func randF32(rng *rand.Rand, n int, lo, hi float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = lo + (hi-lo)*rng.Float32()
	}
	return v
}

func fbits(x float32) uint32 { return math.Float32bits(x) }

// krow is one row of a request table.
type krow struct{ pos, slot, flags uint32 }

// longPrompt is n rows of a long prompt in slot s at positions from on
// (the flash-attention tile's rows).
func longPrompt(slot, from, n int) []krow {
	rows := make([]krow, n)
	for i := range rows {
		rows[i] = krow{uint32(from + i), uint32(slot), kernels.RowPrompt | kernels.RowLongPrompt}
	}
	return rows
}

// tileRows is the rows of the flash-attention tile's tests: one long
// prompt, and the prompts of three slots meeting inside a warp's 16 rows
// with decode rows (no RowPrompt: flash_attn_rest's) among them.
func tileRows() (long, mixed []krow) {
	return longPrompt(1, 200, 70), append(append(append(append(longPrompt(0, 0, 21), longPrompt(1, 100, 50)...), krow{700, 2, 1}), longPrompt(2, 701, 3)...), krow{90, 3, 1}, krow{40, 4, 1})
}

// ioTable builds a request table for rows, slots of maxPages pages each;
// slot s's page j is page s*maxPages+j permuted by perm (nil: identity).
func ioTable(rows []krow, slots, maxPages int, perm []int) []byte {
	rt := kernels.RequestTable{Rows: len(rows), Slots: slots, MaxPages: maxPages}
	w := make([]uint32, rt.Words())
	w[kernels.IOWordRows] = uint32(len(rows))
	w[kernels.IOWordMaxPages] = uint32(maxPages)
	w[kernels.IOWordPageTable] = uint32(rt.PageTable())
	for i, r := range rows {
		o := kernels.IOWordRowBase + i*kernels.IORowWords
		w[o+kernels.IORowToken] = uint32(i)
		w[o+kernels.IORowPos] = r.pos
		w[o+kernels.IORowSlot] = r.slot
		w[o+kernels.IORowFlags] = r.flags
	}
	for p := 0; p < slots*maxPages; p++ {
		page := p
		if perm != nil {
			page = perm[p]
		}
		w[rt.PageTable()+p] = uint32(page)
	}
	b := make([]byte, 4*len(w))
	for i, x := range w {
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
	return b
}

// compareF32 reports the largest difference of got from want, relative to
// max(1, |want|) elementwise, failing past tol.
func compareF32(t *testing.T, what string, got, want []byte, tol float64) {
	t.Helper()
	g, w := lebin.Float32s(got), lebin.Float32s(want)
	worst, at := 0.0, -1
	for i := range w {
		d := math.Abs(float64(g[i]) - float64(w[i]))
		if math.IsNaN(d) {
			if math.IsNaN(float64(g[i])) != math.IsNaN(float64(w[i])) {
				t.Errorf("%s: element %d: got %v, want %v", what, i, g[i], w[i])
				return
			}
			continue
		}
		d /= math.Max(1, math.Abs(float64(w[i])))
		if d > worst {
			worst, at = d, i
		}
	}
	if worst > tol {
		t.Errorf("%s: element %d: got %v, want %v (relative difference %.3g, tolerance %g)", what, at, g[at], w[at], worst, tol)
		return
	}
	t.Logf("%s: worst relative difference %.3g", what, worst)
}

func TestKernelGeglu(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(1))
	rows, cols := 5, 1000
	gate := randF32(rng, rows*cols, -12, 12)
	gate[0], gate[1], gate[2], gate[3] = -10, 10, 0, -3.5
	up := randF32(rng, rows*cols, -2, 2)
	y := make([]float32, rows*cols)
	bufs := [][]byte{lebin.Float32Bytes(gate), lebin.Float32Bytes(up), ioTable(make([]krow, rows), rows, 1, nil), lebin.Float32Bytes(y)}
	push := []uint32{uint32(cols)}
	g.matchCPU("geglu", bufs, push, nil, rows, 3, 1e-6)
}

func TestKernelScale(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(2))
	rows, cols := 3, 777
	x := randF32(rng, (rows+1)*cols, -5, 5) // one row past the active ones stays
	bufs := [][]byte{lebin.Float32Bytes(x), ioTable(make([]krow, rows), rows, 1, nil)}
	push, spec := []uint32{uint32(cols)}, []uint32{fbits(float32(math.Sqrt(2304)))}
	g.matchCPU("scale", bufs, push, spec, rows, 0, 0)
}

func TestKernelLogitSoftcap(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(3))
	nv, slots := 10000, 4
	logits := randF32(rng, slots*nv, -80, 80)
	rows := []krow{{0, 2, 0}, {5, 1, kernels.RowWantsLogits}, {9, 3, kernels.RowWantsLogits}}
	bufs := [][]byte{lebin.Float32Bytes(logits), ioTable(rows, slots, 1, nil)}
	push, spec := []uint32{uint32(nv)}, []uint32{fbits(30)}
	g.matchCPU("logit_softcap", bufs, push, spec, len(rows), 0, 1e-6)
}

func TestKernelAttnTemp(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(4))
	cols := 640
	rows := []krow{{0, 0, 0}, {3, 0, 0}, {4, 1, 0}, {8191, 1, 0}, {8192, 2, 0}, {100000, 2, 0}, {rng.Uint32() % 50000, 3, 0}}
	x := randF32(rng, len(rows)*cols, -3, 3)
	for _, floor := range []uint32{4, 8192} {
		bufs := [][]byte{lebin.Float32Bytes(x), ioTable(rows, 4, 1, nil)}
		push, spec := []uint32{uint32(cols)}, []uint32{fbits(0.1), floor}
		g.matchCPU("attn_temp", bufs, push, spec, len(rows), 0, 1e-6)
	}
}

func TestKernelRopeExtYaRN(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(5))
	nHead, hd, nRot := 4, 128, 128
	rows := []krow{{0, 0, 0}, {1, 0, 0}, {37, 1, 0}, {1000, 1, 0}, {20000, 2, 0}}
	x := randF32(rng, len(rows)*nHead*hd, -2, 2)
	freq := randF32(rng, nRot/2, 1, 4)
	for _, c := range []struct {
		name                      string
		neox                      uint32
		freq                      []float32
		fscale, attn, ext, lo, hi float32
	}{
		{"yarn", 1, nil, 0.25, 1, 1, 20.7, 45.3},
		{"yarn-norm-freq", 0, freq, 1. / 32, 0.9, 1, 8, 30},
		{"yarn-half", 1, nil, 0.125, 1, 0.5, 3, 3},
		{"plain", 0, freq, 0.5, 1.2, 0, 0, 0},
	} {
		var fb []byte
		if c.freq != nil {
			fb = lebin.Float32Bytes(c.freq)
		}
		bufs := [][]byte{lebin.Float32Bytes(x), fb, ioTable(rows, 3, 1, nil)}
		push := []uint32{uint32(nHead), uint32(hd)}
		spec := []uint32{uint32(nRot), c.neox, fbits(10000), fbits(c.fscale), fbits(c.attn), fbits(c.ext), fbits(c.lo), fbits(c.hi)}
		got, want := g.vsCPU("rope_ext", bufs, push, spec, len(rows))
		compareF32(t, "rope_ext "+c.name, got[0], want[0], 1e-5)
	}
}

// TestKernelFlashAttnExt holds flash_attn_ext to T-CPU with each
// extension (soft cap, window, sinks) on decode, mixed and prefill steps,
// and to T-CUDA's own flash_attn with none.
func TestKernelFlashAttnExt(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(6))
	const nLayer, layer = 2, 1
	type fcase struct {
		name          string
		nHead, nKV    int
		hd            int
		softcap       float32
		window        uint32
		sinks         bool
		rows          []krow
		qScale, kScal float32
	}
	decode := []krow{{700, 0, 1}}
	mixed := []krow{{5, 0, 1}, {130, 1, 1}, {300, 2, 1}}
	var prefill []krow
	for i := 0; i < 70; i++ {
		// a 70-token prompt: T-CPU takes ggml's tiled path (F32)
		prefill = append(prefill, krow{uint32(200 + i), 1, kernels.RowPrompt | kernels.RowLongPrompt})
	}
	cases := []fcase{
		{"none-mixed", 8, 2, 128, 0, 0, false, mixed, 1, 1},
		{"softcap-decode", 8, 2, 128, 50, 0, false, decode, 3, 3},
		{"softcap-mixed", 8, 4, 256, 30, 0, false, mixed, 3, 3},
		{"window-decode", 8, 2, 128, 0, 37, false, decode, 1, 1},
		{"window-mixed", 4, 4, 64, 0, 100, false, mixed, 1, 1},
		{"sinks-mixed", 8, 2, 128, 0, 0, true, mixed, 1, 1},
		{"all-mixed", 8, 2, 128, 50, 64, true, mixed, 3, 3},
		{"all-decode", 16, 8, 256, 50, 513, true, decode, 3, 3},
		{"all-prefill", 8, 2, 128, 50, 64, true, prefill, 3, 3},
		{"sinks-prefill", 8, 2, 80, 0, 0, true, prefill, 1, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := g.with(t)
			kvDim := c.nKV * c.hd
			slots, maxPages := 3, 48 // 768 positions a slot
			nPages := slots * maxPages
			perm := rng.Perm(nPages)
			kv := make([]byte, nPages*kernels.KVPageBytes(nLayer, kvDim))
			for i := 0; i < len(kv); i += 2 {
				binary.LittleEndian.PutUint16(kv[i:], quant.F32ToF16(c.kScal*(2*rng.Float32()-1)))
			}
			q := randF32(rng, len(c.rows)*c.nHead*c.hd, -c.qScale, c.qScale)
			var sinks []byte
			if c.sinks {
				sinks = lebin.Float32Bytes(randF32(rng, c.nHead, -1, 5))
			}
			y := make([]float32, len(c.rows)*c.nHead*c.hd)
			io := ioTable(c.rows, slots, maxPages, perm)
			scale := float32(1 / math.Sqrt(float64(c.hd)))
			bufs := [][]byte{lebin.Float32Bytes(q), kv, sinks, io, lebin.Float32Bytes(y)}
			push := []uint32{layer}
			spec := []uint32{nLayer, uint32(c.nHead), uint32(c.nKV), uint32(c.hd), fbits(scale), fbits(c.softcap), c.window}
			got, want := g.vsCPU("flash_attn_ext", bufs, push, spec, len(c.rows))
			// T-CUDA attends in F32, T-CPU with ggml's F16 accumulator on
			// short steps (decode, mixed): outputs (averages of values in
			// ±1) agree to a few 1e-3 (measured on an H200: 6e-3 worst,
			// peaked by a soft cap). A 64-row prefill takes T-CPU's F32
			// tiled path, which agrees to float rounding.
			tol := 1e-2
			if len(c.rows) >= 64 {
				tol = 1e-4
			}
			compareF32(t, "flash_attn_ext "+c.name, got[4], want[4], tol)
			if c.softcap == 0 && c.window == 0 && !c.sinks {
				plain := g.run("flash_attn", [][]byte{bufs[0], kv, io, bufs[4]}, push, spec[:5], len(c.rows))
				compareF32(t, "flash_attn vs flash_attn_ext", got[4], plain[3], 0)
			}
		})
	}
}

// TestKernelFlashAttnTile runs flash_attn's tensor-core prefill entry
// (variants of at least 64 rows, head widths 64 and 128) against T-CPU:
// one long prompt; prompts of three slots meeting inside a warp's 16 rows
// beside a decode row; grouped and ungrouped heads; row counts that leave
// a warp partly empty; a chunk of a prompt deep in its context, whose
// blocks of 64 rows start mid-page and walk many tiles of 64 keys. Stale
// cache bytes past every slot's last position are NaN, which must not
// reach any output.
func TestKernelFlashAttnTile(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(7))
	const nLayer, layer = 2, 1
	long, mixed := tileRows()
	cases := []struct {
		name       string
		nHead, nKV int
		hd         int
		rows       []krow
	}{
		{"long-128", 8, 2, 128, long},
		{"long-64", 12, 4, 64, long},
		{"mixed-128", 16, 8, 128, mixed},
		{"mixed-64", 4, 4, 64, mixed},
		{"deep-128", 16, 8, 128, longPrompt(1, 1500, 200)},
		{"deep-64", 8, 2, 64, longPrompt(0, 1001, 130)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := g.with(t)
			if l, err := kcuda.Shape("flash_attn", []uint32{layer}, []uint32{nLayer, uint32(c.nHead), uint32(c.nKV), uint32(c.hd)}, len(c.rows), true); err != nil || l.Entry != kcuda.EntryTile {
				t.Fatalf("launch %+v, %v: want the tile entry", l, err)
			}
			bufs, push, spec := faInputs(t, rng, nLayer, layer, c.nHead, c.nKV, c.hd, c.rows)
			got, want := g.vsCPU("flash_attn", bufs, push, spec, len(c.rows))
			// Q and P rounded to F16 for the tensor cores: outputs
			// (averages of values in ±1) agree to a few 1e-3.
			compareF32(t, "flash_attn tile "+c.name, got[3], want[3], 1e-2)
			// These launches are few blocks, which split each tile's keys
			// between two warps of the same rows; a launch of many takes
			// a warp per 16 rows (128 threads a block).
			one := g.with(t)
			one.threads = 128
			got = one.run("flash_attn", bufs, push, spec, len(c.rows))
			compareF32(t, "flash_attn tile, unsplit blocks, "+c.name, got[3], want[3], 1e-2)
		})
	}
}

// TestKernelFlashAttnLean runs flash_attn's _lean entry (decode steps of
// many blocks of one head) against the main entry, which must agree to
// the bit (the same arithmetic in fewer registers), and against T-CPU.
func TestKernelFlashAttnLean(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(11))
	const nLayer, layer = 2, 1
	for _, c := range []struct {
		name       string
		nHead, hd  int
		rows, step int
	}{
		{"32x128", 32, 128, 16, 37},
		{"16x64", 16, 64, 40, 13},
	} {
		t.Run(c.name, func(t *testing.T) {
			var rows []krow
			for i := 0; i < c.rows; i++ { // a slot a row, each at its own length
				rows = append(rows, krow{uint32(5 + c.step*i%700), uint32(i), 0})
			}
			if l, err := kcuda.Shape("flash_attn", []uint32{layer}, []uint32{nLayer, uint32(c.nHead), uint32(c.nHead), uint32(c.hd)}, len(rows), false); err != nil || l.Entry != kcuda.EntryLean {
				t.Fatalf("launch %+v, %v: want the lean entry", l, err)
			}
			bufs, push, spec := faInputs(t, rng, nLayer, layer, c.nHead, c.nHead, c.hd, rows)
			got := g.with(t).run("flash_attn", bufs, push, spec, len(rows))
			main := g.with(t)
			main.entry = new(kcuda.EntryPoint) // EntryMain, same blocks
			wantMain := main.run("flash_attn", bufs, push, spec, len(rows))
			compareF32(t, "flash_attn lean vs main "+c.name, got[3], wantMain[3], 0)
			// T-CPU accumulates decode attention in F16 (see
			// TestKernelFlashAttnExt): a few 1e-3.
			compareF32(t, "flash_attn lean vs T-CPU "+c.name, got[3], cpuRun(t, "flash_attn", bufs, push, spec)[3], 1e-2)
		})
	}
}

// faInputs returns flash_attn's buffers (q, the KV cache, the request
// table, y), push and spec for rows of up to 3 slots, each slot's pages
// scattered: every slot's positions up to its last row hold random
// values, the cache's other bytes NaN (stale), which must not reach any
// output.
func faInputs(t *testing.T, rng *rand.Rand, nLayer, layer, nHead, nKV, hd int, rows []krow) (bufs [][]byte, push, spec []uint32) {
	t.Helper()
	kvDim := nKV * hd
	slots, maxPages := 3, 48
	for _, r := range rows {
		slots = max(slots, int(r.slot)+1)
		maxPages = max(maxPages, int(r.pos)/kernels.KVPageTokens+1)
	}
	kv := make([]byte, slots*maxPages*kernels.KVPageBytes(nLayer, kvDim))
	for i := 0; i < len(kv); i += 2 {
		binary.LittleEndian.PutUint16(kv[i:], 0x7e00) // NaN: stale bytes
	}
	// Every slot's positions up to its last row hold values.
	last := map[uint32]uint32{}
	for _, r := range rows {
		last[r.slot] = max(last[r.slot], r.pos)
	}
	pageBytes := kernels.KVPageBytes(nLayer, kvDim)
	perm := rng.Perm(slots * maxPages)
	for s, hi := range last {
		for p := uint32(0); p <= hi; p++ {
			page := perm[int(s)*maxPages+int(p)/kernels.KVPageTokens]
			for which := 0; which < 2; which++ {
				off := page*pageBytes + ((layer*2+which)*kernels.KVPageTokens+int(p)%kernels.KVPageTokens)*kvDim*2
				for e := 0; e < kvDim; e++ {
					binary.LittleEndian.PutUint16(kv[off+2*e:], quant.F32ToF16(2*rng.Float32()-1))
				}
			}
		}
	}
	q := randF32(rng, len(rows)*nHead*hd, -1, 1)
	y := make([]float32, len(rows)*nHead*hd)
	io := ioTable(rows, slots, maxPages, perm)
	scale := float32(1 / math.Sqrt(float64(hd)))
	bufs = [][]byte{lebin.Float32Bytes(q), kv, io, lebin.Float32Bytes(y)}
	push = []uint32{uint32(layer)}
	spec = []uint32{uint32(nLayer), uint32(nHead), uint32(nKV), uint32(hd), fbits(scale)}
	return bufs, push, spec
}

// kweights returns rows random weight rows of k elements as type t: F32,
// or quantized as ggml does (Q8_0, MXFP4).
func kweights(t *testing.T, rng *rand.Rand, typ ggml.Type, rows, k int) []byte {
	t.Helper()
	x := randF32(rng, rows*k, -1, 1)
	switch typ {
	case ggml.F32:
		return lebin.Float32Bytes(x)
	case ggml.F16:
		b := make([]byte, 2*rows*k)
		for i, v := range x {
			binary.LittleEndian.PutUint16(b[2*i:], quant.F32ToF16(v))
		}
		return b
	case ggml.Q8_0:
		rb := k / 32 * 34
		b := make([]byte, rows*rb)
		for r := 0; r < rows; r++ {
			if err := quant.QuantizeRow(ggml.Q8_0, x[r*k:(r+1)*k], b[r*rb:]); err != nil {
				t.Fatal(err)
			}
		}
		return b
	case ggml.MXFP4:
		b := make([]byte, rows*k/32*17)
		if err := quant.QuantizeMXFP4(x, b); err != nil {
			t.Fatal(err)
		}
		return b
	case ggml.IQ4_NL, ggml.IQ4_XS, ggml.IQ3_S, ggml.Q4_0:
		// Every bit pattern past a block's leading f16 scale is a valid
		// block (indices, scales, signs), so random bytes with a sane d
		// cover the decode.
		info, _ := typ.Info()
		b := make([]byte, rows*k/info.BlockSize*info.BlockBytes)
		rng.Read(b)
		for o := 0; o < len(b); o += info.BlockBytes {
			binary.LittleEndian.PutUint16(b[o:], quant.F32ToF16(0.001+0.02*rng.Float32()))
		}
		return b
	case ggml.Q4_K, ggml.Q6_K:
		// Likewise past the F16 scales: d and dmin at the front of a Q4_K
		// block, d at the end of a Q6_K one.
		info, _ := typ.Info()
		b := make([]byte, rows*k/info.BlockSize*info.BlockBytes)
		rng.Read(b)
		for o := 0; o < len(b); o += info.BlockBytes {
			if typ == ggml.Q4_K {
				binary.LittleEndian.PutUint16(b[o:], quant.F32ToF16(0.001+0.02*rng.Float32()))
				binary.LittleEndian.PutUint16(b[o+2:], quant.F32ToF16(0.001+0.02*rng.Float32()))
			} else {
				binary.LittleEndian.PutUint16(b[o+info.BlockBytes-2:], quant.F32ToF16(0.001+0.02*rng.Float32()))
			}
		}
		return b
	}
	t.Fatalf("kweights: type %v", typ)
	return nil
}

// kroutes builds a routing buffer: n_used distinct experts of n_expert per
// row, with random weights.
func kroutes(rng *rand.Rand, rows, nUsed, nExpert int) []byte {
	b := make([]byte, 8*rows*nUsed)
	for r := 0; r < rows; r++ {
		for u, e := range rng.Perm(nExpert)[:nUsed] {
			o := 8 * (r*nUsed + u)
			binary.LittleEndian.PutUint32(b[o:], uint32(e))
			binary.LittleEndian.PutUint32(b[o+4:], math.Float32bits(rng.Float32()))
		}
	}
	return b
}

func TestKernelMoeAddBias(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(7))
	rows, nUsed, f, nExp := 3, 4, 300, 8
	x := randF32(rng, (rows+1)*nUsed*f, -3, 3) // one row past the active ones stays
	b := randF32(rng, nExp*f, -1, 1)
	bufs := [][]byte{lebin.Float32Bytes(x), lebin.Float32Bytes(b), kroutes(rng, rows+1, nUsed, nExp), ioTable(make([]krow, rows), rows, 1, nil)}
	push := []uint32{uint32(f), uint32(nUsed)}
	g.matchCPU("moe_add_bias", bufs, push, nil, rows, 0, 0)
}

func TestKernelSwigluOAI(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(8))
	rows, cols := 5, 1000
	gate := randF32(rng, rows*cols, -12, 12)
	up := randF32(rng, rows*cols, -10, 10)
	gate[0], gate[1], gate[2], up[0], up[1] = 0, 7, -7, 7, -7
	y := make([]float32, rows*cols)
	bufs := [][]byte{lebin.Float32Bytes(gate), lebin.Float32Bytes(up), ioTable(make([]krow, rows), rows, 1, nil), lebin.Float32Bytes(y)}
	push, spec := []uint32{uint32(cols)}, []uint32{fbits(1.702), fbits(7)}
	g.matchCPU("swiglu_oai", bufs, push, spec, rows, 3, 1e-6)
}

// TestKernelMoeGateTopK holds the router to T-CPU for both gatings, with
// and without the router bias: the same experts in the same order, and
// their weights.
func TestKernelMoeGateTopK(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(9))
	rows, k, nExp, nUsed := 4, 256, 32, 4
	for _, typ := range []ggml.Type{ggml.Q8_0, ggml.MXFP4, ggml.F32} {
		w := kweights(t, rng, typ, nExp, k)
		x := randF32(rng, rows*k, -2, 2)
		bias := lebin.Float32Bytes(randF32(rng, nExp, -0.5, 0.5))
		for _, c := range []struct {
			name         string
			bias         []byte
			norm, gating uint32
		}{{"softmax-norm", nil, 1, 0}, {"softmax-bias", bias, 0, 0}, {"oai-bias", bias, 0, 1}, {"oai", nil, 1, 1}} {
			inst := kernels.InstanceName(mustLookup(t, "moe_gate_topk"), typ)
			bufs := [][]byte{lebin.Float32Bytes(x), w, c.bias, ioTable(make([]krow, rows), rows, 1, nil), make([]byte, 8*rows*nUsed)}
			push := []uint32{uint32(k), uint32(nExp), uint32(nUsed), c.norm, c.gating}
			gotBufs, wantBufs := g.vsCPU(inst, bufs, push, nil, rows)
			got, want := gotBufs[4], wantBufs[4]
			what := inst + " " + c.name
			for i := 0; i < rows*nUsed; i++ {
				ge, we := binary.LittleEndian.Uint32(got[8*i:]), binary.LittleEndian.Uint32(want[8*i:])
				if ge != we {
					t.Errorf("%s: route %d: expert %d, want %d", what, i, ge, we)
				}
			}
			gw, ww := make([]byte, 4*rows*nUsed), make([]byte, 4*rows*nUsed)
			for i := 0; i < rows*nUsed; i++ {
				copy(gw[4*i:], got[8*i+4:8*i+8])
				copy(ww[4*i:], want[8*i+4:8*i+8])
			}
			compareF32(t, what+" weights", gw, ww, 1e-4)
		}
	}
}

func mustLookup(t *testing.T, family string) *kernels.ABI {
	t.Helper()
	abi, ok := kernels.Lookup(family)
	if !ok {
		t.Fatalf("no kernel family %s", family)
	}
	return abi
}

// TestKernelMoeDownAcc holds the expert down projection, with and without
// the experts' bias, to T-CPU.
func TestKernelMoeDownAcc(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(10))
	rows, nUsed, f, n, nExp := 3, 4, 256, 96, 8
	for _, typ := range []ggml.Type{ggml.Q8_0, ggml.MXFP4} {
		w := kweights(t, rng, typ, nExp*n, f)
		h := randF32(rng, rows*nUsed*f, -2, 2)
		y := randF32(rng, (rows+1)*n, -5, 5)
		rt := kroutes(rng, rows, nUsed, nExp)
		for _, bias := range [][]byte{nil, lebin.Float32Bytes(randF32(rng, nExp*n, -1, 1))} {
			inst := kernels.InstanceName(mustLookup(t, "moe_down_acc"), typ)
			bufs := [][]byte{lebin.Float32Bytes(h), w, bias, rt, ioTable(make([]krow, rows), rows, 1, nil), lebin.Float32Bytes(y)}
			push := []uint32{uint32(f), uint32(n), uint32(nUsed)}
			got, want := g.vsCPU(inst, bufs, push, nil, rows)
			what := inst
			if bias != nil {
				what += " bias"
			}
			compareF32(t, what, got[5], want[5], 1e-4)
		}
	}
}

// TestKernelMXFP4 holds MXFP4's decode (embed) and products (matmul with
// bias, lm_head, moe_gate_up) to T-CPU; k = 480 is an odd number of
// blocks, the oracle's scalar tail.
func TestKernelMXFP4(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(11))
	const typ = ggml.MXFP4
	inst := func(fam string) string { return kernels.InstanceName(mustLookup(t, fam), typ) }
	rows, k, n := 3, 480, 100
	w := kweights(t, rng, typ, n, k)
	// Extreme block exponents: the subnormal scales and large ones.
	w[0], w[17], w[34] = 0, 1, 200

	cols := k
	y := make([]float32, rows*cols)
	bufs := [][]byte{w, ioTable(make([]krow, rows), rows, 1, nil), lebin.Float32Bytes(y)}
	got, want := g.vsCPU(inst("embed"), bufs, []uint32{uint32(cols)}, nil, rows)
	compareF32(t, "embed.mxfp4", got[2], want[2], 0)

	w[0], w[17], w[34] = 127, 126, 128
	for _, r := range []int{1, rows} {
		x := randF32(rng, r*k, -2, 2)
		bias := lebin.Float32Bytes(randF32(rng, n, -1, 1))
		out := make([]float32, r*n)
		bufs := [][]byte{lebin.Float32Bytes(x), w, bias, ioTable(make([]krow, r), r, 1, nil), lebin.Float32Bytes(out)}
		push := []uint32{uint32(k), uint32(n)}
		got, want := g.vsCPU(inst("matmul"), bufs, push, nil, r)
		compareF32(t, "matmul.mxfp4", got[4], want[4], 1e-4)
	}
	lrows := []krow{{0, 1, kernels.RowWantsLogits}, {1, 0, 0}, {2, 2, kernels.RowWantsLogits}}
	x := randF32(rng, len(lrows)*k, -2, 2)
	logits := make([]float32, 3*n)
	lbufs := [][]byte{lebin.Float32Bytes(x), w, ioTable(lrows, 3, 1, nil), lebin.Float32Bytes(logits)}
	push := []uint32{uint32(k), uint32(n)}
	got = g.run(inst("lm_head"), lbufs, push, nil, len(lrows))
	want = cpuRun(t, inst("lm_head"), lbufs, push, nil)
	compareF32(t, "lm_head.mxfp4", got[3], want[3], 1e-4)

	nUsed, ff, nExp := 2, 64, 4
	wg, wu := kweights(t, rng, typ, nExp*ff, k), kweights(t, rng, typ, nExp*ff, k)
	gate, up := make([]float32, rows*nUsed*ff), make([]float32, rows*nUsed*ff)
	gbufs := [][]byte{lebin.Float32Bytes(randF32(rng, rows*k, -2, 2)), wg, wu, kroutes(rng, rows, nUsed, nExp),
		ioTable(make([]krow, rows), rows, 1, nil), lebin.Float32Bytes(gate), lebin.Float32Bytes(up)}
	spec := []uint32{uint32(k), uint32(ff), uint32(nUsed)}
	got = g.run(inst("moe_gate_up"), gbufs, nil, spec, rows)
	want = cpuRun(t, inst("moe_gate_up"), gbufs, nil, spec)
	compareF32(t, "moe_gate_up.mxfp4 gate", got[5], want[5], 1e-4)
	compareF32(t, "moe_gate_up.mxfp4 up", got[6], want[6], 1e-4)
}

// TestKernelIQuants holds the i-quants' decode (embed) and products
// (matmul with bias, one and several rows, lm_head) to T-CPU; IQ4_NL's k =
// 480 is an odd number of blocks, the oracle's scalar tail.
func TestKernelIQuants(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(12))
	for _, typ := range []ggml.Type{ggml.IQ4_NL, ggml.IQ4_XS, ggml.IQ3_S} {
		name := strings.ToLower(typ.String())
		inst := func(fam string) string { return kernels.InstanceName(mustLookup(t, fam), typ) }
		rows, k, n := 3, 768, 100
		if typ == ggml.IQ4_NL {
			k = 480
		}
		w := kweights(t, rng, typ, n, k)

		y := make([]float32, rows*k)
		bufs := [][]byte{w, ioTable(make([]krow, rows), rows, 1, nil), lebin.Float32Bytes(y)}
		got, want := g.vsCPU(inst("embed"), bufs, []uint32{uint32(k)}, nil, rows)
		compareF32(t, "embed."+name, got[2], want[2], 0)

		for _, r := range []int{1, rows} {
			x := randF32(rng, r*k, -2, 2)
			bias := lebin.Float32Bytes(randF32(rng, n, -1, 1))
			out := make([]float32, r*n)
			bufs := [][]byte{lebin.Float32Bytes(x), w, bias, ioTable(make([]krow, r), r, 1, nil), lebin.Float32Bytes(out)}
			push := []uint32{uint32(k), uint32(n)}
			got, want := g.vsCPU(inst("matmul"), bufs, push, nil, r)
			compareF32(t, "matmul."+name, got[4], want[4], 1e-4)
		}
		lrows := []krow{{0, 1, kernels.RowWantsLogits}, {1, 0, 0}, {2, 2, kernels.RowWantsLogits}}
		x := randF32(rng, len(lrows)*k, -2, 2)
		logits := make([]float32, 3*n)
		lbufs := [][]byte{lebin.Float32Bytes(x), w, ioTable(lrows, 3, 1, nil), lebin.Float32Bytes(logits)}
		push := []uint32{uint32(k), uint32(n)}
		got = g.run(inst("lm_head"), lbufs, push, nil, len(lrows))
		want = cpuRun(t, inst("lm_head"), lbufs, push, nil)
		compareF32(t, "lm_head."+name, got[3], want[3], 1e-4)
	}
}

// TestKernelLMHeadRows holds lm_head's kernels for the types with
// tensor-core tiles to T-CPU (every row its own slot, written in reverse,
// and some rows not wanting logits): the matrix-vector kernel at 4 rows,
// the tensor-core tiles at 16, 32 and 64 (decode variants; 64 rows make a
// full tile), and in prefill variants at 64 rows and at 200 of which two
// want logits (the row tiles without one leave at once), for k of two
// super-blocks and of one, and of 16 (the 32-row tile at 64 rows). n =
// 300 leaves a partial tile of features. The tolerance is 1e-3: random Q6_K scales reach ±128, and the float
// combination of a logit's large partial sums, in another order than
// T-CPU's, loses about 1e-4 of the small ones.
func TestKernelLMHeadRows(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(21))
	for _, tk := range []struct {
		typ ggml.Type
		k   int
	}{{ggml.Q4_K, 512}, {ggml.Q6_K, 512}, {ggml.Q4_K, 256}, {ggml.Q6_K, 256}, {ggml.Q8_0, 512}, {ggml.Q6_K, 4096}} {
		typ, k, n := tk.typ, tk.k, 300
		inst := kernels.InstanceName(mustLookup(t, "lm_head"), typ)
		w := kweights(t, rng, typ, n, k)
		for _, c := range []struct {
			nr      int
			prefill bool
			sparse  bool // two rows want logits: row tiles without one leave
		}{{4, false, false}, {16, false, false}, {32, false, false}, {64, false, false}, {64, true, false}, {200, true, true}} {
			nr := c.nr
			rows := make([]krow, nr)
			for i := range rows {
				rows[i] = krow{pos: uint32(i), slot: uint32(nr - 1 - i), flags: kernels.RowWantsLogits}
				if i%3 == 1 || c.sparse && i != 7 && i != 150 {
					rows[i].flags = 0
				}
			}
			x := randF32(rng, nr*k, -2, 2)
			bufs := [][]byte{lebin.Float32Bytes(x), w, ioTable(rows, nr, 1, nil), lebin.Float32Bytes(make([]float32, nr*n))}
			push := []uint32{uint32(k), uint32(n)}
			got := g.runAs(inst, bufs, push, nil, nr, c.prefill)
			want := cpuRun(t, inst, bufs, push, nil)
			compareF32(t, fmt.Sprintf("%s k=%d, %d rows, prefill %v", inst, k, nr, c.prefill), got[3], want[3], 1e-3)
		}
	}
}

// TestKernelMatrixTiles holds the Q4_K, Q6_K and Q8_0 matrix kernels'
// tensor-core tiles, with their staged rows, to T-CPU: decode variants of
// 16, 40 with 33 active, and 64 rows, prefill variants of 64 and 100 rows
// (the last tile partial), for a plain product added to a residual, the
// fused norm + gate/up and the fused norm + QKV, for k of one, two and
// three super-blocks (the small grid splits k into as many parts: the
// partial tiles' sum is checked too) and of 16, where the decode variants
// past 32 rows take the 32-row tile. n = 300 leaves a partial tile of
// features. Tolerance 1e-3, as for lm_head.
func TestKernelMatrixTiles(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(22))
	const n = 300
	for _, tk := range []struct {
		typ ggml.Type
		k   int
	}{{ggml.Q4_K, 768}, {ggml.Q6_K, 768}, {ggml.Q4_K, 256}, {ggml.Q6_K, 512}, {ggml.Q8_0, 768}, {ggml.Q8_0, 256}, // 256, 512: one and two super-blocks
		{ggml.Q4_K, 4096}, {ggml.Q6_K, 4096}, {ggml.Q8_0, 4096}} { // 4096: 33 to 64 rows take the 32-row tile
		typ, k := tk.typ, tk.k
		w := kweights(t, rng, typ, n, k)
		wn := lebin.Float32Bytes(randF32(rng, k, 0.5, 1.5))
		for _, c := range []struct {
			active, capacity int
			prefill          bool
		}{{16, 16, false}, {33, 40, false}, {64, 64, false}, {64, 64, true}, {100, 100, true}} {
			rows := make([]krow, c.active)
			for i := range rows {
				rows[i] = krow{pos: uint32(i), slot: uint32(i)}
			}
			io := ioTable(rows, c.capacity, 1, nil)
			x := lebin.Float32Bytes(randF32(rng, c.capacity*k, -2, 2))
			res := lebin.Float32Bytes(randF32(rng, c.capacity*n, -1, 1))
			inst := kernels.InstanceName(mustLookup(t, "matmul_residual"), typ)
			bufs := [][]byte{x, w, nil, io, res}
			push := []uint32{uint32(k), n}
			what := fmt.Sprintf("%s k=%d, %d of %d rows, prefill %v", inst, k, c.active, c.capacity, c.prefill)
			got, want := g.runAs(inst, bufs, push, nil, c.capacity, c.prefill), cpuRun(t, inst, bufs, push, nil)
			compareF32(t, what, got[4][:c.active*n*4], want[4][:c.active*n*4], 1e-3)
			inst = kernels.InstanceName(mustLookup(t, "rms_norm_gate_up"), typ)
			half := make([]byte, c.capacity*n/2*4)
			bufs = [][]byte{x, wn, w, io, half, append([]byte(nil), half...)}
			spec := []uint32{uint32(k), n / 2, math.Float32bits(1e-5)}
			what = fmt.Sprintf("%s k=%d, %d of %d rows, prefill %v", inst, k, c.active, c.capacity, c.prefill)
			got, want = g.runAs(inst, bufs, nil, spec, c.capacity, c.prefill), cpuRun(t, inst, bufs, nil, spec)
			for o := 4; o < 6; o++ {
				compareF32(t, fmt.Sprintf("%s, buffer %d", what, o), got[o][:c.active*n/2*4], want[o][:c.active*n/2*4], 1e-3)
			}
			// rms_norm_qkv: n = n_q + 2·n_kv.
			inst = kernels.InstanceName(mustLookup(t, "rms_norm_qkv"), typ)
			third := make([]byte, c.capacity*n/3*4)
			bufs = [][]byte{x, wn, w, nil, io, third, append([]byte(nil), third...), append([]byte(nil), third...)}
			spec = []uint32{uint32(k), n / 3, n / 3, math.Float32bits(1e-5)}
			what = fmt.Sprintf("%s k=%d, %d of %d rows, prefill %v", inst, k, c.active, c.capacity, c.prefill)
			got, want = g.runAs(inst, bufs, nil, spec, c.capacity, c.prefill), cpuRun(t, inst, bufs, nil, spec)
			for o := 5; o < 8; o++ {
				compareF32(t, fmt.Sprintf("%s, buffer %d", what, o), got[o][:c.active*n/3*4], want[o][:c.active*n/3*4], 1e-3)
			}
		}
	}
}

// recurrentSteps are the steps of the recurrent kernels' tests, run one
// after the other on the state the previous one left: several slots a
// step, rows at position 0 (whose slot's state must start from zero
// although the region holds another request's), slots whose rows are not
// adjacent, and slots 0 and 2 whose rows go on in the second step.
var recurrentSteps = [][]krow{
	{{0, 2, 0}, {1, 2, 0}, {5, 0, 0}, {2, 2, 0}, {0, 3, 0}, {6, 0, 0}, {9, 1, 0}},
	{{3, 2, 0}, {7, 0, 0}, {4, 2, 0}, {0, 1, 0}},
}

// runRecurrent runs instance on both tiers over recurrentSteps: inputs(rows)
// gives each step's buffers (the state, at index stateAt, is replaced by
// each tier's own from the step before); every buffer in outs is compared
// after each step, then the state.
func runRecurrent(t *testing.T, g *kgpu, instance string, state []byte, stateAt int, outs []int,
	inputs func(rows []krow) [][]byte, push, spec []uint32, tol float64) {
	t.Helper()
	gs, cs := state, state
	for si, rows := range recurrentSteps {
		bufs := inputs(rows)
		bufs[stateAt] = gs
		got := g.run(instance, bufs, push, spec, len(rows))
		bufs[stateAt] = cs
		want := cpuRun(t, instance, bufs, push, spec)
		for _, o := range outs {
			compareF32(t, fmt.Sprintf("%s step %d buffer %d", instance, si, o), got[o], want[o], tol)
		}
		compareF32(t, fmt.Sprintf("%s step %d state", instance, si), got[stateAt], want[stateAt], tol)
		gs, cs = got[stateAt], want[stateAt]
	}
}

func TestKernelSSMConv(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(12))
	const slots = 4
	for _, c := range []struct{ cols, k, off int }{{300, 4, 64}, {1040, 4, 0}, {70, 3, 12}} {
		slotBytes := c.off + (c.k-1)*c.cols*4 + 36
		state := lebin.Float32Bytes(randF32(rng, slots*slotBytes/4, -2, 2))
		w := lebin.Float32Bytes(randF32(rng, c.k*c.cols, -1, 1))
		inputs := func(rows []krow) [][]byte {
			x := randF32(rng, len(rows)*c.cols, -3, 3)
			y := make([]float32, len(rows)*c.cols)
			return [][]byte{lebin.Float32Bytes(x), w, nil, ioTable(rows, slots, 1, nil), lebin.Float32Bytes(y)}
		}
		push, spec := []uint32{uint32(c.cols), uint32(c.off)}, []uint32{uint32(c.k), uint32(slotBytes)}
		runRecurrent(t, g, "ssm_conv", state, 2, []int{4}, inputs, push, spec, 1e-5)
	}
}

func TestKernelGDNGates(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(13))
	rows, heads := 5, 48
	alpha := randF32(rng, rows*heads, -25, 25)
	beta := randF32(rng, rows*heads, -8, 8)
	alpha[0], alpha[1] = 20, 19.5
	bufs := [][]byte{lebin.Float32Bytes(alpha), lebin.Float32Bytes(beta), lebin.Float32Bytes(randF32(rng, heads, -2, 2)), lebin.Float32Bytes(randF32(rng, heads, -1, 0)),
		ioTable(make([]krow, rows), rows, 1, nil)}
	push := []uint32{uint32(heads)}
	got, want := g.vsCPU("gdn_gates", bufs, push, nil, rows)
	compareF32(t, "gdn_gates alpha", got[0], want[0], 1e-6)
	compareF32(t, "gdn_gates beta", got[1], want[1], 1e-6)
}

// TestKernelGatedDeltaNet holds the delta rule to T-CPU with the state in
// registers (heads of up to 128, a partial lane group at 48) and in memory
// (192), with more v heads than q/k heads, tiled (Qwen3.5) and grouped
// (Qwen3-Next).
func TestKernelGatedDeltaNet(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(14))
	const slots = 4
	for _, c := range []struct{ hk, hv, s, off, grouped int }{{2, 4, 128, 256, 0}, {2, 6, 128, 0, 1}, {1, 3, 48, 0, 0}, {2, 4, 48, 16, 1}, {1, 2, 192, 64, 0}} {
		t.Run(fmt.Sprintf("s%d-hv%d-grouped%d", c.s, c.hv, c.grouped), func(t *testing.T) {
			g := g.with(t)
			slotBytes := c.off + c.hv*c.s*c.s*4 + 128
			state := lebin.Float32Bytes(randF32(rng, slots*slotBytes/4, -0.5, 0.5))
			cols := (2*c.hk + c.hv) * c.s
			inputs := func(rows []krow) [][]byte {
				qkv := randF32(rng, len(rows)*cols, -1, 1)
				alpha := randF32(rng, len(rows)*c.hv, -1.5, 0)
				beta := randF32(rng, len(rows)*c.hv, 0, 1)
				y := make([]float32, len(rows)*c.hv*c.s)
				return [][]byte{lebin.Float32Bytes(qkv), lebin.Float32Bytes(alpha), lebin.Float32Bytes(beta), nil, ioTable(rows, slots, 1, nil), lebin.Float32Bytes(y)}
			}
			push := []uint32{uint32(c.off)}
			spec := []uint32{uint32(c.hk), uint32(c.hv), uint32(c.s), fbits(1e-6), uint32(slotBytes), uint32(c.grouped)}
			runRecurrent(t, g, "gated_delta_net", state, 3, []int{5}, inputs, push, spec, 1e-4)
		})
	}
}

func TestKernelRMSNormGated(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(15))
	rows := 3
	for _, c := range []struct{ cols, group int }{{4 * 128, 128}, {3 * 40, 40}} {
		x := randF32(rng, rows*c.cols, -3, 3)
		z := randF32(rng, rows*c.cols, -6, 6)
		w := randF32(rng, c.group, 0.5, 1.5)
		y := make([]float32, rows*c.cols)
		bufs := [][]byte{lebin.Float32Bytes(x), lebin.Float32Bytes(w), lebin.Float32Bytes(z), ioTable(make([]krow, rows), rows, 1, nil), lebin.Float32Bytes(y)}
		push, spec := []uint32{uint32(c.cols), uint32(c.group)}, []uint32{fbits(1e-6)}
		got, want := g.vsCPU("rms_norm_gated", bufs, push, spec, rows)
		compareF32(t, fmt.Sprintf("rms_norm_gated group %d", c.group), got[4], want[4], 1e-5)
	}
}

func TestKernelSplitHalves(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(16))
	rows, heads, width := 3, 5, 96
	x := randF32(rng, rows*heads*2*width, -3, 3)
	a, b := randF32(rng, (rows+1)*heads*width, -1, 1), randF32(rng, (rows+1)*heads*width, -1, 1) // a row past the active ones stays
	bufs := [][]byte{lebin.Float32Bytes(x), ioTable(make([]krow, rows), rows, 1, nil), lebin.Float32Bytes(a), lebin.Float32Bytes(b)}
	push := []uint32{uint32(heads), uint32(width)}
	got, want := g.vsCPU("split_halves", bufs, push, nil, rows)
	compareF32(t, "split_halves a", got[2], want[2], 0)
	compareF32(t, "split_halves b", got[3], want[3], 0)
}

func TestKernelMulSigmoid(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(17))
	rows, cols := 3, 1000
	x := randF32(rng, (rows+1)*cols, -3, 3)
	gt := randF32(rng, (rows+1)*cols, -20, 20)
	bufs := [][]byte{lebin.Float32Bytes(x), lebin.Float32Bytes(gt), ioTable(make([]krow, rows), rows, 1, nil)}
	push := []uint32{uint32(cols)}
	g.matchCPU("mul_sigmoid", bufs, push, nil, rows, 0, 1e-6)
}

func TestKernelCopyCols(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(18))
	rows, stride, cols, off := 3, 192, 32, 96
	x := randF32(rng, rows*stride, -3, 3)
	y := randF32(rng, (rows+1)*cols, -1, 1) // a row past the active ones stays
	bufs := [][]byte{lebin.Float32Bytes(x), ioTable(make([]krow, rows), rows, 1, nil), lebin.Float32Bytes(y)}
	push, spec := []uint32{uint32(cols), uint32(off)}, []uint32{uint32(stride)}
	g.matchCPU("copy_cols", bufs, push, spec, rows, 2, 0)
}

// rms_norm without a weight (Gemma 4's V norm) is the weighted kernel
// with a weight of ones, bit for bit.
func TestKernelRMSNormUnweighted(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(19))
	rows, cols, group := 3, 4*64, 64
	x := randF32(rng, rows*cols, -3, 3)
	y := make([]float32, rows*cols)
	bufs := [][]byte{lebin.Float32Bytes(x), nil, ioTable(make([]krow, rows), rows, 1, nil), lebin.Float32Bytes(y)}
	push, spec := []uint32{uint32(cols), uint32(group)}, []uint32{fbits(1e-6)}
	got, want := g.vsCPU("rms_norm", bufs, push, spec, rows)
	compareF32(t, "rms_norm unweighted", got[3], want[3], 1e-5)
}

func TestKernelZeroMulVec(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(20))
	rows, cols := 3, 300
	x := randF32(rng, (rows+1)*cols, -3, 3) // a row past the active ones stays
	w := randF32(rng, cols, -2, 2)
	io := ioTable(make([]krow, rows), rows, 1, nil)
	push := []uint32{uint32(cols)}
	g.matchCPU("mul_vec", [][]byte{lebin.Float32Bytes(x), lebin.Float32Bytes(w), io}, push, nil, rows, 0, 0)
	g.matchCPU("zero", [][]byte{lebin.Float32Bytes(x), io}, push, nil, rows, 0, 0)
}

func TestKernelMoeRouteScale(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(21))
	rows, nUsed, nExpert := 3, 4, 16
	route := make([]byte, 8*(rows+1)*nUsed)
	for i := range (rows + 1) * nUsed {
		binary.LittleEndian.PutUint32(route[8*i:], uint32(rng.Intn(nExpert)))
		binary.LittleEndian.PutUint32(route[8*i+4:], math.Float32bits(rng.Float32()))
	}
	s := randF32(rng, nExpert, 0.5, 2)
	bufs := [][]byte{route, lebin.Float32Bytes(s), ioTable(make([]krow, rows), rows, 1, nil)}
	push := []uint32{uint32(nUsed)}
	got, want := g.vsCPU("moe_route_scale", bufs, push, nil, rows)
	if !bytes.Equal(got[0], want[0]) {
		t.Errorf("moe_route_scale: routes differ")
	}
}

// testArch is the PTX architecture the kernel tests load: sm_90, or
// $ZRT_PTX_ARCH (sm_80 runs the Ampere PTX, which the driver compiles for
// the GPU at hand).
func testArch() string {
	if a := os.Getenv("ZRT_PTX_ARCH"); a != "" {
		return a
	}
	return "sm_90"
}

// TestKernelMatrixRows holds the matrix-vector kernel's _rows entry (a
// block takes two activation rows, loading each weight block once for
// them) to T-CPU, for 2-row steps of every integer type, plain
// (added to a residual) and fused (norm + gate/up), and to itself: each
// row's result is bit for bit the one-row kernel's on that row alone, so a
// row's logits do not depend on how many rows share its step.
func TestKernelMatrixRows(t *testing.T) {
	g := newKGPU(t)
	rng := rand.New(rand.NewSource(23))
	const n = 300
	for _, tk := range []struct {
		typ ggml.Type
		k   int
	}{{ggml.Q4_K, 4096}, {ggml.Q6_K, 11008}, {ggml.Q8_0, 4096}, {ggml.Q4_0, 4096}} {
		typ, k := tk.typ, tk.k
		w := kweights(t, rng, typ, n, k)
		wn := lebin.Float32Bytes(randF32(rng, k, 0.5, 1.5))
		for _, nr := range []int{2} {
			inst := kernels.InstanceName(mustLookup(t, "matmul_residual"), typ)
			push := []uint32{uint32(k), n}
			if l, err := kcuda.Shape(inst, push, nil, nr, false); err != nil || l.Entry != kcuda.EntryRows {
				t.Fatalf("%s k=%d, %d rows: launch %+v (%v), want the _rows entry", inst, k, nr, l, err)
			}
			rows := make([]krow, nr)
			for i := range rows {
				rows[i] = krow{pos: uint32(i), slot: uint32(i)}
			}
			x := lebin.Float32Bytes(randF32(rng, nr*k, -2, 2))
			res := lebin.Float32Bytes(randF32(rng, nr*n, -1, 1))
			bufs := [][]byte{x, w, nil, ioTable(rows, nr, 1, nil), res}
			what := fmt.Sprintf("%s k=%d, %d rows", inst, k, nr)
			got, want := g.runAs(inst, bufs, push, nil, nr, false), cpuRun(t, inst, bufs, push, nil)
			compareF32(t, what, got[4], want[4], 1e-3)
			for i := range nr {
				one := [][]byte{x[i*k*4 : (i+1)*k*4], w, nil, ioTable([]krow{{slot: 0}}, 1, 1, nil), res[i*n*4 : (i+1)*n*4]}
				alone := g.runAs(inst, one, push, nil, 1, false)
				if !bytes.Equal(alone[4], got[4][i*n*4:(i+1)*n*4]) {
					t.Errorf("%s: row %d differs from the one-row kernel's result on it alone", what, i)
				}
			}
			inst = kernels.InstanceName(mustLookup(t, "rms_norm_gate_up"), typ)
			half := make([]byte, nr*n/2*4)
			bufs = [][]byte{x, wn, w, ioTable(rows, nr, 1, nil), half, append([]byte(nil), half...)}
			spec := []uint32{uint32(k), n / 2, math.Float32bits(1e-5)}
			got, want = g.runAs(inst, bufs, nil, spec, nr, false), cpuRun(t, inst, bufs, nil, spec)
			for o := 4; o < 6; o++ {
				compareF32(t, fmt.Sprintf("%s k=%d, %d rows, buffer %d", inst, k, nr, o), got[o], want[o], 1e-3)
			}
		}
	}
}
