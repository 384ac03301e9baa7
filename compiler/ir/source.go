package ir

import (
	"fmt"
	"strconv"
	"strings"
)

// Source is one part of a derived weight's bytes (Buffer.Sources): a GGUF
// tensor whole, or a strided slice of its rows. Written "T[lo:hi/period]",
// the slice is rows lo..hi-1 of every block of period consecutive rows of
// T (a row being Dims[0] elements): the gate half of each expert's rows
// of a fused gate|up expert tensor, say. Weight-layout changes like this
// happen when the pack is written, so kernels see an ordinary tensor.
type Source struct {
	Tensor         string
	Lo, Hi, Period int64
}

// Whole reports whether the source is its tensor entire.
func (s Source) Whole() bool { return s.Period == 0 }

func (s Source) String() string {
	if s.Whole() {
		return s.Tensor
	}
	return fmt.Sprintf("%s[%d:%d/%d]", s.Tensor, s.Lo, s.Hi, s.Period)
}

// ParseSource reads a source as String writes it.
func ParseSource(text string) (Source, error) {
	open := strings.LastIndexByte(text, '[')
	if open < 0 || !strings.HasSuffix(text, "]") {
		return Source{Tensor: text}, nil
	}
	spec := text[open+1 : len(text)-1]
	lohi, period, ok := strings.Cut(spec, "/")
	lo, hi, ok2 := strings.Cut(lohi, ":")
	var n [3]int64
	for i, f := range []string{lo, hi, period} {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil || !ok || !ok2 {
			return Source{}, fmt.Errorf("source %q: want TENSOR[lo:hi/period]", text)
		}
		n[i] = v
	}
	s := Source{Tensor: text[:open], Lo: n[0], Hi: n[1], Period: n[2]}
	if s.Lo < 0 || s.Hi <= s.Lo || s.Period < s.Hi {
		return Source{}, fmt.Errorf("source %q: rows %d:%d of blocks of %d", text, s.Lo, s.Hi, s.Period)
	}
	return s, nil
}

// Ranges returns the byte ranges of the source in its tensor's data, in
// order, given the tensor's rows and its size in bytes; it fails when the
// slice does not fit the tensor.
func (s Source) Ranges(rows, size int64) ([][2]int64, error) {
	if s.Whole() {
		return [][2]int64{{0, size}}, nil
	}
	if rows < 1 || size%rows != 0 || rows%s.Period != 0 {
		return nil, fmt.Errorf("source %s: tensor of %d rows (%d bytes) is not made of blocks of %d rows", s, rows, size, s.Period)
	}
	rb := size / rows
	var out [][2]int64
	for b := int64(0); b < rows; b += s.Period {
		out = append(out, [2]int64{(b + s.Lo) * rb, (b + s.Hi) * rb})
	}
	return out, nil
}
