package quant

import "encoding/binary"

// Q5_0 {d f16; qh u32; qs[16]}: element j's 5-bit quant is its nibble (as
// in Q4_0) plus bit j of qh as bit 4; value = (q-16)*d.
// Q5_1 {d f16; m f16; qh u32; qs[16]}: same quants, value = q*d + m.

// unpackQ5 expands one block's nibbles and high bits into 32 unsigned 5-bit
// quants in element order.
func unpackQ5(qs *[16]byte, qh uint32, out *[qk]int32) {
	for j := 0; j < qk/2; j++ {
		q := qs[j]
		out[j] = int32(q&15) | int32((qh>>uint(j))&1)<<4
		out[j+16] = int32(q>>4) | int32((qh>>uint(j+16))&1)<<4
	}
}

var dequantQ5_0 = dequantBlocks(qk, q5_0Len, func(src []byte, dst []float32) {
	b, y := (*[q5_0Len]byte)(src), (*[qk]float32)(dst)
	d := fp16(b[0:])
	var u [qk]int32
	unpackQ5((*[16]byte)(b[6:]), binary.LittleEndian.Uint32(b[2:]), &u)
	for j, q := range u {
		y[j] = float32(q-16) * d
	}
})

var dequantQ5_1 = dequantBlocks(qk, q5_1Len, func(src []byte, dst []float32) {
	b, y := (*[q5_1Len]byte)(src), (*[qk]float32)(dst)
	d, m := fp16(b[0:]), fp16(b[2:])
	var u [qk]int32
	unpackQ5((*[16]byte)(b[8:]), binary.LittleEndian.Uint32(b[4:]), &u)
	for j, q := range u {
		y[j] = float32(q)*d + m
	}
})

// dotNib16H is dotNib16 for 5-bit quants: bit j of qh is bit 4 of element
// j's quant. qh moves right one bit per step so that every shift below is by
// a constant (variable shifts cost more on x86).
func dotNib16H(q *[16]byte, qh uint32, y *[qk]byte, off int32) int32 {
	var l0, l1, h0, h1 int32
	for j := 0; j < 8; j++ {
		a, b := q[j], q[j+8]
		l0 += ((int32(a&15) | int32(qh<<4&16)) - off) * int32(int8(y[j]))
		l1 += ((int32(b&15) | int32(qh>>4&16)) - off) * int32(int8(y[j+8]))
		h0 += ((int32(a>>4) | int32(qh>>12&16)) - off) * int32(int8(y[j+16]))
		h1 += ((int32(b>>4) | int32(qh>>20&16)) - off) * int32(int8(y[j+24]))
		qh >>= 1
	}
	return (l0 + l1) + (h0 + h1)
}

// dotQ5_0 is ggml_vec_dot_q5_0_q8_0: exact sum((q-16)*y) per block, scaled
// by d_w*d_x.
var dotQ5_0 = dotBlocks(qk, q5_0Len, q8_0Len, func(w, x []byte, sum float32) float32 {
	a, b := (*[q5_0Len]byte)(w), (*[q8_0Len]byte)(x)
	sumi := dotNib16H((*[16]byte)(a[6:]), binary.LittleEndian.Uint32(a[2:]), (*[qk]byte)(b[2:]), 16)
	return sum + float32(sumi)*(fp16(a[0:])*fp16(b[0:]))
})

// dotQ5_1 is ggml_vec_dot_q5_1_q8_1: d_w*d_x*sum(q*y) + m*s.
var dotQ5_1 = dotBlocks(qk, q5_1Len, q8_1Len, func(w, x []byte, sum float32) float32 {
	a, b := (*[q5_1Len]byte)(w), (*[q8_1Len]byte)(x)
	sumi := dotNib16H((*[16]byte)(a[8:]), binary.LittleEndian.Uint32(a[4:]), (*[qk]byte)(b[4:]), 0)
	return sum + ((fp16(a[0:])*fp16(b[0:]))*float32(sumi) + fp16(a[2:])*fp16(b[2:]))
})
