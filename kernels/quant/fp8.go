package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// FP8 E4M3 (OCP "E4M3FN", CUDA's __nv_fp8_e4m3): a sign, four exponent
// bits of bias 7 and three mantissa bits; no infinities, S.1111.111 is
// NaN, so the largest finite value is 0x7E = 448 and the smallest
// subnormal 2^-9.
const (
	// E4M3Max is the largest finite E4M3 value.
	E4M3Max = 448
	// E4M3NaN is the NaN code the encoder writes (PTX's canonical one).
	E4M3NaN = 0x7F
)

// E4M3ToF32 decodes one E4M3 code. Every code is exact in float32.
func E4M3ToF32(b uint8) float32 {
	e, m := int(b>>3&0xF), float32(b&7)
	var v float32
	switch {
	case e == 15 && b&7 == 7:
		return float32(math.NaN())
	case e == 0:
		v = m * (1.0 / 512) // subnormal: m/8 · 2^-6
	default:
		v = float32(math.Ldexp(float64(1+m/8), e-7))
	}
	if b&0x80 != 0 {
		return -v
	}
	return v
}

// E4M3FromF32 encodes x as E4M3 the way PTX's cvt.rn.satfinite.e4m3x2.f32
// does: rounded to the nearest code, ties to an even mantissa; a finite
// value or infinity beyond ±448 saturates to ±448; NaN is E4M3NaN.
func E4M3FromF32(x float32) uint8 {
	if x != x {
		return E4M3NaN
	}
	var sign uint8
	if math.Signbit(float64(x)) {
		sign, x = 0x80, -x
	}
	if x >= E4M3Max { // infinity too: satfinite
		return sign | 0x7E
	}
	// float64 holds every step below exactly: x has 24 significant bits,
	// the scalings are powers of two.
	f := float64(x)
	if f < 1.0/64 {
		// Subnormals are multiples of 2^-9; a tie rounding up to 8 is
		// code 8, the smallest normal 2^-6, which the same formula gives.
		return sign | uint8(math.RoundToEven(f*512))
	}
	frac, exp := math.Frexp(f) // f = frac · 2^exp, frac in [0.5, 1)
	e := exp - 1               // f = (2·frac) · 2^e, 2·frac in [1, 2)
	m := int(math.RoundToEven((2*frac - 1) * 8))
	if m == 8 {
		m, e = 0, e+1
	}
	// x < 448 rounds to at most 448 (e = 8, m = 6): no overflow here.
	return sign | uint8(e+7)<<3 | uint8(m)
}

// The FP8 KV cache's block: a float32 scale (little endian) then
// FP8Block E4M3 codes, each value code·scale. The scale is the block's
// largest magnitude over 448, so every block uses E4M3's whole range
// without any calibration.
const (
	FP8Block      = 64
	FP8BlockBytes = 4 + FP8Block
)

// QuantizeFP8Row writes the values x (a whole number of FP8Block blocks)
// as FP8 blocks to dst: per block, scale = amax/448 and each code
// E4M3FromF32(v · (448/amax)), both products and the quotient rounded in
// float32 as a GPU computes them; an all-zero block has scale 0 and zero
// codes. A NaN or infinity in x poisons only its block's scale.
func QuantizeFP8Row(x []float32, dst []byte) error {
	nb := len(x) / FP8Block
	if len(x)%FP8Block != 0 || len(dst) < nb*FP8BlockBytes {
		return fmt.Errorf("quant: an FP8 row of %d values (blocks of %d) needs %d bytes, has %d", len(x), FP8Block, nb*FP8BlockBytes, len(dst))
	}
	for b := range nb {
		blk, out := x[b*FP8Block:(b+1)*FP8Block], dst[b*FP8BlockBytes:(b+1)*FP8BlockBytes]
		var amax float32
		for _, v := range blk {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		scale, inv := amax/E4M3Max, float32(0)
		if amax != 0 {
			inv = E4M3Max / amax
		}
		binary.LittleEndian.PutUint32(out, math.Float32bits(scale))
		for i, v := range blk {
			out[4+i] = E4M3FromF32(v * inv)
		}
	}
	return nil
}

// DequantizeFP8Row decodes the FP8 blocks of src into y (a whole number
// of FP8Block values): each value code·scale in float32.
func DequantizeFP8Row(src []byte, y []float32) error {
	nb := len(y) / FP8Block
	if len(y)%FP8Block != 0 || len(src) < nb*FP8BlockBytes {
		return fmt.Errorf("quant: an FP8 row of %d values (blocks of %d) needs %d bytes, has %d", len(y), FP8Block, nb*FP8BlockBytes, len(src))
	}
	for b := range nb {
		blk := src[b*FP8BlockBytes:]
		scale := math.Float32frombits(binary.LittleEndian.Uint32(blk))
		for i := range FP8Block {
			y[b*FP8Block+i] = E4M3ToF32(blk[4+i]) * scale
		}
	}
	return nil
}
