package cpu

import "math"

// sinf and cosf are glibc's (2.28 and later; the references' x86-64
// build runs its FMA variant, s_sinf-fma.c): the argument reduced to
// [-π/4, π/4] in float64 and a short polynomial in float64 rounded once
// to float32. That is not always the correctly rounded float32: about one
// argument in thirty of RoPE's angles gives the neighbouring value, and
// ggml's RoPE cache takes its cos and sin from these functions, so T-CPU
// computes them the same way, FMA for FMA.

// sincosfTab is glibc's __sincosf_table: the second row serves the
// quadrants where cos and sin change sign.
var sincosfTab = [2]struct{ c0, c1, s1, c2, s2, c3, s3, c4 float64 }{
	{0x1p0, -0x1.ffffffd0c621cp-2, -0x1.555545995a603p-3, 0x1.55553e1068f19p-5, 0x1.1107605230bc4p-7, -0x1.6c087e89a359dp-10, -0x1.994eb3774cf24p-13, 0x1.99343027bf8c3p-16},
	{-0x1p0, 0x1.ffffffd0c621cp-2, -0x1.555545995a603p-3, -0x1.55553e1068f19p-5, 0x1.1107605230bc4p-7, 0x1.6c087e89a359dp-10, -0x1.994eb3774cf24p-13, -0x1.99343027bf8c3p-16},
}

const (
	sincosfHpiInv = 0x1.45F306DC9C883p+23 // 2/π · 2^24
	sincosfHpi    = 0x1.921FB54442D18p0   // π/2
	sincosfPi63   = 0x1.921FB54442D18p-62 // π/2 · 2^-62
)

// sincosfInvPio4 is glibc's __inv_pio4: 32-bit windows, a byte apart, of
// the bits of 2/π.
var sincosfInvPio4 = [24]uint32{
	0xa2, 0xa2f9, 0xa2f983, 0xa2f9836e,
	0xf9836e4e, 0x836e4e44, 0x6e4e4415, 0x4e441529,
	0x441529fc, 0x1529fc27, 0x29fc2757, 0xfc2757d1,
	0x2757d1f5, 0x57d1f534, 0xd1f534dd, 0xf534ddc0,
	0x34ddc0db, 0xddc0db62, 0xc0db6295, 0xdb629599,
	0x6295993c, 0x95993c43, 0x993c4390, 0x3c439041,
}

// abstop12 is the exponent bits of |x| and the top three of its mantissa,
// as glibc compares magnitudes.
func abstop12(x float32) uint32 { return (math.Float32bits(x) >> 20) & 0x7ff }

// sincosfPoly is glibc's sinf_poly: the sine polynomial of x (x2 = x²)
// for even n, the cosine polynomial for odd n, with the FMAs GCC makes of
// its multiply-adds.
func sincosfPoly(x, x2 float64, t int, n int) float32 {
	p := &sincosfTab[t]
	if n&1 == 0 {
		x3 := x * x2
		s1 := math.FMA(x2, p.s3, p.s2)
		x7 := x3 * x2
		s := math.FMA(x3, p.s1, x)
		return float32(math.FMA(x7, s1, s))
	}
	x4 := x2 * x2
	c2 := math.FMA(x2, p.c4, p.c3)
	c1 := math.FMA(x2, p.c1, p.c0)
	x6 := x4 * x2
	c := math.FMA(x4, p.c2, c1)
	return float32(math.FMA(x6, c2, c))
}

// sincosfReduceFast reduces |x| < 120 by a multiple n of π/2.
func sincosfReduceFast(x float64) (float64, int) {
	r := x * sincosfHpiInv
	n := (int32(r) + 0x800000) >> 24
	return math.FMA(-float64(n), sincosfHpi, x), int(n)
}

// sincosfReduceLarge reduces a finite |x| >= 120 (its bits xi) by a
// multiple n of π/2, with 2/π to 96 bits.
func sincosfReduceLarge(xi uint32) (float64, int) {
	arr := sincosfInvPio4[(xi>>26)&15:]
	shift := (xi >> 23) & 7
	xi = (xi & 0xffffff) | 0x800000
	xi <<= shift
	res0 := uint64(xi * arr[0]) // a 32-bit product, as glibc's
	res1 := uint64(xi) * uint64(arr[4])
	res2 := uint64(xi) * uint64(arr[8])
	res0 = (res2 >> 32) | (res0 << 32)
	res0 += res1
	n := (res0 + 1<<61) >> 62
	res0 -= n << 62
	return float64(int64(res0)) * sincosfPi63, int(n)
}

// sinf is glibc's sinf for finite x.
func sinf(y float32) float32 {
	x := float64(y)
	switch {
	case abstop12(y) < abstop12(0x1.921fb6p-1): // |y| < π/4
		if abstop12(y) < abstop12(0x1p-12) {
			return y
		}
		return sincosfPoly(x, x*x, 0, 0)
	case abstop12(y) < abstop12(120):
		r, n := sincosfReduceFast(x)
		return sincosfPoly(r*sincosfSign(n), r*r, (n>>1)&1, n)
	case !math.IsInf(x, 0) && !math.IsNaN(x):
		xi := math.Float32bits(y)
		sign := int(xi >> 31)
		r, n := sincosfReduceLarge(xi)
		return sincosfPoly(r*sincosfSign(n+sign), r*r, ((n+sign)>>1)&1, n)
	}
	return float32(math.NaN())
}

// cosf is glibc's cosf for finite x.
func cosf(y float32) float32 {
	x := float64(y)
	switch {
	case abstop12(y) < abstop12(0x1.921fb6p-1):
		if abstop12(y) < abstop12(0x1p-12) {
			return 1
		}
		return sincosfPoly(x, x*x, 0, 1)
	case abstop12(y) < abstop12(120):
		r, n := sincosfReduceFast(x)
		return sincosfPoly(r*sincosfSign(n), r*r, (n>>1)&1, n^1)
	case !math.IsInf(x, 0) && !math.IsNaN(x):
		xi := math.Float32bits(y)
		sign := int(xi >> 31)
		r, n := sincosfReduceLarge(xi)
		return sincosfPoly(r*sincosfSign(n+sign), r*r, ((n+sign)>>1)&1, n^1)
	}
	return float32(math.NaN())
}

// sincosfSign is glibc's sign table {1, -1, -1, 1} by quadrant.
func sincosfSign(n int) float64 {
	if q := n & 3; q == 1 || q == 2 {
		return -1
	}
	return 1
}
