package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	goruntime "runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/zrtdev/zrt/kernels"
	kcuda "github.com/zrtdev/zrt/kernels/cuda"
	"github.com/zrtdev/zrt/kernels/cuda/ptx"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
	"github.com/zrtdev/zrt/runtime/cuda/nccl"
)

// peerRank is one GPU of the peer collectives' tests: a bare Tier (its
// context, stream and launch scratch), the one-shot kernels loaded from
// the PTX zrtc embeds (or $ZRT_PTX_DIR), its exchange and its NCCL
// communicator.
type peerRank struct {
	t                *Tier
	reduce, gather   driver.Function
	overlap          bool
	peer             *peer
	comm             *nccl.Comm
	modules          []driver.Module
	rank, ranks, dev int
	// blocks is the all-reduce's grid: 0 for kcuda.PeerBlocks, more for
	// a large one spread over the GPU (kcuda.PeerReduceLaunch).
	blocks uint32
}

// do runs fn on a locked thread with the rank's context current.
func (p *peerRank) do(fn func() error) error {
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	if err := p.t.ctx.SetCurrent(); err != nil {
		return err
	}
	return fn()
}

// allRanks runs fn on every rank at once and returns the first error.
func allRanks(rs []*peerRank, fn func(p *peerRank) error) error {
	errs := make([]error, len(rs))
	var wg sync.WaitGroup
	for i, p := range rs {
		wg.Go(func() { errs[i] = p.do(func() error { return fn(p) }) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("rank %d: %w", i, err)
		}
	}
	return nil
}

// needDevices skips the test unless n CUDA devices are here, and
// describes device 0.
func needDevices(t *testing.T, n int) driver.Info {
	t.Helper()
	info, err := driver.Probe()
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	if info.Devices < n {
		t.Skipf("%d GPU(s) here, the test needs %d", info.Devices, n)
	}
	return info
}

// peerRanks sets up n ranks with exchanges of slotBytes, connected, or
// skips: without n GPUs that reach each other, NCCL, or the kernels' PTX.
func peerRanks(t *testing.T, n, slotBytes int) []*peerRank {
	t.Helper()
	info := needDevices(t, n)
	arch := "sm_80"
	if info.Major >= 9 {
		arch = "sm_90"
	}
	code := map[string][]byte{}
	for _, name := range []string{"all_reduce_sum", "all_gather"} {
		src, err := ptx.Source(arch, name, os.Getenv("ZRT_PTX_DIR"))
		if err != nil {
			t.Skipf("no one-shot kernel: %v (rebuild the PTX: make ptx)", err)
		}
		code[name] = src
	}
	lib, err := nccl.Open(nccl.Options{})
	if err != nil {
		t.Skipf("no NCCL: %v", err)
	}
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
	rs := make([]*peerRank, n)
	for r := range rs {
		rs[r] = &peerRank{t: &Tier{}, comm: comms[r], rank: r, ranks: n, dev: r}
	}
	t.Cleanup(func() {
		allRanks(rs, func(p *peerRank) error {
			if p.t.stream != 0 {
				p.t.stream.Synchronize()
				p.t.stream.Destroy()
			}
			if p.peer != nil {
				p.peer.free()
			}
			for _, m := range p.modules {
				m.Unload()
			}
			driver.MemFreeHost(p.t.params)
			return nil
		})
		for _, p := range rs {
			p.comm.Destroy()
			p.t.dev.ReleasePrimaryContext()
		}
	})
	for _, p := range rs {
		if p.t.dev, err = driver.GetDevice(p.dev); err != nil {
			t.Fatal(err)
		}
		if p.t.ctx, err = p.t.dev.PrimaryContext(); err != nil {
			t.Fatal(err)
		}
	}
	err = allRanks(rs, func(p *peerRank) error {
		var err error
		if p.t.stream, err = driver.NewStream(driver.StreamNonBlocking); err != nil {
			return err
		}
		if p.t.params, err = driver.MemHostAlloc(4096); err != nil {
			return err
		}
		fns := []*driver.Function{&p.reduce, &p.gather}
		for i, name := range []string{"all_reduce_sum", "all_gather"} {
			m, err := driver.ModuleLoadData(code[name])
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			p.modules = append(p.modules, m)
			if *fns[i], err = m.Function(kcuda.Entry(name)); err != nil {
				return err
			}
		}
		p.overlap = info.Major >= 9 && driver.CanOverlapLaunches()
		for k := range rs {
			if k == p.rank {
				continue
			}
			d, err := driver.GetDevice(k)
			if err != nil {
				return err
			}
			if ok, err := p.t.dev.CanAccessPeer(d); err != nil || !ok {
				return fmt.Errorf("device %d cannot reach device %d (%v)", p.rank, k, err)
			}
		}
		p.peer, err = newPeer(devs, p.rank, slotBytes)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	ex := make([]PeerExchange, n)
	for r, p := range rs {
		ex[r] = PeerExchange{Buf: p.peer.buf, Flags: p.peer.flags}
	}
	if err := allRanks(rs, func(p *peerRank) error { return p.peer.connect(ex) }); err != nil {
		t.Fatal(err)
	}
	return rs
}

// launch enqueues a one-shot kernel as the tier does (its PDL launch on
// sm_90): params, the rank's descriptor, then after (the all-reduce's
// residual).
func (p *peerRank) launch(f driver.Function, blocks uint32, params []uint64, after ...uint64) error {
	if blocks == 0 {
		blocks = kcuda.PeerBlocks
	}
	l := &Launch{Shape: kcuda.Launch{Grid: [3]uint32{blocks, 1, 1}, Block: [3]uint32{kcuda.PeerThreads, 1, 1}},
		Params: append(append(params, uint64(p.peer.desc)), after...)}
	return p.t.launchFn(f, l, p.overlap)
}

// allReduce enqueues the one-shot all-reduce of x's active rows, adding
// the sums to residual where it is not 0.
func (p *peerRank) allReduce(x, io driver.DevPtr, cols int, residual driver.DevPtr) error {
	return p.allReduceNorm(x, io, cols, residual, 0, 0, 0)
}

// allReduceNorm is allReduce taking in the RMS norm of the residual's
// rows into y (with weights w, 0 for none) where y is not 0.
func (p *peerRank) allReduceNorm(x, io driver.DevPtr, cols int, residual, w, y driver.DevPtr, eps float32) error {
	return p.launch(p.reduce, p.blocks, []uint64{uint64(x), uint64(io), uint64(cols)}, uint64(residual), uint64(w), uint64(y), uint64(math.Float32bits(eps)))
}

// allGather enqueues the one-shot gather of x's parts into y.
func (p *peerRank) allGather(x, io, y driver.DevPtr, cols int, bySlot bool) error {
	b := uint64(0)
	if bySlot {
		b = 1
	}
	return p.launch(p.gather, 0, []uint64{uint64(x), uint64(io), uint64(y), uint64(cols), b})
}

// ioTable writes a request table of rows (slot, flags) at a new device
// buffer.
func ioTable(rows [][2]uint32) (driver.DevPtr, error) {
	w := make([]byte, 4*(kernels.IOWordRowBase+kernels.IORowWords*len(rows)))
	binary.LittleEndian.PutUint32(w[4*kernels.IOWordRows:], uint32(len(rows)))
	for i, r := range rows {
		base := 4 * (kernels.IOWordRowBase + kernels.IORowWords*i)
		binary.LittleEndian.PutUint32(w[base+4*kernels.IORowSlot:], r[0])
		binary.LittleEndian.PutUint32(w[base+4*kernels.IORowFlags:], r[1])
	}
	p, err := driver.MemAlloc(len(w))
	if err != nil {
		return 0, err
	}
	return p, driver.MemcpyHtoD(p, w)
}

func upload(v []float32) (driver.DevPtr, error) {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	p, err := driver.MemAlloc(len(b))
	if err != nil {
		return 0, err
	}
	return p, driver.MemcpyHtoD(p, b)
}

func download(p driver.DevPtr, n int) ([]float32, error) {
	b := make([]byte, 4*n)
	if err := driver.MemcpyDtoH(b, p); err != nil {
		return nil, err
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v, nil
}

// TestPeerCollectives runs the one-shot kernels on 2, 4 or 8 GPUs (as
// many as are here) inside captured graphs replayed several times (the epochs advance,
// the halves alternate) and checks every value, small integers being
// exact in any order: all-reduces of 5 active rows of 8, on PeerBlocks
// blocks and then also on a spread grid of 40 (the others
// untouched); a gather of logits by slot (3 request rows, 2 of them
// wanting logits, at slots 5 and 2) over a vocabulary that does not
// divide evenly, in place; and a gather of values into another buffer.
func TestPeerCollectives(t *testing.T) {
	info, err := driver.Probe()
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	n := 2 // or 4 or 8, which divide the values' columns evenly
	for n*2 <= min(info.Devices, peerMaxRanks) {
		n *= 2
	}
	const cols, capRows, active, vocab, slots = 4096, 8, 5, 1001, 8
	rs := peerRanks(t, n, 4*capRows*cols)
	f := func(i int) float32 { return float32(i%13 + 1) }
	err = allRanks(rs, func(p *peerRank) error {
		// All-reduces: one a replay on PeerBlocks blocks, then two, the
		// second spread over more (a large one's grid), whose blocks count
		// the epoch as a grid: the collectives after it must agree on it.
		for _, grids := range [][]uint32{{0}, {0, 40}} {
			x := make([]float32, capRows*cols)
			for i := range x {
				x[i] = float32(p.rank+1) * f(i)
			}
			xd, err := upload(x)
			if err != nil {
				return err
			}
			defer driver.MemFree(xd)
			io, err := ioTable(make([][2]uint32, active))
			if err != nil {
				return err
			}
			defer driver.MemFree(io)
			// The residual takes every sum: it ends as res + Σ the sums.
			res := make([]float32, capRows*cols)
			for i := range res {
				res[i] = float32(1000 * (i % 7))
			}
			rd, err := upload(res)
			if err != nil {
				return err
			}
			defer driver.MemFree(rd)
			exec, err := p.t.stream.Capture(func() error {
				for _, b := range grids {
					p.blocks = b
					if err := p.allReduce(xd, io, cols, rd); err != nil {
						return err
					}
				}
				p.blocks = 0
				return nil
			})
			if err != nil {
				return err
			}
			defer exec.Destroy()
			// The first sum is Σ (rank+1)·f(i); each after it n times the last.
			scale, sums := float32(n*(n+1)/2), 0
			for rep := range 3 {
				if err := exec.Launch(p.t.stream); err != nil {
					return err
				}
				if err := p.t.stream.Synchronize(); err != nil {
					return err
				}
				for range grids {
					if sums > 0 {
						scale *= float32(n)
					}
					sums++
					for i := range active * cols {
						res[i] += scale * f(i)
					}
				}
				got, err := download(xd, len(x))
				if err != nil {
					return err
				}
				for i, v := range got {
					want := x[i]
					if i < active*cols {
						want = scale * f(i)
					}
					if v != want {
						return fmt.Errorf("all-reduce on grids %v, replay %d: x[%d] = %v, want %v", grids, rep, i, v, want)
					}
				}
				gotRes, err := download(rd, len(res))
				if err != nil {
					return err
				}
				for i, v := range gotRes {
					if v != res[i] {
						return fmt.Errorf("all-reduce on grids %v, replay %d: residual[%d] = %v, want %v", grids, rep, i, v, res[i])
					}
				}
			}
		}
		// Gather of logits by slot, in place: rank k's part of slot s's
		// row is at s·w_k, each value 1000·k + 10·s + c.
		lo, hi := kernels.Part(vocab, p.rank, n)
		w := hi - lo
		logits := make([]float32, slots*vocab)
		for s := range slots {
			for c := range w {
				logits[s*w+c] = float32(1000*p.rank + 10*s + c)
			}
		}
		ld, err := upload(logits)
		if err != nil {
			return err
		}
		defer driver.MemFree(ld)
		gio, err := ioTable([][2]uint32{{5, kernels.RowWantsLogits}, {0, 0}, {2, kernels.RowWantsLogits}})
		if err != nil {
			return err
		}
		defer driver.MemFree(gio)
		gexec, err := p.t.stream.Capture(func() error {
			return p.allGather(ld, gio, ld, vocab, true)
		})
		if err != nil {
			return err
		}
		defer gexec.Destroy()
		for rep := range 2 {
			if rep > 0 { // the gather overwrote the packed parts: put them back
				b := make([]byte, 4*len(logits))
				for i, v := range logits {
					binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
				}
				if err := driver.MemcpyHtoD(ld, b); err != nil {
					return err
				}
			}
			if err := gexec.Launch(p.t.stream); err != nil {
				return err
			}
			if err := p.t.stream.Synchronize(); err != nil {
				return err
			}
			got, err := download(ld, len(logits))
			if err != nil {
				return err
			}
			for _, s := range []int{5, 2} {
				for k := range n {
					klo, khi := kernels.Part(vocab, k, n)
					for c := range khi - klo {
						if v, want := got[s*vocab+klo+c], float32(1000*k+10*s+c); v != want {
							return fmt.Errorf("logits gather, replay %d: slot %d column %d = %v, want %v (rank %d's)", rep, s, klo+c, v, want, k)
						}
					}
				}
			}
			for c := range w { // slot 0's row wants no logits: its part stays
				if got[c] != logits[c] {
					return fmt.Errorf("logits gather, replay %d: slot 0 (no logits) changed at %d: %v, was %v", rep, c, got[c], logits[c])
				}
			}
		}
		// Gather of values into another buffer: 2 active rows of 4.
		vw := cols / n
		part := make([]float32, 4*vw)
		for i := range part {
			part[i] = float32(100*p.rank + i)
		}
		pd, err := upload(part)
		if err != nil {
			return err
		}
		defer driver.MemFree(pd)
		yd, err := upload(make([]float32, 4*cols))
		if err != nil {
			return err
		}
		defer driver.MemFree(yd)
		vio, err := ioTable(make([][2]uint32, 2))
		if err != nil {
			return err
		}
		defer driver.MemFree(vio)
		if err := p.allGather(pd, vio, yd, cols, false); err != nil {
			return err
		}
		if err := p.t.stream.Synchronize(); err != nil {
			return err
		}
		got, err := download(yd, 4*cols)
		if err != nil {
			return err
		}
		for row := range 4 {
			for k := range n {
				for c := range vw {
					want := float32(100*k + row*vw + c)
					if row >= 2 {
						want = 0
					}
					if v := got[row*cols+k*vw+c]; v != want {
						return fmt.Errorf("values gather: row %d column %d = %v, want %v", row, k*vw+c, v, want)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestPeerAllReduceNorm runs the one-shot all-reduce with its residual
// add and the RMS norm after it taken in (fuseResiduals), on 2, 4 or 8
// GPUs, in a captured graph replayed twice: 21 active rows of 24 (more
// than the kernel's blocks, so a block takes several rows), the sums and
// the residual exact (small integers), the norm within 1e-6 relative
// of the host's in double (the scale's and products' roundings), the inactive rows untouched; once with weights into
// another buffer, once without weights into x itself (the norm's output
// may share the sums' register), and once with weights on a spread grid
// of 40 blocks (a block a row, some with none).
func TestPeerAllReduceNorm(t *testing.T) {
	info, err := driver.Probe()
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	n := 2
	for n*2 <= min(info.Devices, peerMaxRanks) {
		n *= 2
	}
	const cols, capRows, active = 4096, 24, 21
	const eps = float32(1e-5)
	rs := peerRanks(t, n, 4*capRows*cols)
	f := func(i int) float32 { return float32(i%13 - 6) }
	err = allRanks(rs, func(p *peerRank) error {
		x := make([]float32, capRows*cols)
		for i := range x {
			x[i] = float32(p.rank+1) * f(i)
		}
		w := make([]float32, cols)
		for i := range w {
			w[i] = 0.5 + float32(i%7)/8
		}
		wd, err := upload(w)
		if err != nil {
			return err
		}
		defer driver.MemFree(wd)
		io, err := ioTable(make([][2]uint32, active))
		if err != nil {
			return err
		}
		defer driver.MemFree(io)
		for _, c := range []struct {
			name     string
			weighted bool
			intoX    bool
			blocks   uint32
		}{{"weights, into y", true, false, 0}, {"no weights, into x", false, true, 0}, {"weights, into y, 40 blocks", true, false, 40}} {
			xd, err := upload(x)
			if err != nil {
				return err
			}
			defer driver.MemFree(xd)
			res := make([]float32, capRows*cols)
			for i := range res {
				res[i] = float32(i%5 + 1)
			}
			rd, err := upload(res)
			if err != nil {
				return err
			}
			defer driver.MemFree(rd)
			y0 := make([]float32, capRows*cols)
			for i := range y0 {
				y0[i] = -7
			}
			yd, err := upload(y0)
			if err != nil {
				return err
			}
			defer driver.MemFree(yd)
			out, wp := yd, wd
			if c.intoX {
				out = xd
			}
			if !c.weighted {
				wp = 0
			}
			p.blocks = c.blocks
			exec, err := p.t.stream.Capture(func() error { return p.allReduceNorm(xd, io, cols, rd, wp, out, eps) })
			p.blocks = 0
			if err != nil {
				return err
			}
			defer exec.Destroy()
			sum := float32(n * (n + 1) / 2)
			for rep := range 2 {
				if rep > 0 { // x holds the norm or the sums: put the rank's values back
					b := make([]byte, 4*len(x))
					for i, v := range x {
						binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
					}
					if err := driver.MemcpyHtoD(xd, b); err != nil {
						return err
					}
				}
				if err := exec.Launch(p.t.stream); err != nil {
					return err
				}
				if err := p.t.stream.Synchronize(); err != nil {
					return err
				}
				for i := range active * cols {
					res[i] += sum * f(i)
				}
				gotX, err := download(xd, len(x))
				if err != nil {
					return err
				}
				gotRes, err := download(rd, len(res))
				if err != nil {
					return err
				}
				gotY, err := download(out, len(x))
				if err != nil {
					return err
				}
				for i := range res {
					if gotRes[i] != res[i] {
						return fmt.Errorf("%s, replay %d: residual[%d] = %v, want %v", c.name, rep, i, gotRes[i], res[i])
					}
				}
				for row := range capRows {
					var ss float64
					for j := range cols {
						v := float64(res[row*cols+j])
						ss += v * v
					}
					scale := float32(1 / math.Sqrt(ss/cols+float64(eps)))
					for j := range cols {
						i := row*cols + j
						if row >= active {
							if gotX[i] != x[i] || (!c.intoX && gotY[i] != y0[i]) {
								return fmt.Errorf("%s, replay %d: inactive row %d changed at %d: x %v, y %v", c.name, rep, row, j, gotX[i], gotY[i])
							}
							continue
						}
						if !c.intoX && gotX[i] != sum*f(i) {
							return fmt.Errorf("%s, replay %d: x[%d] = %v, want the sum %v", c.name, rep, i, gotX[i], sum*f(i))
						}
						want := res[i] * scale
						if c.weighted {
							want *= w[j]
						}
						if d := math.Abs(float64(gotY[i] - want)); d > 1e-6*math.Abs(float64(want))+1e-30 {
							return fmt.Errorf("%s, replay %d: row %d norm[%d] = %v, want %v", c.name, rep, row, j, gotY[i], want)
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestPeerLatency measures the one-shot all-reduce against NCCL's for
// decode's message sizes (one row of 1K to 512K floats: a 7B's hidden row
// is 16 KB, 64 of them 1 MiB), both inside captured graphs of 64 all-reduces back to back
// (a 32-layer decode step's two a layer), on 2 GPUs and on 4 and 8 where
// they are here. It prints a table (go test -v); it asserts nothing about
// speed, only that the kernel's sums are right afterwards.
func TestPeerLatency(t *testing.T) {
	info, err := driver.Probe()
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	for _, n := range []int{2, 4, 8} {
		if n > info.Devices {
			continue
		}
		t.Run(fmt.Sprintf("%dgpus", n), func(t *testing.T) {
			const maxFloats = 2 << 20 / 4
			rs := peerRanks(t, n, 4*maxFloats)
			// alone: the same kernel on each GPU by itself (a set of one
			// rank, its barrier local), the floor of launch, epoch and
			// barrier that the NVLink traffic adds to.
			alone := make([]*peer, len(rs))
			err := allRanks(rs, func(p *peerRank) error {
				var err error
				if alone[p.rank], err = newPeer([]int{p.dev}, 0, 4*maxFloats); err != nil {
					return err
				}
				return alone[p.rank].connect([]PeerExchange{{Buf: alone[p.rank].buf, Flags: alone[p.rank].flags}})
			})
			defer allRanks(rs, func(p *peerRank) error {
				if alone[p.rank] != nil {
					alone[p.rank].free()
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			sms, err := rs[0].t.dev.Attribute(driver.AttrMultiprocessorCount)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("µs per all-reduce of one row, in a graph of 64 back to back (replayed 50 times, wall time / 3200); the one-shot kernel on PeerReduceLaunch's blocks, and on %d where that is more:", kcuda.PeerBlocks)
			t.Logf("%-8s %12s %12s %7s %14s %12s", "bytes", "NCCL", "one-shot", "blocks", "one GPU alone", "16 blocks")
			for _, size := range []int{4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20} {
				blocks := kcuda.PeerReduceLaunch(1, size/4, sms).Grid[0]
				for _, p := range rs {
					p.blocks = blocks
				}
				nc, pe, al, err := peerLatency(rs, alone, size/4)
				if err != nil {
					t.Fatal(err)
				}
				narrow := "-"
				if blocks != kcuda.PeerBlocks {
					for _, p := range rs {
						p.blocks = 0
					}
					_, pn, _, err := peerLatency(rs, alone, size/4)
					if err != nil {
						t.Fatal(err)
					}
					narrow = fmt.Sprintf("%.2f", pn.Seconds()*1e6)
				}
				t.Logf("%-8d %12.2f %12.2f %7d %14.2f %12s", size, nc.Seconds()*1e6, pe.Seconds()*1e6, blocks, al.Seconds()*1e6, narrow)
			}
		})
	}
}

// peerLatency returns the time per all-reduce of one row of cols floats
// through NCCL, through the one-shot kernel, and through the kernel on
// each GPU alone (alone: each rank's exchange of one), each in a graph of
// 64.
func peerLatency(rs []*peerRank, alone []*peer, cols int) (ncclOp, peerOp, aloneOp time.Duration, err error) {
	const chain, replays = 64, 50
	xs := make([]driver.DevPtr, len(rs))
	ios := make([]driver.DevPtr, len(rs))
	ncclExec := make([]driver.GraphExec, len(rs))
	peerExec := make([]driver.GraphExec, len(rs))
	aloneExec := make([]driver.GraphExec, len(rs))
	defer allRanks(rs, func(p *peerRank) error {
		for _, g := range []driver.GraphExec{ncclExec[p.rank], peerExec[p.rank], aloneExec[p.rank]} {
			if g != 0 {
				g.Destroy()
			}
		}
		for _, a := range []driver.DevPtr{xs[p.rank], ios[p.rank]} {
			if a != 0 {
				driver.MemFree(a)
			}
		}
		return nil
	})
	err = allRanks(rs, func(p *peerRank) error {
		x := make([]float32, cols)
		for i := range x {
			x[i] = 1
		}
		var err error
		if xs[p.rank], err = upload(x); err != nil {
			return err
		}
		if ios[p.rank], err = ioTable(make([][2]uint32, 1)); err != nil {
			return err
		}
		if ncclExec[p.rank], err = p.t.stream.Capture(func() error {
			for range chain {
				if err := p.comm.AllReduceSum(xs[p.rank], xs[p.rank], cols, nccl.Float32, p.t.stream); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
		if peerExec[p.rank], err = p.t.stream.Capture(func() error {
			for range chain {
				if err := p.allReduce(xs[p.rank], ios[p.rank], cols, 0); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
		aloneExec[p.rank], err = p.t.stream.Capture(func() error {
			l := &Launch{Shape: kcuda.Launch{Grid: [3]uint32{max(p.blocks, kcuda.PeerBlocks), 1, 1}, Block: [3]uint32{kcuda.PeerThreads, 1, 1}},
				Params: []uint64{uint64(xs[p.rank]), uint64(ios[p.rank]), uint64(cols), uint64(alone[p.rank].desc), 0, 0, 0, 0}}
			for range chain {
				if err := p.t.launchFn(p.reduce, l, p.overlap); err != nil {
					return err
				}
			}
			return nil
		})
		return err
	})
	if err != nil {
		return 0, 0, 0, err
	}
	timed := func(execs []driver.GraphExec) (time.Duration, error) {
		var ready, start, wg sync.WaitGroup
		ready.Add(len(rs))
		start.Add(1)
		ends := make([]time.Time, len(rs))
		errs := make([]error, len(rs))
		for i, p := range rs {
			wg.Go(func() {
				errs[i] = p.do(func() error {
					ready.Done()
					start.Wait()
					for range replays {
						if err := execs[i].Launch(p.t.stream); err != nil {
							return err
						}
					}
					err := p.t.stream.Synchronize()
					ends[i] = time.Now()
					return err
				})
			})
		}
		ready.Wait()
		t0 := time.Now()
		start.Done()
		wg.Wait()
		var last time.Time
		for i, err := range errs {
			if err != nil {
				return 0, err
			}
			if ends[i].After(last) {
				last = ends[i]
			}
		}
		return last.Sub(t0) / (replays * chain), nil
	}
	for range 2 { // warm up, then measure
		if ncclOp, err = timed(ncclExec); err != nil {
			return 0, 0, 0, err
		}
		if peerOp, err = timed(peerExec); err != nil {
			return 0, 0, 0, err
		}
		if aloneOp, err = timed(aloneExec); err != nil {
			return 0, 0, 0, err
		}
	}
	// The values doubled (×n) at every all-reduce: any n^k is a power of
	// n, exact in float32 until it overflows to +Inf, which is still the
	// same on every rank and every element; check they agree.
	var first []float32
	for _, p := range rs {
		var got []float32
		if err := p.do(func() error {
			var err error
			got, err = download(xs[p.rank], cols)
			return err
		}); err != nil {
			return 0, 0, 0, err
		}
		for i, v := range got {
			if v != got[0] || (first != nil && v != first[i]) {
				return 0, 0, 0, fmt.Errorf("after the timing runs rank %d's x[%d] = %v, x[0] = %v, rank 0's %v", p.rank, i, v, got[0], first[i])
			}
		}
		if first == nil {
			first = got
		}
	}
	return ncclOp, peerOp, aloneOp, nil
}

// TestFuseResiduals: a one-shot all-reduce takes in the add of its sum
// into the residual stream right after it, and nothing else; with norms,
// also the RMS norm of the residual's whole rows right after the add,
// into another buffer.
func TestFuseResiduals(t *testing.T) {
	const x, io, hidden, other, desc, w, y, eps = 0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0x6000, 0x7000, 0x3727c5ac
	reduce := func() Launch {
		return Launch{Name: "all_reduce_sum", Params: []uint64{x, io, 64, desc, 0, 0, 0, 0}, Collective: &Collective{X: x, Rows: 1, Cols: 64, Peer: true}}
	}
	add := func(dst, y, cols uint64) Launch { return Launch{Name: "add", Params: []uint64{dst, y, io, cols}} }
	norm := func(src, dst, group uint64) Launch {
		return Launch{Name: "rms_norm", Params: []uint64{src, w, io, dst, 64, group, eps}}
	}
	matmul := Launch{Name: "matmul.q4_k"}
	viaNCCL := reduce()
	viaNCCL.Collective = &Collective{X: x, Rows: 1, Cols: 64}
	for _, c := range []struct {
		name     string
		in       []Launch
		norms    bool
		launches int
		residual uint64
		normY    uint64
	}{
		{"fused", []Launch{reduce(), add(hidden, x, 64), matmul}, true, 2, hidden, 0},
		{"another value's add", []Launch{reduce(), add(hidden, other, 64), matmul}, true, 3, 0, 0},
		{"other columns", []Launch{reduce(), add(hidden, x, 32), matmul}, true, 3, 0, 0},
		{"in place", []Launch{reduce(), add(x, x, 64), matmul}, true, 3, 0, 0},
		{"not next", []Launch{reduce(), matmul, add(hidden, x, 64)}, true, 3, 0, 0},
		{"through NCCL", []Launch{viaNCCL, add(hidden, x, 64), norm(hidden, y, 64)}, true, 3, 0, 0},
		{"norm", []Launch{reduce(), add(hidden, x, 64), norm(hidden, y, 64), matmul}, true, 2, hidden, y},
		{"norm, kernel without", []Launch{reduce(), add(hidden, x, 64), norm(hidden, y, 64), matmul}, false, 3, hidden, 0},
		{"norm into the sums", []Launch{reduce(), add(hidden, x, 64), norm(hidden, x, 64)}, true, 1, hidden, x},
		{"norm in place", []Launch{reduce(), add(hidden, x, 64), norm(hidden, hidden, 64)}, true, 2, hidden, 0},
		{"norm of groups", []Launch{reduce(), add(hidden, x, 64), norm(hidden, y, 32)}, true, 2, hidden, 0},
		{"norm of another value", []Launch{reduce(), add(hidden, x, 64), norm(other, y, 64)}, true, 2, hidden, 0},
		{"norm without the add", []Launch{reduce(), norm(x, y, 64)}, true, 2, 0, 0},
	} {
		in := slices.Clone(c.in)
		out := fuseResiduals(in, c.norms)
		r := out[0].Params
		if len(out) != c.launches || r[reduceResidual] != c.residual || r[reduceNormY] != c.normY {
			t.Errorf("%s: %d launches, residual %#x, norm into %#x; want %d, %#x, %#x", c.name, len(out), r[reduceResidual], r[reduceNormY], c.launches, c.residual, c.normY)
		}
		if c.normY != 0 && (r[reduceNormW] != w || r[reduceEps] != eps) {
			t.Errorf("%s: norm weights %#x, eps %#x; want %#x, %#x", c.name, r[reduceNormW], r[reduceEps], w, eps)
		}
		if in[0].Params[reduceResidual] != 0 || in[0].Params[reduceNormY] != 0 {
			t.Errorf("%s: the unfused launch changed: %#x", c.name, in[0].Params)
		}
	}
}

// TestFuseProducts: a matmul's matrix-vector launch takes in the one-shot
// all-reduce right after it that sums its whole output (with the
// residual add and norm the all-reduce took in), where its grid fits;
// nothing else does.
func TestFuseProducts(t *testing.T) {
	const x, w, io, y, hidden, desc, normW, normY, eps = 0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0xde5c, 0x6000, 0x7000, 0x3727c5ac
	mm := func(name string, out uint64, n uint64, entry kcuda.EntryPoint, rows uint32) Launch {
		return Launch{Name: name, Params: []uint64{x, w, 0, io, out, 64, n}, Sizes: []int{8, 8, 8, 8, 8, 4, 4},
			Shape: kcuda.Launch{Grid: [3]uint32{16, rows, 1}, Block: [3]uint32{32, 16, 1}, Entry: entry}}
	}
	reduce := func(rows int, residual, normY uint64) Launch {
		nw, ne := uint64(0), uint64(0)
		if normY != 0 {
			nw, ne = normW, eps
		}
		return Launch{Name: "all_reduce_sum", Params: []uint64{y, io, 256, desc, residual, nw, normY, ne},
			Collective: &Collective{X: y, Rows: rows, Cols: 256, Peer: true}}
	}
	viaNCCL := reduce(1, hidden, 0)
	viaNCCL.Collective = &Collective{X: y, Rows: 1, Cols: 256}
	gather := reduce(1, 0, 0)
	gather.Collective = &Collective{Gather: true, X: y, Rows: 1, Cols: 256, Peer: true}
	fits := func(l *Launch) bool { return l.Shape.Grid[0] <= 16 }
	wide := mm("matmul.q4_k", y, 256, kcuda.EntryMain, 1)
	wide.Shape.Grid[0] = 17
	for _, c := range []struct {
		name     string
		in       []Launch
		launches int
		residual uint64 // the fused launch's residual; 0: none
		normY    uint64 // its norm's output; 0: none
	}{
		{"fused", []Launch{mm("matmul.q4_k", y, 256, kcuda.EntryMain, 1), reduce(1, hidden, 0)}, 1, hidden, 0},
		{"fused, no add", []Launch{mm("matmul.q6_k", y, 256, kcuda.EntryMain, 1), reduce(1, 0, 0)}, 1, 0, 0},
		{"norm taken in", []Launch{mm("matmul.q4_k", y, 256, kcuda.EntryMain, 1), reduce(1, hidden, normY)}, 1, hidden, normY},
		{"norm into the sums", []Launch{mm("matmul.q4_k", y, 256, kcuda.EntryMain, 1), reduce(1, hidden, y)}, 1, hidden, y},
		{"another output", []Launch{mm("matmul.q4_k", x, 256, kcuda.EntryMain, 1), reduce(1, hidden, 0)}, 2, 0, 0},
		{"other columns", []Launch{mm("matmul.q4_k", y, 128, kcuda.EntryMain, 1), reduce(1, hidden, 0)}, 2, 0, 0},
		{"rows entry", []Launch{mm("matmul.q4_k", y, 256, kcuda.EntryRows, 1), reduce(1, hidden, 0)}, 2, 0, 0},
		{"rows differ", []Launch{mm("matmul.q4_k", y, 256, kcuda.EntryMain, 2), reduce(1, hidden, 0)}, 2, 0, 0},
		{"residual product", []Launch{mm("matmul_residual.q4_k", y, 256, kcuda.EntryMain, 1), reduce(1, hidden, 0)}, 2, 0, 0},
		{"grid too large", []Launch{wide, reduce(1, hidden, 0)}, 2, 0, 0},
		{"through NCCL", []Launch{mm("matmul.q4_k", y, 256, kcuda.EntryMain, 1), viaNCCL}, 2, 0, 0},
		{"gather", []Launch{mm("matmul.q4_k", y, 256, kcuda.EntryMain, 1), gather}, 2, 0, 0},
	} {
		in := slices.Clone(c.in)
		out := fuseProducts(in, fits)
		if len(out) != c.launches {
			t.Errorf("%s: %d launches, want %d", c.name, len(out), c.launches)
			continue
		}
		if c.launches != 1 {
			if out[0].Shape.Entry == kcuda.EntryPeer {
				t.Errorf("%s: the matmul became its _peer entry", c.name)
			}
			continue
		}
		l := out[0]
		wantW, wantEps := uint64(0), uint64(0)
		if c.normY != 0 {
			wantW, wantEps = normW, eps
		}
		if l.Shape.Entry != kcuda.EntryPeer || len(l.Params) != 12 || len(l.Sizes) != 12 || l.Sizes[11] != 4 ||
			!slices.Equal(l.Params[7:], []uint64{desc, c.residual, wantW, c.normY, wantEps}) {
			t.Errorf("%s: entry %d, params %#x (sizes %v), want the _peer entry with the descriptor %#x, residual %#x, norm %#x into %#x (eps %#x) last",
				c.name, l.Shape.Entry, l.Params, l.Sizes, desc, c.residual, wantW, c.normY, wantEps)
		}
		if len(in[0].Params) != 7 || in[0].Shape.Entry != c.in[0].Shape.Entry {
			t.Errorf("%s: the unfused launch changed: %#x", c.name, in[0].Params)
		}
	}
}

// TestReduceCapabilities holds the embedded all_reduce_sum PTX of each
// architecture to what the tier reads from it: the RMS norm's parameters
// (ReduceTakesNorm) and the grid-counted epoch that lets a large
// all-reduce spread over the GPU (ReduceSpreads), both absent from a
// kernel that predates them.
func TestReduceCapabilities(t *testing.T) {
	for _, arch := range []string{"sm_80", "sm_90"} {
		src, err := ptx.Source(arch, "all_reduce_sum", "")
		if err != nil {
			t.Skipf("no embedded PTX: %v", err)
		}
		if !ReduceTakesNorm("all_reduce_sum", src) || !ReduceSpreads(src) {
			t.Errorf("%s: all_reduce_sum takes the norm %v, spreads %v; want both", arch, ReduceTakesNorm("all_reduce_sum", src), ReduceSpreads(src))
		}
	}
	if old := []byte(".entry all_reduce_sum(\n\t.param .u64 all_reduce_sum_param_0\n)"); ReduceTakesNorm("all_reduce_sum", old) || ReduceSpreads(old) {
		t.Error("a kernel without the norm's parameters or the grid count is read as having them")
	}
}
