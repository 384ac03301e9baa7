// Package bundle reads and writes a compiled bundle: a directory holding
// the graph file (graph.zrg), the weights pack (weights.zrw) and one .zrt
// blob per kernel instance under kernels/.
//
// The graph file is flat and little-endian: a header, a section table, and
// sections, each with a CRC-32C, so any flipped byte is caught before use.
// Its packet streams are stored as raw dwords the runtime can use in place.
package bundle

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sort"

	"github.com/zrtdev/zrt/asm/pm4"
)

// Graph-file format version. Compatibility policy (docs/FORMAT.md): a
// reader accepts files of its own major version and any minor version up
// to its own; a new minor may only add sections, which older readers of
// the same major ignore. Anything else is refused with both versions named.
const (
	GraphMagic   = 0x4752545A // "ZTRG"
	VersionMajor = 2          // 2: hyperparameters as key/value entries
	VersionMinor = 1          // 1: megakernel schedules (MEGA)
)

// ErrFormat is wrapped by every error about a malformed bundle.
var ErrFormat = errors.New("bundle: malformed")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Section tags.
const (
	tagIdent    = "IDNT"
	tagHparams  = "HPAR"
	tagConfig   = "CONF"
	tagVocab    = "VOCB"
	tagRegions  = "REGN"
	tagWeights  = "WGHT"
	tagKernels  = "KERN"
	tagVariants = "VARS"
	tagStream   = "STRM"
	tagRelocs   = "RELO"
	tagLiveness = "LIVE"
	// tagMegakernel holds the decode variants' megakernel schedules
	// (megakernel.go); optional, since 2.1.
	tagMegakernel = "MEGA"
)

// requiredSections must all be present in a graph file.
var requiredSections = []string{tagIdent, tagHparams, tagConfig, tagVocab, tagRegions, tagWeights, tagKernels, tagVariants, tagStream, tagRelocs, tagLiveness}

// Header sizes.
const (
	headerBytes = 16 // magic, major u16, minor u16, section count u32, header crc u32
	entryBytes  = 32 // tag[4], flags u32, offset u64, size u64, crc u32, pad u32
)

// Ident says what a bundle was built from and how.
type Ident struct {
	Producer    string   // zrtc version
	Flags       string   // the command line that built it
	Target      string   // cpu, cuda:sm_90…
	SourceName  string   // base name of the GGUF
	SourceHash  [32]byte // SHA-256 of the GGUF
	WeightsHash [32]byte // SHA-256 of the weights pack's data
}

// Region is a memory-plan region.
type Region struct {
	Name  string
	Heap  uint8
	Bytes int64
	Align int64
}

// RegionIndex is the index in g.Regions of the region named name (names
// are unique in a checked graph), or -1 when the plan has none.
func (g *Graph) RegionIndex(name string) int {
	for i, r := range g.Regions {
		if r.Name == name {
			return i
		}
	}
	return -1
}

// Weight places a tensor in a weights region.
type Weight struct {
	Buffer, Tensor string
	Type           uint32
	Dims           []int64
	Region         uint32
	Offset, Bytes  int64
}

// Kernel names a kernel blob file of the bundle.
type Kernel struct {
	Name string // kernel instance (matmul.q4_k)
	File string // path under kernels/
	Hash [32]byte
}

// RegLive is one register's row of a variant's liveness table.
type RegLive struct {
	Name          string
	Bytes         int64
	Def, LastRead int32
	Physical      int32
	Offset        int64
}

// Stage is the kind of step a variant serves, numbered as in the graph
// file: the one definition the compiler (ir) and the runtime share.
type Stage uint8

// The stages.
const (
	StagePrefill Stage = 1 // batched prompt rows (GEMM, batched attention)
	StageDecode  Stage = 2 // one row per slot
	// StageDraft is a decode step through the model's first layers and
	// its output head: self-speculation's draft.
	StageDraft Stage = 3
)

// stageNames names the stages, for String and ParseStage.
var stageNames = [...]string{StagePrefill: "prefill", StageDecode: "decode", StageDraft: "draft"}

func (s Stage) String() string { return enumName(s, stageNames[:], "stage") }

// ParseStage is the stage String names name; false for none.
func ParseStage(name string) (Stage, bool) {
	for s, n := range stageNames {
		if n != "" && n == name {
			return Stage(s), true
		}
	}
	return 0, false
}

// enumName is the name of v in names (indexed by value), or kind(v) for
// a value that has none.
func enumName[T ~uint8](v T, names []string, kind string) string {
	if int(v) < len(names) && names[v] != "" {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", kind, uint8(v))
}

// ShapeKey identifies a variant exactly: its stage, the slots its page
// table covers and the query rows one replay evaluates at most. Positions
// and the number of active rows are data in the request table, never part
// of the key.
type ShapeKey struct {
	Stage       Stage
	Slots, Rows int
}

func (k ShapeKey) String() string { return fmt.Sprintf("%s.s%d.r%d", k.Stage, k.Slots, k.Rows) }

// Variant is one ShapeKey's program.
type Variant struct {
	Stage      Stage
	Slots      uint32
	Rows       uint32
	Words      []uint32
	Relocs     []pm4.Reloc
	Liveness   []RegLive
	Dispatches uint32
	// ScratchBytes is what this variant's physical buffers span.
	ScratchBytes int64
	PeakBytes    int64
}

// ShapeKey is the variant's key.
func (v *Variant) ShapeKey() ShapeKey {
	return ShapeKey{Stage: v.Stage, Slots: int(v.Slots), Rows: int(v.Rows)}
}

// Key names the variant as its ShapeKey prints it: "decode.s4.r4".
func (v *Variant) Key() string { return v.ShapeKey().String() }

// Graph is a decoded graph file.
type Graph struct {
	Major, Minor uint16
	Ident        Ident
	Hparams      Hparams
	ConfigTOML   string
	Vocab        []byte
	Regions      []Region
	Weights      []Weight
	Kernels      []Kernel
	Variants     []Variant
	// Schedules are megakernel schedules of some variants (megakernel.go),
	// in variant order; none where the target has no persistent kernel.
	Schedules []Schedule
}

// Encode writes the graph file. The output depends only on g.
func (g *Graph) Encode() []byte {
	sections := map[string][]byte{}
	var e enc
	e.str(g.Ident.Producer)
	e.str(g.Ident.Flags)
	e.str(g.Ident.Target)
	e.str(g.Ident.SourceName)
	e.b = append(e.b, g.Ident.SourceHash[:]...)
	e.b = append(e.b, g.Ident.WeightsHash[:]...)
	sections[tagIdent], e = e.b, enc{}

	encodeHparams(&e, &g.Hparams)
	sections[tagHparams], e = e.b, enc{}

	sections[tagConfig] = []byte(g.ConfigTOML)
	sections[tagVocab] = g.Vocab

	e.u32(uint32(len(g.Regions)))
	for _, r := range g.Regions {
		e.str(r.Name)
		e.u8(r.Heap)
		e.i64(r.Bytes)
		e.i64(r.Align)
	}
	sections[tagRegions], e = e.b, enc{}

	e.u32(uint32(len(g.Weights)))
	for _, w := range g.Weights {
		e.str(w.Buffer)
		e.str(w.Tensor)
		e.u32(w.Type)
		e.u32(uint32(len(w.Dims)))
		for _, d := range w.Dims {
			e.i64(d)
		}
		e.u32(w.Region)
		e.i64(w.Offset)
		e.i64(w.Bytes)
	}
	sections[tagWeights], e = e.b, enc{}

	e.u32(uint32(len(g.Kernels)))
	for _, k := range g.Kernels {
		e.str(k.Name)
		e.str(k.File)
		e.b = append(e.b, k.Hash[:]...)
	}
	sections[tagKernels], e = e.b, enc{}

	var stream, relocs, live enc
	e.u32(uint32(len(g.Variants)))
	for _, v := range g.Variants {
		e.u8(uint8(v.Stage))
		e.u32(v.Slots)
		e.u32(v.Rows)
		e.u32(v.Dispatches)
		e.i64(v.ScratchBytes)
		e.i64(v.PeakBytes)
		e.u64(uint64(len(stream.b) / 4))
		e.u64(uint64(len(v.Words)))
		for _, w := range v.Words {
			stream.u32(w)
		}
		e.u64(uint64(len(relocs.b) / relocBytes))
		e.u64(uint64(len(v.Relocs)))
		for _, r := range v.Relocs {
			relocs.u32(r.Word)
			relocs.u8(uint8(r.Kind))
			relocs.u8(uint8(r.Sym.Space))
			relocs.u16(0)
			relocs.u32(r.Sym.Index)
			relocs.u64(r.Sym.Addend)
		}
		e.u64(uint64(len(live.b)))
		start := len(live.b)
		live.u32(uint32(len(v.Liveness)))
		for _, l := range v.Liveness {
			live.str(l.Name)
			live.i64(l.Bytes)
			live.u32(uint32(l.Def))
			live.u32(uint32(l.LastRead))
			live.u32(uint32(l.Physical))
			live.i64(l.Offset)
		}
		e.u64(uint64(len(live.b) - start))
	}
	sections[tagVariants] = e.b
	sections[tagStream] = stream.b
	sections[tagRelocs] = relocs.b
	sections[tagLiveness] = live.b
	if len(g.Schedules) > 0 {
		sections[tagMegakernel] = encodeSchedules(g.Schedules)
	}
	return assemble(sections)
}

const relocBytes = 20

// assemble lays out header, section table and sections (8-aligned) in tag order.
func assemble(sections map[string][]byte) []byte {
	tags := make([]string, 0, len(sections))
	for t := range sections {
		tags = append(tags, t)
	}
	sort.Strings(tags)
	off := uint64(headerBytes + entryBytes*len(tags))
	var table enc
	for _, t := range tags {
		off = (off + 7) &^ 7
		table.b = append(table.b, t...)
		table.u32(0)
		table.u64(off)
		table.u64(uint64(len(sections[t])))
		table.u32(crc32.Checksum(sections[t], castagnoli))
		table.u32(0)
		off += uint64(len(sections[t]))
	}
	var out enc
	out.u32(GraphMagic)
	out.u16(VersionMajor)
	out.u16(VersionMinor)
	out.u32(uint32(len(tags)))
	out.u32(tableChecksum(out.b[4:8], table.b))
	out.b = append(out.b, table.b...)
	for _, t := range tags {
		for len(out.b)%8 != 0 {
			out.b = append(out.b, 0)
		}
		out.b = append(out.b, sections[t]...)
	}
	return out.b
}

// tableChecksum is the header's checksum: of the section table, and from
// 2.1 on of the version before it too, so that a flipped version bit
// (2.1 read as 2.0, which would drop its new sections) is caught as well.
func tableChecksum(version, table []byte) uint32 {
	if binary.LittleEndian.Uint16(version[2:]) == 0 {
		return crc32.Checksum(table, castagnoli)
	}
	return crc32.Update(crc32.Checksum(version, castagnoli), castagnoli, table)
}

// sectionTable checks the header and returns each section's bytes,
// verifying every checksum.
func sectionTable(b []byte) (major, minor uint16, _ map[string][]byte, _ error) {
	if len(b) < headerBytes {
		return 0, 0, nil, fmt.Errorf("%w: graph file of %d bytes is shorter than its header", ErrFormat, len(b))
	}
	le := binary.LittleEndian
	if m := le.Uint32(b); m != GraphMagic {
		return 0, 0, nil, fmt.Errorf("%w: graph file magic %#08x (want %#08x): not a zrt graph file", ErrFormat, m, GraphMagic)
	}
	major, minor = le.Uint16(b[4:]), le.Uint16(b[6:])
	if major != VersionMajor || minor > VersionMinor {
		return major, minor, nil, fmt.Errorf("%w: graph file version %d.%d, this zrt reads %d.0–%d.%d: rebuild the bundle with this zrtc",
			ErrFormat, major, minor, VersionMajor, VersionMajor, VersionMinor)
	}
	n := uint64(le.Uint32(b[8:]))
	if n > 1024 || headerBytes+n*entryBytes > uint64(len(b)) {
		return major, minor, nil, fmt.Errorf("%w: section table of %d entries does not fit", ErrFormat, n)
	}
	table := b[headerBytes : headerBytes+n*entryBytes]
	if tableChecksum(b[4:8], table) != le.Uint32(b[12:]) {
		return major, minor, nil, fmt.Errorf("%w: section table checksum mismatch (corrupt file)", ErrFormat)
	}
	secs := map[string][]byte{}
	for i := uint64(0); i < n; i++ {
		e := table[i*entryBytes:]
		tag := string(e[:4])
		off, size, sum := le.Uint64(e[8:]), le.Uint64(e[16:]), le.Uint32(e[24:])
		if off > uint64(len(b)) || size > uint64(len(b))-off {
			return major, minor, nil, fmt.Errorf("%w: section %s [%d,+%d) lies outside the %d-byte file (truncated?)", ErrFormat, tag, off, size, len(b))
		}
		s := b[off : off+size]
		if crc32.Checksum(s, castagnoli) != sum {
			return major, minor, nil, fmt.Errorf("%w: section %s checksum mismatch (corrupt file)", ErrFormat, tag)
		}
		if _, dup := secs[tag]; dup {
			return major, minor, nil, fmt.Errorf("%w: duplicate section %s", ErrFormat, tag)
		}
		secs[tag] = s
	}
	if err := checkCoverage(b, headerBytes+int(n)*entryBytes, table, int(n)); err != nil {
		return major, minor, nil, err
	}
	for _, t := range requiredSections {
		if _, ok := secs[t]; !ok {
			return major, minor, nil, fmt.Errorf("%w: missing section %s", ErrFormat, t)
		}
	}
	return major, minor, secs, nil
}

// checkCoverage requires the sections to follow the table in order without
// overlap, with only zero padding between them and nothing after the last,
// so that no byte of the file escapes a check.
func checkCoverage(b []byte, pos int, table []byte, n int) error {
	type span struct{ off, end uint64 }
	spans := make([]span, n)
	for i := range spans {
		e := table[i*entryBytes:]
		off := binary.LittleEndian.Uint64(e[8:])
		spans[i] = span{off, off + binary.LittleEndian.Uint64(e[16:])}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].off < spans[j].off })
	at := uint64(pos)
	for _, s := range spans {
		if s.off < at {
			return fmt.Errorf("%w: sections overlap at byte %d", ErrFormat, s.off)
		}
		for ; at < s.off; at++ {
			if b[at] != 0 {
				return fmt.Errorf("%w: non-zero padding at byte %d (corrupt file)", ErrFormat, at)
			}
		}
		at = s.end
	}
	if at != uint64(len(b)) {
		return fmt.Errorf("%w: %d bytes after the last section", ErrFormat, uint64(len(b))-at)
	}
	return nil
}

// DecodeGraph parses and checks a graph file. The stream words are copied
// so the caller may patch them.
func DecodeGraph(b []byte) (*Graph, error) {
	major, minor, secs, err := sectionTable(b)
	if err != nil {
		return nil, err
	}
	g := &Graph{Major: major, Minor: minor, ConfigTOML: string(secs[tagConfig]), Vocab: secs[tagVocab]}
	d := newDec(secs[tagIdent], tagIdent)
	g.Ident.Producer, g.Ident.Flags, g.Ident.Target, g.Ident.SourceName = d.str(), d.str(), d.str(), d.str()
	copy(g.Ident.SourceHash[:], d.Take(32))
	copy(g.Ident.WeightsHash[:], d.Take(32))
	if err := d.done(); err != nil {
		return nil, err
	}

	d = newDec(secs[tagHparams], tagHparams)
	decodeHparams(d, &g.Hparams)
	if err := d.done(); err != nil {
		return nil, err
	}

	d = newDec(secs[tagRegions], tagRegions)
	g.Regions = make([]Region, d.count(21))
	for i := range g.Regions {
		g.Regions[i] = Region{Name: d.str(), Heap: d.U8(), Bytes: d.i64(), Align: d.i64()}
		if r := g.Regions[i]; d.Err == nil && (r.Bytes < 0 || r.Align <= 0 || r.Align&(r.Align-1) != 0) {
			return nil, fmt.Errorf("%w: region %q has size %d, alignment %d", ErrFormat, r.Name, r.Bytes, r.Align)
		}
	}
	if err := d.done(); err != nil {
		return nil, err
	}

	d = newDec(secs[tagWeights], tagWeights)
	g.Weights = make([]Weight, d.count(40))
	for i := range g.Weights {
		w := &g.Weights[i]
		w.Buffer, w.Tensor, w.Type = d.str(), d.str(), d.U32()
		w.Dims = make([]int64, d.count(8))
		for j := range w.Dims {
			w.Dims[j] = d.i64()
		}
		w.Region, w.Offset, w.Bytes = d.U32(), d.i64(), d.i64()
		if d.Err == nil && (int(w.Region) >= len(g.Regions) || w.Offset < 0 || w.Bytes < 0 || w.Offset > g.Regions[w.Region].Bytes-w.Bytes) {
			return nil, fmt.Errorf("%w: weight %q lies outside its region", ErrFormat, w.Buffer)
		}
	}
	if err := d.done(); err != nil {
		return nil, err
	}

	d = newDec(secs[tagKernels], tagKernels)
	g.Kernels = make([]Kernel, d.count(40))
	for i := range g.Kernels {
		g.Kernels[i].Name, g.Kernels[i].File = d.str(), d.str()
		copy(g.Kernels[i].Hash[:], d.Take(32))
	}
	if err := d.done(); err != nil {
		return nil, err
	}

	stream, relocs, live := secs[tagStream], secs[tagRelocs], secs[tagLiveness]
	if len(stream)%4 != 0 || len(relocs)%relocBytes != 0 {
		return nil, fmt.Errorf("%w: stream or relocation section has a partial record", ErrFormat)
	}
	d = newDec(secs[tagVariants], tagVariants)
	g.Variants = make([]Variant, d.count(60))
	for i := range g.Variants {
		v := &g.Variants[i]
		v.Stage, v.Slots, v.Rows, v.Dispatches = Stage(d.U8()), d.U32(), d.U32(), d.U32()
		v.ScratchBytes, v.PeakBytes = d.i64(), d.i64()
		wOff, wLen, rOff, rLen, lOff, lLen := d.U64(), d.U64(), d.U64(), d.U64(), d.U64(), d.U64()
		if d.Err != nil {
			break
		}
		if wOff > uint64(len(stream)/4) || wLen > uint64(len(stream)/4)-wOff ||
			rOff > uint64(len(relocs)/relocBytes) || rLen > uint64(len(relocs)/relocBytes)-rOff ||
			lOff > uint64(len(live)) || lLen > uint64(len(live))-lOff {
			return nil, fmt.Errorf("%w: variant %d points outside the stream, relocation or liveness sections", ErrFormat, i)
		}
		v.Words = make([]uint32, wLen)
		for j := range v.Words {
			v.Words[j] = binary.LittleEndian.Uint32(stream[(wOff+uint64(j))*4:])
		}
		v.Relocs = make([]pm4.Reloc, rLen)
		for j := range v.Relocs {
			rb := relocs[(rOff+uint64(j))*relocBytes:]
			v.Relocs[j] = pm4.Reloc{Word: binary.LittleEndian.Uint32(rb), Kind: pm4.RelocKind(rb[4]),
				Sym: pm4.Symbol{Space: pm4.Space(rb[5]), Index: binary.LittleEndian.Uint32(rb[8:]), Addend: binary.LittleEndian.Uint64(rb[12:])}}
		}
		ld := newDec(live[lOff:lOff+lLen], tagLiveness)
		v.Liveness = make([]RegLive, ld.count(32))
		for j := range v.Liveness {
			v.Liveness[j] = RegLive{Name: ld.str(), Bytes: ld.i64(), Def: int32(ld.U32()), LastRead: int32(ld.U32()), Physical: int32(ld.U32()), Offset: ld.i64()}
		}
		if err := ld.done(); err != nil {
			return nil, err
		}
	}
	if err := d.done(); err != nil {
		return nil, err
	}
	if b, ok := secs[tagMegakernel]; ok {
		if g.Schedules, err = decodeSchedules(b, g.Variants); err != nil {
			return nil, err
		}
	}
	return g, nil
}
