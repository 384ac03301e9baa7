package nccl

import (
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ebitengine/purego"
	"github.com/zrtdev/zrt/format/lebin"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
)

// TestSettingsReachNCCL checks that what Open writes into the
// environment is what the C library's getenv, which NCCL reads, sees:
// in a CGO_ENABLED=0 binary os.Setenv must reach libc's environment.
func TestSettingsReachNCCL(t *testing.T) {
	t.Setenv("NCCL_NVLS_ENABLE", "1") // restored after the test
	t.Setenv("NCCL_RUNTIME_CONNECT", "1")
	if err := settings(Options{}); err != nil {
		t.Fatal(err)
	}
	libc, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		t.Skipf("no libc.so.6: %v", err)
	}
	var getenv func(string) string
	purego.RegisterLibFunc(&getenv, libc, "getenv")
	for k, want := range map[string]string{"NCCL_NVLS_ENABLE": "0", "NCCL_RUNTIME_CONNECT": "0"} {
		if got := getenv(k); got != want {
			t.Errorf("C getenv(%s) = %q, want %q", k, got, want)
		}
	}
	if err := settings(Options{NVLS: true}); err != nil {
		t.Fatal(err)
	}
	if got := os.Getenv("NCCL_NVLS_ENABLE"); got != "0" {
		t.Errorf("Options{NVLS: true} changed NCCL_NVLS_ENABLE to %q", got)
	}
}

// TestOpen finds NCCL or says where it looked; where it is found it must
// report a path and a 2.x version.
func TestOpen(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nowhere")
	lib, err := Open(Options{Paths: []string{missing}})
	if err != nil {
		if !strings.Contains(err.Error(), Soname) || !strings.Contains(err.Error(), "/usr/lib/x86_64-linux-gnu") || !strings.Contains(err.Error(), missing) {
			t.Errorf("the error does not say where it looked: %v", err)
		}
		t.Skipf("no NCCL here: %v", err)
	}
	if lib.Path() == "" || lib.Version() < 20000 || !strings.HasPrefix(lib.VersionString(), "2.") {
		t.Errorf("NCCL at %q, version %d (%s)", lib.Path(), lib.Version(), lib.VersionString())
	}
	t.Logf("NCCL %s at %s", lib.VersionString(), lib.Path())
}

func TestErrorText(t *testing.T) {
	e := &Error{Call: "ncclAllReduce(4 × 4 bytes)", Code: 4, Text: "invalid argument (run with NCCL_DEBUG=WARN for details)", Last: "recvbuff is NULL"}
	if got, want := e.Error(), "nccl: ncclAllReduce(4 × 4 bytes): invalid argument (run with NCCL_DEBUG=WARN for details) (4): recvbuff is NULL"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// rank is one GPU of a test: its context and stream.
type rank struct {
	dev    driver.Device
	ctx    driver.Context
	stream driver.Stream
	comm   *Comm
}

// gpus opens n ranks (skipping without n GPUs or NCCL) and their
// communicators.
func gpus(t testing.TB, n int) []*rank {
	t.Helper()
	info, err := driver.Probe()
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	if info.Devices < n {
		t.Skipf("%d GPU(s), the test needs %d", info.Devices, n)
	}
	lib, err := Open(Options{})
	if err != nil {
		t.Skipf("no NCCL: %v", err)
	}
	t.Logf("%d × %s, NCCL %s at %s", n, info.Name, lib.VersionString(), lib.Path())
	devs := make([]int, n)
	for i := range devs {
		devs[i] = i
	}
	goruntime.LockOSThread()
	comms, err := lib.InitAll(devs)
	goruntime.UnlockOSThread()
	if err != nil {
		t.Fatal(err)
	}
	rs := make([]*rank, n)
	for i := range rs {
		r := &rank{comm: comms[i]}
		if r.dev, err = driver.GetDevice(i); err != nil {
			t.Fatal(err)
		}
		if r.ctx, err = r.dev.PrimaryContext(); err != nil {
			t.Fatal(err)
		}
		rs[i] = r
		err = r.do(func() error {
			var err error
			r.stream, err = driver.NewStream(driver.StreamNonBlocking)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, r := range rs {
			r.do(func() error { r.stream.Synchronize(); return r.stream.Destroy() })
		}
		for _, r := range rs {
			if err := r.comm.Destroy(); err != nil {
				t.Error(err)
			}
			r.dev.ReleasePrimaryContext()
		}
	})
	return rs
}

// do runs fn on a locked thread with the rank's context current.
func (r *rank) do(fn func() error) error {
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	if err := r.ctx.SetCurrent(); err != nil {
		return err
	}
	return fn()
}

// all runs fn for every rank at once, each on its own goroutine, and
// returns the first error.
func all(rs []*rank, fn func(i int, r *rank) error) error {
	errs := make([]error, len(rs))
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Go(func() { errs[i] = r.do(func() error { return fn(i, r) }) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("rank %d: %w", i, err)
		}
	}
	return nil
}

// TestCollectives runs each collective the tier uses on every GPU here
// (at least 2), eagerly and an all-reduce inside a captured graph
// replayed twice, and checks the values (small integers: exact in any
// order of summation).
func TestCollectives(t *testing.T) {
	info, err := driver.Probe()
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	rs := gpus(t, max(2, min(info.Devices, 8)))
	n := len(rs)
	const count = 1000
	type bufs struct{ x, parts, gathered driver.DevPtr }
	b := make([]bufs, n)
	partOf := func(k int) int { return 3 + k } // uneven parts, for the broadcasts
	offset := func(k int) int {
		o := 0
		for j := range k {
			o += partOf(j)
		}
		return o
	}
	err = all(rs, func(r int, rk *rank) error {
		var err error
		if b[r].x, err = driver.MemAlloc(4 * count); err != nil {
			return err
		}
		if b[r].parts, err = driver.MemAlloc(4 * count); err != nil {
			return err
		}
		if b[r].gathered, err = driver.MemAlloc(4 * count * n); err != nil {
			return err
		}
		x := make([]float32, count)
		for i := range x {
			x[i] = float32((r + 1) * (i % 7))
		}
		if err := driver.MemcpyHtoD(b[r].x, lebin.Float32Bytes(x)); err != nil {
			return err
		}
		for i := range x {
			x[i] = float32(100*r + i)
		}
		if err := driver.MemcpyHtoD(b[r].parts, lebin.Float32Bytes(x)); err != nil {
			return err
		}
		if err := rk.comm.AllReduceSum(b[r].x, b[r].x, count, Float32, rk.stream); err != nil {
			return err
		}
		if err := rk.comm.AllGather(b[r].parts, b[r].gathered, 5, Float32, rk.stream); err != nil {
			return err
		}
		if err := rk.stream.Synchronize(); err != nil {
			return err
		}
		got := make([]byte, 4*count)
		if err := driver.MemcpyDtoH(got, b[r].x); err != nil {
			return err
		}
		for i, v := range lebin.Float32s(got) {
			if want := float32(n * (n + 1) / 2 * (i % 7)); v != want {
				return fmt.Errorf("all-reduce: x[%d] = %v, want %v", i, v, want)
			}
		}
		got = make([]byte, 4*5*n)
		if err := driver.MemcpyDtoH(got, b[r].gathered); err != nil {
			return err
		}
		for i, v := range lebin.Float32s(got) {
			if want := float32(100*(i/5) + i%5); v != want {
				return fmt.Errorf("all-gather: element %d = %v, want %v", i, v, want)
			}
		}
		// Uneven parts: one broadcast from each rank, grouped.
		err = rk.comm.Library().Group(func() error {
			for k := range n {
				if err := rk.comm.Broadcast(b[r].parts, b[r].gathered+driver.DevPtr(4*offset(k)), partOf(k), Float32, k, rk.stream); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if err := rk.stream.Synchronize(); err != nil {
			return err
		}
		got = make([]byte, 4*offset(n))
		if err := driver.MemcpyDtoH(got, b[r].gathered); err != nil {
			return err
		}
		g := lebin.Float32s(got)
		for k := range n {
			for i := range partOf(k) {
				if v, want := g[offset(k)+i], float32(100*k+i); v != want {
					return fmt.Errorf("broadcast from rank %d: element %d = %v, want %v", k, i, v, want)
				}
			}
		}
		// In a captured graph, replayed twice: x = r+1, then Σ = n(n+1)/2,
		// then n·Σ.
		for i := range x {
			x[i] = float32(r + 1)
		}
		if err := driver.MemcpyHtoD(b[r].x, lebin.Float32Bytes(x)); err != nil {
			return err
		}
		exec, err := rk.stream.Capture(func() error { return rk.comm.AllReduceSum(b[r].x, b[r].x, count, Float32, rk.stream) })
		if err != nil {
			return err
		}
		defer exec.Destroy()
		for range 2 {
			if err := exec.Launch(rk.stream); err != nil {
				return err
			}
		}
		if err := rk.stream.Synchronize(); err != nil {
			return err
		}
		got = make([]byte, 4*count)
		if err := driver.MemcpyDtoH(got, b[r].x); err != nil {
			return err
		}
		for i, v := range lebin.Float32s(got) {
			if want := float32(n * n * (n + 1) / 2); v != want {
				return fmt.Errorf("captured all-reduce replayed twice: x[%d] = %v, want %v", i, v, want)
			}
		}
		for _, p := range []driver.DevPtr{b[r].x, b[r].parts, b[r].gathered} {
			driver.MemFree(p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestAllReduceLatency measures NCCL's all-reduce of decode's message
// sizes (a 7B's hidden row of 4096 floats is 16 KB; a step of B slots is
// B rows) on 2 GPUs, and on 4 where they are here: eagerly (one call a
// collective, host launch included, as PyTorch issues it) and inside a
// captured graph of 64 all-reduces back to back (a 32-layer decode step's
// two a layer), one replay per iteration. It prints a table (go test -v);
// it asserts nothing about speed.
func TestAllReduceLatency(t *testing.T) {
	info, err := driver.Probe()
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	for _, n := range []int{2, 4, 8} {
		if n > info.Devices || (n > 2 && testing.Short()) {
			continue
		}
		t.Run(fmt.Sprintf("%dgpus", n), func(t *testing.T) {
			rs := gpus(t, n)
			t.Logf("%-8s %14s %14s", "bytes", "eager µs/op", "graph µs/op")
			for _, size := range []int{4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 256 << 10} {
				eager, graph, err := latency(rs, size/4)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%-8d %14.1f %14.1f", size, eager.Seconds()*1e6, graph.Seconds()*1e6)
			}
		})
	}
}

// latency returns the time per all-reduce of count floats, eager and in a
// captured graph, over the ranks rs.
func latency(rs []*rank, count int) (eager, graph time.Duration, err error) {
	const (
		chain = 64  // all-reduces a graph
		iters = 200 // eager calls, and graph replays / 4
	)
	bufs := make([]driver.DevPtr, len(rs))
	execs := make([]driver.GraphExec, len(rs))
	defer all(rs, func(r int, _ *rank) error {
		if execs[r] != 0 {
			execs[r].Destroy()
		}
		if bufs[r] != 0 {
			driver.MemFree(bufs[r])
		}
		return nil
	})
	err = all(rs, func(r int, rk *rank) error {
		var err error
		if bufs[r], err = driver.MemAlloc(4 * count); err != nil {
			return err
		}
		if err := driver.MemsetD8(bufs[r], 0, 4*count); err != nil {
			return err
		}
		execs[r], err = rk.stream.Capture(func() error {
			for range chain {
				if err := rk.comm.AllReduceSum(bufs[r], bufs[r], count, Float32, rk.stream); err != nil {
					return err
				}
			}
			return nil
		})
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	// timed runs body on every rank from one start, each rank waiting for
	// its stream, and returns the wall time until the last is done.
	timed := func(body func(r int, rk *rank) error) (time.Duration, error) {
		var ready, start sync.WaitGroup
		ready.Add(len(rs))
		start.Add(1)
		var t0 time.Time
		var mu sync.Mutex
		var last time.Time
		errs := make(chan error, len(rs))
		var wg sync.WaitGroup
		for r, rk := range rs {
			wg.Go(func() {
				errs <- rk.do(func() error {
					ready.Done()
					start.Wait()
					if err := body(r, rk); err != nil {
						return err
					}
					if err := rk.stream.Synchronize(); err != nil {
						return err
					}
					mu.Lock()
					last = time.Now()
					mu.Unlock()
					return nil
				})
			})
		}
		ready.Wait()
		t0 = time.Now()
		start.Done()
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				return 0, err
			}
		}
		return last.Sub(t0), nil
	}
	eagerBody := func(r int, rk *rank) error {
		for range iters {
			if err := rk.comm.AllReduceSum(bufs[r], bufs[r], count, Float32, rk.stream); err != nil {
				return err
			}
		}
		return nil
	}
	graphBody := func(r int, rk *rank) error {
		for range iters / 4 {
			if err := execs[r].Launch(rk.stream); err != nil {
				return err
			}
		}
		return nil
	}
	if _, err := timed(eagerBody); err != nil { // warm up
		return 0, 0, err
	}
	if _, err := timed(graphBody); err != nil {
		return 0, 0, err
	}
	e, err := timed(eagerBody)
	if err != nil {
		return 0, 0, err
	}
	g, err := timed(graphBody)
	if err != nil {
		return 0, 0, err
	}
	return e / iters, g / (iters / 4 * chain), nil
}
