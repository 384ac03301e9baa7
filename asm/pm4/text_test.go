package pm4

import (
	"slices"
	"strings"
	"testing"
)

var testSyms = &SymbolTable{
	Regions: []string{"scratch", "kv", "fence", "weights.attn_q"},
	Kernels: []string{"embed.f32", "matmul.q4_k"},
}

// sampleStream is one dispatch as lower emits it, with a barrier and the
// closing fence.
func sampleStream() Builder {
	var b Builder
	pgm := Addr(Symbol{Space: SpaceKernel, Index: 1})
	b.SetShReg(COMPUTE_PGM_LO, pgm[0], pgm[1])
	x := Addr(Symbol{Space: SpaceRegion, Index: 0, Addend: 0x240})
	w := Addr(Symbol{Space: SpaceRegion, Index: 3})
	b.SetShReg(COMPUTE_USER_DATA_0, x[0], x[1], w[0], w[1], C(0), C(0), C(7), C(0x12345))
	b.DispatchDirect(64, 1, 1)
	b.Barrier()
	b.ReleaseMem(Symbol{Space: SpaceRegion, Index: 2}, 1)
	return b
}

// sampleListing is sampleStream written out by hand, raw dwords included
// (headers from (3<<30)|(count-1)<<16|op<<8), not by the disassembler: the
// two directions are each held to it.
const sampleListing = `
0000  SET_SH_REG       COMPUTE_PGM_LO=@k1:matmul.q4_k.lo COMPUTE_PGM_HI=@k1:matmul.q4_k.hi  // c0027600 0000020c 00000000 00000000
0004  SET_SH_REG       COMPUTE_USER_DATA_0=@scratch+0x240.lo COMPUTE_USER_DATA_1=@scratch+0x240.hi COMPUTE_USER_DATA_2=@weights.attn_q.lo COMPUTE_USER_DATA_3=@weights.attn_q.hi COMPUTE_USER_DATA_4=0 COMPUTE_USER_DATA_5=0 COMPUTE_USER_DATA_6=7 COMPUTE_USER_DATA_7=0x12345  // c0087600 00000240 00000000 00000000 00000000 00000000 00000000 00000000 00000007 00012345
000e  DISPATCH_DIRECT  grid=64,1,1 init=compute_shader_en|force_start_at_000  // c0031500 00000040 00000001 00000001 00000005
0013  EVENT_WRITE      event=cs_partial_flush/4  // c0004600 00000407
0015  ACQUIRE_MEM      cntl=0x0 size=0xffffffff size_hi=0xffffff base=0x0 base_hi=0x0 poll=10 gcr=0xc3e0  // c0065800 00000000 ffffffff 00ffffff 00000000 00000000 0000000a 0000c3e0
001d  RELEASE_MEM      event=cache_flush_inv_ts/5 ctl=0x20000000 addr_lo=@fence.lo addr_hi=@fence.hi data=1 data_hi=0 ctx=0  // c0064900 00000514 20000000 00000000 00000000 00000001 00000000 00000000
; relocs:
0002  lo  @k1:matmul.q4_k
0003  hi  @k1:matmul.q4_k
0006  lo  @scratch+0x240
0007  hi  @scratch+0x240
0008  lo  @weights.attn_q
0009  hi  @weights.attn_q
0020  lo  @fence
0021  hi  @fence
`

// squash collapses runs of blanks, so the hand-written listing need not
// reproduce the disassembler's column padding.
func squash(s string) string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		out = append(out, strings.Join(strings.Fields(l), " "))
	}
	return strings.Join(out, "\n")
}

func TestDisassembleByHand(t *testing.T) {
	b := sampleStream()
	got, err := Disassemble(b.Words, b.Relocs, testSyms)
	if err != nil {
		t.Fatal(err)
	}
	if squash(got) != squash(sampleListing) {
		t.Errorf("bytes → text:\n%s\nwant:\n%s", got, sampleListing)
	}
	// Short packet text is padded so the raw dwords line up.
	if i := strings.Index(got, "// c0031500"); i < 0 || i-strings.LastIndex(got[:i], "\n")-1 != rawColumn {
		t.Errorf("DISPATCH_DIRECT raw dwords not at column %d:\n%s", rawColumn, got)
	}
}

func TestAssembleByHand(t *testing.T) {
	b := sampleStream()
	words, relocs, err := Assemble(sampleListing, testSyms)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(words, b.Words) {
		t.Errorf("text → bytes:\n got %08x\nwant %08x", words, b.Words)
	}
	if !slices.Equal(relocs, b.Relocs) {
		t.Errorf("relocations:\n got %v\nwant %v", relocs, b.Relocs)
	}
	raw, err := RawWords(sampleListing)
	if err != nil || !slices.Equal(raw, b.Words) {
		t.Errorf("raw dwords %08x (%v), want %08x", raw, err, b.Words)
	}
	// The assembler reads fields, not the raw column: a listing whose raw
	// dwords lie still assembles to what its fields say.
	lying := strings.Replace(sampleListing, "00000040 00000001 00000001 00000005", "00000041 00000001 00000001 00000005", 1)
	if w, _, err := Assemble(lying, testSyms); err != nil || !slices.Equal(w, b.Words) {
		t.Errorf("assembler read the raw column: %v", err)
	}
	// Offsets and the relocation table are optional when writing by hand.
	var bare []string
	for _, l := range strings.Split(sampleListing, "\n") {
		if l == "; relocs:" {
			break
		}
		if f := strings.Fields(l); len(f) > 1 {
			bare = append(bare, strings.Join(f[1:], " "))
		}
	}
	if w, r, err := Assemble(strings.Join(bare, "\n"), testSyms); err != nil || !slices.Equal(w, b.Words) || !slices.Equal(r, b.Relocs) {
		t.Errorf("listing without offsets or relocation table: %v", err)
	}
}

// TestRoundTripOddStreams covers what lower does not emit today: other
// packets, variable bodies, unknown registers, relocations where the named
// form cannot show them, unnamed symbols, relocations out of stream order.
func TestRoundTripOddStreams(t *testing.T) {
	reg := func(i uint32, a uint64) Symbol { return Symbol{Space: SpaceRegion, Index: i, Addend: a} }
	cases := map[string]struct {
		words  []uint32
		relocs []Reloc
		want   string // a fragment of the listing
	}{
		"nop": {[]uint32{Header(NOP, 2), 0xdeadbeef, 3}, nil, "NOP              d0=0xdeadbeef d1=3"},
		"write data": {[]uint32{Header(WRITE_DATA, 5), 0x500, 0, 0, 1, 2}, []Reloc{{2, RelocLo, reg(1, 8)}, {3, RelocHi, reg(1, 8)}},
			"ctl=0x500 addr_lo=@kv+0x8.lo addr_hi=@kv+0x8.hi d3=1 d4=2"},
		"wait reg mem": {[]uint32{Header(WAIT_REG_MEM, 6), 0x13, 0, 0, 1, 0xffffffff, 4}, []Reloc{{2, RelocLo, reg(2, 0)}, {3, RelocHi, reg(2, 0)}},
			"func=0x13 addr_lo=@fence.lo addr_hi=@fence.hi ref=1 mask=0xffffffff poll=4"},
		"indirect buffer":     {[]uint32{Header(INDIRECT_BUFFER, 3), 0, 0, 0x800010}, []Reloc{{1, RelocLo, reg(0, 0)}, {2, RelocHi, reg(0, 0)}}, "addr_lo=@scratch.lo addr_hi=@scratch.hi ctl=0x800010"},
		"event with extras":   {[]uint32{Header(EVENT_WRITE, 3), 0x3f | 0xf<<8 | 1<<31, 5, 6}, nil, "event=0x3f/15|0x80000000 d1=5 d2=6"},
		"unknown register":    {[]uint32{Header(SET_SH_REG, 3), 0x20E, 1, 2}, nil, "SH_0x20e=1 SH_0x20f=2"},
		"registers wrap":      {[]uint32{Header(SET_SH_REG, 3), 0xffffffff, 1, 2}, nil, "SH_0xffffffff=1 SH_0x0=2"},
		"init flags":          {[]uint32{Header(DISPATCH_DIRECT, 4), 1, 2, 3, 0x41}, nil, "grid=1,2,3 init=compute_shader_en|0x40"},
		"init zero":           {[]uint32{Header(DISPATCH_DIRECT, 4), 0, 0, 0, 0}, nil, "grid=0,0,0 init=0x0"},
		"reloc on grid":       {[]uint32{Header(DISPATCH_DIRECT, 4), 0, 0, 1, 1}, []Reloc{{1, RelocLo, reg(0, 0)}, {2, RelocHi, reg(0, 0)}}, "DISPATCH_DIRECT  d0=@scratch.lo d1=@scratch.hi d2=1 d3=1"},
		"reloc on reg offset": {[]uint32{Header(SET_SH_REG, 2), 0, 5}, []Reloc{{1, RelocLo, reg(0, 0)}}, "SET_SH_REG       d0=@scratch.lo d1=5"},
		"reloc on event":      {[]uint32{Header(EVENT_WRITE, 1), 0}, []Reloc{{1, RelocHi, reg(0, 0)}}, "EVENT_WRITE      d0=@scratch.hi"},
		"unnamed symbols": {[]uint32{Header(SET_SH_REG, 5), COMPUTE_PGM_LO, 0, 0, 0, 0},
			[]Reloc{{2, RelocLo, Symbol{Space: SpaceKernel, Index: 9}}, {3, RelocHi, reg(77, 1<<40)}, {5, RelocLo, Symbol{Space: SpaceKernel, Index: 0, Addend: 4}}},
			"COMPUTE_PGM_LO=@k9.lo COMPUTE_PGM_HI=@r77+0x10000000000.hi SH_0x20e=0 SH_0x20f=@k0:embed.f32+0x4.lo"},
		"relocs out of order": {[]uint32{Header(SET_SH_REG, 3), COMPUTE_USER_DATA_0, 0, 0}, []Reloc{{3, RelocHi, reg(1, 0)}, {2, RelocLo, reg(1, 0)}},
			"; relocs:\n0003  hi  @kv\n0002  lo  @kv\n"},
		"empty stream":    {nil, nil, "; relocs:\n"},
		"header low bits": {[]uint32{Header(NOP, 1) | 2, 0}, nil, "NOP              hdr=0x2 d0=0"},
	}
	for name, c := range cases {
		text, err := Disassemble(c.words, c.relocs, testSyms)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !strings.Contains(text, c.want) {
			t.Errorf("%s: listing lacks %q:\n%s", name, c.want, text)
		}
		words, relocs, err := Assemble(text, testSyms)
		if err != nil {
			t.Errorf("%s: %v\n%s", name, err, text)
			continue
		}
		if !slices.Equal(words, c.words) || !slices.Equal(relocs, c.relocs) {
			t.Errorf("%s: round trip gave %08x %v, want %08x %v", name, words, relocs, c.words, c.relocs)
		}
	}
}

func TestSymbolNames(t *testing.T) {
	syms := &SymbolTable{Regions: []string{"kv", "dup", "dup", "r3", "x.lo", "has space", ""}, Kernels: []string{"a.b", ""}}
	for _, c := range []struct {
		sym  Symbol
		name string
	}{
		{Symbol{Space: SpaceRegion, Index: 0}, "kv"},
		{Symbol{Space: SpaceRegion, Index: 1}, "r1"}, // ambiguous names fall back to the index
		{Symbol{Space: SpaceRegion, Index: 2}, "r2"},
		{Symbol{Space: SpaceRegion, Index: 3}, "r3"},
		{Symbol{Space: SpaceRegion, Index: 4}, "r4"},
		{Symbol{Space: SpaceRegion, Index: 5}, "r5"},
		{Symbol{Space: SpaceRegion, Index: 6}, "r6"},
		{Symbol{Space: SpaceRegion, Index: 7}, "r7"},
		{Symbol{Space: SpaceKernel, Index: 0}, "k0:a.b"},
		{Symbol{Space: SpaceKernel, Index: 1}, "k1"},
	} {
		if n := syms.Name(c.sym); n != c.name {
			t.Errorf("%v named %q, want %q", c.sym, n, c.name)
		}
		if s, err := syms.Lookup(c.name); err != nil || s != c.sym {
			t.Errorf("%q looked up as %v, %v", c.name, s, err)
		}
	}
	for _, bad := range []string{"", "dup", "k0:other", "k5:a.b", "k01", "r", "nope", "kz"} {
		if s, err := syms.Lookup(bad); err == nil {
			t.Errorf("%q looked up as %v", bad, s)
		}
	}
	var none *SymbolTable
	if n := none.Name(Symbol{Space: SpaceRegion, Index: 2}); n != "r2" {
		t.Errorf("nil table: %q", n)
	}
}

func TestAssembleRejects(t *testing.T) {
	const pgm = "SET_SH_REG COMPUTE_PGM_LO=@k1:matmul.q4_k.lo COMPUTE_PGM_HI=@k1:matmul.q4_k.hi\n"
	for _, c := range []struct {
		text string
		line int
		msg  string
	}{
		{"FOO a=1", 1, "unknown mnemonic"},
		{"\n\nNOP", 3, "cannot be encoded"},
		{"0001  NOP d0=1", 1, "starts at dword 0000"},
		{"00zz NOP d0=1", 1, "not hex"},
		{"0000", 1, "no mnemonic"},
		{"// c0001000", 1, "no mnemonic"},
		{"NOP d0", 1, "not NAME=VALUE"},
		{"NOP d0=", 1, "not NAME=VALUE"},
		{"NOP d1=1", 1, "where d0 belongs"},
		{"NOP d0=1 d2=1", 1, "where d1 belongs"},
		{"NOP d0=0x", 1, "bad number"},
		{"NOP d0=010", 1, "bad number"},
		{"NOP d0=0x100000000", 1, "bad number"},
		{"NOP d0=-1", 1, "bad number"},
		{"NOP d0=@scratch", 1, "must end in .lo or .hi"},
		{"NOP d0=@nowhere.lo", 1, "unknown symbol"},
		{"NOP d0=@scratch+zz.lo", 1, "addend"},
		{"NOP d0=@k0:matmul.q4_k.lo", 1, "is not \"matmul.q4_k\""},
		{"SET_SH_REG", 1, "sets no register"},
		{"NOP hdr=0x100 d0=1", 1, "hdr"},
		{"NOP hdr=0 d0=1", 1, "hdr"},
		{"SET_SH_REG COMPUTE_PGM_LO=1 COMPUTE_USER_DATA_0=2", 1, "not consecutive"},
		{"SET_SH_REG COMPUTE_USER_DATA_16=1", 1, "no register"},
		{"SET_SH_REG SH_0x20c=1", 1, "spelled COMPUTE_PGM_LO"},
		{"SET_SH_REG FOO=1", 1, "unknown register"},
		{"DISPATCH_DIRECT grid=1,1 init=0", 1, "not X,Y,Z"},
		{"DISPATCH_DIRECT grid=1,1,x init=0", 1, "grid"},
		{"DISPATCH_DIRECT grid=1,1,1", 1, "needs field init"},
		{"DISPATCH_DIRECT init=0 grid=1,1,1", 1, "where grid belongs"},
		{"DISPATCH_DIRECT grid=1,1,1 init=fast", 1, "init flag"},
		{"DISPATCH_DIRECT grid=1,1,1 init=0 d4=1", 1, "has 5 body dwords"},
		{"EVENT_WRITE event=cs_partial_flush", 1, "TYPE/INDEX"},
		{"EVENT_WRITE event=nope/1", 1, "event type"},
		{"EVENT_WRITE event=0x40/1", 1, "event type"},
		{"EVENT_WRITE event=7/16", 1, "event index"},
		{"EVENT_WRITE event=7/1|0x7", 1, "event bits"},
		{"ACQUIRE_MEM cntl=0 size=0 size_hi=0 base=0 base_hi=0 poll=@kv.lo gcr=zz", 1, "gcr"},
		{pgm + "; relocs:\n0002 lo @k1:matmul.q4_k\n", 1, "missing from the relocation table"},
		{pgm + "; relocs:\n0002 lo @k1:matmul.q4_k\n0003 hi @k1:matmul.q4_k\n0004 hi @kv\n", 5, "no relocated field"},
		{pgm + "; relocs:\n0002 lo @k1:matmul.q4_k\n0003 lo @k1:matmul.q4_k\n", 4, "the field at line 1 says hi"},
		{pgm + "; relocs:\n0002 lo @k1:matmul.q4_k\n0002 lo @k1:matmul.q4_k\n", 4, "listed twice"},
		{pgm + "; relocs:\n0002 lo\n", 3, "WORD KIND @SYMBOL"},
		{pgm + "; relocs:\nzz lo @kv\n", 3, "hex dword offset"},
		{pgm + "; relocs:\n0002 mid @kv\n", 3, "not lo or hi"},
		{pgm + "; relocs:\n0002 lo kv\n", 3, "does not start with @"},
		{pgm + "; relocs:\n; relocs:\n", 3, "second relocation table"},
	} {
		_, _, err := Assemble(c.text, testSyms)
		se, ok := err.(*SyntaxError)
		if !ok {
			t.Errorf("%q: error %v, want a SyntaxError", c.text, err)
			continue
		}
		if se.Line != c.line || !strings.Contains(se.Msg, c.msg) {
			t.Errorf("%q: %v, want line %d: …%s…", c.text, err, c.line, c.msg)
		}
		if !strings.HasPrefix(err.Error(), "pm4: line ") {
			t.Errorf("%q: %v", c.text, err)
		}
	}
}

func TestDisassembleRejects(t *testing.T) {
	b := sampleStream()
	for name, relocs := range map[string][]Reloc{
		"outside":   {{Word: 500, Kind: RelocLo, Sym: Symbol{Space: SpaceRegion}}},
		"kind":      {{Word: 2, Kind: 7, Sym: Symbol{Space: SpaceRegion}}},
		"space":     {{Word: 2, Kind: RelocLo, Sym: Symbol{Space: 9}}},
		"duplicate": {{Word: 2, Kind: RelocLo, Sym: Symbol{Space: SpaceRegion}}, {Word: 2, Kind: RelocLo, Sym: Symbol{Space: SpaceRegion}}},
		"header":    {{Word: 4, Kind: RelocLo, Sym: Symbol{Space: SpaceRegion}}},
	} {
		if _, err := Disassemble(b.Words, relocs, testSyms); err == nil || !strings.HasPrefix(err.Error(), "pm4: ") {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A stream that stops decoding prints up to the bad packet, the rest
	// as raw comments, and the decoder's error.
	words := append(append([]uint32(nil), b.Words[:14]...), 0x12345678, 9)
	text, err := Disassemble(words, nil, testSyms)
	if err == nil || !strings.Contains(err.Error(), "dword 0xe") {
		t.Errorf("bad header: %v", err)
	}
	if !strings.Contains(text, "0004  SET_SH_REG") || !strings.HasSuffix(text, "; 12345678\n; 00000009\n") {
		t.Errorf("partial listing:\n%s", text)
	}
}

func TestRawWordsRejects(t *testing.T) {
	for _, s := range []string{"NOP d0=1", "NOP d0=1 // c000100", "NOP d0=1 // c0001000 zz"} {
		if _, err := RawWords(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}

func FuzzAssemble(f *testing.F) {
	f.Add(sampleListing)
	f.Add("NOP d0=1\n; relocs:\n")
	f.Add("SET_SH_REG SH_0xffffffff=@r1+0x5.lo SH_0x0=@r1+0x5.hi")
	f.Add("EVENT_WRITE event=0x3f/15|0x80000000 d1=@k0:embed.f32.hi")
	f.Fuzz(func(t *testing.T, text string) {
		words, relocs, err := Assemble(text, testSyms)
		if err != nil {
			return
		}
		// Whatever assembles must print and assemble back to itself.
		out, err := Disassemble(words, relocs, testSyms)
		if err != nil {
			t.Fatalf("assembled %q, which does not disassemble: %v", text, err)
		}
		w2, r2, err := Assemble(out, testSyms)
		if err != nil || !slices.Equal(w2, words) || !slices.Equal(r2, relocs) {
			t.Fatalf("listing of %q does not round-trip: %v\n%s", text, err, out)
		}
		if raw, err := RawWords(out); err != nil || !slices.Equal(raw, words) {
			t.Fatalf("raw column of %q: %v", text, err)
		}
	})
}

func FuzzDisassemble(f *testing.F) {
	b := sampleStream()
	f.Add(wordBytes(b.Words), uint32(2), uint32(3))
	f.Fuzz(func(t *testing.T, raw []byte, lo, hi uint32) {
		words := bytesWords(raw)
		relocs := []Reloc{{Word: lo, Kind: RelocLo, Sym: Symbol{Space: SpaceRegion, Index: 1}}, {Word: hi, Kind: RelocHi, Sym: Symbol{Space: SpaceKernel}}}
		text, err := Disassemble(words, relocs, testSyms)
		if err != nil {
			return
		}
		// Relocated dwords assemble as 0, as an unpatched stream holds them.
		want := append([]uint32(nil), words...)
		want[lo], want[hi] = 0, 0
		w, r, err := Assemble(text, testSyms)
		if err != nil || !slices.Equal(w, want) || !slices.Equal(r, relocs) {
			t.Fatalf("round trip: %v\n%s", err, text)
		}
	})
}

func wordBytes(w []uint32) []byte {
	var b []byte
	for _, x := range w {
		b = append(b, byte(x), byte(x>>8), byte(x>>16), byte(x>>24))
	}
	return b
}

func bytesWords(b []byte) []uint32 {
	w := make([]uint32, len(b)/4)
	for i := range w {
		w[i] = uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24
	}
	return w
}
