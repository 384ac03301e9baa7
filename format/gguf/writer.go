package gguf

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"

	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/publish"
)

// Writer assembles a GGUF v3 file in memory, in the order entries are added.
// It is used to make synthetic models and malformed inputs for tests.
type Writer struct {
	kv      []KV
	tensors []wtensor
	align   int64
}

type wtensor struct {
	name string
	dims []int64
	typ  ggml.Type
	data []byte
}

// NewWriter returns an empty writer with the default alignment.
func NewWriter() *Writer { return &Writer{align: DefaultAlignment} }

// Set adds a metadata entry.
func (w *Writer) Set(key string, v Value) {
	if key == "general.alignment" {
		if a, err := v.Uint(); err == nil && a > 0 {
			w.align = int64(a)
		}
	}
	w.kv = append(w.kv, KV{Key: key, Value: v})
}

// AddTensor adds a tensor; data must hold exactly its encoded bytes.
func (w *Writer) AddTensor(name string, t ggml.Type, dims []int64, data []byte) error {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	rb, err := t.RowBytes(dims[0])
	if err != nil {
		return fmt.Errorf("gguf: tensor %q: %w", name, err)
	}
	if want := rb * (n / dims[0]); int64(len(data)) != want {
		return fmt.Errorf("gguf: tensor %q: %d bytes of data, want %d", name, len(data), want)
	}
	w.tensors = append(w.tensors, wtensor{name, append([]int64(nil), dims...), t, data})
	return nil
}

// Bytes encodes the file.
func (w *Writer) Bytes() []byte {
	var b bytes.Buffer
	le := func(x any) { binary.Write(&b, binary.LittleEndian, x) }
	str := func(s string) { le(uint64(len(s))); b.WriteString(s) }
	le(uint32(Magic))
	le(uint32(3))
	le(uint64(len(w.tensors)))
	le(uint64(len(w.kv)))
	for _, kv := range w.kv {
		str(kv.Key)
		le(uint32(kv.Value.Type))
		writeValue(&b, kv.Value)
	}
	off := int64(0)
	offs := make([]int64, len(w.tensors))
	for i, t := range w.tensors {
		str(t.name)
		le(uint32(len(t.dims)))
		for _, d := range t.dims {
			le(uint64(d))
		}
		le(uint32(t.typ))
		offs[i] = off
		le(uint64(off))
		off = alignUp(off+int64(len(t.data)), w.align)
	}
	pad := func() {
		for int64(b.Len())%w.align != 0 {
			b.WriteByte(0)
		}
	}
	pad()
	base := int64(b.Len())
	for i, t := range w.tensors {
		for int64(b.Len()) < base+offs[i] {
			b.WriteByte(0)
		}
		b.Write(t.data)
	}
	if len(w.tensors) > 0 {
		pad()
	}
	return b.Bytes()
}

// WriteFile writes the file atomically (temp file, then rename).
func (w *Writer) WriteFile(path string) error {
	return WriteFileAtomic(path, w.Bytes())
}

// WriteFileAtomic writes data to path crash-safely (format/publish):
// through a temporary file in the same directory, fsynced and renamed over
// path. An existing path must be a GGUF file; anything else is refused,
// never overwritten.
func WriteFileAtomic(path string, data []byte) error {
	return publish.File(publish.OS{}, path, IsGGUF, data)
}

// IsGGUF accepts a regular file that starts with the GGUF magic, the only
// kind of file a GGUF writer may replace.
func IsGGUF(path string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("it is not a regular file")
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var magic [4]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil || string(magic[:]) != "GGUF" {
		return fmt.Errorf("it is not a GGUF file")
	}
	return nil
}

func alignUp(x, a int64) int64 { return (x + a - 1) / a * a }

func writeValue(b io.Writer, v Value) {
	le := func(x any) { binary.Write(b, binary.LittleEndian, x) }
	switch v.Type {
	case TypeUint8:
		le(uint8(v.v.(uint64)))
	case TypeInt8:
		le(int8(v.v.(int64)))
	case TypeUint16:
		le(uint16(v.v.(uint64)))
	case TypeInt16:
		le(int16(v.v.(int64)))
	case TypeUint32:
		le(uint32(v.v.(uint64)))
	case TypeInt32:
		le(int32(v.v.(int64)))
	case TypeUint64:
		le(v.v.(uint64))
	case TypeInt64:
		le(v.v.(int64))
	case TypeFloat32:
		le(math.Float32bits(float32(v.v.(float64))))
	case TypeFloat64:
		le(v.v.(float64))
	case TypeBool:
		if v.v.(bool) {
			le(uint8(1))
		} else {
			le(uint8(0))
		}
	case TypeString:
		s := v.v.(string)
		le(uint64(len(s)))
		io.WriteString(b, s)
	case TypeArray:
		le(uint32(v.Elem))
		le(uint64(v.Len()))
		switch x := v.v.(type) {
		case []string:
			for _, s := range x {
				le(uint64(len(s)))
				io.WriteString(b, s)
			}
		case []Value:
			for _, e := range x {
				writeValue(b, e) // a nested array: element type, count, items
			}
		case []bool:
			for _, e := range x {
				if e {
					le(uint8(1))
				} else {
					le(uint8(0))
				}
			}
		default:
			le(x) // fixed-size slices encode directly
		}
	}
}
