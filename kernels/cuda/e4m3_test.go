package cuda

import (
	"math"
	"math/rand"
	"testing"

	"github.com/zrtdev/zrt/kernels/quant"
)

// e4m3F32 and f32E4M3 are kv.cuh's e4m3_f32 and f32_e4m3 line for line in
// Go (the integer coding compute_80's PTX uses, having no FP8
// conversions), so that their arithmetic is held to kernels/quant's
// encoder and decoder without a GPU; the GPU tests
// (runtime/cuda's TestKernelFP8KVWrite) hold the kernels themselves.
func e4m3F32(b uint32) float32 {
	v := math.Float32frombits((b&0x80)<<24|(b&0x7f)<<20) * 0x1p120
	if b&0x7f == 0x7f {
		return math.Float32frombits(0x7fc00000)
	}
	return v
}

func f32E4M3(x float32) uint32 {
	if x != x {
		return 0x7f
	}
	bits := math.Float32bits(x)
	sign, ab := (bits>>24)&0x80, bits&0x7fffffff
	a := math.Float32frombits(ab)
	if a >= 448 {
		return sign | 0x7e
	}
	if a < 0.015625 {
		return sign | uint32(math.RoundToEven(float64(a*512))) // __float2int_rn: half to even
	}
	m := ab & 0x7fffff
	keep, rem := m>>20, m&0xfffff
	code := ((ab>>23)-120)<<3 + keep
	if rem > 0x80000 || (rem == 0x80000 && keep&1 != 0) {
		code++
	}
	return sign | code
}

// TestE4M3Coding holds kv.cuh's integer E4M3 coding (in its Go mirror) to
// quant.E4M3ToF32 for every code and to quant.E4M3FromF32 for every
// value a code decodes to, every midpoint between neighbours and its two
// neighbouring floats, the saturation bounds, and random floats of every
// magnitude the cache's scaled values take.
func TestE4M3Coding(t *testing.T) {
	for c := range uint32(256) {
		got, want := e4m3F32(c), quant.E4M3ToF32(uint8(c))
		if math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
			t.Errorf("decode %#02x: %g, want %g", c, got, want)
		}
	}
	check := func(x float32) {
		if got, want := f32E4M3(x), uint32(quant.E4M3FromF32(x)); got != want {
			t.Errorf("encode %g (%#08x): %#02x, want %#02x", x, math.Float32bits(x), got, want)
		}
	}
	for c := range 0x7f {
		v := quant.E4M3ToF32(uint8(c))
		next := float32(480)
		if c < 0x7e {
			next = quant.E4M3ToF32(uint8(c + 1))
		}
		mid := (v + next) / 2
		for _, x := range []float32{v, mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, 1000), math.Nextafter32(v, 0)} {
			check(x)
			check(-x)
		}
	}
	for _, x := range []float32{0, float32(math.Copysign(0, -1)), 448, 449, 464, 480, 1e30, float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), 1e-45, 1.0 / 2048, 3.0 / 2048, 1.0 / 1024} {
		check(x)
		check(-x)
	}
	rng := rand.New(rand.NewSource(1))
	for range 200000 {
		x := float32(math.Ldexp(rng.Float64()*2-1, rng.Intn(24)-14))
		check(x)
	}
}

// e4m3PairHalves is kv.cuh's e4m3x2_lo and e4m3x2_hi before the
// conversion to float: the two codes of bytes (sel's) of w as the F16s
// of their values over 256, packed.
func e4m3PairHalves(w uint32, hi bool) uint32 {
	t := w&0xff | (w>>8&0xff)<<16 // __byte_perm(w, 0, 0x4140)
	if hi {
		t = w>>16&0xff | (w>>24&0xff)<<16 // 0x4342
	}
	return (t&0x00800080)<<8 | (t&0x007f007f)<<7
}

// TestE4M3PairHalves holds the two-codes-at-once decoding of the decode
// attention's walk to quant.E4M3ToF32: every code but NaN's (0x7f, 0xff,
// which it reads as ±480) is its value over 256 as an F16, exactly.
func TestE4M3PairHalves(t *testing.T) {
	for c := range uint32(256) {
		if c&0x7f == 0x7f {
			continue
		}
		for _, hi := range []bool{false, true} {
			w := c | (c^0x80)<<8
			if hi {
				w = (c | (c^0x80)<<8) << 16
			}
			h := e4m3PairHalves(w, hi)
			lo, up := quant.F16ToF32(uint16(h)), quant.F16ToF32(uint16(h>>16))
			if want := quant.E4M3ToF32(uint8(c)) / 256; lo != want || math.Signbit(float64(lo)) != math.Signbit(float64(want)) {
				t.Errorf("code %#02x (hi %v): %g, want %g", c, hi, lo, want)
			}
			if want := quant.E4M3ToF32(uint8(c^0x80)) / 256; up != want || math.Signbit(float64(up)) != math.Signbit(float64(want)) {
				t.Errorf("code %#02x (hi %v, second): %g, want %g", c^0x80, hi, up, want)
			}
		}
	}
}

// TestE4M3ScaledBy256 holds the walk's value (code/256 times 256·scale)
// to T-CPU's (code times scale), bit for bit: both are the exact product
// rounded once, for scales of every magnitude, subnormal ones too.
func TestE4M3ScaledBy256(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for range 20000 {
		sc := float32(math.Ldexp(rng.Float64(), rng.Intn(260)-140))
		for c := range uint32(0x7f) {
			v := quant.F16ToF32(uint16(e4m3PairHalves(c, false)))
			if got, want := v*(sc*256), quant.E4M3ToF32(uint8(c))*sc; math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("code %#02x scale %g: %g, want %g", c, sc, got, want)
			}
		}
	}
}
