// Package cpu is T-CPU: it allocates the memory plan's regions in host
// memory (weights stay in the mapped pack), walks each variant's PM4 stream
// once at load — checking every packet — into a list of resolved
// dispatches, and replays that list with Go kernels on a worker pool.
package cpu

import (
	"context"
	"fmt"

	"github.com/zrtdev/zrt/asm/pm4"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/zrt"
	"github.com/zrtdev/zrt/kernels"
	kcpu "github.com/zrtdev/zrt/kernels/cpu"
)

// Region addresses: region i lives at (i+1)<<regionShift, kernel k's program
// at kernelBase + k<<8, so any address says what it points into.
const (
	regionShift = 40
	kernelBase  = 0xFF << 48
)

// Tier is a loaded bundle on the CPU.
type Tier struct {
	regions  [][]byte
	variants []*variant
	pool     *kcpu.Pool
	work     []byte
	fence    int
	trace    func(i int, kernel string, out []byte)
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
}

// Load prepares a bundle for replay.
func Load(b *bundle.Bundle, opt Options) (*Tier, error) {
	g := b.Graph
	t := &Tier{pool: kcpu.NewPool(opt.Threads), fence: -1, trace: opt.Trace}
	for i, r := range g.Regions {
		if w, ok := b.Weights[r.Name]; ok {
			t.regions = append(t.regions, w)
			continue
		}
		if r.Name == "fence" {
			t.fence = i
		}
		t.regions = append(t.regions, make([]byte, r.Bytes))
	}
	if t.fence < 0 {
		t.Close()
		return nil, fmt.Errorf("cpu: memory plan has no fence region")
	}
	fns := make([]kcpu.Func, len(b.Blobs))
	for i, blob := range b.Blobs {
		f, err := kcpu.Bind(blob.Name)
		if err != nil {
			t.Close()
			return nil, err
		}
		fns[i] = f
	}
	for vi := range g.Variants {
		v, err := t.walk(&g.Variants[vi], b.Blobs, fns)
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("cpu: variant %d: %w", vi, err)
		}
		t.variants = append(t.variants, v)
	}
	return t, nil
}

// address is the relocation resolver of this tier's address map.
func (t *Tier) address(nKernels int) func(pm4.Symbol) (uint64, error) {
	return func(s pm4.Symbol) (uint64, error) {
		switch s.Space {
		case pm4.SpaceRegion:
			if int(s.Index) >= len(t.regions) || s.Addend > uint64(len(t.regions[s.Index])) {
				return 0, fmt.Errorf("region %d+%d outside the memory plan", s.Index, s.Addend)
			}
			return uint64(s.Index+1)<<regionShift + s.Addend, nil
		case pm4.SpaceKernel:
			if int(s.Index) >= nKernels || s.Addend != 0 {
				return 0, fmt.Errorf("kernel %d+%d does not exist", s.Index, s.Addend)
			}
			return kernelBase + uint64(s.Index)<<8, nil
		}
		return 0, fmt.Errorf("symbol space %d", s.Space)
	}
}

// resolve turns an address back into the bytes it points at.
func (t *Tier) resolve(addr uint64) ([]byte, int, error) {
	ri := int(addr>>regionShift) - 1
	off := addr & (1<<regionShift - 1)
	if addr >= kernelBase || ri < 0 || ri >= len(t.regions) || off > uint64(len(t.regions[ri])) {
		return nil, 0, fmt.Errorf("address %#x is not inside any region", addr)
	}
	return t.regions[ri][off:], ri, nil
}

// walk patches a copy of the stream, decodes it and checks the invariants
// every tier relies on: a program is set before each dispatch, the user
// data covers the kernel's ABI, every pointer lands in a mapped region,
// and the stream ends with a barrier and a fence.
func (t *Tier) walk(v *bundle.Variant, blobs []*zrt.Blob, fns []kcpu.Func) (*variant, error) {
	words := append([]uint32(nil), v.Words...)
	if err := pm4.Patch(words, v.Relocs, t.address(len(blobs))); err != nil {
		return nil, err
	}
	pkts, err := pm4.Decode(words)
	if err != nil {
		return nil, err
	}
	out := &variant{}
	var sh [pm4.COMPUTE_USER_DATA_0 + pm4.NumUserData]uint32
	var set [len(sh)]bool
	fenced, barrierSinceDispatch := false, false
	for _, p := range pkts {
		switch p.Op {
		case pm4.SET_SH_REG:
			reg := int(p.Body[0])
			if reg < 0 || reg+len(p.Body)-1 > len(sh) {
				return nil, fmt.Errorf("dword %#x: SET_SH_REG of %d registers at %#x is outside the compute registers", p.Offset, len(p.Body)-1, reg)
			}
			for i, x := range p.Body[1:] {
				sh[reg+i], set[reg+i] = x, true
			}
		case pm4.DISPATCH_DIRECT:
			if fenced {
				return nil, fmt.Errorf("dword %#x: dispatch after the fence", p.Offset)
			}
			d, err := t.dispatch(p, sh[:], set[:], blobs, fns)
			if err != nil {
				return nil, fmt.Errorf("dword %#x: %w", p.Offset, err)
			}
			out.dispatches = append(out.dispatches, d)
			set = [len(sh)]bool{}
			barrierSinceDispatch = false
		case pm4.EVENT_WRITE, pm4.ACQUIRE_MEM:
			barrierSinceDispatch = true
		case pm4.RELEASE_MEM:
			addr := uint64(p.Body[2]) | uint64(p.Body[3])<<32
			_, ri, err := t.resolve(addr)
			if err != nil || ri != t.fence {
				return nil, fmt.Errorf("dword %#x: RELEASE_MEM does not target the fence", p.Offset)
			}
			if !barrierSinceDispatch {
				return nil, fmt.Errorf("dword %#x: fence without a barrier after the last dispatch", p.Offset)
			}
			fenced, out.fenceValue = true, p.Body[4]
		default:
			return nil, fmt.Errorf("dword %#x: %s is not valid in a compute stream", p.Offset, p.Op)
		}
	}
	if !fenced {
		return nil, fmt.Errorf("stream ends without a fence")
	}
	return out, nil
}

func (t *Tier) dispatch(p pm4.Packet, sh []uint32, set []bool, blobs []*zrt.Blob, fns []kcpu.Func) (dispatch, error) {
	if !set[pm4.COMPUTE_PGM_LO] || !set[pm4.COMPUTE_PGM_HI] {
		return dispatch{}, fmt.Errorf("dispatch without a program address")
	}
	pgm := uint64(sh[pm4.COMPUTE_PGM_LO]) | uint64(sh[pm4.COMPUTE_PGM_HI])<<32
	ki := int((pgm - kernelBase) >> 8)
	if pgm < kernelBase || pgm&0xFF != 0 || ki >= len(blobs) {
		return dispatch{}, fmt.Errorf("program address %#x is not a kernel", pgm)
	}
	blob := blobs[ki]
	abi, _, err := kernels.SplitInstance(blob.Name)
	if err != nil {
		return dispatch{}, err
	}
	ud := sh[pm4.COMPUTE_USER_DATA_0:]
	for i := 0; i < abi.UserDataDwords(); i++ {
		if !set[pm4.COMPUTE_USER_DATA_0+i] {
			return dispatch{}, fmt.Errorf("kernel %s needs %d user-data dwords, only %d set", blob.Name, abi.UserDataDwords(), i)
		}
	}
	d := dispatch{name: blob.Name, fn: fns[ki]}
	d.args.Bufs = make([][]byte, len(abi.Bufs))
	for i, role := range abi.Bufs {
		addr := uint64(ud[2*i]) | uint64(ud[2*i+1])<<32
		if addr == 0 {
			if !abi.Optional[role] {
				return dispatch{}, fmt.Errorf("kernel %s: null pointer for %s", blob.Name, role)
			}
			continue
		}
		if d.args.Bufs[i], _, err = t.resolve(addr); err != nil {
			return dispatch{}, fmt.Errorf("kernel %s: %s: %w", blob.Name, role, err)
		}
	}
	d.args.Push = append([]uint32(nil), ud[2*len(abi.Bufs):abi.UserDataDwords()]...)
	for _, s := range abi.Spec {
		v, err := blob.SlotValue(s.Name)
		if err != nil {
			return dispatch{}, err
		}
		d.args.Spec = append(d.args.Spec, v)
	}
	d.args.Grid = [3]uint32{p.Body[0], p.Body[1], p.Body[2]}
	d.args.Pool = t.pool
	d.args.Work = &t.work
	return d, nil
}

// Name is the tier's name.
func (t *Tier) Name() string { return "cpu" }

// Region returns the host view of a region (the request table, the outputs).
func (t *Tier) Region(i int) []byte { return t.regions[i] }

// Run replays variant vi and signals its fence.
func (t *Tier) Run(ctx context.Context, vi int) error {
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
	}
	fence[0], fence[1], fence[2], fence[3] = byte(v.fenceValue), byte(v.fenceValue>>8), byte(v.fenceValue>>16), byte(v.fenceValue>>24)
	return nil
}

// Threads is the worker count.
func (t *Tier) Threads() int { return t.pool.Threads() }

// Close stops the workers.
func (t *Tier) Close() error {
	t.pool.Close()
	return nil
}
