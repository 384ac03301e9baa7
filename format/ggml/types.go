// Package ggml describes ggml's tensor element types: their numeric ids as
// stored in GGUF files, their names, and their block geometry. It is the one
// table every other package consults; nothing here computes on data.
//
// The table holds every type id llama.cpp defines (as of the reference
// commit in ../shared/REFERENCE.md), including the ones zrt cannot compute
// with and the interleaved layouts ggml has since removed, so that a reader
// can walk and map any GGUF file. Which types a target computes with is the
// kernels' business (kernels/quant for T-CPU); a build reports the others
// as unsupported, never as malformed.
package ggml

import "fmt"

// Type is a ggml tensor element type, numbered as in GGUF files.
type Type uint32

// The types GGUF files carry. The numbering is ggml's and is part of the
// GGUF format; ids 4 and 5 (Q4_2, Q4_3) were retired before GGUF existed.
const (
	F32        Type = 0
	F16        Type = 1
	Q4_0       Type = 2
	Q4_1       Type = 3
	Q5_0       Type = 6
	Q5_1       Type = 7
	Q8_0       Type = 8
	Q8_1       Type = 9
	Q2_K       Type = 10
	Q3_K       Type = 11
	Q4_K       Type = 12
	Q5_K       Type = 13
	Q6_K       Type = 14
	Q8_K       Type = 15
	IQ2_XXS    Type = 16
	IQ2_XS     Type = 17
	IQ3_XXS    Type = 18
	IQ1_S      Type = 19
	IQ4_NL     Type = 20
	IQ3_S      Type = 21
	IQ2_S      Type = 22
	IQ4_XS     Type = 23
	I8         Type = 24
	I16        Type = 25
	I32        Type = 26
	I64        Type = 27
	F64        Type = 28
	IQ1_M      Type = 29
	BF16       Type = 30
	Q4_0_4_4   Type = 31 // removed from ggml: Q4_0 interleaved for ARM
	Q4_0_4_8   Type = 32
	Q4_0_8_8   Type = 33
	TQ1_0      Type = 34
	TQ2_0      Type = 35
	IQ4_NL_4_4 Type = 36 // removed from ggml: IQ4_NL interleaved for ARM
	IQ4_NL_4_8 Type = 37
	IQ4_NL_8_8 Type = 38
	MXFP4      Type = 39
	NVFP4      Type = 40
	Q1_0       Type = 41
)

// TypeCount bounds the type ids: every known id is below it.
const TypeCount = 42

// TypeInfo is the geometry of one type: BlockSize elements are stored in
// BlockBytes bytes.
type TypeInfo struct {
	Name       string
	BlockSize  int
	BlockBytes int
	// Removed, when set, says why ggml no longer reads this type: files
	// that carry it were written by older converters and must be
	// re-quantized.
	Removed string
}

// QK_K is the super-block size of the k-quants and most i-quants.
const QK_K = 256

// typeTable holds each block's size as ggml-common.h's static_asserts give
// it (f16 scales are 2 bytes).
var typeTable = [TypeCount]TypeInfo{
	F32:     {Name: "F32", BlockSize: 1, BlockBytes: 4},
	F16:     {Name: "F16", BlockSize: 1, BlockBytes: 2},
	BF16:    {Name: "BF16", BlockSize: 1, BlockBytes: 2},
	F64:     {Name: "F64", BlockSize: 1, BlockBytes: 8},
	I8:      {Name: "I8", BlockSize: 1, BlockBytes: 1},
	I16:     {Name: "I16", BlockSize: 1, BlockBytes: 2},
	I32:     {Name: "I32", BlockSize: 1, BlockBytes: 4},
	I64:     {Name: "I64", BlockSize: 1, BlockBytes: 8},
	Q4_0:    {Name: "Q4_0", BlockSize: 32, BlockBytes: 2 + 16},
	Q4_1:    {Name: "Q4_1", BlockSize: 32, BlockBytes: 2 + 2 + 16},
	Q5_0:    {Name: "Q5_0", BlockSize: 32, BlockBytes: 2 + 4 + 16},
	Q5_1:    {Name: "Q5_1", BlockSize: 32, BlockBytes: 2 + 2 + 4 + 16},
	Q8_0:    {Name: "Q8_0", BlockSize: 32, BlockBytes: 2 + 32},
	Q8_1:    {Name: "Q8_1", BlockSize: 32, BlockBytes: 2 + 2 + 32},
	Q2_K:    {Name: "Q2_K", BlockSize: QK_K, BlockBytes: QK_K/16 + QK_K/4 + 2 + 2},
	Q3_K:    {Name: "Q3_K", BlockSize: QK_K, BlockBytes: QK_K/8 + QK_K/4 + 12 + 2},
	Q4_K:    {Name: "Q4_K", BlockSize: QK_K, BlockBytes: 2 + 2 + 12 + QK_K/2},
	Q5_K:    {Name: "Q5_K", BlockSize: QK_K, BlockBytes: 2 + 2 + 12 + QK_K/8 + QK_K/2},
	Q6_K:    {Name: "Q6_K", BlockSize: QK_K, BlockBytes: QK_K/2 + QK_K/4 + QK_K/16 + 2},
	Q8_K:    {Name: "Q8_K", BlockSize: QK_K, BlockBytes: 4 + QK_K + QK_K/16*2},
	IQ2_XXS: {Name: "IQ2_XXS", BlockSize: QK_K, BlockBytes: 2 + QK_K/8*2},
	IQ2_XS:  {Name: "IQ2_XS", BlockSize: QK_K, BlockBytes: 2 + QK_K/8*2 + QK_K/32},
	IQ2_S:   {Name: "IQ2_S", BlockSize: QK_K, BlockBytes: 2 + QK_K/4 + QK_K/16},
	IQ3_XXS: {Name: "IQ3_XXS", BlockSize: QK_K, BlockBytes: 2 + 3*QK_K/8},
	IQ3_S:   {Name: "IQ3_S", BlockSize: QK_K, BlockBytes: 2 + 13*QK_K/32 + QK_K/64},
	IQ1_S:   {Name: "IQ1_S", BlockSize: QK_K, BlockBytes: 2 + QK_K/8 + QK_K/16},
	IQ1_M:   {Name: "IQ1_M", BlockSize: QK_K, BlockBytes: QK_K/8 + QK_K/16 + QK_K/32},
	IQ4_NL:  {Name: "IQ4_NL", BlockSize: 32, BlockBytes: 2 + 16},
	IQ4_XS:  {Name: "IQ4_XS", BlockSize: QK_K, BlockBytes: 2 + 2 + QK_K/64 + QK_K/2},
	TQ1_0:   {Name: "TQ1_0", BlockSize: QK_K, BlockBytes: 2 + QK_K/64 + (QK_K-4*QK_K/64)/5},
	TQ2_0:   {Name: "TQ2_0", BlockSize: QK_K, BlockBytes: 2 + QK_K/4},
	MXFP4:   {Name: "MXFP4", BlockSize: 32, BlockBytes: 1 + 16},
	NVFP4:   {Name: "NVFP4", BlockSize: 64, BlockBytes: 4 + 32},
	Q1_0:    {Name: "Q1_0", BlockSize: 128, BlockBytes: 2 + 16},

	// The interleaved layouts kept the geometry of the type they
	// interleave; ggml now repacks Q4_0 and IQ4_NL at load time instead.
	Q4_0_4_4:   {Name: "Q4_0_4_4", BlockSize: 32, BlockBytes: 18, Removed: "re-quantize as Q4_0"},
	Q4_0_4_8:   {Name: "Q4_0_4_8", BlockSize: 32, BlockBytes: 18, Removed: "re-quantize as Q4_0"},
	Q4_0_8_8:   {Name: "Q4_0_8_8", BlockSize: 32, BlockBytes: 18, Removed: "re-quantize as Q4_0"},
	IQ4_NL_4_4: {Name: "IQ4_NL_4_4", BlockSize: 32, BlockBytes: 18, Removed: "re-quantize as IQ4_NL"},
	IQ4_NL_4_8: {Name: "IQ4_NL_4_8", BlockSize: 32, BlockBytes: 18, Removed: "re-quantize as IQ4_NL"},
	IQ4_NL_8_8: {Name: "IQ4_NL_8_8", BlockSize: 32, BlockBytes: 18, Removed: "re-quantize as IQ4_NL"},
}

// Info returns the geometry of t, or false when t is not a ggml type id.
func (t Type) Info() (TypeInfo, bool) {
	if t >= TypeCount || typeTable[t].BlockSize == 0 {
		return TypeInfo{}, false
	}
	return typeTable[t], true
}

// Known reports whether t is a ggml type id (whether or not zrt computes
// with it).
func (t Type) Known() bool { _, ok := t.Info(); return ok }

// Types lists every known type in id order.
func Types() []Type {
	var out []Type
	for t := Type(0); t < TypeCount; t++ {
		if t.Known() {
			out = append(out, t)
		}
	}
	return out
}

// String returns ggml's name for t, or "type(N)" for an unknown id.
func (t Type) String() string {
	if ti, ok := t.Info(); ok {
		return ti.Name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// Describe names t with its id, as errors about a file's tensors do:
// "IQ4_XS (id 23)".
func (t Type) Describe() string {
	return fmt.Sprintf("%s (id %d)", t, uint32(t))
}

// RowBytes returns the bytes a row of n elements of type t occupies. It fails
// when t is unknown or n is not a whole number of blocks.
func (t Type) RowBytes(n int64) (int64, error) {
	ti, ok := t.Info()
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
	for _, t := range Types() {
		if typeTable[t].Name == s {
			return t, true
		}
	}
	return 0, false
}
