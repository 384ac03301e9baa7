package cuda_test

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/lebin"
	"github.com/zrtdev/zrt/kernels"
	kcuda "github.com/zrtdev/zrt/kernels/cuda"
	"github.com/zrtdev/zrt/kernels/cuda/ptx"
	"github.com/zrtdev/zrt/kernels/quant"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
)

var (
	tileSpeed      = flag.Bool("tilespeed", false, "TestMatrixTileSpeed: time the tensor-core matrix tiles on prefill shapes")
	tileSpeedRows  = flag.String("tilespeed.rows", "512,1024", "TestMatrixTileSpeed: the steps' rows, comma-separated")
	tileSpeedOnly  = flag.String("tilespeed.only", "q06,7b", "TestMatrixTileSpeed: the model shapes timed (q06, 7b), comma-separated")
	tileSpeedIters = flag.Int("tilespeed.iters", 50, "TestMatrixTileSpeed: launches timed a shape")
)

// TestMatrixTileSpeed times the matmul instances' tensor-core tile launch
// (the entry and geometry kcuda.Shape gives a prefill variant; the stage
// launch runs once before, untimed) on the matrices of the qwen3 0.6B
// shape (embd 1024, 16 q / 8 kv heads of 128, ffn 3072: Q4_K_M's fused
// QKV, Q+K beside a Q6_K V, gate/up fused, and the lone matrices) and the
// llama 7B shape (embd 4096, ffn 11008), and logs each launch's
// microseconds and TOPS (2·rows·n·k a launch). The PTX is the embedded
// archive's ("old") and, where $ZRT_PTX_DIR is set, that directory's
// ("new"), timed side by side on the same buffers: an A/B of a kernel
// change whose launch geometry is the same. Their outputs must have the
// same bits, or the log says how far apart they are. It runs only with
// -tilespeed; each launch is timed with events over -tilespeed.iters.
func TestMatrixTileSpeed(t *testing.T) {
	if !*tileSpeed {
		t.Skip("timing: run with -tilespeed")
	}
	g := newKGPU(t)
	var rowsList []int
	for _, f := range strings.Split(*tileSpeedRows, ",") {
		r, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || r < 65 {
			t.Fatalf("-tilespeed.rows: %q is no prefill step (more than 64 rows)", f)
		}
		rowsList = append(rowsList, r)
	}
	type shape struct {
		model, what string
		typ         ggml.Type
		n, k        int
	}
	var shapes []shape
	for _, m := range strings.Split(*tileSpeedOnly, ",") {
		switch strings.TrimSpace(m) {
		case "q06":
			shapes = append(shapes,
				shape{"q06", "qkv", ggml.Q4_K, 4096, 1024}, shape{"q06", "q+k", ggml.Q4_K, 3072, 1024},
				shape{"q06", "q", ggml.Q4_K, 2048, 1024}, shape{"q06", "kv", ggml.Q4_K, 1024, 1024},
				shape{"q06", "v", ggml.Q6_K, 1024, 1024}, shape{"q06", "o", ggml.Q4_K, 1024, 2048},
				shape{"q06", "gate|up", ggml.Q4_K, 3072, 1024}, shape{"q06", "gate+up", ggml.Q4_K, 6144, 1024},
				shape{"q06", "down", ggml.Q4_K, 1024, 3072}, shape{"q06", "down", ggml.Q6_K, 1024, 3072})
		case "7b":
			shapes = append(shapes,
				shape{"7b", "qkv", ggml.Q4_K, 12288, 4096}, shape{"7b", "q|o", ggml.Q4_K, 4096, 4096},
				shape{"7b", "v", ggml.Q6_K, 4096, 4096}, shape{"7b", "gate+up", ggml.Q4_K, 22016, 4096},
				shape{"7b", "down", ggml.Q4_K, 4096, 11008}, shape{"7b", "down", ggml.Q6_K, 4096, 11008})
		default:
			t.Fatalf("-tilespeed.only: no shape %q", m)
		}
	}
	dir := os.Getenv("ZRT_PTX_DIR")
	type archive struct{ name, dir string }
	archives := []archive{{"old", ""}}
	if dir != "" {
		archives = append(archives, archive{"new", dir})
	}
	rng := rand.New(rand.NewSource(47))
	defer g.current()()
	for _, sh := range shapes {
		inst := kernels.InstanceName(mustLookup(t, "matmul"), sh.typ)
		w := speedWeights(rng, sh.typ, sh.n, sh.k)
		for _, rows := range rowsList {
			l, err := kcuda.Shape(inst, []uint32{uint32(sh.k), uint32(sh.n)}, nil, rows, true)
			if err != nil {
				t.Fatal(err)
			}
			prompt := make([]krow, rows)
			for i := range prompt {
				prompt[i] = krow{uint32(i), 0, kernels.RowPrompt}
			}
			bufs := [][]byte{lebin.Float32Bytes(randF32(rng, rows*sh.k, -2, 2)), w, nil, ioTable(prompt, 1, 1, nil), make([]byte, 4*rows*sh.n)}
			ops := 2 * float64(rows) * float64(sh.n) * float64(sh.k)
			var first []float32
			for _, a := range archives {
				us, y := timeTile(t, g, a.dir, inst, l, bufs, []uint32{uint32(sh.k), uint32(sh.n)}, *tileSpeedIters)
				same := ""
				if first == nil {
					first = y
				} else {
					same = sameBits(first, y)
				}
				t.Logf("%-4s %-8s %-4s n=%-5d k=%-5d rows=%-4d %s grid=%v: %8.1f µs %6.1f TOPS %s",
					sh.model, sh.what, sh.typ, sh.n, sh.k, rows, a.name, l.Grid, us, ops/us/1e6, same)
			}
		}
	}
}

// sameBits says whether b has a's bits, else how many elements differ
// and the largest difference relative to max(1, |a|).
func sameBits(a, b []float32) string {
	diff, worst := 0, 0.0
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			diff++
			worst = max(worst, math.Abs(float64(a[i])-float64(b[i]))/max(1, math.Abs(float64(a[i]))))
		}
	}
	if diff == 0 {
		return "(same bits)"
	}
	return fmt.Sprintf("(%d of %d elements differ, up to %.3g)", diff, len(a), worst)
}

// speedWeights is n random rows of k weights of typ (Q4_K, Q6_K, Q8_0),
// made fast: random bytes with every block's scales set to a sane float.
func speedWeights(rng *rand.Rand, typ ggml.Type, n, k int) []byte {
	bb, at := map[ggml.Type]int{ggml.Q4_K: 144, ggml.Q6_K: 210, ggml.Q8_0: 34}[typ], map[ggml.Type][]int{ggml.Q4_K: {0, 2}, ggml.Q6_K: {208}, ggml.Q8_0: {0}}[typ]
	bs := 256
	if typ == ggml.Q8_0 {
		bs = 32
	}
	b := make([]byte, n*k/bs*bb)
	rng.Read(b)
	for o := 0; o < len(b); o += bb {
		for _, d := range at {
			binary.LittleEndian.PutUint16(b[o+d:], quant.F32ToF16(0.001+0.01*rng.Float32()))
		}
	}
	return b
}

// timeTile launches instance's stage (l.Stage) once and its tile launch l
// iters times over bufs (the matmul's x, w, bias, io, y) with the PTX of
// dir ("": the embedded archive), and returns a launch's microseconds, by
// events around the timed launches, and y.
func timeTile(t *testing.T, g *kgpu, dir, instance string, l kcuda.Launch, bufs [][]byte, push []uint32, iters int) (float64, []float32) {
	t.Helper()
	src, err := ptx.Source(testArch(), instance, dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := driver.ModuleLoadData(src)
	if err != nil {
		t.Fatalf("%s: %v", instance, err)
	}
	defer m.Unload()
	var vals []uint64
	var devs []driver.DevPtr
	defer func() {
		for _, p := range devs {
			driver.MemFree(p)
		}
	}()
	alloc := func(n int) driver.DevPtr {
		p, err := driver.MemAlloc(n)
		if err != nil {
			t.Fatal(err)
		}
		devs = append(devs, p)
		return p
	}
	for _, b := range bufs {
		if b == nil {
			vals = append(vals, 0)
			continue
		}
		p := alloc(len(b) + 16)
		if err := driver.MemcpyHtoD(p, b); err != nil {
			t.Fatal(err)
		}
		vals = append(vals, uint64(p))
	}
	for _, x := range push {
		vals = append(vals, uint64(x))
	}
	st := alloc(l.Staged)
	if err := driver.MemsetD8(st, 0, l.Staged); err != nil {
		t.Fatal(err)
	}
	vals = append(vals, uint64(st))
	g.launch(m, instance, *l.Stage, vals)
	for range 3 {
		g.launch(m, instance, l, vals)
	}
	start, err := driver.NewEvent(0)
	if err != nil {
		t.Fatal(err)
	}
	defer start.Destroy()
	end, err := driver.NewEvent(0)
	if err != nil {
		t.Fatal(err)
	}
	defer end.Destroy()
	if err := start.Record(0); err != nil {
		t.Fatal(err)
	}
	for range iters {
		g.launch(m, instance, l, vals)
	}
	if err := end.Record(0); err != nil {
		t.Fatal(err)
	}
	if err := driver.Synchronize(); err != nil {
		t.Fatalf("%s: %v", instance, err)
	}
	ms, err := end.Elapsed(start)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, len(bufs[len(bufs)-1]))
	if err := driver.MemcpyDtoH(out, driver.DevPtr(vals[len(bufs)-1])); err != nil {
		t.Fatal(err)
	}
	return float64(ms) * 1e3 / float64(iters), lebin.Float32s(out)
}
