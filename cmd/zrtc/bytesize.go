package main

import (
	"strconv"

	"github.com/zrtdev/zrt/format/bytesize"
)

// byteSize is a flag value in bytes, written with an optional binary
// suffix (sysmem.ParseBytes).
type byteSize int64

func (b *byteSize) Set(s string) error {
	n, err := bytesize.Parse(s)
	*b = byteSize(n)
	return err
}

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Type() string { return "size" }
