// Package lebin reads the little-endian fields of zrt's binary formats
// (a bundle graph's sections, a GGUF header, a vocabulary blob) with a
// sticky error: the first read past the end sets Err, and every later
// read returns zero values, so a decoder checks Err once, at the end.
// Float32s and Float32Bytes convert whole rows of little-endian float32s.
package lebin

import (
	"encoding/binary"
	"errors"
	"math"
)

// ErrShort is a read past the end, where the Reader has no Short.
var ErrShort = errors.New("lebin: read past the end")

// Reader reads B from Off on.
type Reader struct {
	B   []byte
	Off int
	Err error
	// Short is the error a read of n bytes past the end sets (r.Off is
	// where the read started), in the format's words; nil: ErrShort.
	Short func(r *Reader, n int) error
}

// Left is how many bytes are left to read.
func (r *Reader) Left() int { return len(r.B) - r.Off }

// Take reads n bytes, nil once a read has failed.
func (r *Reader) Take(n int) []byte {
	if r.Err != nil {
		return nil
	}
	if n < 0 || n > r.Left() {
		if r.Short != nil {
			r.Err = r.Short(r, n)
		} else {
			r.Err = ErrShort
		}
		return nil
	}
	s := r.B[r.Off : r.Off+n]
	r.Off += n
	return s
}

// U8 reads a byte.
func (r *Reader) U8() uint8 {
	if s := r.Take(1); s != nil {
		return s[0]
	}
	return 0
}

// U16 reads a little-endian uint16.
func (r *Reader) U16() uint16 {
	if s := r.Take(2); s != nil {
		return binary.LittleEndian.Uint16(s)
	}
	return 0
}

// U32 reads a little-endian uint32.
func (r *Reader) U32() uint32 {
	if s := r.Take(4); s != nil {
		return binary.LittleEndian.Uint32(s)
	}
	return 0
}

// U64 reads a little-endian uint64.
func (r *Reader) U64() uint64 {
	if s := r.Take(8); s != nil {
		return binary.LittleEndian.Uint64(s)
	}
	return 0
}

// Float32s decodes the whole little-endian float32s of b (a region of
// activations or logits read back from a device), ignoring a partial
// last one.
func Float32s(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// Float32Bytes encodes v as little-endian float32s, Float32s' inverse.
func Float32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}
