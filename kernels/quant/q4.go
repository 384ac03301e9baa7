package quant

// Q4_0 {d f16; qs[16]}: element j (j < 16) is the low nibble of qs[j],
// element j+16 the high nibble; value = (q-8)*d.
// Q4_1 {d f16; m f16; qs[16]}: same nibbles, value = q*d + m.

var dequantQ4_0 = dequantBlocks(qk, q4_0Len, func(src []byte, dst []float32) {
	b, y := (*[q4_0Len]byte)(src), (*[qk]float32)(dst)
	d := fp16(b[0:])
	for j := 0; j < qk/2; j++ {
		q := b[2+j]
		y[j] = float32(int32(q&15)-8) * d
		y[j+16] = float32(int32(q>>4)-8) * d
	}
})

var dequantQ4_1 = dequantBlocks(qk, q4_1Len, func(src []byte, dst []float32) {
	b, y := (*[q4_1Len]byte)(src), (*[qk]float32)(dst)
	d, m := fp16(b[0:]), fp16(b[2:])
	for j := 0; j < qk/2; j++ {
		q := b[4+j]
		y[j] = float32(q&15)*d + m
		y[j+16] = float32(q>>4)*d + m
	}
})

// dotNib16 returns sum((q-off)*y) over one block of 16 packed nibble bytes
// and 32 int8 activations: element j < 16 is the low nibble of q[j], element
// j+16 its high nibble. Subtracting the offset per element (rather than
// off*sum(y) afterwards) saves a second pass over y.
func dotNib16(q *[16]byte, y *[qk]byte, off int32) int32 {
	var l0, l1, h0, h1 int32
	for j := 0; j < 8; j++ {
		a, b := q[j], q[j+8]
		l0 += (int32(a&15) - off) * int32(int8(y[j]))
		l1 += (int32(b&15) - off) * int32(int8(y[j+8]))
		h0 += (int32(a>>4) - off) * int32(int8(y[j+16]))
		h1 += (int32(b>>4) - off) * int32(int8(y[j+24]))
	}
	return (l0 + l1) + (h0 + h1)
}

// dotQ4_0 is ggml_vec_dot_q4_0_q8_0: per block the exact integer
// sum((q-8)*y), scaled by d_w*d_x.
var dotQ4_0 = dotBlocks(qk, q4_0Len, q8_0Len, func(w, x []byte, sum float32) float32 {
	a, b := (*[q4_0Len]byte)(w), (*[q8_0Len]byte)(x)
	sumi := dotNib16((*[16]byte)(a[2:]), (*[qk]byte)(b[2:]), 8)
	return sum + float32(sumi)*(fp16(a[0:])*fp16(b[0:]))
})

// dotQ4_1 is ggml_vec_dot_q4_1_q8_1: d_w*d_x*sum(q*y) + m*s, where s is the
// activation block's stored d*sum(y).
var dotQ4_1 = dotBlocks(qk, q4_1Len, q8_1Len, func(w, x []byte, sum float32) float32 {
	a, b := (*[q4_1Len]byte)(w), (*[q8_1Len]byte)(x)
	sumi := dotNib16((*[16]byte)(a[4:]), (*[qk]byte)(b[4:]), 0)
	return sum + ((fp16(a[0:])*fp16(b[0:]))*float32(sumi) + fp16(a[2:])*fp16(b[2:]))
})
