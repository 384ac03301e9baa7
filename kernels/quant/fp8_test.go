package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// e4m3Finite lists the finite codes' values, for the brute-force oracle.
func e4m3Finite() (codes []uint8, vals []float64) {
	for c := range 256 {
		if v := E4M3ToF32(uint8(c)); !math.IsNaN(float64(v)) {
			codes, vals = append(codes, uint8(c)), append(vals, float64(v))
		}
	}
	return codes, vals
}

// nearestE4M3 is the encoder's oracle by search: the finite code nearest
// x, a tie going to the even code (an even mantissa), beyond 448
// saturating; the sign of a zero result is x's.
func nearestE4M3(x float64) uint8 {
	if math.IsNaN(x) {
		return E4M3NaN
	}
	codes, vals := e4m3Finite()
	best, bestD := -1, math.Inf(1)
	for i, v := range vals {
		if v == 0 && math.Signbit(v) != math.Signbit(x) {
			continue
		}
		d := math.Abs(v - x)
		if d < bestD || d == bestD && codes[i]&1 == 0 {
			best, bestD = i, d
		}
	}
	if math.Abs(x) >= 448 {
		if x < 0 {
			return 0xFE
		}
		return 0x7E
	}
	return codes[best]
}

// TestE4M3Codes: all 256 codes decode to OCP E4M3's values (checked
// against the format's definition at the boundaries), and every finite
// code encodes back to itself; the two NaN codes decode to NaN.
func TestE4M3Codes(t *testing.T) {
	for c, want := range map[uint8]float32{0x00: 0, 0x01: 1.0 / 512, 0x07: 7.0 / 512, 0x08: 1.0 / 64, 0x38: 1, 0x39: 1.125,
		0x7E: 448, 0x77: 240, 0x80: 0, 0xB8: -1, 0xFE: -448} {
		if got := E4M3ToF32(c); got != want || math.Signbit(float64(got)) != (c&0x80 != 0) {
			t.Errorf("code %#02x decodes to %v, want %v", c, got, want)
		}
	}
	nan := 0
	for c := range 256 {
		v := E4M3ToF32(uint8(c))
		if math.IsNaN(float64(v)) {
			nan++
			if c&0x7F != 0x7F {
				t.Errorf("code %#02x decodes to NaN", c)
			}
			if got := E4M3FromF32(v); got != E4M3NaN {
				t.Errorf("NaN encodes to %#02x", got)
			}
			continue
		}
		if got := E4M3FromF32(v); got != uint8(c) {
			t.Errorf("code %#02x = %v encodes to %#02x", c, v, got)
		}
		if c&0x7F != 0 && c&0x7F != 0x7E { // monotone: the next code up is larger
			if next := E4M3ToF32(uint8(c + 1)); !(math.Abs(float64(next)) > math.Abs(float64(v))) {
				t.Errorf("code %#02x = %v, next %v", c, v, next)
			}
		}
	}
	if nan != 2 {
		t.Errorf("%d NaN codes, want 2", nan)
	}
}

// TestE4M3Rounding: midpoints between neighbouring codes go to the even
// one and the float32 values either side of a midpoint to the nearer
// code; values beyond 448 and infinities saturate; values under half
// the smallest subnormal go to a zero of their sign.
func TestE4M3Rounding(t *testing.T) {
	codes, vals := e4m3Finite()
	for i := range vals {
		lo, c := vals[i], codes[i]
		if c&0x80 != 0 || c == 0x7E {
			continue
		}
		hi := float64(E4M3ToF32(c + 1))
		mid := float32((lo + hi) / 2) // exact: one more mantissa bit
		even := c
		if c&1 != 0 {
			even = c + 1
		}
		for _, s := range []float32{1, -1} {
			sg := uint8(0)
			if s < 0 {
				sg = 0x80
			}
			if got := E4M3FromF32(s * mid); got != sg|even {
				t.Errorf("midpoint %v of %#02x and %#02x: %#02x, want %#02x", s*mid, c, c+1, got, sg|even)
			}
			if got := E4M3FromF32(s * math.Nextafter32(mid, 0)); got != sg|c {
				t.Errorf("just under %v: %#02x, want %#02x", s*mid, got, sg|c)
			}
			if got := E4M3FromF32(s * math.Nextafter32(mid, 1000)); got != sg|(c+1) {
				t.Errorf("just over %v: %#02x, want %#02x", s*mid, got, sg|(c+1))
			}
		}
	}
	for x, want := range map[float32]uint8{
		448: 0x7E, 464: 0x7E, 465: 0x7E, 1e30: 0x7E, float32(math.Inf(1)): 0x7E, float32(math.Inf(-1)): 0xFE, -500: 0xFE,
		math.MaxFloat32: 0x7E, 1.0 / 1024: 0x00, -1.0 / 1024: 0x80, 1e-30: 0x00, math.SmallestNonzeroFloat32: 0x00,
		3.0 / 2048: 0x01, 1.0/1024 + 1.0/(1<<20): 0x01, 416: 0x7D, 432: 0x7E, 400: 0x7C,
	} {
		if got := E4M3FromF32(x); got != want {
			t.Errorf("E4M3FromF32(%v) = %#02x, want %#02x", x, got, want)
		}
	}
	if got := E4M3FromF32(float32(math.Copysign(0, -1))); got != 0x80 {
		t.Errorf("-0 encodes to %#02x", got)
	}
}

// TestE4M3Oracle: the encoder agrees with the search oracle over a sweep
// of float32 bit patterns (every 2^13th, both signs, NaNs and infinities
// included) and over random values in E4M3's range.
func TestE4M3Oracle(t *testing.T) {
	check := func(x float32) {
		if got, want := E4M3FromF32(x), nearestE4M3(float64(x)); got != want {
			t.Fatalf("E4M3FromF32(%v = %#08x) = %#02x, want %#02x", x, math.Float32bits(x), got, want)
		}
	}
	for b := uint64(0); b < 1<<32; b += 1 << 13 {
		check(math.Float32frombits(uint32(b)))
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		check(float32(r.NormFloat64() * math.Exp2(float64(r.IntN(24)-12))))
	}
}

// TestFP8Row: a row round trip keeps each value within half a step of
// its block's scale (relative 2^-4 of the value for normals, scale·2^-10
// for subnormals), a block's largest magnitude is exact, a zero block
// decodes to zeros, and short buffers are refused.
func TestFP8Row(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	x := make([]float32, 3*FP8Block)
	for i := range x {
		x[i] = float32(r.NormFloat64()) * float32(i/FP8Block)
	}
	x[FP8Block+5] = -37.5 // the second block's amax
	b := make([]byte, 3*FP8BlockBytes)
	if err := QuantizeFP8Row(x, b); err != nil {
		t.Fatal(err)
	}
	y := make([]float32, len(x))
	if err := DequantizeFP8Row(b, y); err != nil {
		t.Fatal(err)
	}
	for i := range x {
		scale := math.Float32frombits(binary.LittleEndian.Uint32(b[i/FP8Block*FP8BlockBytes:]))
		tol := max(math.Abs(float64(x[i]))/16, float64(scale)/1024)
		if d := math.Abs(float64(y[i] - x[i])); d > tol*1.0001 {
			t.Errorf("value %d: %v → %v (scale %v)", i, x[i], y[i], scale)
		}
		if i < FP8Block && y[i] != 0 {
			t.Errorf("zero block value %d decodes to %v", i, y[i])
		}
	}
	if y[FP8Block+5] != -37.5 {
		t.Errorf("the block's amax -37.5 decodes to %v", y[FP8Block+5])
	}
	if QuantizeFP8Row(x, b[:len(b)-1]) == nil || DequantizeFP8Row(b[:len(b)-1], y) == nil || QuantizeFP8Row(x[:10], b) == nil {
		t.Error("a short buffer or a partial block was accepted")
	}
}
