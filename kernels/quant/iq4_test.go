package quant

import (
	"encoding/binary"
	"math"
	"math/big"
	"math/rand"
	"testing"

	"github.com/zrtdev/zrt/format/ggml"
)

// iq4Levels restates the format's 16 non-linear levels (ggml-common.h's
// kvalues_iq4nl) for the hand-built expectations below.
var iq4Levels = [16]float32{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// iq4Nibbles is the nibble pattern of the hand-built blocks: qs[j] = j |
// (15-j)<<4, so element j (j < 16) has index j and element 16+j index 15-j.
func iq4Nibbles() (qs [16]byte) {
	for j := range qs {
		qs[j] = byte(j) | byte(15-j)<<4
	}
	return qs
}

func iq4Index(e int) int {
	if e < 16 {
		return e
	}
	return 15 - (e - 16)
}

func TestDequantizeIQ4_NLHandBuilt(t *testing.T) {
	qs := iq4Nibbles()
	for _, c := range []struct {
		h uint16
		d float32
	}{{hHalf, 0.5}, {hMinus2, -2}} {
		b := make([]byte, 2*18) // two blocks: the second repeats the first scaled by 1
		put16(b, c.h)
		copy(b[2:], qs[:])
		put16(b[18:], h1)
		copy(b[20:], qs[:])
		got := dequant(t, ggml.IQ4_NL, b, 64)
		want := make([]float32, 64)
		for e := 0; e < 32; e++ {
			want[e] = c.d * iq4Levels[iq4Index(e)]
			want[32+e] = iq4Levels[iq4Index(e)]
		}
		expectEqual(t, ggml.IQ4_NL, got, want)
	}
	// Spot values worked by hand for d = 0.5: index 0 is -127, index 15 is
	// 113, index 8 is 1.
	b := make([]byte, 18)
	put16(b, hHalf)
	copy(b[2:], qs[:])
	got := dequant(t, ggml.IQ4_NL, b, 32)
	if got[0] != -63.5 || got[15] != 56.5 || got[16] != 56.5 || got[31] != -63.5 || got[8] != 0.5 || got[23] != 0.5 {
		t.Fatalf("IQ4_NL spot values %v", got)
	}
}

func TestDequantizeIQ4_XSHandBuilt(t *testing.T) {
	// Sub-block scales ls = 0, 1, 31, 32, 33, 47, 63, 16 (ls-32 = -32, -31,
	// -1, 0, 1, 15, 31, -16). Worked by hand: the low nibbles 0,1,15,0,1,
	// 15,15,0 pack two per byte as 0x10, 0x0f, 0xf1, 0x0f; the high bit
	// pairs 0,0,1,2,2,2,3,1 at bits 2s give scales_h = 1<<4 | 2<<6 | 2<<8 |
	// 2<<10 | 3<<12 | 1<<14 = 0x7a90.
	ls := [8]int{0, 1, 31, 32, 33, 47, 63, 16}
	qs := iq4Nibbles()
	b := make([]byte, 136)
	put16(b, hQuarter)
	put16(b[2:], 0x7a90)
	copy(b[4:], []byte{0x10, 0x0f, 0xf1, 0x0f})
	for s := 0; s < 8; s++ {
		copy(b[8+16*s:], qs[:])
	}
	got := dequant(t, ggml.IQ4_XS, b, 256)
	want := make([]float32, 256)
	for s := 0; s < 8; s++ {
		for e := 0; e < 32; e++ {
			want[32*s+e] = 0.25 * float32(ls[s]-32) * iq4Levels[iq4Index(e)]
		}
	}
	expectEqual(t, ggml.IQ4_XS, got, want)
	// By hand: 0.25*-32*-127 = 1016; 0.25*31*113 = 875.75; sub-block 3
	// (ls = 32) is all zeros.
	if got[0] != 1016 || got[6*32+15] != 875.75 || got[3*32] != 0 || got[3*32+31] != 0 {
		t.Fatalf("IQ4_XS spot values %v %v %v", got[0], got[6*32+15], got[3*32])
	}
}

// bigFMA32 is a*b+c rounded once to float32, through big.Float (exact
// product and sum, one rounding at 24 bits; the values used stay normal).
func bigFMA32(a, b, c float32) float32 {
	x := new(big.Float).SetPrec(200).SetFloat64(float64(a))
	x.Mul(x, new(big.Float).SetPrec(200).SetFloat64(float64(b)))
	x.Add(x, new(big.Float).SetPrec(200).SetFloat64(float64(c)))
	f, _ := x.Float32()
	return f
}

func TestFMA32RoundsOnce(t *testing.T) {
	// The double-rounding trap: a*b = 2^-24*(1-2^-46), c = 1+2^-23. The
	// exact sum lies just below the float32 midpoint 1+3*2^-24, so the
	// answer is c; rounding to float64 first lands on the midpoint, which
	// ties to even, 1+2^-22.
	a := float32(math.Ldexp(1+math.Ldexp(1, -23), -12))
	b := float32(math.Ldexp(1-math.Ldexp(1, -23), -12))
	c := float32(1 + math.Ldexp(1, -23))
	if got := fma32(a, b, c); got != c {
		t.Fatalf("fma32 trap: got %v, want %v", got, c)
	}
	if twice := float32(math.FMA(float64(a), float64(b), float64(c))); twice == c {
		t.Fatalf("the trap case no longer double-rounds (%v); it tests nothing", twice)
	}
	rng := rand.New(rand.NewSource(21))
	for i := 0; i < 200000; i++ {
		a := float32(rng.NormFloat64() * math.Exp2(float64(rng.Intn(20)-10)))
		b := float32(rng.NormFloat64() * math.Exp2(float64(rng.Intn(20)-10)))
		var c float32
		switch rng.Intn(3) {
		case 0: // near cancellation
			c = -a*b + float32(rng.NormFloat64())*1e-6*a*b
		case 1: // c dominates, a*b lands in its last bits
			c = float32(rng.NormFloat64() * 1e6)
		default:
			c = float32(rng.NormFloat64())
		}
		if got, want := fma32(a, b, c), bigFMA32(a, b, c); got != want {
			t.Fatalf("fma32(%v, %v, %v) = %v, want %v", a, b, c, got, want)
		}
	}
}

// levelsFromDequant returns the integer levels of a row of t by
// dequantizing a copy whose f16 scales are set to 1: IQ4_NL's then hold
// kvalues[q] and IQ4_XS's (ls-32)*kvalues[q], exactly.
func levelsFromDequant(t *testing.T, typ ggml.Type, n int, w []byte) []int32 {
	t.Helper()
	ti, _ := typ.Info()
	c := append([]byte(nil), w...)
	for o := 0; o < len(c); o += ti.BlockBytes {
		put16(c[o:], h1)
	}
	f := dequant(t, typ, c, n)
	l := make([]int32, n)
	for i, v := range f {
		l[i] = int32(v)
		if float32(l[i]) != v {
			t.Fatalf("level %d is %v, not an integer", i, v)
		}
	}
	return l
}

// avx2OrderIQ4 restates ggml's AVX2 float order independently of the
// kernels: lane k of a 32-element block holds elements 4k..4k+3 (the eight
// int32 lanes of VPMADDWD after VPMADDUBSW on the low-nibble half, then the
// high-nibble half), FMAs are rounded once through big.Float, and lanes
// are reduced as hsum_float_8 does. IQ4_NL alternates blocks between two
// accumulators and adds an odd last block after the reduction.
func avx2OrderIQ4(typ ggml.Type, n int, w, xq []byte, lv []int32) float32 {
	lanes := func(y []int32, lvl []int32) (l [8]int32) {
		for e := 0; e < 32; e++ {
			l[e/4] += lvl[e] * y[e]
		}
		return l
	}
	hsum := func(a [8]float32) float32 {
		lo := [4]float32{a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]}
		return (lo[0] + lo[2]) + (lo[1] + lo[3])
	}
	var acc [2][8]float32
	if typ == ggml.IQ4_NL {
		nb := n / 32
		ys := make([]int32, 32)
		blk := func(i int) (float32, [8]int32) {
			for j := range ys {
				ys[j] = int32(int8(xq[i*34+2+j]))
			}
			d := F16ToF32(binary.LittleEndian.Uint16(xq[i*34:])) * F16ToF32(binary.LittleEndian.Uint16(w[i*18:]))
			return d, lanes(ys, lv[32*i:])
		}
		i := 0
		for ; i+1 < nb; i += 2 {
			for k := 0; k < 2; k++ {
				d, l := blk(i + k)
				for j := range l {
					acc[k][j] = bigFMA32(d, float32(l[j]), acc[k][j])
				}
			}
		}
		var s [8]float32
		for j := range s {
			s[j] = acc[0][j] + acc[1][j]
		}
		sum := hsum(s)
		if i < nb {
			d, l := blk(i)
			var si int32
			for _, v := range l {
				si += v
			}
			sum = bigFMA32(d, float32(si), sum)
		}
		return sum
	}
	ys := make([]int32, 32)
	for i := 0; i < n/256; i++ {
		xd := math.Float32frombits(binary.LittleEndian.Uint32(xq[i*292:]))
		var tot [8]int32
		for s := 0; s < 8; s++ {
			for j := range ys {
				ys[j] = int32(int8(xq[i*292+4+32*s+j]))
			}
			l := lanes(ys, lv[256*i+32*s:])
			for j := range tot {
				tot[j] += l[j]
			}
		}
		d := F16ToF32(binary.LittleEndian.Uint16(w[i*136:])) * xd
		for j := range tot {
			acc[0][j] = bigFMA32(d, float32(tot[j]), acc[0][j])
		}
	}
	return hsum(acc[0])
}

// TestIQ4DotFollowsAVX2Order holds the IQ4 dot products, at every SIMD
// level, bit for bit to ggml's AVX2 float order, restated independently
// above, for 1..9 blocks (odd and even counts: IQ4_NL pairs its blocks),
// with -128 activations and zero or negative scales among the blocks.
func TestIQ4DotFollowsAVX2Order(t *testing.T) {
	rng := rand.New(rand.NewSource(22))
	for _, typ := range []ggml.Type{ggml.IQ4_NL, ggml.IQ4_XS} {
		ti, _ := typ.Info()
		for nb := 1; nb <= 9; nb++ {
			for trial := 0; trial < 3; trial++ {
				n := nb * ti.BlockSize
				w := awkwardRow(rng, typ, n)
				xq := quantizedActivations(t, rng, VecDotType(typ), n)
				want := avx2OrderIQ4(typ, n, w, xq, levelsFromDequant(t, typ, n, w))
				for _, l := range levels() {
					atLevel(l, func() {
						if got := VecDot(typ, n, w, xq); got != want {
							t.Fatalf("%v n=%d level %s: VecDot %v, AVX2 order %v", typ, n, levelNames[l], got, want)
						}
					})
				}
			}
		}
	}
}

// TestIQ4PathsAgreeBitwise checks, at every SIMD level, that every path
// of the IQ4 types gives the pure-Go dot product's exact bits: VecDot (the
// assembly, where the level has it), and VecDotRows and MatVec, which have
// no multi-row kernels for these types and must fall back to VecDot; and
// that no prepared kernel claims them.
func TestIQ4PathsAgreeBitwise(t *testing.T) {
	rng := rand.New(rand.NewSource(23))
	for _, typ := range []ggml.Type{ggml.IQ4_NL, ggml.IQ4_XS} {
		checkPathsBitwise(t, rng, typ)
	}
}

// checkPathsBitwise holds VecDot, VecDotRows and MatVec of a type that has
// only one-row kernels to its pure-Go dot product, bit for bit, at every
// SIMD level, and checks that no prepared kernel claims the type.
func checkPathsBitwise(t *testing.T, rng *rand.Rand, typ ggml.Type) {
	t.Helper()
	ti, _ := typ.Info()
	vt := VecDotType(typ)
	vti, _ := vt.Info()
	for _, nb := range []int{1, 2, 3, 7} {
		n := nb * ti.BlockSize
		rb := n / ti.BlockSize * ti.BlockBytes
		xb := n / vti.BlockSize * vti.BlockBytes
		const rows = 5
		w := make([]byte, rows*rb)
		xq := make([]byte, rows*xb)
		for r := 0; r < rows; r++ {
			copy(w[r*rb:], awkwardRow(rng, typ, n))
			copy(xq[r*xb:], quantizedActivations(t, rng, vt, n))
		}
		for _, l := range levels() {
			atLevel(l, func() {
				if g := PrepGroupBytes(typ, n); g != 0 {
					t.Fatalf("%v level %s: PrepGroupBytes = %d, want 0", typ, levelNames[l], g)
				}
				out := make([]float32, rows)
				VecDotRows(typ, n, w, xq, xb, rows, out)
				for r := range out {
					want := genericDot[typ](n, w, xq[r*xb:(r+1)*xb])
					if got := VecDot(typ, n, w, xq[r*xb:(r+1)*xb]); got != want || out[r] != want {
						t.Fatalf("%v n=%d level %s row %d: VecDot %v, VecDotRows %v, pure Go %v", typ, n, levelNames[l], r, got, out[r], want)
					}
				}
				MatVec(typ, n, w, xq[:xb], out)
				for r := range out {
					if want := genericDot[typ](n, w[r*rb:(r+1)*rb], xq[:xb]); out[r] != want {
						t.Fatalf("%v n=%d level %s row %d: MatVec %v, pure Go %v", typ, n, levelNames[l], r, out[r], want)
					}
				}
			})
		}
	}
}

func TestIQ4IsWeightType(t *testing.T) {
	for _, typ := range []ggml.Type{ggml.IQ4_NL, ggml.IQ4_XS} {
		if !IsWeightType(typ) {
			t.Errorf("IsWeightType(%v) = false", typ)
		}
	}
}
