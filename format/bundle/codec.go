package bundle

import (
	"encoding/binary"
	"fmt"
	"math"
)

// enc appends little-endian fields.
type enc struct{ b []byte }

func (e *enc) u8(v uint8)    { e.b = append(e.b, v) }
func (e *enc) u16(v uint16)  { e.b = binary.LittleEndian.AppendUint16(e.b, v) }
func (e *enc) u32(v uint32)  { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *enc) u64(v uint64)  { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *enc) i64(v int64)   { e.u64(uint64(v)) }
func (e *enc) f32(v float32) { e.u32(math.Float32bits(v)) }
func (e *enc) str(s string)  { e.u32(uint32(len(s))); e.b = append(e.b, s...) }
func (e *enc) raw(b []byte)  { e.u32(uint32(len(b))); e.b = append(e.b, b...) }

// dec reads little-endian fields; the first overrun sets err and every
// later read returns zero, so callers check once at the end.
type dec struct {
	b    []byte
	off  int
	err  error
	what string
}

func (d *dec) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b)-d.off {
		d.err = fmt.Errorf("%w: section %s: truncated at byte %d (need %d more)", ErrFormat, d.what, d.off, n)
		return nil
	}
	s := d.b[d.off : d.off+n]
	d.off += n
	return s
}

func (d *dec) u8() uint8 {
	if s := d.take(1); s != nil {
		return s[0]
	}
	return 0
}
func (d *dec) u16() uint16 {
	if s := d.take(2); s != nil {
		return binary.LittleEndian.Uint16(s)
	}
	return 0
}
func (d *dec) u32() uint32 {
	if s := d.take(4); s != nil {
		return binary.LittleEndian.Uint32(s)
	}
	return 0
}
func (d *dec) u64() uint64 {
	if s := d.take(8); s != nil {
		return binary.LittleEndian.Uint64(s)
	}
	return 0
}
func (d *dec) i64() int64   { return int64(d.u64()) }
func (d *dec) f32() float32 { return math.Float32frombits(d.u32()) }
func (d *dec) str() string  { return string(d.take(int(d.u32()))) }
func (d *dec) raw() []byte  { return d.take(int(d.u32())) }

// count reads an element count and checks it against the bytes left, given
// the minimum encoded size of one element.
func (d *dec) count(minSize int) int {
	n := d.u32()
	if d.err == nil && uint64(n)*uint64(minSize) > uint64(len(d.b)-d.off) {
		d.err = fmt.Errorf("%w: section %s: count %d exceeds the bytes left", ErrFormat, d.what, n)
		return 0
	}
	return int(n)
}

// fail records a malformed-content error (the first one wins).
func (d *dec) fail(msg string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: section %s: %s", ErrFormat, d.what, msg)
	}
}

func (d *dec) done() error {
	if d.err == nil && d.off != len(d.b) {
		return fmt.Errorf("%w: section %s: %d trailing bytes", ErrFormat, d.what, len(d.b)-d.off)
	}
	return d.err
}
