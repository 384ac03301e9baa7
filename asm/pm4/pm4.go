// Package pm4 builds and decodes AMD PM4 type-3 packet streams, the one
// command format every zrt tier consumes: AMD tiers submit it, T-CPU walks
// it, other tiers translate it. Addresses are never baked in: every address
// dword is carried by a relocation that the loader patches.
package pm4

import (
	"fmt"
)

// Opcode is a PM4 type-3 opcode.
type Opcode uint8

// The packets zrt emits (seed 000, Appendix A).
const (
	NOP             Opcode = 0x10
	DISPATCH_DIRECT Opcode = 0x15
	WRITE_DATA      Opcode = 0x37
	WAIT_REG_MEM    Opcode = 0x3C
	INDIRECT_BUFFER Opcode = 0x3F
	EVENT_WRITE     Opcode = 0x46
	RELEASE_MEM     Opcode = 0x49
	ACQUIRE_MEM     Opcode = 0x58
	SET_SH_REG      Opcode = 0x76
)

// opInfo gives each opcode its name and the body length it must have
// (-1: variable, at least minBody).
var opInfo = map[Opcode]struct {
	name    string
	body    int
	minBody int
}{
	NOP:             {"NOP", -1, 0},
	DISPATCH_DIRECT: {"DISPATCH_DIRECT", 4, 4},
	WRITE_DATA:      {"WRITE_DATA", -1, 4},
	WAIT_REG_MEM:    {"WAIT_REG_MEM", 6, 6},
	INDIRECT_BUFFER: {"INDIRECT_BUFFER", 3, 3},
	EVENT_WRITE:     {"EVENT_WRITE", -1, 1},
	RELEASE_MEM:     {"RELEASE_MEM", 7, 7},
	ACQUIRE_MEM:     {"ACQUIRE_MEM", 7, 7},
	SET_SH_REG:      {"SET_SH_REG", -1, 2},
}

func (o Opcode) String() string {
	if i, ok := opInfo[o]; ok {
		return i.name
	}
	return fmt.Sprintf("OP_%#02x", uint8(o))
}

// SH register offsets (from the SH register base 0x2C00) used for compute.
const (
	COMPUTE_PGM_LO      = 0x20C
	COMPUTE_PGM_HI      = 0x20D
	COMPUTE_USER_DATA_0 = 0x240
	NumUserData         = 16
)

// DISPATCH_INITIATOR bits.
const (
	InitComputeShaderEn = 1 << 0
	InitForceStartAt000 = 1 << 2
)

// Event types and cache-control values used by barriers and fences.
const (
	EventCSPartialFlush   = 0x07
	EventCacheFlushInvTS  = 0x14
	eventIndexShift       = 8
	releaseDataSel32      = 1 << 29
	acquireGCRInvalidateL = 0x0000C3E0 // GL2/GL1/GLV/GLK/GLM invalidate + writeback
)

// Header returns the type-3 header for a packet with n body dwords.
func Header(op Opcode, n int) uint32 {
	return 3<<30 | uint32(n-1)&0x3FFF<<16 | uint32(op)<<8
}

// RelocKind says which half of a 64-bit address a relocated dword holds.
type RelocKind uint8

// Relocation kinds.
const (
	RelocLo RelocKind = iota + 1
	RelocHi
)

func (k RelocKind) String() string {
	if k == RelocLo {
		return "lo"
	}
	if k == RelocHi {
		return "hi"
	}
	return "?"
}

// Space says what a relocation's symbol indexes.
type Space uint8

// Symbol spaces.
const (
	SpaceRegion Space = iota + 1 // a memory-plan region
	SpaceKernel                  // a kernel blob
)

// Symbol is an address the loader knows: a region or kernel plus a byte offset.
type Symbol struct {
	Space  Space
	Index  uint32
	Addend uint64
}

// Reloc marks dword Word of a stream as holding half of Sym's address.
type Reloc struct {
	Word uint32
	Kind RelocKind
	Sym  Symbol
}

// Builder appends packets to a stream. Relocated dwords are written as 0.
type Builder struct {
	Words  []uint32
	Relocs []Reloc
}

func (b *Builder) packet(op Opcode, body ...uint32) int {
	at := len(b.Words)
	b.Words = append(b.Words, Header(op, len(body)))
	b.Words = append(b.Words, body...)
	return at + 1
}

// Value is one dword for SetShReg: a constant or half of a relocated address.
type Value struct {
	Const uint32
	Reloc RelocKind
	Sym   Symbol
}

// C is a constant Value.
func C(x uint32) Value { return Value{Const: x} }

// Addr returns the two Values (lo, hi) of a relocated address.
func Addr(s Symbol) [2]Value {
	return [2]Value{{Reloc: RelocLo, Sym: s}, {Reloc: RelocHi, Sym: s}}
}

// SetShReg writes consecutive SH registers starting at reg.
func (b *Builder) SetShReg(reg uint32, vals ...Value) {
	body := make([]uint32, 1+len(vals))
	body[0] = reg
	for i, v := range vals {
		body[1+i] = v.Const
	}
	at := b.packet(SET_SH_REG, body...)
	for i, v := range vals {
		if v.Reloc != 0 {
			b.Relocs = append(b.Relocs, Reloc{Word: uint32(at + 1 + i), Kind: v.Reloc, Sym: v.Sym})
		}
	}
}

// DispatchDirect launches the program set by COMPUTE_PGM_LO/HI on an x×y×z grid.
func (b *Builder) DispatchDirect(x, y, z uint32) {
	b.packet(DISPATCH_DIRECT, x, y, z, InitComputeShaderEn|InitForceStartAt000)
}

// Barrier makes all earlier dispatches' writes visible to later ones: a CS
// partial flush followed by a cache invalidate.
func (b *Builder) Barrier() {
	b.packet(EVENT_WRITE, EventCSPartialFlush|4<<eventIndexShift)
	b.packet(ACQUIRE_MEM, 0, 0xFFFFFFFF, 0x00FFFFFF, 0, 0, 0x0A, acquireGCRInvalidateL)
}

// ReleaseMem writes value to the fence at s once all prior work retires.
func (b *Builder) ReleaseMem(s Symbol, value uint32) {
	at := b.packet(RELEASE_MEM, EventCacheFlushInvTS|5<<eventIndexShift, releaseDataSel32, 0, 0, value, 0, 0)
	b.Relocs = append(b.Relocs, Reloc{Word: uint32(at + 2), Kind: RelocLo, Sym: s}, Reloc{Word: uint32(at + 3), Kind: RelocHi, Sym: s})
}

// Packet is one decoded packet.
type Packet struct {
	Offset int // dword offset of the header
	Op     Opcode
	Body   []uint32
}

// Decode splits a stream into packets, checking every header: type 3 only,
// known opcodes, body lengths within the stream and as the opcode requires.
func Decode(words []uint32) ([]Packet, error) {
	var out []Packet
	for i := 0; i < len(words); {
		h := words[i]
		if h>>30 != 3 {
			return nil, fmt.Errorf("pm4: dword %#x: header %#08x is not a type-3 packet", i, h)
		}
		op := Opcode(h >> 8 & 0xFF)
		n := int(h>>16&0x3FFF) + 1
		info, ok := opInfo[op]
		if !ok {
			return nil, fmt.Errorf("pm4: dword %#x: unknown opcode %#02x", i, uint8(op))
		}
		if n > len(words)-i-1 {
			return nil, fmt.Errorf("pm4: dword %#x: %s body of %d dwords runs past the end of the stream", i, info.name, n)
		}
		if (info.body >= 0 && n != info.body) || n < info.minBody {
			return nil, fmt.Errorf("pm4: dword %#x: %s has %d body dwords", i, info.name, n)
		}
		out = append(out, Packet{Offset: i, Op: op, Body: words[i+1 : i+1+n]})
		i += 1 + n
	}
	return out, nil
}

// Patch resolves relocations in place: addr returns the address of a symbol.
func Patch(words []uint32, relocs []Reloc, addr func(Symbol) (uint64, error)) error {
	for _, r := range relocs {
		if int(r.Word) >= len(words) {
			return fmt.Errorf("pm4: relocation at dword %#x is outside the %d-dword stream", r.Word, len(words))
		}
		a, err := addr(r.Sym)
		if err != nil {
			return fmt.Errorf("pm4: relocation at dword %#x: %w", r.Word, err)
		}
		switch r.Kind {
		case RelocLo:
			words[r.Word] = uint32(a)
		case RelocHi:
			words[r.Word] = uint32(a >> 32)
		default:
			return fmt.Errorf("pm4: relocation at dword %#x has kind %d", r.Word, r.Kind)
		}
	}
	return nil
}
