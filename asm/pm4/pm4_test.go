package pm4

import (
	"strings"
	"testing"
)

func TestBuildDecodePatch(t *testing.T) {
	var b Builder
	pgm := Addr(Symbol{Space: SpaceKernel, Index: 3})
	b.SetShReg(COMPUTE_PGM_LO, pgm[0], pgm[1])
	buf := Addr(Symbol{Space: SpaceRegion, Index: 1, Addend: 0x40})
	b.SetShReg(COMPUTE_USER_DATA_0, buf[0], buf[1], C(7))
	b.DispatchDirect(64, 1, 1)
	b.Barrier()
	b.ReleaseMem(Symbol{Space: SpaceRegion, Index: 2}, 1)
	// The header encoding is the one the hardware reads.
	if b.Words[0] != 0xC0027600 {
		t.Errorf("SET_SH_REG header %#08x, want 0xc0027600", b.Words[0])
	}
	if b.Words[9] != 0xC0031500 {
		t.Errorf("DISPATCH_DIRECT header %#08x, want 0xc0031500", b.Words[9])
	}
	pkts, err := Decode(b.Words)
	if err != nil {
		t.Fatal(err)
	}
	ops := []Opcode{SET_SH_REG, SET_SH_REG, DISPATCH_DIRECT, EVENT_WRITE, ACQUIRE_MEM, RELEASE_MEM}
	if len(pkts) != len(ops) {
		t.Fatalf("%d packets", len(pkts))
	}
	for i, p := range pkts {
		if p.Op != ops[i] {
			t.Errorf("packet %d is %s, want %s", i, p.Op, ops[i])
		}
	}
	words := append([]uint32(nil), b.Words...)
	err = Patch(words, b.Relocs, func(s Symbol) (uint64, error) { return uint64(s.Index)<<40 + s.Addend, nil })
	if err != nil {
		t.Fatal(err)
	}
	if words[6] != 0x40 || words[7] != 1<<8 {
		t.Errorf("patched pointer %#x %#x", words[6], words[7])
	}
}

func TestDecodeRejects(t *testing.T) {
	for name, words := range map[string][]uint32{
		"type 2 header":   {0x80000000},
		"unknown opcode":  {Header(0x22, 1), 0},
		"runs past end":   {Header(SET_SH_REG, 3), 0x240},
		"wrong body size": {Header(DISPATCH_DIRECT, 3), 1, 1, 1},
	} {
		if _, err := Decode(words); err == nil {
			t.Errorf("%s: accepted", name)
		} else if !strings.HasPrefix(err.Error(), "pm4: ") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := Patch([]uint32{0}, []Reloc{{Word: 5, Kind: RelocLo}}, nil); err == nil {
		t.Error("relocation outside the stream accepted")
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte{0, 0x76, 2, 0xC0, 0x40, 2, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		words := make([]uint32, len(b)/4)
		for i := range words {
			words[i] = uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24
		}
		Decode(words)
	})
}
