package pm4

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// The text form of a stream, one packet per line, in the manner of Go's
// assembler test files: the packet in words on the left, the dwords it
// encodes to after "//", so a reader (and a test) can hold the two against
// each other:
//
//	0000  SET_SH_REG       COMPUTE_PGM_LO=@k0:embed.f32.lo COMPUTE_PGM_HI=@k0:embed.f32.hi  // c0027600 0000020c 00000000 00000000
//	000d  DISPATCH_DIRECT  grid=128,1,1 init=compute_shader_en|force_start_at_000   // c0031500 00000080 00000001 00000001 00000005
//	; relocs:
//	0002  lo  @k0:embed.f32
//
// The leading offset (hex dwords) is optional when writing by hand; when
// present it must be right. A packet whose header has bits set below the
// opcode (predicate, shader type) shows them first, as hdr=0x….
// "; relocs:" starts the relocation table: one line per relocation (word,
// kind, symbol) in the order the stream's relocation list has them. Other
// lines starting with ";" are comments. Relocated dwords encode as 0: the
// loader patches them, and Check refuses a stream where they are not 0.

// SymbolTable names the targets of relocations. The disassembler prints a
// symbol by name; the assembler, given the same table, reads it back.
type SymbolTable struct {
	Regions []string // region index → name (kv, scratch, weights.attn_q…)
	Kernels []string // kernel index → instance name (matmul.q4_k…)
}

// Name prints s without its addend: a region by its name, a kernel as
// k<index>:<instance> (instances repeat across specializations, so the
// index is what identifies one). Unnamed or ambiguous symbols print as
// r<index> or k<index>, which Lookup always accepts.
func (t *SymbolTable) Name(s Symbol) string {
	switch s.Space {
	case SpaceRegion:
		if t != nil && int(s.Index) < len(t.Regions) && t.regionNameOK(s.Index) {
			return t.Regions[s.Index]
		}
		return "r" + strconv.FormatUint(uint64(s.Index), 10)
	case SpaceKernel:
		if t != nil && int(s.Index) < len(t.Kernels) && symbolChars(t.Kernels[s.Index]) {
			return "k" + strconv.FormatUint(uint64(s.Index), 10) + ":" + t.Kernels[s.Index]
		}
		return "k" + strconv.FormatUint(uint64(s.Index), 10)
	}
	return fmt.Sprintf("space%d.%d", s.Space, s.Index)
}

// regionNameOK reports whether region i's name reads back unambiguously.
func (t *SymbolTable) regionNameOK(i uint32) bool {
	n := t.Regions[i]
	if !symbolChars(n) || isIndexName(n) || strings.HasSuffix(n, ".lo") || strings.HasSuffix(n, ".hi") {
		return false
	}
	for j, m := range t.Regions {
		if m == n && uint32(j) != i {
			return false
		}
	}
	return true
}

// symbolChars reports whether n can stand in a field: no spaces, and none
// of the characters the syntax uses around a name.
func symbolChars(n string) bool {
	if n == "" {
		return false
	}
	for _, c := range n {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
		if !ok {
			return false
		}
	}
	return true
}

// isIndexName matches r<digits> and k<digits>, the names of unnamed symbols.
func isIndexName(n string) bool {
	if len(n) < 2 || (n[0] != 'r' && n[0] != 'k') {
		return false
	}
	for _, c := range n[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Lookup reads back a name printed by Name (without "@" or addend).
func (t *SymbolTable) Lookup(name string) (Symbol, error) {
	if name == "" {
		return Symbol{}, fmt.Errorf("empty symbol name")
	}
	if name[0] == 'k' {
		idx, inst, named := strings.Cut(name[1:], ":")
		if i, err := parseIndex(idx); err == nil {
			if named && (t == nil || int(i) >= len(t.Kernels) || t.Kernels[i] != inst) {
				return Symbol{}, fmt.Errorf("kernel %d is not %q in this bundle", i, inst)
			}
			return Symbol{Space: SpaceKernel, Index: i}, nil
		}
	}
	if isIndexName(name) && name[0] == 'r' {
		i, err := parseIndex(name[1:])
		if err != nil {
			return Symbol{}, err
		}
		return Symbol{Space: SpaceRegion, Index: i}, nil
	}
	if t != nil {
		for i, r := range t.Regions {
			if r == name && t.regionNameOK(uint32(i)) {
				return Symbol{Space: SpaceRegion, Index: uint32(i)}, nil
			}
		}
	}
	return Symbol{}, fmt.Errorf("unknown symbol %q", name)
}

func parseIndex(s string) (uint32, error) {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return 0, fmt.Errorf("bad symbol index %q", s)
	}
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("bad symbol index %q", s)
	}
	return uint32(v), nil
}

// symText prints a symbol with its addend: @scratch+0x240.
func (t *SymbolTable) symText(s Symbol) string {
	if s.Addend == 0 {
		return "@" + t.Name(s)
	}
	return "@" + t.Name(s) + "+0x" + strconv.FormatUint(s.Addend, 16)
}

// parseSym reads @name[+addend].
func (t *SymbolTable) parseSym(s string) (Symbol, error) {
	if !strings.HasPrefix(s, "@") {
		return Symbol{}, fmt.Errorf("symbol %q does not start with @", s)
	}
	name, add, hasAdd := strings.Cut(s[1:], "+")
	sym, err := t.Lookup(name)
	if err != nil {
		return Symbol{}, err
	}
	if hasAdd {
		if sym.Addend, err = parseNum(add, 64); err != nil {
			return Symbol{}, fmt.Errorf("addend: %w", err)
		}
	}
	return sym, nil
}

// fieldKind says how a packet field is printed and parsed.
type fieldKind uint8

const (
	kValue fieldKind = iota // one dword: a number or half of a relocated address
	kHex                    // one dword of control bits, printed in hex
	kInit                   // DISPATCH_INITIATOR flags
	kEvent                  // event type and index
	kGrid                   // three dwords: x,y,z
)

type field struct {
	name string
	kind fieldKind
}

func (f field) dwords() int {
	if f.kind == kGrid {
		return 3
	}
	return 1
}

// layouts name the body dwords of each fixed packet (gfx10+ field order).
// Dwords past a layout (variable-length packets) print as d<index>=.
// SET_SH_REG is printed by register name instead.
var layouts = map[Opcode][]field{
	NOP:             {},
	DISPATCH_DIRECT: {{"grid", kGrid}, {"init", kInit}},
	WRITE_DATA:      {{"ctl", kHex}, {"addr_lo", kValue}, {"addr_hi", kValue}},
	WAIT_REG_MEM:    {{"func", kHex}, {"addr_lo", kValue}, {"addr_hi", kValue}, {"ref", kValue}, {"mask", kHex}, {"poll", kValue}},
	INDIRECT_BUFFER: {{"addr_lo", kValue}, {"addr_hi", kValue}, {"ctl", kHex}},
	EVENT_WRITE:     {{"event", kEvent}},
	RELEASE_MEM:     {{"event", kEvent}, {"ctl", kHex}, {"addr_lo", kValue}, {"addr_hi", kValue}, {"data", kValue}, {"data_hi", kValue}, {"ctx", kValue}},
	ACQUIRE_MEM:     {{"cntl", kHex}, {"size", kHex}, {"size_hi", kHex}, {"base", kHex}, {"base_hi", kHex}, {"poll", kValue}, {"gcr", kHex}},
}

var opByName = func() map[string]Opcode {
	m := map[string]Opcode{}
	for op, i := range opInfo {
		m[i.name] = op
	}
	return m
}()

// Flag and event names, for the fields that are bit sets or enumerations.
var (
	initNames = []struct {
		bit  uint32
		name string
	}{{InitComputeShaderEn, "compute_shader_en"}, {InitForceStartAt000, "force_start_at_000"}}
	eventNames = map[uint32]string{EventCSPartialFlush: "cs_partial_flush", EventCacheFlushInvTS: "cache_flush_inv_ts"}
)

// regName is the symbolic name of an SH register offset.
func regName(r uint32) string {
	switch {
	case r == COMPUTE_PGM_LO:
		return "COMPUTE_PGM_LO"
	case r == COMPUTE_PGM_HI:
		return "COMPUTE_PGM_HI"
	case r >= COMPUTE_USER_DATA_0 && r < COMPUTE_USER_DATA_0+NumUserData:
		return "COMPUTE_USER_DATA_" + strconv.Itoa(int(r-COMPUTE_USER_DATA_0))
	}
	return "SH_0x" + strconv.FormatUint(uint64(r), 16)
}

// parseReg reads a register name printed by regName.
func parseReg(s string) (uint32, error) {
	switch {
	case s == "COMPUTE_PGM_LO":
		return COMPUTE_PGM_LO, nil
	case s == "COMPUTE_PGM_HI":
		return COMPUTE_PGM_HI, nil
	case strings.HasPrefix(s, "COMPUTE_USER_DATA_"):
		n, err := parseIndex(s[len("COMPUTE_USER_DATA_"):])
		if err != nil || n >= NumUserData {
			return 0, fmt.Errorf("no register %s (COMPUTE_USER_DATA_0..%d)", s, NumUserData-1)
		}
		return COMPUTE_USER_DATA_0 + n, nil
	case strings.HasPrefix(s, "SH_"):
		r, err := parseNum(s[3:], 32)
		if err != nil {
			return 0, fmt.Errorf("register %s: %w", s, err)
		}
		if regName(uint32(r)) != s {
			return 0, fmt.Errorf("register %s is spelled %s", s, regName(uint32(r)))
		}
		return uint32(r), nil
	}
	return 0, fmt.Errorf("unknown register %q", s)
}

// parseNum reads a decimal or 0x-prefixed hex number of at most size bits.
// It is stricter than strconv's base 0: no octal, no binary, no "_".
func parseNum(s string, size int) (uint64, error) {
	base, digits := 10, s
	if strings.HasPrefix(s, "0x") {
		base, digits = 16, s[2:]
	}
	if digits == "" || strings.ContainsAny(digits, "_+-") || (base == 10 && len(digits) > 1 && digits[0] == '0') {
		return 0, fmt.Errorf("bad number %q", s)
	}
	v, err := strconv.ParseUint(digits, base, size)
	if err != nil {
		return 0, fmt.Errorf("bad number %q (%d bits)", s, size)
	}
	return v, nil
}

// numText prints a constant: small values (counts, shapes) in decimal,
// larger ones (masks, bit patterns) in hex.
func numText(v uint32) string {
	if v < 0x10000 {
		return strconv.FormatUint(uint64(v), 10)
	}
	return "0x" + strconv.FormatUint(uint64(v), 16)
}

func initText(v uint32) string {
	var parts []string
	for _, f := range initNames {
		if v&f.bit != 0 {
			parts = append(parts, f.name)
			v &^= f.bit
		}
	}
	if v != 0 || len(parts) == 0 {
		parts = append(parts, "0x"+strconv.FormatUint(uint64(v), 16))
	}
	return strings.Join(parts, "|")
}

func parseInit(s string) (uint32, error) {
	var v uint32
	for _, p := range strings.Split(s, "|") {
		found := false
		for _, f := range initNames {
			if p == f.name {
				v |= f.bit
				found = true
			}
		}
		if !found {
			x, err := parseNum(p, 32)
			if err != nil {
				return 0, fmt.Errorf("init flag %q: not %s or a number", p, initNames[0].name)
			}
			v |= uint32(x)
		}
	}
	return v, nil
}

// eventText prints an event dword as type/index, with any other bits
// appended as |0x…: cs_partial_flush/4.
func eventText(v uint32) string {
	typ, idx, rest := v&0x3F, v>>eventIndexShift&0xF, v&^(0x3F|0xF<<eventIndexShift)
	s, ok := eventNames[typ]
	if !ok {
		s = "0x" + strconv.FormatUint(uint64(typ), 16)
	}
	s += "/" + strconv.Itoa(int(idx))
	if rest != 0 {
		s += "|0x" + strconv.FormatUint(uint64(rest), 16)
	}
	return s
}

func parseEvent(s string) (uint32, error) {
	head, rest, hasRest := strings.Cut(s, "|")
	name, idx, ok := strings.Cut(head, "/")
	if !ok {
		return 0, fmt.Errorf("event %q is not TYPE/INDEX", s)
	}
	var typ uint32
	found := false
	for t, n := range eventNames {
		if n == name {
			typ, found = t, true
		}
	}
	if !found {
		t, err := parseNum(name, 32)
		if err != nil || t > 0x3F {
			return 0, fmt.Errorf("event type %q: not a known event or a number below 0x40", name)
		}
		typ = uint32(t)
	}
	i, err := parseNum(idx, 32)
	if err != nil || i > 0xF {
		return 0, fmt.Errorf("event index %q: not a number below 16", idx)
	}
	v := typ | uint32(i)<<eventIndexShift
	if hasRest {
		r, err := parseNum(rest, 32)
		if err != nil || uint32(r)&(0x3F|0xF<<eventIndexShift) != 0 {
			return 0, fmt.Errorf("event bits %q: not a number clear of the type and index bits", rest)
		}
		v |= uint32(r)
	}
	return v, nil
}

// Padding: the raw dwords start at this column when the packet text is
// shorter, so that most lines line up without one long line re-padding
// every other (which would make golden diffs noisy).
const rawColumn = 80

// Disassemble prints a stream and its relocations in the text form above.
// Relocations must each sit on a distinct body dword; a stream that does
// not decode is printed up to the bad packet and the error returned.
func Disassemble(words []uint32, relocs []Reloc, syms *SymbolTable) (string, error) {
	at := map[uint32]Reloc{}
	for _, r := range relocs {
		if int(r.Word) >= len(words) {
			return "", fmt.Errorf("pm4: relocation at dword %#x is outside the %d-dword stream", r.Word, len(words))
		}
		if r.Kind != RelocLo && r.Kind != RelocHi {
			return "", fmt.Errorf("pm4: relocation at dword %#x has kind %d", r.Word, r.Kind)
		}
		if r.Sym.Space != SpaceRegion && r.Sym.Space != SpaceKernel {
			return "", fmt.Errorf("pm4: relocation at dword %#x has symbol space %d", r.Word, r.Sym.Space)
		}
		if _, dup := at[r.Word]; dup {
			return "", fmt.Errorf("pm4: two relocations at dword %#x", r.Word)
		}
		at[r.Word] = r
	}
	var sb strings.Builder
	pkts, derr := decodePrefix(words)
	covered := 0
	for _, p := range pkts {
		if _, ok := at[uint32(p.Offset)]; ok {
			return "", fmt.Errorf("pm4: relocation at dword %#x falls on a packet header", p.Offset)
		}
		covered = p.Offset + 1 + len(p.Body)
		fields := packetFields(p, at, syms)
		if x := words[p.Offset] & 0xFF; x != 0 {
			// Header bits below the opcode (predicate, shader type) are
			// not part of any field: show them so the text says every bit.
			fields = "hdr=0x" + strconv.FormatUint(uint64(x), 16) + " " + fields
		}
		line := fmt.Sprintf("%04x  %-16s %s", p.Offset, p.Op, fields)
		sb.WriteString(line)
		sb.WriteString(strings.Repeat(" ", max(2, rawColumn-len(line))))
		sb.WriteString("//")
		for _, w := range words[p.Offset : p.Offset+1+len(p.Body)] {
			fmt.Fprintf(&sb, " %08x", w)
		}
		sb.WriteByte('\n')
	}
	if derr != nil {
		for _, w := range words[covered:] {
			fmt.Fprintf(&sb, "; %08x\n", w)
		}
		return sb.String(), derr
	}
	sb.WriteString("; relocs:\n")
	for _, r := range relocs {
		fmt.Fprintf(&sb, "%04x  %s  %s\n", r.Word, r.Kind, syms.symText(r.Sym))
	}
	return sb.String(), nil
}

// decodePrefix decodes as far as the stream is well formed, so that a
// broken stream still prints up to its first bad packet.
func decodePrefix(words []uint32) ([]Packet, error) {
	pkts, err := Decode(words)
	if err == nil {
		return pkts, nil
	}
	var good []Packet
	for i := 0; i < len(words); {
		end := min(len(words), i+2+int(words[i]>>16&0x3FFF))
		p, perr := Decode(words[i:end])
		if perr != nil {
			break
		}
		p[0].Offset = i
		good = append(good, p[0])
		i = end
	}
	return good, err
}

// packetFields prints a packet's body.
func packetFields(p Packet, at map[uint32]Reloc, syms *SymbolTable) string {
	base := uint32(p.Offset + 1)
	val := func(i int) string {
		if r, ok := at[base+uint32(i)]; ok {
			return syms.symText(r.Sym) + "." + r.Kind.String()
		}
		return numText(p.Body[i])
	}
	var out []string
	generic := func(from int) {
		for i := from; i < len(p.Body); i++ {
			out = append(out, "d"+strconv.Itoa(i)+"="+val(i))
		}
	}
	if p.Op == SET_SH_REG {
		if _, ok := at[base]; ok {
			generic(0)
			return strings.Join(out, " ")
		}
		for i := 1; i < len(p.Body); i++ {
			out = append(out, regName(p.Body[0]+uint32(i-1))+"="+val(i))
		}
		return strings.Join(out, " ")
	}
	lay := layouts[p.Op]
	// A relocation on a dword the layout does not show as a value can only
	// be printed in the generic form.
	i := 0
	for _, f := range lay {
		for j := 0; j < f.dwords(); j++ {
			if _, ok := at[base+uint32(i+j)]; ok && f.kind != kValue {
				generic(0)
				return strings.Join(out, " ")
			}
		}
		i += f.dwords()
	}
	i = 0
	for _, f := range lay {
		switch f.kind {
		case kValue:
			out = append(out, f.name+"="+val(i))
		case kHex:
			out = append(out, f.name+"=0x"+strconv.FormatUint(uint64(p.Body[i]), 16))
		case kInit:
			out = append(out, f.name+"="+initText(p.Body[i]))
		case kEvent:
			out = append(out, f.name+"="+eventText(p.Body[i]))
		case kGrid:
			out = append(out, fmt.Sprintf("%s=%d,%d,%d", f.name, p.Body[i], p.Body[i+1], p.Body[i+2]))
		}
		i += f.dwords()
	}
	generic(i)
	return strings.Join(out, " ")
}

// SyntaxError is an assembler error at a line of the text.
type SyntaxError struct {
	Line int
	Msg  string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("pm4: line %d: %s", e.Line, e.Msg) }

// Assemble reads the text form back into a stream and its relocations,
// resolving symbols with syms. It reads the mnemonic and fields only: the
// raw dwords after "//" are the listing's record of the encoding, which
// tests compare against (see RawWords), never an input. The relocations
// come from the fields; a "; relocs:" table, when present, must list
// exactly those and gives their order.
func Assemble(text string, syms *SymbolTable) ([]uint32, []Reloc, error) {
	a := assembler{syms: syms, fieldLine: map[uint32]int{}}
	inTable := false
	var table []Reloc
	tableWords := map[uint32]bool{}
	for n, line := range strings.Split(text, "\n") {
		a.line = n + 1
		line = strings.TrimRight(line, " \t\r")
		trimmed := strings.TrimLeft(line, " \t")
		if trimmed == "; relocs:" {
			if inTable {
				return nil, nil, a.errf("second relocation table")
			}
			inTable = true
			continue
		}
		if trimmed == "" || trimmed[0] == ';' {
			continue
		}
		if inTable {
			r, err := a.relocLine(trimmed)
			if err != nil {
				return nil, nil, err
			}
			if tableWords[r.Word] {
				return nil, nil, a.errf("dword %#x listed twice", r.Word)
			}
			tableWords[r.Word] = true
			table = append(table, r)
			continue
		}
		if err := a.packet(trimmed); err != nil {
			return nil, nil, err
		}
	}
	if !inTable {
		return a.words, a.relocs, nil
	}
	// The table must say the same as the fields: same words, same halves,
	// same symbols. Its order wins, so any stream round-trips exactly.
	byWord := map[uint32]Reloc{}
	for _, r := range a.relocs {
		byWord[r.Word] = r
	}
	for _, r := range table {
		f, ok := byWord[r.Word]
		if !ok {
			return nil, nil, &SyntaxError{a.tableLine[r.Word], fmt.Sprintf("relocation at dword %#x: no relocated field there", r.Word)}
		}
		if f != r {
			return nil, nil, &SyntaxError{a.tableLine[r.Word], fmt.Sprintf("relocation at dword %#x says %s %s, the field at line %d says %s %s",
				r.Word, r.Kind, syms.symText(r.Sym), a.fieldLine[r.Word], f.Kind, syms.symText(f.Sym))}
		}
	}
	if len(table) != len(a.relocs) {
		var missing []int
		for _, r := range a.relocs {
			if !tableWords[r.Word] {
				missing = append(missing, int(r.Word))
			}
		}
		sort.Ints(missing)
		return nil, nil, &SyntaxError{a.fieldLine[uint32(missing[0])], fmt.Sprintf("relocated field at dword %#x is missing from the relocation table", missing[0])}
	}
	return a.words, table, nil
}

type assembler struct {
	syms      *SymbolTable
	line      int
	words     []uint32
	relocs    []Reloc
	fieldLine map[uint32]int // dword → line of the field that relocates it
	tableLine map[uint32]int // dword → line of its relocation-table entry
}

func (a *assembler) errf(format string, args ...any) error {
	return &SyntaxError{a.line, fmt.Sprintf(format, args...)}
}

// relocLine reads one relocation-table line: WORD KIND @SYMBOL.
func (a *assembler) relocLine(s string) (Reloc, error) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return Reloc{}, a.errf("relocation %q is not WORD KIND @SYMBOL", s)
	}
	w, err := strconv.ParseUint(f[0], 16, 32)
	if err != nil {
		return Reloc{}, a.errf("relocation word %q is not a hex dword offset", f[0])
	}
	var k RelocKind
	switch f[1] {
	case "lo":
		k = RelocLo
	case "hi":
		k = RelocHi
	default:
		return Reloc{}, a.errf("relocation kind %q is not lo or hi", f[1])
	}
	sym, err := a.syms.parseSym(f[2])
	if err != nil {
		return Reloc{}, a.errf("%v", err)
	}
	if a.tableLine == nil {
		a.tableLine = map[uint32]int{}
	}
	a.tableLine[uint32(w)] = a.line
	return Reloc{Word: uint32(w), Kind: k, Sym: sym}, nil
}

// value reads a kValue field: a number or @symbol.lo / @symbol.hi, the
// latter recording a relocation on the dword at word.
func (a *assembler) value(s string, word int) (uint32, error) {
	if !strings.HasPrefix(s, "@") {
		v, err := parseNum(s, 32)
		if err != nil {
			return 0, a.errf("%v", err)
		}
		return uint32(v), nil
	}
	var k RelocKind
	switch {
	case strings.HasSuffix(s, ".lo"):
		k = RelocLo
	case strings.HasSuffix(s, ".hi"):
		k = RelocHi
	default:
		return 0, a.errf("relocated value %q must end in .lo or .hi", s)
	}
	sym, err := a.syms.parseSym(s[:len(s)-3])
	if err != nil {
		return 0, a.errf("%v", err)
	}
	a.relocs = append(a.relocs, Reloc{Word: uint32(word), Kind: k, Sym: sym})
	a.fieldLine[uint32(word)] = a.line
	return 0, nil
}

// packet assembles one packet line.
func (a *assembler) packet(s string) error {
	if code, _, ok := strings.Cut(s, "//"); ok {
		s = code
	}
	f := strings.Fields(s)
	if len(f) == 0 {
		return a.errf("no mnemonic before //")
	}
	at := len(a.words)
	if c := f[0][0]; c >= '0' && c <= '9' || c >= 'a' && c <= 'f' {
		off, err := strconv.ParseUint(f[0], 16, 32)
		if err != nil {
			return a.errf("offset %q is not hex", f[0])
		}
		if int(off) != at {
			return a.errf("offset %s, but this packet starts at dword %04x", f[0], at)
		}
		f = f[1:]
		if len(f) == 0 {
			return a.errf("no mnemonic after the offset")
		}
	}
	op, ok := opByName[f[0]]
	if !ok {
		return a.errf("unknown mnemonic %q", f[0])
	}
	type kv struct{ k, v string }
	var fields []kv
	for _, x := range f[1:] {
		k, v, ok := strings.Cut(x, "=")
		if !ok || k == "" || v == "" {
			return a.errf("field %q is not NAME=VALUE", x)
		}
		fields = append(fields, kv{k, v})
	}
	var hdr uint32
	if len(fields) > 0 && fields[0].k == "hdr" {
		x, err := parseNum(fields[0].v, 32)
		if err != nil || x == 0 || x > 0xFF {
			return a.errf("hdr %q: not a number from 0x1 to 0xff (the header bits below the opcode)", fields[0].v)
		}
		hdr, fields = uint32(x), fields[1:]
	}
	body := []uint32{}
	base := at + 1
	switch {
	case len(fields) > 0 && fields[0].k == "d0":
		// The generic form: every body dword by index.
		for i, x := range fields {
			if x.k != "d"+strconv.Itoa(i) {
				return a.errf("field %s where d%d belongs", x.k, i)
			}
			v, err := a.value(x.v, base+i)
			if err != nil {
				return err
			}
			body = append(body, v)
		}
	case op == SET_SH_REG:
		if len(fields) == 0 {
			return a.errf("SET_SH_REG sets no register")
		}
		first, err := parseReg(fields[0].k)
		if err != nil {
			return a.errf("%v", err)
		}
		body = append(body, first)
		for i, x := range fields {
			r, err := parseReg(x.k)
			if err != nil {
				return a.errf("%v", err)
			}
			if r != first+uint32(i) {
				return a.errf("register %s is not consecutive: %s expected", x.k, regName(first+uint32(i)))
			}
			v, err := a.value(x.v, base+len(body))
			if err != nil {
				return err
			}
			body = append(body, v)
		}
	default:
		lay := layouts[op]
		i := 0
		for _, fl := range lay {
			if i >= len(fields) {
				return a.errf("%s needs field %s", op, fl.name)
			}
			x := fields[i]
			if x.k != fl.name {
				return a.errf("field %s where %s belongs", x.k, fl.name)
			}
			var v uint32
			var err error
			switch fl.kind {
			case kValue:
				v, err = a.value(x.v, base+len(body))
				if err != nil {
					return err
				}
			case kHex:
				var n uint64
				n, err = parseNum(x.v, 32)
				v = uint32(n)
			case kInit:
				v, err = parseInit(x.v)
			case kEvent:
				v, err = parseEvent(x.v)
			case kGrid:
				xyz := strings.Split(x.v, ",")
				if len(xyz) != 3 {
					return a.errf("grid %q is not X,Y,Z", x.v)
				}
				for _, d := range xyz {
					n, err := parseNum(d, 32)
					if err != nil {
						return a.errf("grid: %v", err)
					}
					body = append(body, uint32(n))
				}
				i++
				continue
			}
			if err != nil {
				return a.errf("%s: %v", fl.name, err)
			}
			body = append(body, v)
			i++
		}
		for _, x := range fields[i:] {
			if x.k != "d"+strconv.Itoa(len(body)) {
				return a.errf("field %s where d%d belongs", x.k, len(body))
			}
			v, err := a.value(x.v, base+len(body))
			if err != nil {
				return err
			}
			body = append(body, v)
		}
	}
	info := opInfo[op]
	// A type-3 count field holds body-1 in 14 bits: no packet is empty.
	if len(body) == 0 || len(body) > 0x4000 {
		return a.errf("%s with %d body dwords cannot be encoded", op, len(body))
	}
	if (info.body >= 0 && len(body) != info.body) || len(body) < info.minBody {
		return a.errf("%s has %d body dwords", op, len(body))
	}
	a.words = append(a.words, Header(op, len(body))|hdr)
	a.words = append(a.words, body...)
	return nil
}

// RawWords returns the dwords a listing records after "//" on its packet
// lines, in order: the encoding as the disassembler saw it, for tests to
// hold the assembler's output against.
func RawWords(text string) ([]uint32, error) {
	var out []uint32
	for n, line := range strings.Split(text, "\n") {
		t := strings.TrimSpace(line)
		if t == "; relocs:" {
			break
		}
		if t == "" || t[0] == ';' {
			continue
		}
		_, raw, ok := strings.Cut(t, "//")
		if !ok {
			return nil, &SyntaxError{n + 1, "packet line without // raw dwords"}
		}
		for _, h := range strings.Fields(raw) {
			w, err := strconv.ParseUint(h, 16, 32)
			if err != nil || len(h) != 8 {
				return nil, &SyntaxError{n + 1, fmt.Sprintf("raw dword %q is not 8 hex digits", h)}
			}
			out = append(out, uint32(w))
		}
	}
	return out, nil
}
