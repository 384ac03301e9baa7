package amd

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
)

// The AMDGPU ELF constants this reader checks (LLVM's AMDGPUUsage).
const (
	elfMachineAMDGPU = 224  // EM_AMDGPU
	elfOSABIHSA      = 64   // ELFOSABI_AMDGPU_HSA
	elfABIVersionV5  = 3    // ELFABIVERSION_AMDGPU_HSA_V5: code object v5
	noteAMDGPUMeta   = 32   // NT_AMDGPU_METADATA
	kdSize           = 64   // the kernel descriptor's bytes
	machMask         = 0xff // EF_AMDGPU_MACH
)

// machs are the EF_AMDGPU_MACH values of the processors built for.
var machs = map[string]uint32{"gfx1100": 0x41, "gfx1201": 0x4e}

// Descriptor is the part of an amdhsa kernel descriptor (the 64-byte
// <kernel>.kd object) that the blob header and the tests use.
type Descriptor struct {
	GroupSegmentFixedSize   uint32 // LDS bytes, offset 0
	PrivateSegmentFixedSize uint32 // offset 4
	KernargSize             uint32 // offset 8
	KernelCodeEntryOffset   int64  // offset 16, from the descriptor's address
	PgmRsrc3                uint32 // offset 44
	PgmRsrc1                uint32 // offset 48
	PgmRsrc2                uint32 // offset 52
	CodeProperties          uint16 // offset 56
}

// Wave32 reports ENABLE_WAVEFRONT_SIZE32 (kernel_code_properties bit 10).
func (d Descriptor) Wave32() bool { return d.CodeProperties&(1<<10) != 0 }

// GranulatedVGPRs is COMPUTE_PGM_RSRC1.GRANULATED_WORKITEM_VGPR_COUNT:
// the VGPR count in blocks of VGPRGranule, minus one.
func (d Descriptor) GranulatedVGPRs() uint32 { return d.PgmRsrc1 & 0x3f }

// VGPRGranule is the VGPR encoding granule of GFX10+ in a wave32 kernel.
const VGPRGranule = 8

// UserSGPRs is COMPUTE_PGM_RSRC2.USER_SGPR_COUNT.
func (d Descriptor) UserSGPRs() uint32 { return d.PgmRsrc2 >> 1 & 0x1f }

// Arg is one kernel argument of the metadata.
type Arg struct {
	Offset, Size uint32
	ValueKind    string // global_buffer, by_value, hidden_…
}

// Kernel is one kernel of a code object: its descriptor and metadata.
type Kernel struct {
	Name, Symbol string // the kernel and its descriptor symbol (name.kd)
	// From the metadata note (amdhsa.kernels).
	VGPRCount, SGPRCount  uint32
	GroupSegmentFixedSize uint32
	KernargSegmentSize    uint32
	WavefrontSize         uint32
	MaxFlatWorkgroupSize  uint32
	ReqdWorkgroupSize     [3]uint32
	Args                  []Arg
	// Descriptor is the .kd object's contents; DescriptorOffset its file
	// offset in the code object.
	Descriptor       Descriptor
	DescriptorOffset uint64
}

// CodeObject is a parsed AMDGPU code object.
type CodeObject struct {
	Target  string // amdhsa.target: amdgcn-amd-amdhsa--gfx1201
	Mach    uint32 // EF_AMDGPU_MACH
	Kernels []Kernel
}

// ParseCodeObject reads an HSA code object v5 (trailing bytes, such as a
// blob's specialization slots, are ignored): the ELF header, the
// NT_AMDGPU_METADATA note and every kernel's descriptor. It checks that
// the metadata and the descriptors agree where both say the same thing.
func ParseCodeObject(code []byte) (*CodeObject, error) {
	f, err := elf.NewFile(bytes.NewReader(code))
	if err != nil {
		return nil, fmt.Errorf("amd: code object: %w", err)
	}
	if f.Machine != elfMachineAMDGPU || f.Class != elf.ELFCLASS64 || f.OSABI != elfOSABIHSA || f.ABIVersion != elfABIVersionV5 {
		return nil, fmt.Errorf("amd: not an HSA code object v5 (machine %d, OS ABI %d, ABI version %d)", f.Machine, f.OSABI, f.ABIVersion)
	}
	flags, err := elfFlags(code)
	if err != nil {
		return nil, err
	}
	co := &CodeObject{Mach: flags & machMask}
	meta, err := metadata(f)
	if err != nil {
		return nil, err
	}
	m, ok := meta.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("amd: metadata is not a map")
	}
	co.Target, _ = m["amdhsa.target"].(string)
	ks, _ := m["amdhsa.kernels"].([]any)
	if len(ks) == 0 {
		return nil, fmt.Errorf("amd: metadata lists no kernels")
	}
	syms, err := f.Symbols()
	if err != nil {
		return nil, fmt.Errorf("amd: code object symbols: %w", err)
	}
	for _, kv := range ks {
		km, ok := kv.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("amd: metadata kernel is not a map")
		}
		k, err := kernelMeta(km)
		if err != nil {
			return nil, err
		}
		if err := k.readDescriptor(f, syms); err != nil {
			return nil, err
		}
		co.Kernels = append(co.Kernels, k)
	}
	return co, nil
}

// Kernel returns the kernel named name.
func (c *CodeObject) Kernel(name string) (*Kernel, bool) {
	for i := range c.Kernels {
		if c.Kernels[i].Name == name {
			return &c.Kernels[i], true
		}
	}
	return nil, false
}

// Processor returns the gfx name of the code object's EF_AMDGPU_MACH, or
// "" for one this package does not know.
func (c *CodeObject) Processor() string {
	for n, m := range machs {
		if m == c.Mach {
			return n
		}
	}
	return ""
}

func elfFlags(code []byte) (uint32, error) {
	if len(code) < 64 {
		return 0, fmt.Errorf("amd: code object shorter than an ELF header")
	}
	return binary.LittleEndian.Uint32(code[48:]), nil
}

func metadata(f *elf.File) (any, error) {
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOTE {
			continue
		}
		b, err := s.Data()
		if err != nil {
			return nil, fmt.Errorf("amd: note section %s: %w", s.Name, err)
		}
		for len(b) >= 12 {
			nameSz, descSz, typ := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:]), binary.LittleEndian.Uint32(b[8:])
			nameEnd := 12 + align4(uint64(nameSz))
			end := nameEnd + align4(uint64(descSz))
			if end > uint64(len(b)) {
				return nil, fmt.Errorf("amd: truncated note in %s", s.Name)
			}
			name := string(bytes.TrimRight(b[12:12+nameSz], "\x00"))
			if name == "AMDGPU" && typ == noteAMDGPUMeta {
				v, err := decodeMsgpack(b[nameEnd : nameEnd+uint64(descSz)])
				if err != nil {
					return nil, fmt.Errorf("amd: metadata note: %w", err)
				}
				return v, nil
			}
			b = b[end:]
		}
	}
	return nil, fmt.Errorf("amd: code object has no NT_AMDGPU_METADATA note")
}

func align4(n uint64) uint64 { return (n + 3) &^ 3 }

func u32Of(m map[string]any, key string) (uint32, error) {
	switch v := m[key].(type) {
	case int64:
		if v >= 0 && v <= 0xffffffff {
			return uint32(v), nil
		}
	case uint64:
		if v <= 0xffffffff {
			return uint32(v), nil
		}
	case nil:
		return 0, fmt.Errorf("amd: metadata lacks %s", key)
	}
	return 0, fmt.Errorf("amd: metadata %s = %v is not a 32-bit count", key, m[key])
}

func kernelMeta(km map[string]any) (Kernel, error) {
	var k Kernel
	k.Name, _ = km[".name"].(string)
	k.Symbol, _ = km[".symbol"].(string)
	if k.Name == "" || k.Symbol != k.Name+".kd" {
		return k, fmt.Errorf("amd: kernel %q has descriptor symbol %q", k.Name, k.Symbol)
	}
	for _, f := range []struct {
		key string
		dst *uint32
	}{
		{".vgpr_count", &k.VGPRCount}, {".sgpr_count", &k.SGPRCount},
		{".group_segment_fixed_size", &k.GroupSegmentFixedSize}, {".kernarg_segment_size", &k.KernargSegmentSize},
		{".wavefront_size", &k.WavefrontSize}, {".max_flat_workgroup_size", &k.MaxFlatWorkgroupSize},
	} {
		v, err := u32Of(km, f.key)
		if err != nil {
			return k, fmt.Errorf("kernel %s: %w", k.Name, err)
		}
		*f.dst = v
	}
	if wg, ok := km[".reqd_workgroup_size"].([]any); ok && len(wg) == 3 {
		for i := range wg {
			v, err := u32Of(map[string]any{"x": wg[i]}, "x")
			if err != nil {
				return k, fmt.Errorf("kernel %s: .reqd_workgroup_size: %w", k.Name, err)
			}
			k.ReqdWorkgroupSize[i] = v
		}
	}
	args, _ := km[".args"].([]any)
	for i, av := range args {
		am, ok := av.(map[string]any)
		if !ok {
			return k, fmt.Errorf("kernel %s: argument %d is not a map", k.Name, i)
		}
		var a Arg
		var err error
		if a.Offset, err = u32Of(am, ".offset"); err != nil {
			return k, fmt.Errorf("kernel %s argument %d: %w", k.Name, i, err)
		}
		if a.Size, err = u32Of(am, ".size"); err != nil {
			return k, fmt.Errorf("kernel %s argument %d: %w", k.Name, i, err)
		}
		a.ValueKind, _ = am[".value_kind"].(string)
		k.Args = append(k.Args, a)
	}
	return k, nil
}

// readDescriptor finds the kernel's .kd symbol and decodes it, checking it
// against the metadata.
func (k *Kernel) readDescriptor(f *elf.File, syms []elf.Symbol) error {
	for _, s := range syms {
		if s.Name != k.Symbol {
			continue
		}
		if s.Size != kdSize || int(s.Section) >= len(f.Sections) {
			return fmt.Errorf("amd: %s: descriptor of %d bytes in section %d", k.Symbol, s.Size, s.Section)
		}
		sec := f.Sections[s.Section]
		if s.Value < sec.Addr || s.Value+kdSize > sec.Addr+sec.Size {
			return fmt.Errorf("amd: %s lies outside its section %s", k.Symbol, sec.Name)
		}
		b := make([]byte, kdSize)
		if _, err := sec.ReadAt(b, int64(s.Value-sec.Addr)); err != nil {
			return fmt.Errorf("amd: %s: %w", k.Symbol, err)
		}
		le := binary.LittleEndian
		k.Descriptor = Descriptor{
			GroupSegmentFixedSize: le.Uint32(b[0:]), PrivateSegmentFixedSize: le.Uint32(b[4:]), KernargSize: le.Uint32(b[8:]),
			KernelCodeEntryOffset: int64(le.Uint64(b[16:])), PgmRsrc3: le.Uint32(b[44:]), PgmRsrc1: le.Uint32(b[48:]),
			PgmRsrc2: le.Uint32(b[52:]), CodeProperties: le.Uint16(b[56:]),
		}
		k.DescriptorOffset = sec.Offset + (s.Value - sec.Addr)
		return k.check()
	}
	return fmt.Errorf("amd: code object lacks the descriptor symbol %s", k.Symbol)
}

// check holds the descriptor to the metadata where both say the same.
func (k *Kernel) check() error {
	d := k.Descriptor
	switch {
	case d.GroupSegmentFixedSize != k.GroupSegmentFixedSize:
		return fmt.Errorf("amd: %s: descriptor LDS %d, metadata %d", k.Name, d.GroupSegmentFixedSize, k.GroupSegmentFixedSize)
	case d.KernargSize != k.KernargSegmentSize:
		return fmt.Errorf("amd: %s: descriptor kernarg size %d, metadata %d", k.Name, d.KernargSize, k.KernargSegmentSize)
	case d.Wave32() != (k.WavefrontSize == 32):
		return fmt.Errorf("amd: %s: descriptor wave32=%v, metadata wavefront size %d", k.Name, d.Wave32(), k.WavefrontSize)
	case k.WavefrontSize == 32 && (d.GranulatedVGPRs()+1)*VGPRGranule < k.VGPRCount:
		return fmt.Errorf("amd: %s: descriptor grants %d VGPRs, metadata uses %d", k.Name, (d.GranulatedVGPRs()+1)*VGPRGranule, k.VGPRCount)
	}
	return nil
}
