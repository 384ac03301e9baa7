package bundle

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/zrtdev/zrt/format/lebin"
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

// dec reads a section's little-endian fields (lebin's sticky error: the
// first overrun sets Err and every later read returns zero, so callers
// check once at the end); what names the section in its errors.
type dec struct {
	lebin.Reader
	what string
}

func newDec(b []byte, what string) *dec {
	d := &dec{Reader: lebin.Reader{B: b}, what: what}
	d.Short = func(r *lebin.Reader, n int) error {
		return fmt.Errorf("%w: section %s: truncated at byte %d (need %d more)", ErrFormat, what, r.Off, n)
	}
	return d
}

func (d *dec) i64() int64   { return int64(d.U64()) }
func (d *dec) f32() float32 { return math.Float32frombits(d.U32()) }
func (d *dec) str() string  { return string(d.Take(int(d.U32()))) }
func (d *dec) raw() []byte  { return d.Take(int(d.U32())) }

// count reads an element count and checks it against the bytes left, given
// the minimum encoded size of one element.
func (d *dec) count(minSize int) int {
	n := d.U32()
	if d.Err == nil && uint64(n)*uint64(minSize) > uint64(d.Left()) {
		d.Err = fmt.Errorf("%w: section %s: count %d exceeds the bytes left", ErrFormat, d.what, n)
		return 0
	}
	return int(n)
}

// fail records a malformed-content error (the first one wins).
func (d *dec) fail(msg string) {
	if d.Err == nil {
		d.Err = fmt.Errorf("%w: section %s: %s", ErrFormat, d.what, msg)
	}
}

func (d *dec) done() error {
	if d.Err == nil && d.Left() != 0 {
		return fmt.Errorf("%w: section %s: %d trailing bytes", ErrFormat, d.what, d.Left())
	}
	return d.Err
}
