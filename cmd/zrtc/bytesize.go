package main

import (
	"fmt"
	"strconv"
	"strings"
)

// byteSize is a flag value in bytes, written with an optional binary
// suffix: 512MiB, 16GiB, 2TiB (K/M/G/T alone mean the same).
type byteSize int64

var byteSuffixes = []struct {
	s     string
	shift uint
}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"T", 40}, {"G", 30}, {"M", 20}, {"K", 10}, {"B", 0}}

func (b *byteSize) Set(s string) error {
	num, shift := strings.TrimSpace(s), uint(0)
	for _, u := range byteSuffixes {
		if rest, ok := strings.CutSuffix(num, u.s); ok {
			num, shift = strings.TrimSpace(rest), u.shift
			break
		}
	}
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || n < 0 || n*float64(uint64(1)<<shift) > 1<<62 {
		return fmt.Errorf("%q is not a size (e.g. 512MiB, 16GiB)", s)
	}
	*b = byteSize(n * float64(uint64(1)<<shift))
	return nil
}

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Type() string { return "size" }
