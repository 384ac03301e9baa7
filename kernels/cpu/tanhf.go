package cpu

import "math"

// tanhf is glibc's tanhf (2.36, the build of the references): fdlibm's
// float algorithm on expm1f, not correctly rounded — about a quarter of
// float32 inputs in (2^-11, 10) come out one ulp away from the rounded
// tanh — so T-CPU computes it as libm does wherever ggml calls tanhf
// (flash attention's and the logits' soft caps, GELU's table). Every
// float32 operation is rounded as in C (the explicit float32 conversions
// keep products from being fused into FMAs).
func tanhf(x float32) float32 {
	ix := math.Float32bits(x) & 0x7fffffff
	var z float32
	switch {
	case ix >= 0x7f800000: // ±Inf, NaN
		if ix > 0x7f800000 {
			return x + x
		}
		z = 1
	case ix >= 0x41b00000: // |x| >= 22
		z = 1
	case ix == 0:
		return x
	case ix < 0x24000000: // |x| < 2^-55
		return x * float32(1+x)
	case ix >= 0x3f800000: // |x| >= 1
		t := expm1f(2 * math.Float32frombits(ix))
		z = 1 - float32(2/float32(t+2))
	default:
		t := expm1f(-2 * math.Float32frombits(ix))
		z = float32(-t) / float32(t+2)
	}
	if math.Float32bits(x)>>31 != 0 {
		return -z
	}
	return z
}

// fdlibm's float expm1 constants: ln2 split into a high part with trailing
// zero bits and the rest, 1/ln2, and the scaled coefficients of the
// rational approximation on [-ln2/2, ln2/2].
var (
	expm1Ln2Hi  = math.Float32frombits(0x3f317180)
	expm1Ln2Lo  = math.Float32frombits(0x3717f7d1)
	expm1InvLn2 = math.Float32frombits(0x3fb8aa3b)
	expm1Q      = [5]float32{
		math.Float32frombits(0xbd088889), math.Float32frombits(0x3ad00d01),
		math.Float32frombits(0xb8a670cd), math.Float32frombits(0x36867e54),
		math.Float32frombits(0xb457edbb),
	}
)

// expm1f is glibc's (fdlibm's) expm1f for the arguments tanhf passes:
// finite, |x| < 44. x is reduced to r = x - k·ln2 (hi and lo parts, with
// c the reduction's rounding error), exp(r)-1 comes from the rational
// approximation, and 2^k is applied to the exponent bits.
func expm1f(x float32) float32 {
	hx := math.Float32bits(x)
	neg := hx>>31 != 0
	hx &= 0x7fffffff
	if hx >= 0x4195b844 && neg { // x <= -27·ln2
		return -1
	}
	var k int32
	var c float32
	switch {
	case hx > 0x3eb17218: // |x| > ln2/2
		var hi, lo float32
		if hx < 0x3f851592 { // |x| < 1.5·ln2
			if !neg {
				hi, lo, k = x-expm1Ln2Hi, expm1Ln2Lo, 1
			} else {
				hi, lo, k = x+expm1Ln2Hi, -expm1Ln2Lo, -1
			}
		} else {
			h := float32(0.5)
			if neg {
				h = -0.5
			}
			k = int32(float32(expm1InvLn2*x) + h)
			t := float32(k)
			hi = x - float32(t*expm1Ln2Hi)
			lo = float32(t * expm1Ln2Lo)
		}
		x = hi - lo
		c = (hi - x) - lo
	case hx < 0x33000000: // |x| < 2^-25
		return x
	}
	hfx := float32(0.5 * x)
	hxs := float32(x * hfx)
	q := expm1Q
	r1 := 1 + float32(hxs*(q[0]+float32(hxs*(q[1]+float32(hxs*(q[2]+float32(hxs*(q[3]+float32(hxs*q[4])))))))))
	t := 3 - float32(r1*hfx)
	e := float32(hxs * float32(float32(r1-t)/float32(6-float32(x*t))))
	if k == 0 {
		return x - (float32(x*e) - hxs)
	}
	e = float32(x*(e-c)) - c
	e -= hxs
	switch {
	case k == -1:
		return float32(0.5*(x-e)) - 0.5
	case k == 1:
		if x < -0.25 {
			return float32(-2 * (e - (x + 0.5)))
		}
		return 1 + float32(2*(x-e))
	case k <= -2 || k > 56:
		y := 1 - (e - x)
		y = math.Float32frombits(math.Float32bits(y) + uint32(k)<<23)
		return y - 1
	case k < 23:
		t := math.Float32frombits(0x3f800000 - (0x1000000 >> uint(k))) // 1 - 2^-k
		y := t - (e - x)
		return math.Float32frombits(math.Float32bits(y) + uint32(k)<<23)
	default:
		t := math.Float32frombits(uint32(0x7f-k) << 23) // 2^-k
		y := x - (e + t)
		y++
		return math.Float32frombits(math.Float32bits(y) + uint32(k)<<23)
	}
}
