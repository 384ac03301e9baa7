package cpu

import (
	"math"
	"testing"
)

// glibcSinCos are (x, sinf(x), cosf(x)) as glibc 2.36's x86-64 FMA build
// computes them (the float32 bits), over the three ways it reduces the
// argument (|x| < π/4, < 120, larger). In every row but the last three at
// least one of the two is not the correctly rounded value, so a float64
// sin or cos rounded to float32 fails here.
var glibcSinCos = [][3]uint32{
	{0x42080000, 0x3f0771f6, 0xbf593be7}, // 34
	{0xc2080000, 0xbf0771f6, 0xbf593be7}, // -34
	{0x42c00000, 0x3f7bcc68, 0xbe38c2c3}, // 96
	{0x42c40000, 0xbf12c927, 0xbf51bce0}, // 98
	{0x43030000, 0xbf4fc53d, 0x3f158eb5}, // 131
	{0xc3030000, 0x3f4fc53d, 0x3f158eb5}, // -131
	{0x43410000, 0xbf7a7c21, 0xbe536859}, // 193
	{0x43430000, 0x3e60b8ba, 0x3f79c269}, // 195
	{0x43870000, 0xbe344564, 0x3f7c0075}, // 270
	{0x43ab8000, 0xbf095e82, 0xbf5805c1}, // 343
	{0x43b38000, 0x3f41bf19, 0x3f2753b2}, // 359
	{0x43de0000, 0xbf5c2e84, 0xbf029943}, // 444
	{0x43f98000, 0x3efb63bd, 0xbf5f047c}, // 499
	{0x4289b983, 0xbe8003e1, 0x3f77de75}, // 68.862328
	{0x42e6c828, 0x3f3ffd39, 0xbf295724}, // 115.39093
	{0x40c1f9db, 0xbe60e6bc, 0x3f79bfd2}, // 6.06175
	{0x41cfd4d8, 0x3f3fae9b, 0x3f29b01c}, // 25.978928
	{0xc1cfd4d8, 0xbf3fae9b, 0x3f29b01c}, // -25.978928
	{0x418dd406, 0xbf668a54, 0x3ede985b}, // 17.728527
	{0x3ef953cc, 0x3eef96e1, 0x3f623dd5}, // 0.48696744
	{0xbef953cc, 0xbeef96e1, 0x3f623dd5}, // -0.48696744
	{0x3e297407, 0x3e28ae50, 0x3f7c80b9}, // 0.16548167
	{0x3e8eea68, 0x3e8d1127, 0x3f76176c}, // 0.27913213
	{0x3efa1a3a, 0x3ef0462c, 0x3f620f57}, // 0.48848134
	{0x3e6e88ee, 0x3e6c622a, 0x3f7915f0}, // 0.23294422
	{0x3df8cbfa, 0x3df82f6e, 0x3f7e1d01}, // 0.12148280
	{0x3f2a78c8, 0x3f1e2644, 0x3f494ebe}, // 0.66590548
	{0x3f2954c4, 0x3f1d403d, 0x3f4a02a1}, // 0.66144967
	{0x3727c5ac, 0x3727c5ac, 0x3f800000}, // 1e-5: sin x = x, cos x = 1
	{0x46ea6000, 0xbf4d7b7b, 0xbf18af9b}, // 30000
	{0x47f1205a, 0xbf7fd9b9, 0xbd0bf8c5}, // 123456.7
}

// TestSinCosfGlibc holds sinf and cosf to glibc's bits; measured against
// glibc itself over three million arguments (RoPE angles pos·base^-k and
// random ones between 2^-20 and 2^20) they never differed.
func TestSinCosfGlibc(t *testing.T) {
	for i, v := range glibcSinCos {
		x := math.Float32frombits(v[0])
		if s := math.Float32bits(sinf(x)); s != v[1] {
			t.Errorf("sinf(%v) = %#08x, glibc %#08x", x, s, v[1])
		}
		if c := math.Float32bits(cosf(x)); c != v[2] {
			t.Errorf("cosf(%v) = %#08x, glibc %#08x", x, c, v[2])
		}
		cr := math.Float32bits(float32(math.Sin(float64(x)))) == v[1] && math.Float32bits(float32(math.Cos(float64(x)))) == v[2]
		if cr != (i >= len(glibcSinCos)-3) {
			t.Errorf("row %d (%v): correctly rounded %v; the table says otherwise", i, x, cr)
		}
	}
}

// TestRotateFMA: ggml's RoPE rotation, as GCC compiles it with FMA, rounds
// once per output: x0·c − x1·s as fma(x0, c, −(x1·s)).
func TestRotateFMA(t *testing.T) {
	rp := ropeSpec{nRot: 2, scale: 1, thetaScale: 1, mscale: 1}
	// Values where the fused and the unfused results differ.
	x0, x1, c, s := float32(0.7853982), float32(-1.3333334), float32(0.5403023), float32(0.84147096)
	v := []float32{x0, x1}
	rp.rotate(v, []float32{c, s})
	if want := fma32(x0, c, -(x1 * s)); v[0] != want {
		t.Errorf("rotate: %v, want fma %v", v[0], want)
	}
	if want := fma32(x0, s, x1*c); v[1] != want {
		t.Errorf("rotate: %v, want fma %v", v[1], want)
	}
	if x0*c-x1*s == v[0] && x0*s+x1*c == v[1] {
		t.Log("note: these values round the same unfused")
	}
}
