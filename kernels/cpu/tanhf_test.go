package cpu

import (
	"math"
	"testing"
)

// glibcTanhf are (x, tanhf(x)) bit patterns from glibc 2.36's tanhf, the
// libm of the references, across its branches (|x| < 2^-55 aside: tiny,
// below 1, at least 1, from 22 on): mostly inputs whose glibc result is
// one ulp from the correctly rounded tanh, which rounding math.Tanh
// would give. Checked beyond these: every 13th float32 of both signs from
// 2^-55 to 24 (76.8M values) agreed bit for bit when tanhf was written.
var glibcTanhf = [][2]uint32{
	{0x24000001, 0x24000001}, {0x24000062, 0x24000062},
	{0x39800ec7, 0x39800ec6}, {0x39800f28, 0x39800f27},
	{0x3d000061, 0x3cffeb6e}, {0x3d0002a7, 0x3cffeffa},
	{0x3e8000c2, 0x3e7acd63}, {0x3e8001e5, 0x3e7acf84},
	{0x3f000061, 0x3eec9b36}, {0x3f000123, 0x3eec9c67},
	{0x3f400184, 0x3f229a06}, {0x3f400308, 0x3f229aef},
	{0x3f8000c2, 0x3f42f878}, {0x3f80048c, 0x3f42fba8},
	{0x3fc00610, 0x3f67b9fc}, {0x3fc00f28, 0x3f67bd46},
	{0x40001599, 0x3f76d09c}, {0x400016bc, 0x3f76d0ee},
	{0x40400246, 0x3f7ebc00}, {0x404070ea, 0x3f7ec056},
	{0x40803875, 0x3f7fd4a6}, {0x408b1115, 0x3f7fe9fc},
	{0x41b00000, 0x3f800000}, {0x41b00061, 0x3f800000},
}

// TestTanhfGlibc holds tanhf to glibc's bits, for x and -x (tanhf is odd
// exactly), and checks the special values.
func TestTanhfGlibc(t *testing.T) {
	cr := 0
	for _, c := range glibcTanhf {
		for _, s := range []uint32{0, 1 << 31} {
			x := math.Float32frombits(c[0] | s)
			if got := math.Float32bits(tanhf(x)); got != c[1]|s {
				t.Errorf("tanhf(%v) = %v (%#x), glibc %v (%#x)", x, math.Float32frombits(got), got, math.Float32frombits(c[1]|s), c[1]|s)
			}
		}
		if math.Float32bits(float32(math.Tanh(float64(math.Float32frombits(c[0]))))) != c[1] {
			cr++
		}
	}
	if cr < len(glibcTanhf)/2 {
		t.Errorf("only %d of %d table entries differ from the rounded tanh: the table no longer tells glibc's tanhf apart", cr, len(glibcTanhf))
	}
	for _, c := range []struct{ x, want float32 }{
		{0, 0}, {float32(math.Inf(1)), 1}, {float32(math.Inf(-1)), -1}, {100, 1}, {-100, -1},
	} {
		if got := tanhf(c.x); got != c.want {
			t.Errorf("tanhf(%v) = %v, want %v", c.x, got, c.want)
		}
	}
	if math.Signbit(float64(tanhf(float32(math.Copysign(0, -1))))) != true {
		t.Error("tanhf(-0) lost its sign")
	}
	if v := tanhf(float32(math.NaN())); v == v {
		t.Errorf("tanhf(NaN) = %v", v)
	}
}
