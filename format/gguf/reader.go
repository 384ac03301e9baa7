// Package gguf reads and writes GGUF model files (versions 2 and 3).
//
// The reader is strict: every length is checked against the bytes that
// remain, unknown value types and tensor type ids that ggml never defined
// are errors (every defined id is walkable, whether or not zrt computes
// with it: see format/ggml), tensor data must lie
// inside the file and be aligned, and names must be unique. A file that
// passes Parse can be indexed without further bounds checks. Open maps the
// file read-only so tensor data is never copied.
package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/zrtdev/zrt/format/ggml"
)

// Magic is "GGUF" read as a little-endian uint32.
const Magic = 0x46554747

// DefaultAlignment is the tensor data alignment when general.alignment is absent.
const DefaultAlignment = 32

// Limits that keep a hostile header from making the reader allocate without
// bound before it discovers the file is short.
const (
	maxDims        = 4
	maxStringBytes = 1 << 30
)

// ErrFormat is wrapped by every error that describes malformed input.
var ErrFormat = errors.New("gguf: malformed file")

// KV is one metadata entry.
type KV struct {
	Key   string
	Value Value
}

// TensorInfo describes one tensor. Dims are in ggml order: Dims[0] is the
// fastest-varying (row length).
type TensorInfo struct {
	Name   string
	Dims   []int64
	Type   ggml.Type
	Offset int64 // relative to the start of the data section
	Size   int64 // bytes
	// part is the file of a split GGUF that holds the data (0: the first,
	// or the only one).
	part int
}

// Elements returns the element count.
func (t *TensorInfo) Elements() int64 {
	n := int64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// File is a parsed GGUF file. Its tensor data aliases the bytes it was
// parsed from.
type File struct {
	Version    uint32
	KV         []KV
	Tensors    []TensorInfo
	Alignment  int64
	DataOffset int64 // absolute offset of the data section

	data    []byte
	kvIndex map[string]int
	tIndex  map[string]int
	closer  func() error
	// parts are the files of a split GGUF (OpenModel), nil for one file.
	parts []*File
}

// Lookup returns the metadata value for key.
func (f *File) Lookup(key string) (Value, bool) {
	i, ok := f.kvIndex[key]
	if !ok {
		return Value{}, false
	}
	return f.KV[i].Value, true
}

// Tensor returns the info of the named tensor.
func (f *File) Tensor(name string) (*TensorInfo, bool) {
	i, ok := f.tIndex[name]
	if !ok {
		return nil, false
	}
	return &f.Tensors[i], true
}

// TensorData returns the bytes of t; they alias the mapped file (the
// part of a split GGUF that holds them).
func (f *File) TensorData(t *TensorInfo) []byte {
	src := f
	if f.parts != nil {
		src = f.parts[t.part]
	}
	start := src.DataOffset + t.Offset
	return src.data[start : start+t.Size : start+t.Size]
}

// Close releases the mapping of a file returned by Open. Tensor data must
// not be used afterwards.
func (f *File) Close() error {
	var err error
	for _, p := range f.parts {
		err = errors.Join(err, p.Close())
	}
	f.parts = nil
	if f.closer == nil {
		return err
	}
	c := f.closer
	f.closer = nil
	return errors.Join(err, c())
}

// Typed lookups used throughout the compiler. Each names the key in its error.

// String returns the string at key.
func (f *File) String(key string) (string, error) { return keyed(f, key, Value.StringValue) }

// Uint returns the non-negative integer at key.
func (f *File) Uint(key string) (uint64, error) { return keyed(f, key, Value.Uint) }

// Float returns the number at key.
func (f *File) Float(key string) (float64, error) { return keyed(f, key, Value.Float) }

// keyed reads the value at key with get, naming the key in the error.
func keyed[T any](f *File, key string, get func(Value) (T, error)) (T, error) {
	var zero T
	v, ok := f.Lookup(key)
	if !ok {
		return zero, fmt.Errorf("gguf: missing key %q", key)
	}
	x, err := get(v)
	if err != nil {
		return zero, fmt.Errorf("gguf: key %q: %w", key, err)
	}
	return x, nil
}

// reader is a bounds-checked cursor over the header.
type reader struct {
	b   []byte
	off int64
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: at byte %d: %s", ErrFormat, r.off, fmt.Sprintf(format, args...))
	}
}

func (r *reader) take(n int64) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > int64(len(r.b))-r.off {
		r.fail("need %d bytes, %d remain (truncated file?)", n, int64(len(r.b))-r.off)
		return nil
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s
}

func (r *reader) u8() uint8 {
	if s := r.take(1); s != nil {
		return s[0]
	}
	return 0
}
func (r *reader) u16() uint16 {
	if s := r.take(2); s != nil {
		return binary.LittleEndian.Uint16(s)
	}
	return 0
}
func (r *reader) u32() uint32 {
	if s := r.take(4); s != nil {
		return binary.LittleEndian.Uint32(s)
	}
	return 0
}
func (r *reader) u64() uint64 {
	if s := r.take(8); s != nil {
		return binary.LittleEndian.Uint64(s)
	}
	return 0
}

func (r *reader) str() string {
	n := r.u64()
	if r.err != nil {
		return ""
	}
	if n > maxStringBytes {
		r.fail("string length %d too large", n)
		return ""
	}
	return string(r.take(int64(n)))
}

// count reads an element count and checks that count elements of at least
// minSize bytes each could fit in what remains, so a hostile count cannot
// make us allocate gigabytes before failing.
func (r *reader) count(minSize int64, what string) int {
	n := r.u64()
	if r.err != nil {
		return 0
	}
	remain := uint64(int64(len(r.b)) - r.off)
	if minSize > 0 && n > remain/uint64(minSize) {
		r.fail("%s count %d cannot fit in the %d bytes that remain", what, n, remain)
		return 0
	}
	return int(n)
}

// Parse parses a GGUF file held in b. The returned File aliases b.
func Parse(b []byte) (*File, error) {
	r := &reader{b: b}
	if magic := r.u32(); r.err == nil && magic != Magic {
		return nil, fmt.Errorf("%w: bad magic %#08x (want \"GGUF\")", ErrFormat, magic)
	}
	f := &File{data: b, kvIndex: map[string]int{}, tIndex: map[string]int{}}
	f.Version = r.u32()
	if r.err == nil && f.Version != 2 && f.Version != 3 {
		return nil, fmt.Errorf("%w: unsupported version %d (zrt reads GGUF v2 and v3)", ErrFormat, f.Version)
	}
	// Each tensor info is at least 8+4+8+4+8 bytes, each KV at least 8+4+1.
	nTensors := r.count(32, "tensor")
	nKV := r.count(13, "metadata")
	for i := 0; i < nKV && r.err == nil; i++ {
		key := r.str()
		v := r.value(ValueType(r.u32()), 0)
		if r.err != nil {
			return nil, fmt.Errorf("gguf: metadata entry %d (%q): %w", i, key, r.err)
		}
		if _, dup := f.kvIndex[key]; dup {
			return nil, fmt.Errorf("%w: duplicate metadata key %q", ErrFormat, key)
		}
		f.kvIndex[key] = len(f.KV)
		f.KV = append(f.KV, KV{Key: key, Value: v})
	}
	if r.err != nil {
		return nil, r.err
	}

	f.Alignment = DefaultAlignment
	if v, ok := f.Lookup("general.alignment"); ok {
		a, err := v.Uint()
		if err != nil || a == 0 || a&(a-1) != 0 || a > 1<<20 {
			return nil, fmt.Errorf("%w: general.alignment %v is not a power of two", ErrFormat, v)
		}
		f.Alignment = int64(a)
	}

	for i := 0; i < nTensors && r.err == nil; i++ {
		t := TensorInfo{Name: r.str()}
		nd := r.u32()
		if r.err == nil && (nd == 0 || nd > maxDims) {
			r.fail("tensor %q has %d dimensions", t.Name, nd)
		}
		elems := int64(1)
		for d := uint32(0); d < nd && r.err == nil; d++ {
			x := r.u64()
			if x == 0 || x > math.MaxInt32*16 || elems > math.MaxInt64/int64(x) {
				r.fail("tensor %q dimension %d is %d", t.Name, d, x)
				break
			}
			elems *= int64(x)
			t.Dims = append(t.Dims, int64(x))
		}
		t.Type = ggml.Type(r.u32())
		off := r.u64()
		if r.err != nil {
			break
		}
		if !t.Type.Known() {
			return nil, fmt.Errorf("%w: tensor %q has type id %d, which no ggml version defines", ErrFormat, t.Name, uint32(t.Type))
		}
		rowBytes, err := t.Type.RowBytes(t.Dims[0])
		if err != nil {
			return nil, fmt.Errorf("%w: tensor %q: %v", ErrFormat, t.Name, err)
		}
		rows := elems / t.Dims[0]
		if rowBytes > math.MaxInt64/rows {
			return nil, fmt.Errorf("%w: tensor %q of dims %v is larger than any file", ErrFormat, t.Name, t.Dims)
		}
		t.Size = rowBytes * rows
		if off > math.MaxInt64/2 || int64(off)%f.Alignment != 0 {
			return nil, fmt.Errorf("%w: tensor %q offset %d is not aligned to %d", ErrFormat, t.Name, off, f.Alignment)
		}
		t.Offset = int64(off)
		if _, dup := f.tIndex[t.Name]; dup {
			return nil, fmt.Errorf("%w: duplicate tensor %q", ErrFormat, t.Name)
		}
		f.tIndex[t.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
	}
	if r.err != nil {
		return nil, r.err
	}

	f.DataOffset = (r.off + f.Alignment - 1) / f.Alignment * f.Alignment
	if f.DataOffset > int64(len(b)) && len(f.Tensors) > 0 {
		return nil, fmt.Errorf("%w: data section starts at %d beyond the end of the %d-byte file", ErrFormat, f.DataOffset, len(b))
	}
	dataLen := int64(len(b)) - f.DataOffset
	// Sort by offset to check that tensors neither leave the file nor overlap.
	order := make([]int, len(f.Tensors))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, c int) bool { return f.Tensors[order[a]].Offset < f.Tensors[order[c]].Offset })
	end := int64(0)
	for _, i := range order {
		t := &f.Tensors[i]
		if t.Offset < end {
			return nil, fmt.Errorf("%w: tensor %q at offset %d overlaps the previous tensor", ErrFormat, t.Name, t.Offset)
		}
		if t.Size > dataLen || t.Offset > dataLen-t.Size {
			return nil, fmt.Errorf("%w: tensor %q data [%d, %d) lies outside the %d-byte data section (truncated file?)",
				ErrFormat, t.Name, t.Offset, t.Offset+t.Size, dataLen)
		}
		end = t.Offset + t.Size
	}
	return f, nil
}

// value decodes a value of type t. depth bounds array nesting.
func (r *reader) value(t ValueType, depth int) Value {
	v := Value{Type: t}
	switch t {
	case TypeUint8:
		v.v = uint64(r.u8())
	case TypeInt8:
		v.v = int64(int8(r.u8()))
	case TypeUint16:
		v.v = uint64(r.u16())
	case TypeInt16:
		v.v = int64(int16(r.u16()))
	case TypeUint32:
		v.v = uint64(r.u32())
	case TypeInt32:
		v.v = int64(int32(r.u32()))
	case TypeUint64:
		v.v = r.u64()
	case TypeInt64:
		v.v = int64(r.u64())
	case TypeFloat32:
		v.v = float64(math.Float32frombits(r.u32()))
	case TypeFloat64:
		v.v = math.Float64frombits(r.u64())
	case TypeBool:
		b := r.u8()
		if b > 1 {
			r.fail("bool value %d", b)
		}
		v.v = b == 1
	case TypeString:
		v.v = r.str()
	case TypeArray:
		if depth > 2 {
			r.fail("arrays nested too deeply")
			return v
		}
		v.Elem = ValueType(r.u32())
		v.v = r.array(v.Elem, depth)
	default:
		r.fail("unknown value type %d", uint32(t))
	}
	return v
}

func (r *reader) array(et ValueType, depth int) any {
	minSize := int64(8) // strings and arrays carry at least a length
	if s, ok := scalarSize[et]; ok {
		minSize = int64(s)
	} else if et != TypeString && et != TypeArray {
		r.fail("unknown array element type %d", uint32(et))
		return nil
	}
	n := r.count(minSize, "array element")
	if r.err != nil {
		return nil
	}
	switch et {
	case TypeUint8:
		return fixed(r, n, 1, func(b []byte) uint8 { return b[0] })
	case TypeInt8:
		return fixed(r, n, 1, func(b []byte) int8 { return int8(b[0]) })
	case TypeUint16:
		return fixed(r, n, 2, binary.LittleEndian.Uint16)
	case TypeInt16:
		return fixed(r, n, 2, func(b []byte) int16 { return int16(binary.LittleEndian.Uint16(b)) })
	case TypeUint32:
		return fixed(r, n, 4, binary.LittleEndian.Uint32)
	case TypeInt32:
		return fixed(r, n, 4, func(b []byte) int32 { return int32(binary.LittleEndian.Uint32(b)) })
	case TypeUint64:
		return fixed(r, n, 8, binary.LittleEndian.Uint64)
	case TypeInt64:
		return fixed(r, n, 8, func(b []byte) int64 { return int64(binary.LittleEndian.Uint64(b)) })
	case TypeFloat32:
		return fixed(r, n, 4, func(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) })
	case TypeFloat64:
		return fixed(r, n, 8, func(b []byte) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(b)) })
	case TypeBool:
		out := make([]bool, n)
		for i := range out {
			b := r.u8()
			if b > 1 {
				r.fail("bool array element %d is %d", i, b)
			}
			out[i] = b == 1
		}
		return out
	case TypeString:
		out := make([]string, n)
		for i := range out {
			out[i] = r.str()
			if r.err != nil {
				return nil
			}
		}
		return out
	default: // TypeArray
		out := make([]Value, n)
		for i := range out {
			out[i] = r.value(TypeArray, depth+1)
			if r.err != nil {
				return nil
			}
		}
		return out
	}
}

func fixed[T any](r *reader, n, size int, dec func([]byte) T) []T {
	raw := r.take(int64(n) * int64(size))
	if raw == nil {
		return nil
	}
	out := make([]T, n)
	for i := range out {
		out[i] = dec(raw[i*size:])
	}
	return out
}
