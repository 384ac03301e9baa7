// Package zrt reads and writes .zrt kernel blobs: the 64-byte header of
// seed 000 §11.2, the kernel code, its name, and a table of named
// specialization slots that zrtc patches with shape constants. The loader
// refuses a blob whose slots are not all patched.
package zrt

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Magic is "ZRT\0" as a little-endian uint32.
const Magic = 0x0054525A

// ABIVersion is the kernel ABI this build reads and writes: the buffers
// and parameters of each kernel, and for T-CUDA the launch shapes its code
// is written for. 2: T-CUDA's matrix-vector kernels run 16-warp blocks,
// its multi-row matrix kernels use tensor cores, and every kernel waits
// for its predecessor itself (griddepcontrol.wait). 3: T-CUDA's
// tensor-core tiles read rows staged by a _stage launch from a buffer
// passed as an extra parameter and split k over grid z, and its decode
// attention runs a block per group of query heads sharing a KV head. 4:
// the staging buffer starts with split-k's counters, and decode steps of
// up to 16 rows take a _tile16 entry. 5: decode attention blocks run 8 to
// 32 warps in dynamic shared memory, rope_kv_write takes a warp a head, and
// steps of 33 to 64 rows may take a _tile32 entry.
const ABIVersion = 5

// Target is a gpu_target code.
type Target uint16

// Target codes. The AMD, Intel, NVIDIA sm_90, Apple and CPU codes are the
// seed's; the other NVIDIA architectures are zrt's (0x21…, in the order
// they were added).
const (
	GFX1201    Target = 0x01
	GFX1200    Target = 0x02
	GFX1151    Target = 0x03
	GFX1100    Target = 0x04
	XE2HPG     Target = 0x10
	SM90       Target = 0x20
	SM80       Target = 0x21
	SM89       Target = 0x22
	SM100      Target = 0x23
	SM86       Target = 0x24 // after the others: codes, once written, stay
	AppleMetal Target = 0x30
	CPU        Target = 0xFF
)

var targetNames = map[Target]string{
	GFX1201: "amd:gfx1201", GFX1200: "amd:gfx1200", GFX1151: "amd:gfx1151", GFX1100: "amd:gfx1100",
	XE2HPG: "intel:xe2hpg", SM90: "cuda:sm_90", SM80: "cuda:sm_80", SM86: "cuda:sm_86", SM89: "cuda:sm_89", SM100: "cuda:sm_100",
	AppleMetal: "metal", CPU: "cpu",
}

func (t Target) String() string {
	if s, ok := targetNames[t]; ok {
		return s
	}
	return fmt.Sprintf("target(%#x)", uint16(t))
}

// ParseTarget parses a target spelling: cpu, cuda:sm_90, amd:gfx1201, metal.
func ParseTarget(s string) (Target, error) {
	for t, n := range targetNames {
		if n == s {
			return t, nil
		}
	}
	return 0, fmt.Errorf("unknown target %q (known: cpu, cuda:sm_90, cuda:sm_80, cuda:sm_86, cuda:sm_89, cuda:sm_100, amd:gfx1201, amd:gfx1200, amd:gfx1151, amd:gfx1100, intel:xe2hpg, metal)", s)
}

// Header is the fixed 64-byte header.
type Header struct {
	Magic          uint32
	ABIVersion     uint16
	Target         Target
	CodeSize       uint32
	EntryOffset    uint32
	BufferCount    uint32
	PushConstBytes uint32
	SubgroupSize   uint32
	Workgroup      [3]uint32
	LDSBytes       uint32
	VGPRCount      uint32
	SGPRCount      uint32
	OccupancyHint  uint32
	NameOffset     uint32
	NameSize       uint32
}

// HeaderSize is the encoded size of Header.
const HeaderSize = 64

// Slot is a named specialization constant: a dword of the code at
// CodeOffset that zrtc patches.
type Slot struct {
	Name       string
	CodeOffset uint32
	Patched    bool
}

// Blob is a decoded kernel blob.
type Blob struct {
	Header Header
	Name   string
	Code   []byte
	Slots  []Slot
}

// Placeholder is the value an unpatched slot holds in the code.
const Placeholder = 0xCAFEBABE

// ErrFormat is wrapped by errors about malformed blobs.
var ErrFormat = errors.New("zrt: malformed kernel blob")

// Layout after the header: the code, then the slot table (count u32, then
// per slot: name offset u32, name size u32, code offset u32, flags u32 with
// bit 0 = patched), then the kernel name, then the slot names. The table
// therefore spans [HeaderSize+CodeSize, NameOffset).

// Encode writes the blob.
func (b *Blob) Encode() []byte {
	le := binary.LittleEndian
	h := b.Header
	h.Magic, h.CodeSize = Magic, uint32(len(b.Code))
	tableAt := HeaderSize + h.CodeSize
	h.NameOffset, h.NameSize = tableAt+4+16*uint32(len(b.Slots)), uint32(len(b.Name))
	out := make([]byte, HeaderSize, int(h.NameOffset)+len(b.Name)+64)
	le.PutUint32(out[0:], h.Magic)
	le.PutUint16(out[4:], h.ABIVersion)
	le.PutUint16(out[6:], uint16(h.Target))
	for i, v := range []uint32{h.CodeSize, h.EntryOffset, h.BufferCount, h.PushConstBytes, h.SubgroupSize,
		h.Workgroup[0], h.Workgroup[1], h.Workgroup[2], h.LDSBytes, h.VGPRCount, h.SGPRCount, h.OccupancyHint,
		h.NameOffset, h.NameSize} {
		le.PutUint32(out[8+4*i:], v)
	}
	out = append(out, b.Code...)
	out = le.AppendUint32(out, uint32(len(b.Slots)))
	nameAt := h.NameOffset + h.NameSize
	for _, s := range b.Slots {
		flags := uint32(0)
		if s.Patched {
			flags = 1
		}
		out = le.AppendUint32(out, nameAt)
		out = le.AppendUint32(out, uint32(len(s.Name)))
		out = le.AppendUint32(out, s.CodeOffset)
		out = le.AppendUint32(out, flags)
		nameAt += uint32(len(s.Name))
	}
	out = append(out, b.Name...)
	for _, s := range b.Slots {
		out = append(out, s.Name...)
	}
	return out
}

// Decode parses and checks a blob: magic, ABI version, sizes, and that
// every slot lies inside the code and names inside the blob.
func Decode(data []byte) (*Blob, error) {
	le := binary.LittleEndian
	if len(data) < HeaderSize {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrFormat, len(data), HeaderSize)
	}
	var h Header
	h.Magic = le.Uint32(data[0:])
	if h.Magic != Magic {
		return nil, fmt.Errorf("%w: bad magic %#08x", ErrFormat, h.Magic)
	}
	h.ABIVersion, h.Target = le.Uint16(data[4:]), Target(le.Uint16(data[6:]))
	if h.ABIVersion != ABIVersion {
		return nil, fmt.Errorf("%w: kernel ABI version %d, this zrt reads version %d: rebuild the bundle with a matching zrtc", ErrFormat, h.ABIVersion, ABIVersion)
	}
	f := []*uint32{&h.CodeSize, &h.EntryOffset, &h.BufferCount, &h.PushConstBytes, &h.SubgroupSize,
		&h.Workgroup[0], &h.Workgroup[1], &h.Workgroup[2], &h.LDSBytes, &h.VGPRCount, &h.SGPRCount, &h.OccupancyHint,
		&h.NameOffset, &h.NameSize}
	for i, p := range f {
		*p = le.Uint32(data[8+4*i:])
	}
	n := uint64(len(data))
	tableAt := uint64(HeaderSize) + uint64(h.CodeSize)
	if tableAt+4 > n || uint64(h.EntryOffset) >= max(uint64(h.CodeSize), 1) {
		return nil, fmt.Errorf("%w: code of %d bytes (entry %d) does not fit the %d-byte blob", ErrFormat, h.CodeSize, h.EntryOffset, n)
	}
	cnt := uint64(le.Uint32(data[tableAt:]))
	if tableAt+4+16*cnt != uint64(h.NameOffset) || uint64(h.NameOffset)+uint64(h.NameSize) > n {
		return nil, fmt.Errorf("%w: slot table (%d slots) or name [%d,+%d) inconsistent with the %d-byte blob", ErrFormat, cnt, h.NameOffset, h.NameSize, n)
	}
	b := &Blob{Header: h, Code: data[HeaderSize:tableAt], Name: string(data[h.NameOffset : h.NameOffset+h.NameSize])}
	for i := uint64(0); i < cnt; i++ {
		e := data[tableAt+4+16*i:]
		no, ns, co, fl := uint64(le.Uint32(e)), uint64(le.Uint32(e[4:])), le.Uint32(e[8:]), le.Uint32(e[12:])
		if no < uint64(h.NameOffset) || no+ns > n {
			return nil, fmt.Errorf("%w: slot %d name outside the blob", ErrFormat, i)
		}
		if uint64(co)+4 > uint64(h.CodeSize) || co%4 != 0 {
			return nil, fmt.Errorf("%w: slot %d at code offset %d outside the %d-byte code", ErrFormat, i, co, h.CodeSize)
		}
		if fl > 1 {
			return nil, fmt.Errorf("%w: slot %d has flags %#x", ErrFormat, i, fl)
		}
		b.Slots = append(b.Slots, Slot{Name: string(data[no : no+ns]), CodeOffset: co, Patched: fl == 1})
	}
	return b, nil
}

// Patch sets the named slot to v and marks it patched.
func (b *Blob) Patch(name string, v uint32) error {
	for i := range b.Slots {
		s := &b.Slots[i]
		if s.Name == name {
			binary.LittleEndian.PutUint32(b.Code[s.CodeOffset:], v)
			s.Patched = true
			return nil
		}
	}
	return fmt.Errorf("zrt: kernel %s has no slot %q", b.Name, name)
}

// SlotValue returns the patched value of the named slot.
func (b *Blob) SlotValue(name string) (uint32, error) {
	for _, s := range b.Slots {
		if s.Name == name {
			if !s.Patched {
				return 0, fmt.Errorf("zrt: kernel %s: slot %q is not patched", b.Name, name)
			}
			return binary.LittleEndian.Uint32(b.Code[s.CodeOffset:]), nil
		}
	}
	return 0, fmt.Errorf("zrt: kernel %s has no slot %q", b.Name, name)
}

// CheckPatched fails when any slot is unpatched.
func (b *Blob) CheckPatched() error {
	for _, s := range b.Slots {
		if !s.Patched {
			return fmt.Errorf("zrt: kernel %s: specialization slot %q was never patched; rebuild the bundle with zrtc", b.Name, s.Name)
		}
	}
	return nil
}
