// Package replay turns a variant's packet stream into the dispatches a
// tier runs. Every tier replays the same stream: Walk patches its
// relocations with the tier's addresses, decodes the packets, checks the
// invariants all tiers rely on — a program set before each dispatch, user
// data covering the kernel's ABI, every pointer inside a region, a barrier
// and then the fence at the end, nothing after it — and resolves each
// dispatch's kernel, buffers, push constants and specialization values.
// What a tier does with them (call Go kernels, launch CUDA functions) is
// its own business.
package replay

import (
	"fmt"

	"github.com/zrtdev/zrt/asm/pm4"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/zrt"
	"github.com/zrtdev/zrt/kernels"
)

// KernelBase tags program addresses: kernel k's PGM_LO/HI is KernelBase +
// k<<8. Tiers bind kernels by index, not code address, so the tag only has
// to differ from every buffer address (user-space addresses stay far
// below 2^56).
const KernelBase = 0xFF << 56

// Memory is where a tier put the regions: region i spans [Base[i],
// Base[i]+Size[i]) in its address space.
type Memory struct {
	Base, Size []uint64
}

// Region returns the region holding addr (its end included: a pointer may
// sit at the end of an empty tail), or -1.
func (m *Memory) Region(addr uint64) int {
	for i, b := range m.Base {
		if addr >= b && addr <= b+m.Size[i] {
			return i
		}
	}
	return -1
}

func (m *Memory) address(nKernels int) func(pm4.Symbol) (uint64, error) {
	return func(s pm4.Symbol) (uint64, error) {
		switch s.Space {
		case pm4.SpaceRegion:
			if int(s.Index) >= len(m.Base) || s.Addend > m.Size[s.Index] {
				return 0, fmt.Errorf("region %d+%d outside the memory plan", s.Index, s.Addend)
			}
			return m.Base[s.Index] + s.Addend, nil
		case pm4.SpaceKernel:
			if int(s.Index) >= nKernels || s.Addend != 0 {
				return 0, fmt.Errorf("kernel %d+%d does not exist", s.Index, s.Addend)
			}
			return KernelBase + uint64(s.Index)<<8, nil
		}
		return 0, fmt.Errorf("symbol space %d", s.Space)
	}
}

// Dispatch is one resolved dispatch.
type Dispatch struct {
	Kernel int // index into the bundle's blobs
	Name   string
	ABI    *kernels.ABI
	// Bufs are the buffer arguments' addresses in ABI order, 0 for an
	// absent optional buffer; Regions the region each lies in (-1 for 0).
	Bufs    []uint64
	Regions []int
	Push    []uint32
	Spec    []uint32
	Grid    [3]uint32
}

// Stream is a walked variant.
type Stream struct {
	Dispatches []Dispatch
	// FenceValue is what the stream's RELEASE_MEM writes to the fence.
	FenceValue uint32
}

// Walk resolves variant v against mem; fence is the index of the fence region.
func Walk(v *bundle.Variant, blobs []*zrt.Blob, mem *Memory, fence int) (*Stream, error) {
	words := append([]uint32(nil), v.Words...)
	if err := pm4.Patch(words, v.Relocs, mem.address(len(blobs))); err != nil {
		return nil, err
	}
	pkts, err := pm4.Decode(words)
	if err != nil {
		return nil, err
	}
	out := &Stream{}
	var sh [pm4.COMPUTE_USER_DATA_0 + pm4.NumUserData]uint32
	var set [len(sh)]bool
	fenced, barrier := false, false
	for _, p := range pkts {
		switch p.Op {
		case pm4.SET_SH_REG:
			reg := int(p.Body[0])
			if reg+len(p.Body)-1 > len(sh) {
				return nil, fmt.Errorf("dword %#x: SET_SH_REG of %d registers at %#x is outside the compute registers", p.Offset, len(p.Body)-1, reg)
			}
			for i, x := range p.Body[1:] {
				sh[reg+i], set[reg+i] = x, true
			}
		case pm4.DISPATCH_DIRECT:
			if fenced {
				return nil, fmt.Errorf("dword %#x: dispatch after the fence", p.Offset)
			}
			d, err := dispatch(sh[:], set[:], blobs, mem)
			if err != nil {
				return nil, fmt.Errorf("dword %#x: %w", p.Offset, err)
			}
			d.Grid = [3]uint32{p.Body[0], p.Body[1], p.Body[2]}
			out.Dispatches = append(out.Dispatches, d)
			set = [len(sh)]bool{}
			barrier = false
		case pm4.EVENT_WRITE, pm4.ACQUIRE_MEM:
			barrier = true
		case pm4.RELEASE_MEM:
			addr := uint64(p.Body[2]) | uint64(p.Body[3])<<32
			if mem.Region(addr) != fence {
				return nil, fmt.Errorf("dword %#x: RELEASE_MEM does not target the fence", p.Offset)
			}
			if !barrier {
				return nil, fmt.Errorf("dword %#x: fence without a barrier after the last dispatch", p.Offset)
			}
			fenced, out.FenceValue = true, p.Body[4]
		default:
			return nil, fmt.Errorf("dword %#x: %s is not valid in a compute stream", p.Offset, p.Op)
		}
	}
	if !fenced {
		return nil, fmt.Errorf("stream ends without a fence")
	}
	return out, nil
}

func dispatch(sh []uint32, set []bool, blobs []*zrt.Blob, mem *Memory) (Dispatch, error) {
	if !set[pm4.COMPUTE_PGM_LO] || !set[pm4.COMPUTE_PGM_HI] {
		return Dispatch{}, fmt.Errorf("dispatch without a program address")
	}
	pgm := uint64(sh[pm4.COMPUTE_PGM_LO]) | uint64(sh[pm4.COMPUTE_PGM_HI])<<32
	ki := int((pgm - KernelBase) >> 8)
	if pgm < KernelBase || pgm&0xFF != 0 || ki >= len(blobs) {
		return Dispatch{}, fmt.Errorf("program address %#x is not a kernel", pgm)
	}
	blob := blobs[ki]
	abi, _, err := kernels.SplitInstance(blob.Name)
	if err != nil {
		return Dispatch{}, err
	}
	ud := sh[pm4.COMPUTE_USER_DATA_0:]
	for i := 0; i < abi.UserDataDwords(); i++ {
		if !set[pm4.COMPUTE_USER_DATA_0+i] {
			return Dispatch{}, fmt.Errorf("kernel %s needs %d user-data dwords, only %d set", blob.Name, abi.UserDataDwords(), i)
		}
	}
	d := Dispatch{Kernel: ki, Name: blob.Name, ABI: abi}
	for i, role := range abi.Bufs {
		addr := uint64(ud[2*i]) | uint64(ud[2*i+1])<<32
		r := -1
		if addr == 0 {
			if !abi.Optional[role] {
				return Dispatch{}, fmt.Errorf("kernel %s: null pointer for %s", blob.Name, role)
			}
		} else if r = mem.Region(addr); r < 0 {
			return Dispatch{}, fmt.Errorf("kernel %s: %s: address %#x is not inside any region", blob.Name, role, addr)
		}
		d.Bufs, d.Regions = append(d.Bufs, addr), append(d.Regions, r)
	}
	d.Push = append([]uint32(nil), ud[2*len(abi.Bufs):abi.UserDataDwords()]...)
	for _, s := range abi.Spec {
		v, err := blob.SlotValue(s.Name)
		if err != nil {
			return Dispatch{}, err
		}
		d.Spec = append(d.Spec, v)
	}
	return d, nil
}
