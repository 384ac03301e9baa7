package t1

import (
	"bytes"
	"debug/elf"
	"fmt"

	"github.com/zrtdev/zrt/asm/pm4"
	"github.com/zrtdev/zrt/format/zrt"
	"github.com/zrtdev/zrt/kernels/amd"
	"github.com/zrtdev/zrt/runtime/amd/kfd"
	"github.com/zrtdev/zrt/runtime/replay"
)

// gfxKernel is a kernel blob whose code is an AMDGPU code object (HSA
// code object v5), loaded the way the CP needs it: its PT_LOAD segments
// at their virtual addresses from a page-aligned base, the program
// address the kernel descriptor's code entry, the dispatch registers from
// the descriptor, the arguments in a kernarg segment (kernels/amd: the
// dispatch's user-data dwords, then the blob's slot values) whose address
// goes in s[0:1] through COMPUTE_USER_DATA_0/1.
type gfxKernel struct {
	image      []byte // the loaded segments
	entry      uint64 // code entry, from the image base
	desc       amd.Descriptor
	workgroup  [3]uint32
	wave32     bool
	kernargMin uint32
}

// isGfx says whether a blob's code is for an AMD GPU.
func isGfx(b *zrt.Blob) bool {
	switch b.Header.Target {
	case zrt.GFX1201, zrt.GFX1200, zrt.GFX1151, zrt.GFX1100:
		return true
	}
	return false
}

func loadGfx(b *zrt.Blob) (*gfxKernel, error) {
	co, err := amd.ParseCodeObject(b.Code)
	if err != nil {
		return nil, fmt.Errorf("kernel %s: %w", b.Name, err)
	}
	if len(co.Kernels) != 1 {
		return nil, fmt.Errorf("kernel %s: code object holds %d kernels, T1 loads one per blob", b.Name, len(co.Kernels))
	}
	k := co.Kernels[0]
	if k.Descriptor.PrivateSegmentFixedSize != 0 {
		return nil, fmt.Errorf("kernel %s needs %d bytes of scratch, which T1 does not set up", b.Name, k.Descriptor.PrivateSegmentFixedSize)
	}
	f, err := elf.NewFile(bytes.NewReader(b.Code))
	if err != nil {
		return nil, fmt.Errorf("kernel %s: %w", b.Name, err)
	}
	for _, s := range f.Sections {
		if (s.Type == elf.SHT_RELA || s.Type == elf.SHT_REL) && s.Size > 0 {
			return nil, fmt.Errorf("kernel %s: code object has relocations (%s), which T1 does not apply", b.Name, s.Name)
		}
	}
	var end uint64
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			end = max(end, p.Vaddr+p.Memsz)
		}
	}
	if end == 0 || end > 64<<20 {
		return nil, fmt.Errorf("kernel %s: code object loads %d bytes", b.Name, end)
	}
	g := &gfxKernel{image: make([]byte, end), desc: k.Descriptor, workgroup: k.ReqdWorkgroupSize, wave32: k.Descriptor.Wave32(), kernargMin: k.KernargSegmentSize}
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Filesz == 0 {
			continue
		}
		if _, err := p.ReadAt(g.image[p.Vaddr:p.Vaddr+p.Filesz], 0); err != nil {
			return nil, fmt.Errorf("kernel %s: segment at %#x: %w", b.Name, p.Vaddr, err)
		}
	}
	syms, err := f.Symbols()
	if err != nil {
		return nil, fmt.Errorf("kernel %s: %w", b.Name, err)
	}
	found := false
	for _, s := range syms {
		if s.Name == k.Symbol {
			g.entry, found = uint64(int64(s.Value)+k.Descriptor.KernelCodeEntryOffset), true
		}
	}
	if !found || g.entry >= end || g.entry%kfd.CodeAlign != 0 {
		return nil, fmt.Errorf("kernel %s: code entry %#x is not a 256-byte aligned address inside the %d loaded bytes", b.Name, g.entry, end)
	}
	if g.workgroup[0] == 0 {
		return nil, fmt.Errorf("kernel %s: code object has no required workgroup size", b.Name)
	}
	return g, nil
}

// kernargWords is a dispatch's kernarg segment: the user data the stream
// set (buffer addresses, then push constants), then the slot values.
func kernargWords(d replay.Dispatch) []uint32 {
	var w []uint32
	for _, a := range d.Bufs {
		w = append(w, uint32(a), uint32(a>>32))
	}
	w = append(w, d.Push...)
	return append(w, d.Spec...)
}

// toHardware rewrites a patched stream of gfx kernels into what the CP
// runs: each dispatch gets its program address (bits 39:8 and 47:40), its
// PGM_RSRC1/2/3, workgroup size, no scratch and its kernarg address in
// user data 0/1, and wave32 in its initiator; the stream's own SET_SH_REG
// of the program and user data give way to those. Barriers and fences
// pass through. kernarg(i) returns the GPU address of dispatch i's
// kernarg segment.
func (t *Tier) toHardware(words []uint32, s *replay.Stream, kernarg func(i int) uint64) ([]uint32, error) {
	pkts, err := pm4.Decode(words)
	if err != nil {
		return nil, err
	}
	var b pm4.Builder
	di := 0
	for _, p := range pkts {
		switch p.Op {
		case pm4.SET_SH_REG:
			reg := p.Body[0]
			if reg != pm4.COMPUTE_PGM_LO && reg < pm4.COMPUTE_USER_DATA_0 {
				return nil, fmt.Errorf("dword %#x: SET_SH_REG of register %#x, which T1 does not translate", p.Offset, reg)
			}
		case pm4.DISPATCH_DIRECT:
			d := s.Dispatches[di]
			g := t.gfx[d.Kernel]
			if g == nil {
				return nil, fmt.Errorf("dword %#x: kernel %s is not a gfx code object", p.Offset, d.Name)
			}
			pgm := t.kernelVA[d.Kernel]
			ka := kernarg(di)
			b.SetShReg(pm4.COMPUTE_PGM_LO, pm4.C(uint32(pgm>>8)), pm4.C(uint32(pgm>>40)))
			b.SetShReg(kfd.RegPgmRsrc1, pm4.C(g.desc.PgmRsrc1), pm4.C(g.desc.PgmRsrc2))
			b.SetShReg(kfd.RegPgmRsrc3, pm4.C(g.desc.PgmRsrc3))
			b.SetShReg(kfd.RegNumThreadX, pm4.C(g.workgroup[0]), pm4.C(max(g.workgroup[1], 1)), pm4.C(max(g.workgroup[2], 1)))
			b.SetShReg(kfd.RegResourceLimits, pm4.C(0))
			b.SetShReg(kfd.RegTmpringSize, pm4.C(0))
			b.SetShReg(pm4.COMPUTE_USER_DATA_0, pm4.C(uint32(ka)), pm4.C(uint32(ka>>32)))
			init := p.Body[3]
			if g.wave32 {
				init |= kfd.InitiatorCSW32En
			}
			b.Words = append(b.Words, pm4.Header(pm4.DISPATCH_DIRECT, 4), p.Body[0], p.Body[1], p.Body[2], init)
			di++
		default:
			b.Words = append(b.Words, words[p.Offset:p.Offset+1+len(p.Body)]...)
		}
	}
	if di != len(s.Dispatches) {
		return nil, fmt.Errorf("stream has %d dispatches, the walk %d", di, len(s.Dispatches))
	}
	return b.Words, nil
}
