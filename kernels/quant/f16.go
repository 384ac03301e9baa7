package quant

import (
	"encoding/binary"
	"math"
)

// F16ToF32 converts an IEEE binary16 value to float32. The conversion is
// exact; subnormals become normal float32s and NaNs keep their payload with
// the quiet bit set, as x86's F16C VCVTPH2PS does.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	mag := uint32(h & 0x7fff)
	if mag >= 0x7c00 { // inf or NaN: keep the payload, max the exponent
		bits := sign | 0x7f800000 | (mag&0x3ff)<<13
		if mag != 0x7c00 {
			bits |= 0x400000
		}
		return math.Float32frombits(bits)
	}
	// Place the 15 magnitude bits where float32 keeps them; the result is
	// the half's value scaled by 2^-112 (the exponent-bias difference), and
	// one exact multiply fixes the scale for normals and subnormals alike.
	f := math.Float32frombits(mag<<13) * 0x1p112
	return math.Float32frombits(math.Float32bits(f) | sign)
}

// F32ToF16 converts a float32 to IEEE binary16 rounding to nearest, ties to
// even, as ggml's GGML_FP32_TO_FP16 does on x86 with F16C (_cvtss_sh with
// rounding mode 0): overflow goes to infinity, tiny values to (signed)
// subnormals or zero, NaNs stay quiet NaNs with the payload's top bits.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15 // the half's biased exponent
	if e >= 31 {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Subnormal half: the significand (with its implicit bit) in units
		// of 2^-24 is m >> (14-e). Below 2^-25 everything rounds to zero.
		if e < -10 {
			return sign
		}
		m := mant | 0x800000
		shift := uint(14 - e)
		return sign | uint16(roundShift(m, shift))
	}
	// Normal: rounding may carry into the exponent, which is right (it
	// gives the next binade, or infinity from the largest finite).
	return sign | uint16(roundShift(uint32(e)<<23|mant, 13))
}

// roundShift returns v >> s rounded to nearest, ties to even.
func roundShift(v uint32, s uint) uint32 {
	q := v >> s
	rem := v & (1<<s - 1)
	half := uint32(1) << (s - 1)
	if rem > half || (rem == half && q&1 != 0) {
		q++
	}
	return q
}

// BF16ToF32 converts a bfloat16 value to float32 (exact: bf16 is the top
// half of a float32).
func BF16ToF32(h uint16) float32 {
	return math.Float32frombits(uint32(h) << 16)
}

// F32ToBF16 converts a float32 to bfloat16 as ggml's GGML_FP32_TO_BF16 does:
// round to nearest even, NaNs forced quiet.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 64
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// f16Table holds F16ToF32 of every half. A load from it is about three
// times faster than converting in the F16 dot product's inner loop; ggml's
// CPU backend keeps the same table (ggml_table_f32_f16) for the same reason.
// It costs 256 KiB and well under a millisecond at init.
var f16Table [1 << 16]float32

func init() {
	for i := range f16Table {
		f16Table[i] = F16ToF32(uint16(i))
	}
}

// fp16 reads the little-endian half at b[0:2] as float32.
func fp16(b []byte) float32 {
	return f16Table[binary.LittleEndian.Uint16(b)]
}

func dequantF32(src []byte, dst []float32) {
	src = src[:4*len(dst)]
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

func dequantF16(src []byte, dst []float32) {
	src = src[:2*len(dst)]
	for i := range dst {
		dst[i] = fp16(src[2*i:])
	}
}

func dequantBF16(src []byte, dst []float32) {
	src = src[:2*len(dst)]
	for i := range dst {
		dst[i] = BF16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

func quantF32(x []float32, dst []byte) {
	dst = dst[:4*len(x)]
	for i, v := range x {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	}
}

func quantF16(x []float32, dst []byte) {
	dst = dst[:2*len(x)]
	for i, v := range x {
		binary.LittleEndian.PutUint16(dst[2*i:], F32ToF16(v))
	}
}

func quantBF16(x []float32, dst []byte) {
	dst = dst[:2*len(x)]
	for i, v := range x {
		binary.LittleEndian.PutUint16(dst[2*i:], F32ToBF16(v))
	}
}

// The float dot products keep four float32 partial sums, like ggml's SIMD
// loops keep several vector accumulators: each product is rounded to
// float32 and added to its lane, then the lanes are reduced. Four chains
// hide most of the float add latency without spilling registers (the Go
// compiler does not vectorize). Explicit float32 conversions keep the
// compiler from fusing multiply and add, so the result does not depend on
// GOAMD64.

func dotF32(n int, w, x []byte) float32 {
	w = w[:4*n]
	x = x[:4*n]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+16 <= len(w); i += 16 {
		a := (*[16]byte)(w[i:])
		b := (*[16]byte)(x[i:])
		s0 += float32(f32le(a[0:]) * f32le(b[0:]))
		s1 += float32(f32le(a[4:]) * f32le(b[4:]))
		s2 += float32(f32le(a[8:]) * f32le(b[8:]))
		s3 += float32(f32le(a[12:]) * f32le(b[12:]))
	}
	for ; i+4 <= len(w); i += 4 {
		s0 += float32(f32le(w[i:]) * f32le(x[i:]))
	}
	return (s0 + s2) + (s1 + s3)
}

func f32le(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) }

func dotF16(n int, w, x []byte) float32 {
	w = w[:2*n]
	x = x[:2*n]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+8 <= len(w); i += 8 {
		a := (*[8]byte)(w[i:])
		b := (*[8]byte)(x[i:])
		s0 += float32(fp16(a[0:]) * fp16(b[0:]))
		s1 += float32(fp16(a[2:]) * fp16(b[2:]))
		s2 += float32(fp16(a[4:]) * fp16(b[4:]))
		s3 += float32(fp16(a[6:]) * fp16(b[6:]))
	}
	for ; i+2 <= len(w); i += 2 {
		s0 += float32(fp16(w[i:]) * fp16(x[i:]))
	}
	return (s0 + s2) + (s1 + s3)
}

func bf16le(b []byte) float32 { return BF16ToF32(binary.LittleEndian.Uint16(b)) }

func dotBF16(n int, w, x []byte) float32 {
	w = w[:2*n]
	x = x[:2*n]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+8 <= len(w); i += 8 {
		a := (*[8]byte)(w[i:])
		b := (*[8]byte)(x[i:])
		s0 += float32(bf16le(a[0:]) * bf16le(b[0:]))
		s1 += float32(bf16le(a[2:]) * bf16le(b[2:]))
		s2 += float32(bf16le(a[4:]) * bf16le(b[4:]))
		s3 += float32(bf16le(a[6:]) * bf16le(b[6:]))
	}
	for ; i+2 <= len(w); i += 2 {
		s0 += float32(bf16le(w[i:]) * bf16le(x[i:]))
	}
	return (s0 + s2) + (s1 + s3)
}
