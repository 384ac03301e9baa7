// Package cpu is T-CPU: it allocates the memory plan's regions in host
// memory (weights copied from the mapped pack into huge pages, or left
// there), walks each variant's PM4 stream
// once at load — checking every packet — into a list of resolved
// dispatches, and replays that list with Go kernels on a worker pool.
package cpu

import (
	"context"
	"fmt"

	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/kernels"
	kcpu "github.com/zrtdev/zrt/kernels/cpu"
	"github.com/zrtdev/zrt/runtime/replay"
)

// regionShift spaces the regions of T-CPU's address map: region i lives
// at (i+1)<<regionShift, so no region starts at 0 (a null pointer).
const regionShift = 40

// Tier is a loaded bundle on the CPU.
type Tier struct {
	regions  [][]byte
	variants []*variant
	pool     *kcpu.Pool
	ownPool  bool // pool is the Tier's own (not Options.Pool)
	work     []byte
	fence    int
	trace    func(i int, kernel string, out []byte)
	release  []func() error // the huge-page arenas' unmaps
	comm     kcpu.Comm      // the tensor-parallel set this tier is a rank of
	packs    *kcpu.Packs    // the weights' repacked forms, built on first use
	packFree []byte         // the rest of the arena the packs are carved from
}

type variant struct {
	dispatches []dispatch
	fenceValue uint32
}

type dispatch struct {
	name string
	fn   kcpu.Func
	args kcpu.Args
}

// Options configure the tier.
type Options struct {
	Threads int // ≤ 0: one per CPU
	// Trace, when set, receives each dispatch's kernel name and its last
	// buffer argument (the output for every kernel but argmax) after it
	// runs: the hook for layer-by-layer comparison with another engine.
	Trace func(i int, kernel string, out []byte)
	// MapWeights keeps the weights in the mapped pack, shared with other
	// processes through the page cache, instead of copying them into
	// memory of their own backed by huge pages (see placeWeights).
	MapWeights bool
	// Log, when set, hears about the copy of the weights.
	Log func(format string, args ...any)
	// Comm, for a rank bundle of a tensor-parallel set, is the set its
	// collective kernels meet the other ranks at (runtime/tp).
	Comm kcpu.Comm
	// Pool, when set, is the worker pool to run on, shared with another
	// tier that replays one step at a time with this one (a draft model
	// beside its target): two pools would each keep workers spinning
	// while the other's run, on the same cores. The Tier does not close
	// it.
	Pool *kcpu.Pool
}

// Load prepares a bundle for replay: it maps weight regions from the pack,
// allocates the others, binds every kernel blob to its Go kernel, and
// walks each variant's stream once into a list of resolved calls.
func Load(b *bundle.Bundle, opt Options) (*Tier, error) {
	g := b.Graph
	if tp := b.Graph.Hparams.TPRanks; tp > 1 && (opt.Comm == nil || opt.Comm.Ranks() != tp || opt.Comm.Rank() != b.Graph.Hparams.TPRank) {
		return nil, fmt.Errorf("cpu: the bundle is rank %d of a tensor-parallel set of %d: it runs only with every rank of its set (open the set)", b.Graph.Hparams.TPRank, tp)
	}
	t := &Tier{pool: opt.Pool, fence: -1, trace: opt.Trace, comm: opt.Comm}
	if t.pool == nil {
		t.pool, t.ownPool = kcpu.NewPool(opt.Threads), true
	}
	mem := &replay.Memory{}
	var err error
	if t.regions, err = t.place(b, opt); err != nil {
		t.Close()
		return nil, err
	}
	for i, r := range g.Regions {
		if r.Name == kernels.RegionFence {
			t.fence = i
		}
		mem.Base = append(mem.Base, uint64(i+1)<<regionShift)
		mem.Size = append(mem.Size, uint64(len(t.regions[i])))
	}
	if t.fence < 0 {
		t.Close()
		return nil, fmt.Errorf("cpu: memory plan has no fence region")
	}
	var weights [][]byte
	for i, r := range g.Regions {
		if _, ok := b.Weights[r.Name]; ok {
			weights = append(weights, t.regions[i])
		}
	}
	t.packs = kcpu.NewPacks(weights, t.packAlloc)
	fns, err := kcpu.BindBlobs(b.Blobs)
	if err != nil {
		t.Close()
		return nil, err
	}
	for vi := range g.Variants {
		s, err := replay.Walk(&g.Variants[vi], b.Blobs, mem, t.fence)
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("cpu: variant %d: %w", vi, err)
		}
		v := &variant{fenceValue: s.FenceValue}
		for _, d := range s.Dispatches {
			v.dispatches = append(v.dispatches, t.bind(d, mem, fns[d.Kernel]))
		}
		t.variants = append(t.variants, v)
	}
	return t, nil
}

// bind turns a resolved dispatch into a Go call: each buffer address
// becomes the bytes from it to the end of its region.
func (t *Tier) bind(d replay.Dispatch, mem *replay.Memory, fn kcpu.Func) dispatch {
	out := dispatch{name: d.Name, fn: fn}
	out.args.Bufs = make([][]byte, len(d.Bufs))
	for i, addr := range d.Bufs {
		if r := d.Regions[i]; r >= 0 {
			out.args.Bufs[i] = t.regions[r][addr-mem.Base[r]:]
		}
	}
	out.args.Push, out.args.Spec, out.args.Grid = d.Push, d.Spec, d.Grid
	out.args.Pool, out.args.Work, out.args.Comm, out.args.Packs = t.pool, &t.work, t.comm, t.packs
	return out
}

// packChunk is the size of the huge-page arenas the weights' packs are
// carved from (one pack larger than it gets an arena of its own).
const packChunk = 32 << 20

// packAlloc returns n bytes of huge-page memory for a weight's pack
// (kcpu.Packs), released by Close.
func (t *Tier) packAlloc(n int) ([]byte, error) {
	if len(t.packFree) < n {
		a, err := t.arena(max(n, packChunk))
		if err != nil {
			return nil, err
		}
		t.packFree = a
	}
	b := t.packFree[:n:n]
	t.packFree = t.packFree[min(len(t.packFree), alignUp(n, 64)):]
	return b, nil
}

// Name is the tier's name.
func (t *Tier) Name() string { return "cpu" }

// Region returns the host view of a region (the request table, the outputs).
func (t *Tier) Region(i int) []byte { return t.regions[i] }

// Run replays variant vi and signals its fence.
func (t *Tier) Run(ctx context.Context, vi int) error { return t.RunEach(ctx, vi, nil) }

// RunEach is Run calling after (when not nil) once each dispatch is done.
func (t *Tier) RunEach(ctx context.Context, vi int, after func(dispatch int) error) error {
	v := t.variants[vi]
	fence := t.regions[t.fence]
	fence[0], fence[1], fence[2], fence[3] = 0, 0, 0, 0
	for i := range v.dispatches {
		if i%16 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		d := &v.dispatches[i]
		if err := d.fn(&d.args); err != nil {
			return fmt.Errorf("cpu: dispatch %d (%s): %w", i, d.name, err)
		}
		if t.trace != nil {
			t.trace(i, d.name, d.args.Bufs[len(d.args.Bufs)-1])
		}
		if after != nil {
			if err := after(i); err != nil {
				return err
			}
		}
	}
	fence[0], fence[1], fence[2], fence[3] = byte(v.fenceValue), byte(v.fenceValue>>8), byte(v.fenceValue>>16), byte(v.fenceValue>>24)
	return nil
}

// ReadRegion copies n bytes at off of region i.
func (t *Tier) ReadRegion(i int, off, n int64) ([]byte, error) {
	if i < 0 || i >= len(t.regions) || off < 0 || n < 0 || off+n > int64(len(t.regions[i])) {
		return nil, fmt.Errorf("cpu: no bytes [%d, %d) in region %d", off, off+n, i)
	}
	return append([]byte(nil), t.regions[i][off:off+n]...), nil
}

// CopyFromRegion copies len(dst) bytes at off of region i into dst
// (between replays: the prefix cache's host tier reads KV pages so).
func (t *Tier) CopyFromRegion(i int, off int64, dst []byte) error {
	if i < 0 || i >= len(t.regions) || off < 0 || off+int64(len(dst)) > int64(len(t.regions[i])) {
		return fmt.Errorf("cpu: no bytes [%d, %d) in region %d", off, off+int64(len(dst)), i)
	}
	copy(dst, t.regions[i][off:])
	return nil
}

// CopyToRegion copies src into region i at off (between replays).
func (t *Tier) CopyToRegion(i int, off int64, src []byte) error {
	if i < 0 || i >= len(t.regions) || off < 0 || off+int64(len(src)) > int64(len(t.regions[i])) {
		return fmt.Errorf("cpu: no bytes [%d, %d) in region %d", off, off+int64(len(src)), i)
	}
	copy(t.regions[i][off:], src)
	return nil
}

// CopyWithinRegion copies the n bytes at src of region i to dst of the
// same region (between replays: a SubmitN choice's copy of its group's
// partial prompt page).
func (t *Tier) CopyWithinRegion(i int, dst, src, n int64) error {
	if i < 0 || i >= len(t.regions) || n < 0 || src < 0 || dst < 0 || src+n > int64(len(t.regions[i])) || dst+n > int64(len(t.regions[i])) {
		return fmt.Errorf("cpu: no copy of %d bytes from %d to %d in region %d", n, src, dst, i)
	}
	copy(t.regions[i][dst:dst+n], t.regions[i][src:src+n])
	return nil
}

// Threads is the worker count.
func (t *Tier) Threads() int { return t.pool.Threads() }

// Workers is the worker pool the tier runs on, for a tier that shares it
// (Options.Pool).
func (t *Tier) Workers() *kcpu.Pool { return t.pool }

// Close stops the workers (unless the pool is shared: Options.Pool) and
// releases the memory.
func (t *Tier) Close() error {
	if t.ownPool {
		t.pool.Close()
	}
	var first error
	for _, f := range t.release {
		if err := f(); err != nil && first == nil {
			first = err
		}
	}
	t.release, t.regions, t.packs, t.packFree = nil, nil, nil, nil
	return first
}
