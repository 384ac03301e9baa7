package ir

import (
	"fmt"
	"strconv"
	"strings"
)

// Source is one part of a derived weight's bytes (Buffer.Sources): a GGUF
// tensor whole, a strided slice of its rows, or a slice of every row's
// columns. Written "T[lo:hi/period]", the slice is rows lo..hi-1 of every
// block of period consecutive rows of T (a row being Dims[0] elements):
// the gate half of each expert's rows of a fused gate|up expert tensor,
// or one rank's output rows of a column-parallel projection. Written
// "T{lo:hi/cols}", it is columns lo..hi-1 of every row of cols columns
// (cols is Dims[0]): one rank's inputs of a row-parallel projection,
// which must start and end on the weight type's blocks. Weight-layout
// changes like these happen when the pack is written, so kernels see an
// ordinary tensor.
type Source struct {
	Tensor         string
	Lo, Hi, Period int64
	// Cols marks a column slice: Lo..Hi-1 of rows of Period columns.
	Cols bool
}

// Whole reports whether the source is its tensor entire.
func (s Source) Whole() bool { return s.Period == 0 }

func (s Source) String() string {
	switch {
	case s.Whole():
		return s.Tensor
	case s.Cols:
		return fmt.Sprintf("%s{%d:%d/%d}", s.Tensor, s.Lo, s.Hi, s.Period)
	}
	return fmt.Sprintf("%s[%d:%d/%d]", s.Tensor, s.Lo, s.Hi, s.Period)
}

// ParseSource reads a source as String writes it.
func ParseSource(text string) (Source, error) {
	if open := strings.LastIndexByte(text, '{'); open >= 0 && strings.HasSuffix(text, "}") {
		s, err := ParseSource(text[:open] + "[" + text[open+1:len(text)-1] + "]")
		if err != nil {
			return Source{}, fmt.Errorf("source %q: want TENSOR{lo:hi/cols}", text)
		}
		s.Cols = true
		return s, nil
	}
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
// order, given the tensor's rows, its size in bytes and the bytes of its
// first n elements of a row (an error where n ends inside a block of
// its type); it fails when the slice does not fit the tensor.
func (s Source) Ranges(rows, size int64, rowBytes func(n int64) (int64, error)) ([][2]int64, error) {
	if s.Whole() {
		return [][2]int64{{0, size}}, nil
	}
	if s.Cols {
		return s.colRanges(rows, size, rowBytes)
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

// colRanges is Ranges of a column slice.
func (s Source) colRanges(rows, size int64, rowBytes func(n int64) (int64, error)) ([][2]int64, error) {
	rb, err := rowBytes(s.Period)
	if err != nil || rows < 1 || rb*rows != size {
		return nil, fmt.Errorf("source %s: tensor of %d rows (%d bytes) is not made of rows of %d columns", s, rows, size, s.Period)
	}
	lo, err := rowBytes(s.Lo)
	if err != nil {
		return nil, fmt.Errorf("source %s: %w", s, err)
	}
	hi, err := rowBytes(s.Hi)
	if err != nil {
		return nil, fmt.Errorf("source %s: %w", s, err)
	}
	out := make([][2]int64, rows)
	for r := range rows {
		out[r] = [2]int64{r*rb + lo, r*rb + hi}
	}
	return out, nil
}
