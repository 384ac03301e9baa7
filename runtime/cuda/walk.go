package cuda

import (
	"fmt"

	"github.com/zrtdev/zrt/asm/pm4"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/zrt"
	"github.com/zrtdev/zrt/kernels"
	kcuda "github.com/zrtdev/zrt/kernels/cuda"
)

// kernelBase tags program addresses: kernel k's PGM_LO/HI is kernelBase +
// k<<8. CUDA launches functions, not code addresses, so the tag only has
// to be distinct from every device pointer (user-space device addresses
// stay far below 2^56).
const kernelBase = 0xFF << 56

// Launch is one resolved dispatch of a variant: the kernel (an index into
// the bundle's blobs), its launch shape, and its parameter values in the
// kernel-parameter convention — buffer pointers (device addresses, 0 for
// an absent optional buffer), then push constants, then specialization
// values, each in its own 8-byte slot (a u32 in the low half).
type Launch struct {
	Kernel int
	Name   string
	Shape  kcuda.Launch
	Params []uint64
	// Sizes are the byte sizes of the parameters (8 for pointers, 4 for
	// dwords), which is how the kernel reads them.
	Sizes []int
}

// Memory is where the walker finds regions: region i spans [Base[i],
// Base[i]+Size[i]) in the device's address space.
type Memory struct {
	Base, Size []uint64
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
			return kernelBase + uint64(s.Index)<<8, nil
		}
		return 0, fmt.Errorf("symbol space %d", s.Space)
	}
}

// region returns the region holding addr (its end included: a pointer
// may sit at the end of an empty tail).
func (m *Memory) region(addr uint64) int {
	for i, b := range m.Base {
		if addr >= b && addr <= b+m.Size[i] {
			return i
		}
	}
	return -1
}

// Walk patches a copy of a variant's stream with the addresses of mem,
// decodes it and checks what T-CPU checks — a program before each
// dispatch, user data covering the kernel's ABI, every pointer inside a
// region, a barrier and then the fence at the end — and returns the
// launches in stream order. Barriers need no translation: launches on one
// stream (and the graph captured from it) already run in order.
func Walk(v *bundle.Variant, blobs []*zrt.Blob, mem *Memory, fence int) ([]Launch, error) {
	words := append([]uint32(nil), v.Words...)
	if err := pm4.Patch(words, v.Relocs, mem.address(len(blobs))); err != nil {
		return nil, err
	}
	pkts, err := pm4.Decode(words)
	if err != nil {
		return nil, err
	}
	var out []Launch
	var sh [pm4.COMPUTE_USER_DATA_0 + pm4.NumUserData]uint32
	var set [len(sh)]bool
	fenced, barrier := false, false
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
			l, err := dispatch(sh[:], set[:], blobs, mem, int(v.Rows))
			if err != nil {
				return nil, fmt.Errorf("dword %#x: %w", p.Offset, err)
			}
			out = append(out, l)
			set = [len(sh)]bool{}
			barrier = false
		case pm4.EVENT_WRITE, pm4.ACQUIRE_MEM:
			barrier = true
		case pm4.RELEASE_MEM:
			addr := uint64(p.Body[2]) | uint64(p.Body[3])<<32
			if mem.region(addr) != fence {
				return nil, fmt.Errorf("dword %#x: RELEASE_MEM does not target the fence", p.Offset)
			}
			if !barrier {
				return nil, fmt.Errorf("dword %#x: fence without a barrier after the last dispatch", p.Offset)
			}
			fenced = true
		default:
			return nil, fmt.Errorf("dword %#x: %s is not valid in a compute stream", p.Offset, p.Op)
		}
	}
	if !fenced {
		return nil, fmt.Errorf("stream ends without a fence")
	}
	return out, nil
}

func dispatch(sh []uint32, set []bool, blobs []*zrt.Blob, mem *Memory, rows int) (Launch, error) {
	if !set[pm4.COMPUTE_PGM_LO] || !set[pm4.COMPUTE_PGM_HI] {
		return Launch{}, fmt.Errorf("dispatch without a program address")
	}
	pgm := uint64(sh[pm4.COMPUTE_PGM_LO]) | uint64(sh[pm4.COMPUTE_PGM_HI])<<32
	ki := int((pgm - kernelBase) >> 8)
	if pgm < kernelBase || pgm&0xFF != 0 || ki >= len(blobs) {
		return Launch{}, fmt.Errorf("program address %#x is not a kernel", pgm)
	}
	blob := blobs[ki]
	abi, _, err := kernels.SplitInstance(blob.Name)
	if err != nil {
		return Launch{}, err
	}
	ud := sh[pm4.COMPUTE_USER_DATA_0:]
	for i := 0; i < abi.UserDataDwords(); i++ {
		if !set[pm4.COMPUTE_USER_DATA_0+i] {
			return Launch{}, fmt.Errorf("kernel %s needs %d user-data dwords, only %d set", blob.Name, abi.UserDataDwords(), i)
		}
	}
	l := Launch{Kernel: ki, Name: blob.Name}
	for i, role := range abi.Bufs {
		addr := uint64(ud[2*i]) | uint64(ud[2*i+1])<<32
		if addr == 0 {
			if !abi.Optional[role] {
				return Launch{}, fmt.Errorf("kernel %s: null pointer for %s", blob.Name, role)
			}
		} else if mem.region(addr) < 0 {
			return Launch{}, fmt.Errorf("kernel %s: %s: address %#x is not inside any region", blob.Name, role, addr)
		}
		l.Params, l.Sizes = append(l.Params, addr), append(l.Sizes, 8)
	}
	push := ud[2*len(abi.Bufs) : abi.UserDataDwords()]
	var spec []uint32
	for _, s := range abi.Spec {
		v, err := blob.SlotValue(s.Name)
		if err != nil {
			return Launch{}, err
		}
		spec = append(spec, v)
	}
	for _, x := range append(append([]uint32(nil), push...), spec...) {
		l.Params, l.Sizes = append(l.Params, uint64(x)), append(l.Sizes, 4)
	}
	if l.Shape, err = kcuda.Shape(blob.Name, push, spec, rows); err != nil {
		return Launch{}, err
	}
	return l, nil
}
