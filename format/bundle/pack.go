package bundle

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
)

// The weights pack (weights.zrw): a header, a table of regions, then each
// region's bytes at a page-aligned offset, so the runtime maps regions
// straight from the file, and nothing after the last region.
//
// The header is magic, version, table length, a CRC-32C of the data hash
// and the table, then the SHA-256 of the data. The graph file records the
// same hash, so a loader matches the two files of one build by comparing
// 32 bytes, without hashing the data.
const (
	PackMagic    = 0x5752545A // "ZTRW"
	PackVersion  = 2          // 2: the data hash in the header
	PackPageSize = 4096

	packHeaderBytes = 48
)

// PackRegion is one region in the pack.
type PackRegion struct {
	Name   string
	Offset int64
	Bytes  int64
}

// PackWriter streams regions into a pack. Region sizes must be known up
// front so the table can precede the data; the data hash is written into
// the header at Close.
type PackWriter struct {
	f       io.WriterAt
	w       *bufio.Writer
	table   []byte
	regions []PackRegion
	next    int // index of the region being written
	pos     int64
	hash    [32]byte
	// The data's SHA-256 is computed on a goroutine fed the written
	// slices in order, so hashing (slower than copying into the page
	// cache) overlaps with writing instead of adding to it.
	hashIn  chan []byte
	hashOut chan [32]byte
}

// zeroPage pads regions; the hasher reads it, so it is never written.
var zeroPage [PackPageSize]byte

// PackFile is where a pack is written: streamed, then its header patched.
type PackFile interface {
	io.Writer
	io.WriterAt
}

// NewPackWriter writes the header and table for regions to f.
func NewPackWriter(f PackFile, names []string, sizes []int64) (*PackWriter, error) {
	var table enc
	table.u32(uint32(len(names)))
	pw := &PackWriter{f: f, w: bufio.NewWriterSize(f, 1<<20), hashIn: make(chan []byte, 256), hashOut: make(chan [32]byte, 1)}
	go func(in <-chan []byte, out chan<- [32]byte) {
		h := sha256.New()
		for b := range in {
			h.Write(b)
		}
		var sum [32]byte
		copy(sum[:], h.Sum(nil))
		out <- sum
	}(pw.hashIn, pw.hashOut)
	// Table entries have a fixed encoding size given the names.
	tableLen := 4
	for _, n := range names {
		tableLen += 4 + len(n) + 16
	}
	off := alignTo(int64(packHeaderBytes+tableLen), PackPageSize)
	for i, n := range names {
		pw.regions = append(pw.regions, PackRegion{Name: n, Offset: off, Bytes: sizes[i]})
		table.str(n)
		table.i64(off)
		table.i64(sizes[i])
		off = alignTo(off+sizes[i], PackPageSize)
	}
	pw.table = table.b
	// The hash and checksum are zero until Close: a pack cut short never
	// matches its graph file.
	var hdr enc
	hdr.u32(PackMagic)
	hdr.u32(PackVersion)
	hdr.u32(uint32(len(table.b)))
	hdr.u32(0)
	hdr.b = append(hdr.b, make([]byte, 32)...)
	if err := pw.write(append(hdr.b, table.b...), false); err != nil {
		pw.Abort()
		return nil, err
	}
	return pw, nil
}

func alignTo(x, a int64) int64 { return (x + a - 1) / a * a }

func (pw *PackWriter) write(b []byte, hashed bool) error {
	if hashed {
		if pw.hashIn == nil {
			return fmt.Errorf("bundle: pack writer used after Close or Abort")
		}
		pw.hashIn <- b
	}
	_, err := pw.w.Write(b)
	pw.pos += int64(len(b))
	return err
}

// padTo writes zeros up to absolute offset off.
func (pw *PackWriter) padTo(off int64) error {
	for pw.pos < off {
		n := min(off-pw.pos, PackPageSize)
		if err := pw.write(zeroPage[:n], true); err != nil {
			return err
		}
	}
	return nil
}

// Put writes b at offset off within the current region (offsets must
// grow). b is hashed after Put returns: it must not change until Close.
func (pw *PackWriter) Put(region int, off int64, b []byte) error {
	r := pw.regions[region]
	if off < 0 || off+int64(len(b)) > r.Bytes {
		return fmt.Errorf("bundle: pack region %s: write [%d,+%d) outside %d bytes", r.Name, off, len(b), r.Bytes)
	}
	if r.Offset+off < pw.pos {
		return fmt.Errorf("bundle: pack region %s: writes out of order", r.Name)
	}
	if err := pw.padTo(r.Offset + off); err != nil {
		return err
	}
	return pw.write(b, true)
}

// Close pads the last region and returns the SHA-256 of the data.
func (pw *PackWriter) Close() ([32]byte, error) {
	defer pw.Abort() // on an early return
	if n := len(pw.regions); n > 0 {
		last := pw.regions[n-1]
		if err := pw.padTo(alignTo(last.Offset+last.Bytes, PackPageSize)); err != nil {
			return pw.hash, err
		}
	}
	pw.hash = pw.finishHash()
	if err := pw.w.Flush(); err != nil {
		return pw.hash, err
	}
	var crc enc
	crc.u32(packChecksum(pw.hash, pw.table))
	if _, err := pw.f.WriteAt(crc.b, 12); err != nil {
		return pw.hash, err
	}
	_, err := pw.f.WriteAt(pw.hash[:], 16)
	return pw.hash, err
}

// finishHash ends the hashing goroutine and returns the data's hash.
func (pw *PackWriter) finishHash() [32]byte {
	if pw.hashIn == nil {
		return pw.hash
	}
	close(pw.hashIn)
	pw.hashIn = nil
	return <-pw.hashOut
}

// Abort stops a writer that will not be closed (its file is being
// discarded). After Close it does nothing.
func (pw *PackWriter) Abort() { pw.finishHash() }

func packChecksum(hash [32]byte, table []byte) uint32 {
	return crc32.Update(crc32.Checksum(hash[:], castagnoli), castagnoli, table)
}

// DecodePackTable checks a pack's header and returns its regions and the
// data hash its header records. Regions must lie inside the file, in
// order without overlap, and the file must end with the last one.
func DecodePackTable(b []byte) ([]PackRegion, [32]byte, error) {
	var hash [32]byte
	regs, err := decodePackTable(b, &hash)
	return regs, hash, err
}

func decodePackTable(b []byte, hash *[32]byte) ([]PackRegion, error) {
	if len(b) < packHeaderBytes {
		return nil, fmt.Errorf("%w: weights pack of %d bytes is shorter than its header", ErrFormat, len(b))
	}
	le := binary.LittleEndian
	if m := le.Uint32(b); m != PackMagic {
		return nil, fmt.Errorf("%w: weights pack magic %#08x: not a zrt weights pack", ErrFormat, m)
	}
	if v := le.Uint32(b[4:]); v != PackVersion {
		return nil, fmt.Errorf("%w: weights pack version %d, this zrt reads %d: rebuild the bundle", ErrFormat, v, PackVersion)
	}
	n := uint64(le.Uint32(b[8:]))
	if packHeaderBytes+n > uint64(len(b)) {
		return nil, fmt.Errorf("%w: weights pack table does not fit (truncated?)", ErrFormat)
	}
	copy(hash[:], b[16:48])
	table := b[packHeaderBytes : packHeaderBytes+n]
	if packChecksum(*hash, table) != le.Uint32(b[12:]) {
		return nil, fmt.Errorf("%w: weights pack header checksum mismatch (corrupt, or a build that did not finish)", ErrFormat)
	}
	d := newDec(table, "pack table")
	regs := make([]PackRegion, d.count(20))
	end := int64(packHeaderBytes) + int64(n) // the first byte a region may use
	size := int64(len(b))
	for i := range regs {
		regs[i] = PackRegion{Name: d.str(), Offset: d.i64(), Bytes: d.i64()}
		r := regs[i]
		if d.Err != nil {
			break
		}
		if r.Offset < end || r.Bytes < 0 || r.Offset%PackPageSize != 0 || r.Offset > size || r.Bytes > size-r.Offset {
			return nil, fmt.Errorf("%w: weights pack region %q [%d,+%d) lies outside the %d-byte file or overlaps what precedes it (truncated?)", ErrFormat, r.Name, r.Offset, r.Bytes, size)
		}
		end = alignTo(r.Offset+r.Bytes, PackPageSize)
	}
	if d.Err == nil && end != size {
		return nil, fmt.Errorf("%w: weights pack of %d bytes, its regions end at %d (trailing bytes or truncated)", ErrFormat, size, end)
	}
	return regs, d.done()
}

// PackDataHash returns the SHA-256 of a pack's data (everything after the
// header and table), for full verification. b must have passed
// DecodePackTable.
func PackDataHash(b []byte) [32]byte {
	n := binary.LittleEndian.Uint32(b[8:])
	return sha256.Sum256(b[packHeaderBytes+int(n):])
}
