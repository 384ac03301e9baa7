// Package ggml describes ggml's tensor element types: their numeric ids as
// stored in GGUF files, their names, and their block geometry. It is the one
// table every other package consults; nothing here computes on data.
package ggml

import "fmt"

// Type is a ggml tensor element type, numbered as in GGUF files.
type Type uint32

// The types zrt knows. The numbering is ggml's and is part of the GGUF format.
const (
	F32  Type = 0
	F16  Type = 1
	Q4_0 Type = 2
	Q4_1 Type = 3
	Q5_0 Type = 6
	Q5_1 Type = 7
	Q8_0 Type = 8
	Q8_1 Type = 9
	Q2_K Type = 10
	Q3_K Type = 11
	Q4_K Type = 12
	Q5_K Type = 13
	Q6_K Type = 14
	Q8_K Type = 15
	BF16 Type = 30
)

// TypeInfo is the geometry of one type: BlockSize elements are stored in
// BlockBytes bytes.
type TypeInfo struct {
	Name       string
	BlockSize  int
	BlockBytes int
}

// QK_K is the super-block size of the k-quants.
const QK_K = 256

var typeTable = map[Type]TypeInfo{
	F32:  {"F32", 1, 4},
	F16:  {"F16", 1, 2},
	BF16: {"BF16", 1, 2},
	Q4_0: {"Q4_0", 32, 2 + 16},
	Q4_1: {"Q4_1", 32, 2 + 2 + 16},
	Q5_0: {"Q5_0", 32, 2 + 4 + 16},
	Q5_1: {"Q5_1", 32, 2 + 2 + 4 + 16},
	Q8_0: {"Q8_0", 32, 2 + 32},
	Q8_1: {"Q8_1", 32, 2 + 2 + 32},
	Q2_K: {"Q2_K", QK_K, QK_K/16 + QK_K/4 + 2 + 2},
	Q3_K: {"Q3_K", QK_K, QK_K/8 + QK_K/4 + 12 + 2},
	Q4_K: {"Q4_K", QK_K, 2 + 2 + 12 + QK_K/2},
	Q5_K: {"Q5_K", QK_K, 2 + 2 + 12 + QK_K/8 + QK_K/2},
	Q6_K: {"Q6_K", QK_K, QK_K/2 + QK_K/4 + QK_K/16 + 2},
	Q8_K: {"Q8_K", QK_K, 4 + QK_K + QK_K/16*2},
}

// Info returns the geometry of t, or false when t is not a type zrt knows.
func (t Type) Info() (TypeInfo, bool) {
	ti, ok := typeTable[t]
	return ti, ok
}

// Known reports whether t is in the table.
func (t Type) Known() bool { _, ok := typeTable[t]; return ok }

// String returns ggml's name for t, or "type(N)" for an unknown one.
func (t Type) String() string {
	if ti, ok := typeTable[t]; ok {
		return ti.Name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// RowBytes returns the bytes a row of n elements of type t occupies. It fails
// when t is unknown or n is not a whole number of blocks.
func (t Type) RowBytes(n int64) (int64, error) {
	ti, ok := typeTable[t]
	if !ok {
		return 0, fmt.Errorf("ggml: unknown tensor type %d", uint32(t))
	}
	if n < 0 || n%int64(ti.BlockSize) != 0 {
		return 0, fmt.Errorf("ggml: %s row of %d elements is not a multiple of the block size %d", ti.Name, n, ti.BlockSize)
	}
	return n / int64(ti.BlockSize) * int64(ti.BlockBytes), nil
}

// ParseType returns the type named s (as String prints it).
func ParseType(s string) (Type, bool) {
	for t, ti := range typeTable {
		if ti.Name == s {
			return t, true
		}
	}
	return 0, false
}
