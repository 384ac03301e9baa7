package quant

import (
	"encoding/binary"
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/zrtdev/zrt/format/ggml"
)

// e2m1 decodes a 4-bit E2M1 float from its fields, the OCP MX
// specification's way, independently of kvaluesMXFP4: bit 3 is the sign,
// bits 2..1 the exponent (bias 1, 0 meaning subnormal), bit 0 the
// mantissa.
func e2m1(v byte) float64 {
	exp, man := int(v>>1&3), float64(v&1)
	var m float64
	if exp == 0 {
		m = man / 2
	} else {
		m = math.Ldexp(1+man/2, exp-1)
	}
	if v&8 != 0 {
		m = -m
	}
	return m
}

// refMXFP4 is dequantize_row_mxfp4 restated from the format: element value
// = e2m1(nibble) * 2^(e-127), exact in float64 and then rounded to float32
// (where 6*2^128 overflows to +Inf). ggml's zeros are +0 (the integer
// level 0 times the scale), so -0 comes back as +0.
func refMXFP4(b []byte) []float32 {
	out := make([]float32, 32)
	for j := 0; j < 16; j++ {
		for h, v := range [2]byte{b[1+j] & 15, b[1+j] >> 4} {
			x := float32(e2m1(v) * math.Ldexp(1, int(b[0])-127))
			if x == 0 {
				x = 0
			}
			out[j+16*h] = x
		}
	}
	return out
}

// allNibbles is a block's qs holding every nibble value in both halves:
// element j (< 16) is j and element 16+j is 15-j.
func allNibbles() (qs [16]byte) {
	for j := range qs {
		qs[j] = byte(j) | byte(15-j)<<4
	}
	return qs
}

// TestDequantizeMXFP4 checks every exponent byte, e = 0, 1 (the subnormal
// scales), 254 and 255 included, with every nibble in both halves of the
// block, against refMXFP4, bit for bit; and a few values by hand.
func TestDequantizeMXFP4(t *testing.T) {
	qs := allNibbles()
	row := make([]byte, 0, 256*mxfp4Len)
	for e := 0; e < 256; e++ {
		row = append(row, byte(e))
		row = append(row, qs[:]...)
	}
	got := dequant(t, ggml.MXFP4, row, 256*32)
	for e := 0; e < 256; e++ {
		want := refMXFP4(row[e*mxfp4Len:])
		for i, w := range want {
			if g := got[32*e+i]; math.Float32bits(g) != math.Float32bits(w) {
				t.Fatalf("e=%d element %d: got %v (%#x), want %v (%#x)", e, i, g, math.Float32bits(g), w, math.Float32bits(w))
			}
		}
	}
	// e = 127 is a scale of 1: the E2M1 values themselves.
	b := append([]byte{127}, qs[:]...)
	want := []float32{0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6}
	got = dequant(t, ggml.MXFP4, b, 32)
	for j, w := range want {
		if got[j] != w || got[31-j] != w {
			t.Fatalf("e=127 nibble %d: got %v and %v, want %v", j, got[j], got[31-j], w)
		}
	}
	// The extremes: e = 0 scales 6 to 6*2^-127 (a float32 subnormal),
	// e = 255 overflows 6*2^128 to +Inf.
	b[0] = 0
	if got := dequant(t, ggml.MXFP4, b, 32); got[7] != float32(math.Ldexp(6, -127)) || got[1] != float32(math.Ldexp(1, -128)) {
		t.Fatalf("e=0: got %v, %v", got[7], got[1])
	}
	b[0] = 255
	if got := dequant(t, ggml.MXFP4, b, 32); !math.IsInf(float64(got[7]), 1) || !math.IsInf(float64(got[15]), -1) || got[1] != float32(math.Ldexp(1, 127)) {
		t.Fatalf("e=255: got %v, %v, %v", got[7], got[15], got[1])
	}
}

// mxfp4Row returns n/32 random MXFP4 blocks: random nibbles under
// exponents mostly near 127, with the edge exponents 0, 1, 254 and 255
// among them, and the every-nibble block now and then.
func mxfp4Row(rng *rand.Rand, n int) []byte {
	b := make([]byte, n/32*mxfp4Len)
	rng.Read(b)
	qs := allNibbles()
	for o := 0; o < len(b); o += mxfp4Len {
		switch rng.Intn(10) {
		case 0:
			b[o] = []byte{0, 1, 254, 255}[rng.Intn(4)]
		case 1:
			b[o] = byte(rng.Intn(256))
		default:
			b[o] = byte(118 + rng.Intn(16))
		}
		if rng.Intn(5) == 0 {
			copy(b[o+1:], qs[:])
		}
	}
	return b
}

// fma32Ref is a*b+c rounded once: through big.Float (bigFMA32) for finite
// operands, and in float64 where one is infinite (the result is then an
// infinity or NaN, which rounding cannot change).
func fma32Ref(a, b, c float32) float32 {
	for _, v := range []float32{a, b, c} {
		if math.IsInf(float64(v), 0) || math.IsNaN(float64(v)) {
			return float32(float64(a)*float64(b) + float64(c))
		}
	}
	return bigFMA32(a, b, c)
}

// avx2OrderMXFP4 restates ggml_vec_dot_mxfp4_q8_0's AVX2 path on x86
// independently of the kernel. The weight levels are the block's
// dequantized values at e = 128 (scale 1). Per block, VPSHUFB looks the
// levels up into one 256-bit register in element order (the low nibbles'
// levels in its low half, the high nibbles' in its high half); mul_add_epi8
// takes VPSIGNB(level, level) (the magnitude) and VPSIGNB(y, level) (the
// activation negated where the level is negative, zeroed where it is 0; the
// negation is the byte's two's complement, so -128 stays -128), then
// VPMADDUBSW sums adjacent products into int16 and VPMADDWD against ones
// sums adjacent int16 into the eight int32 lanes. The block scale is the
// float32 product f16(y.d)*2^(e-128). Blocks go in pairs, block 2i into
// accumulator 1 and 2i+1 into accumulator 2, as VFMADD231PS (scale, float
// lane, acc); at the end hsum_float_8(acc1+acc2): the high 128 bits added
// to the low, then MOVHLPS (lanes 2,3 onto 0,1), then MOVSHDUP (lane 1 onto
// 0). An odd last block goes through the scalar C tail: exact int products
// summed over both halves, then sumf += d*sumi, contracted to one FMA.
func avx2OrderMXFP4(t *testing.T, n int, w, xq []byte) float32 {
	nb := n / 32
	c := append([]byte(nil), w...)
	for o := 0; o < len(c); o += mxfp4Len {
		c[o] = 128
	}
	lv := dequant(t, ggml.MXFP4, c, n)
	level := func(i int) int {
		v := int(lv[i])
		if float32(v) != lv[i] || v < -12 || v > 12 {
			t.Fatalf("level %d is %v", i, lv[i])
		}
		return v
	}
	scale := func(ib int) float32 {
		yd := F16ToF32(binary.LittleEndian.Uint16(xq[ib*34:]))
		return yd * float32(math.Ldexp(1, int(w[ib*mxfp4Len])-128))
	}
	ybyte := func(ib, j int) byte { return xq[ib*34+2+j] }
	lanes := func(ib int) (l [8]int32) {
		var p16 [16]int32 // VPMADDUBSW's int16 results (no saturation here)
		for e := 0; e < 32; e++ {
			x := level(32*ib + e)
			ax := x
			if ax < 0 {
				ax = -ax
			}
			y := ybyte(ib, e)
			var sy int8
			switch {
			case x < 0:
				sy = int8(byte(0x100 - int(y))) // two's complement negation of the byte
			case x > 0:
				sy = int8(y)
			}
			p16[e/2] += int32(ax) * int32(sy)
		}
		for k := range l {
			l[k] = p16[2*k] + p16[2*k+1]
		}
		return l
	}
	var acc [2][8]float32
	ib := 0
	for ; ib+1 < nb; ib += 2 {
		for h := 0; h < 2; h++ {
			d, l := scale(ib+h), lanes(ib+h)
			for k := range l {
				acc[h][k] = fma32Ref(d, float32(l[k]), acc[h][k])
			}
		}
	}
	var s [8]float32
	for k := range s {
		s[k] = acc[0][k] + acc[1][k]
	}
	lo := [4]float32{s[0] + s[4], s[1] + s[5], s[2] + s[6], s[3] + s[7]}
	sum := (lo[0] + lo[2]) + (lo[1] + lo[3])
	if ib < nb {
		var sumi1, sumi2 int32
		for j := 0; j < 16; j++ {
			sumi1 += int32(int8(ybyte(ib, j))) * int32(level(32*ib+j))
			sumi2 += int32(int8(ybyte(ib, j+16))) * int32(level(32*ib+j+16))
		}
		sum = fma32Ref(scale(ib), float32(sumi1+sumi2), sum)
	}
	return sum
}

func sameFloat(a, b float32) bool {
	return a == b || (math.IsNaN(float64(a)) && math.IsNaN(float64(b)))
}

// TestMXFP4DotFollowsAVX2Order holds VecDot, at every SIMD level, bit for
// bit to avx2OrderMXFP4 for 1..9 blocks (odd and even counts: blocks go in
// pairs), on random blocks with the edge exponents and every nibble, and
// activations with -128 and 127 written over some quants.
func TestMXFP4DotFollowsAVX2Order(t *testing.T) {
	rng := rand.New(rand.NewSource(39))
	for nb := 1; nb <= 9; nb++ {
		for trial := 0; trial < 20; trial++ {
			n := nb * 32
			w := mxfp4Row(rng, n)
			xq := quantizedActivations(t, rng, ggml.Q8_0, n)
			want := avx2OrderMXFP4(t, n, w, xq)
			for _, l := range levels() {
				atLevel(l, func() {
					if got := VecDot(ggml.MXFP4, n, w, xq); !sameFloat(got, want) {
						t.Fatalf("n=%d level %s: VecDot %v, AVX2 order %v", n, levelNames[l], got, want)
					}
				})
			}
		}
	}
}

// TestMXFP4DotSignWrap pins the one place where ggml's AVX2 products are
// not the integer products: a -128 activation against a negative level is
// negated by VPSIGNB to -128, so the pair path counts -128*|level|, while
// the scalar tail of an odd block count computes the true +128*|level|.
func TestMXFP4DotSignWrap(t *testing.T) {
	blk := make([]byte, mxfp4Len)
	blk[0] = 128  // scale 1
	blk[1] = 0x0f // element 0: level -12; element 16: level 0
	x := make([]byte, q8_0Len)
	put16(x, h1)
	x[2] = 0x80 // y[0] = -128
	w2 := append(append([]byte(nil), blk...), make([]byte, mxfp4Len)...)
	x2 := append(append([]byte(nil), x...), make([]byte, q8_0Len)...)
	if got := VecDot(ggml.MXFP4, 64, w2, x2); got != -1536 {
		t.Errorf("pair path: got %v, want -1536 (VPSIGNB wraps -128)", got)
	}
	if got := VecDot(ggml.MXFP4, 32, blk, x); got != 1536 {
		t.Errorf("scalar tail: got %v, want 1536", got)
	}
}

// TestMXFP4VecDotMatchesDequantized compares VecDot on activations from
// QuantizeRow (no -128) with the float64 dot product of the dequantized
// rows, within float32 rounding.
func TestMXFP4VecDotMatchesDequantized(t *testing.T) {
	rng := rand.New(rand.NewSource(40))
	for nb := 1; nb <= 8; nb++ {
		for trial := 0; trial < 8; trial++ {
			n := nb * 32
			w := mxfp4Row(rng, n)
			for o := 0; o < len(w); o += mxfp4Len {
				w[o] = byte(118 + rng.Intn(16)) // finite products
			}
			xq := make([]byte, n/32*q8_0Len)
			if err := QuantizeRow(ggml.Q8_0, randomActivations(rng, n), xq); err != nil {
				t.Fatal(err)
			}
			if err := CheckVecDot(ggml.MXFP4, n, len(w), len(xq)); err != nil {
				t.Fatal(err)
			}
			got := VecDot(ggml.MXFP4, n, w, xq)
			wd := dequant(t, ggml.MXFP4, w, n)
			xd := dequant(t, ggml.Q8_0, xq, n)
			var ref, mag float64
			for i := range wd {
				p := float64(wd[i]) * float64(xd[i])
				ref += p
				mag += math.Abs(p)
			}
			if diff := math.Abs(float64(got) - ref); diff > 1e-5*mag+1e-30 {
				t.Fatalf("n=%d: VecDot = %v, reference %v (diff %g, sum|p| %g)", n, got, ref, diff, mag)
			}
		}
	}
}

// TestMXFP4PathsAgreeBitwise checks, at every SIMD level, that VecDotRows
// (which has no multi-row MXFP4 kernel and loops over VecDot) and MatVec
// (mxfp4_amd64.go's loop over the assembly from AVX2 up) give the pure-Go
// dot product's exact bits, and that no prepared kernel claims MXFP4.
func TestMXFP4PathsAgreeBitwise(t *testing.T) {
	rng := rand.New(rand.NewSource(41))
	for _, nb := range []int{1, 2, 3, 7, 90} {
		n := nb * 32
		rb, xb := nb*mxfp4Len, nb*q8_0Len
		const rows = 9
		w := make([]byte, rows*rb)
		xq := make([]byte, rows*xb)
		for r := 0; r < rows; r++ {
			copy(w[r*rb:], mxfp4Row(rng, n))
			copy(xq[r*xb:], quantizedActivations(t, rng, ggml.Q8_0, n))
		}
		for _, l := range levels() {
			atLevel(l, func() {
				if g := PrepGroupBytes(ggml.MXFP4, n); g != 0 {
					t.Fatalf("level %s: PrepGroupBytes = %d, want 0", levelNames[l], g)
				}
				out := make([]float32, rows)
				VecDotRows(ggml.MXFP4, n, w, xq, xb, rows, out)
				for r := range out {
					want := dotMXFP4(n, w, xq[r*xb:(r+1)*xb])
					if got := VecDot(ggml.MXFP4, n, w, xq[r*xb:(r+1)*xb]); !sameFloat(got, want) || !sameFloat(out[r], want) {
						t.Fatalf("n=%d level %s row %d: VecDot %v, VecDotRows %v, pure Go %v", n, levelNames[l], r, got, out[r], want)
					}
				}
				MatVec(ggml.MXFP4, n, w, xq[:xb], out)
				for r := range out {
					if want := dotMXFP4(n, w[r*rb:(r+1)*rb], xq[:xb]); !sameFloat(out[r], want) {
						t.Fatalf("n=%d level %s row %d: MatVec %v, pure Go %v", n, levelNames[l], r, out[r], want)
					}
				}
			})
		}
	}
}

func TestMXFP4IsWeightType(t *testing.T) {
	if !IsWeightType(ggml.MXFP4) || !slices.Contains(WeightTypes(), ggml.MXFP4) {
		t.Error("MXFP4 is not a weight type")
	}
	if vt := VecDotType(ggml.MXFP4); vt != ggml.Q8_0 {
		t.Errorf("VecDotType(MXFP4) = %v, want Q8_0", vt)
	}
	if err := QuantizeRow(ggml.MXFP4, make([]float32, 32), make([]byte, 17)); err == nil {
		t.Error("QuantizeRow to MXFP4 (a weight-only type) accepted")
	}
	if err := CheckVecDot(ggml.MXFP4, 64, 33, 68); err == nil {
		t.Error("CheckVecDot with a short MXFP4 row accepted")
	}
	if err := CheckVecDot(ggml.MXFP4, 48, 1000, 1000); err == nil {
		t.Error("CheckVecDot with a partial block accepted")
	}
	rng := rand.New(rand.NewSource(42))
	const n = 512
	w := mxfp4Row(rng, n)
	xq := quantizedActivations(t, rng, ggml.Q8_0, n)
	if a := testing.AllocsPerRun(10, func() { VecDot(ggml.MXFP4, n, w, xq) }); a != 0 {
		t.Errorf("VecDot allocates %v times", a)
	}
}

// ---- quantization

// TestQuantizeMXFP4HandBuilt works one block by hand. amax = 7 gives
// e = floor(log2 7) - 2 + 127 = 127, a scale of 0.5, so the levels are
// 0, ±0.5, ±1, ±1.5, ±2, ±3, ±4, ±6 (7 clips to 6); ties go to the first
// level in table order (1.25 to 1, -0.75 to -0.5, 5 to 4, -3.5 to -3).
func TestQuantizeMXFP4HandBuilt(t *testing.T) {
	x := make([]float32, 32)
	copy(x, []float32{6, 1.25, -0.75, 5, 0, -0.1, -6, 100e-3, 2.4, -3.5, 7})
	x[16], x[17], x[31] = -5, 0.25, 4.9
	want := map[int]byte{
		0: 7, 1: 2, 2: 9, 3: 6, 4: 0, 5: 0, 6: 15, 7: 0, 8: 4, 9: 13, 10: 7,
		16: 14, 17: 0, 31: 6,
	}
	b := make([]byte, mxfp4Len)
	if err := QuantizeMXFP4(x, b); err != nil {
		t.Fatal(err)
	}
	if b[0] != 127 {
		t.Fatalf("e = %d, want 127", b[0])
	}
	for i := 0; i < 32; i++ {
		got := b[1+i%16] >> (4 * (i / 16)) & 15
		if got != want[i] {
			t.Errorf("element %d (%v): nibble %d, want %d", i, x[i], got, want[i])
		}
	}
	if err := QuantizeMXFP4(make([]float32, 33), make([]byte, 100)); err == nil {
		t.Error("a partial block accepted")
	}
	if err := QuantizeMXFP4(make([]float32, 64), make([]byte, 33)); err == nil {
		t.Error("a short dst accepted")
	}
	if err := QuantizeMXFP4(make([]float32, 32), b); err != nil || b[0] != 0 || slices.ContainsFunc(b[1:], func(v byte) bool { return v != 0 }) {
		t.Errorf("zero block: %v, %v", b, err)
	}
}

// TestMXFP4Exponent checks the block exponent against values of glibc's
// floorf(log2f(amax)) (2.36, x86-64), at the edges of binades where log2f
// rounds amax just below a power of two up to the integer, and the x86
// conversion of out-of-range values to uint8_t.
func TestMXFP4Exponent(t *testing.T) {
	for _, c := range []struct {
		bits  uint32
		floor int
	}{
		{0x3f800000, 0}, {0x3f7fffff, -1}, {0x40000000, 1},
		{0x3e7ffffe, -3}, {0x3e7fffff, -2}, // just below 2^-2
		{0x3bfffffd, -8}, {0x3bfffffe, -7},
		{0x3afffffa, -10}, {0x3afffffb, -9},
		{0x0fffffd3, -96}, {0x0fffffd4, -95},
		{0x40fffffe, 2}, {0x40ffffff, 3}, // just below 8
		{0x43fffffa, 8}, {0x43fffffb, 9},
		{0x7f7fffd3, 127}, {0x7f7fffd4, 128}, // near MaxFloat32
		{0x0003fffe, -132}, {0x0003ffff, -131}, // subnormals
		{0x007fffe9, -127}, {0x007fffea, -126}, // the latter gives e = 255
		{0x00000001, -149},
	} {
		want := uint8(int32(c.floor - 2 + 127))
		if got := mxfp4Exponent(math.Float32frombits(c.bits)); got != want {
			t.Errorf("amax %#08x (%g): e = %d, want %d (floor %d)", c.bits, math.Float32frombits(c.bits), got, want, c.floor)
		}
	}
	if got := mxfp4Exponent(float32(math.Inf(1))); got != 0 {
		t.Errorf("amax +Inf: e = %d, want 0", got)
	}
	if got := mxfp4Exponent(math.SmallestNonzeroFloat32); got != 232 {
		t.Errorf("amax 2^-149: e = %d, want 232", got)
	}
}

// TestQuantizeMXFP4RoundTrip checks, on random rows, that quantize then
// dequantize gives each element the nearest level of its block (the first
// such in table order, as best_index_mxfp4 picks), that the exponent puts
// amax in [8, 16) scale units, that the error is at most 2 units below the
// top level 12 (where the levels are 4 apart) and clipping above it, and
// that quantizing the dequantized row gives back the same bytes.
func TestQuantizeMXFP4RoundTrip(t *testing.T) {
	rng := rand.New(rand.NewSource(43))
	for trial := 0; trial < 200; trial++ {
		n := 32 * (1 + rng.Intn(8))
		x := make([]float32, n)
		sigma := math.Exp2(float64(rng.Intn(40) - 20))
		for i := range x {
			x[i] = float32(rng.NormFloat64() * sigma)
		}
		if trial%10 == 0 {
			x[rng.Intn(n)] = 0
			x[rng.Intn(n)] = float32(math.Copysign(math.Ldexp(1, rng.Intn(10)-5), rng.NormFloat64()))
		}
		q := make([]byte, n/32*mxfp4Len)
		if err := QuantizeMXFP4(x, q); err != nil {
			t.Fatal(err)
		}
		y := dequant(t, ggml.MXFP4, q, n)
		for blk := 0; blk < n/32; blk++ {
			e := q[blk*mxfp4Len]
			d := float64(math.Ldexp(1, int(e)-128))
			var amax float64
			for _, v := range x[32*blk : 32*blk+32] {
				amax = math.Max(amax, math.Abs(float64(v)))
			}
			if u := amax / d; u < 8 || u >= 16 {
				t.Fatalf("block %d: amax %g is %g units of %g (e=%d), want [8, 16)", blk, amax, u, d, e)
			}
			for i := 32 * blk; i < 32*blk+32; i++ {
				xv, yv := float64(x[i]), float64(y[i])
				err := math.Abs(xv - yv)
				first := -1
				for k, l := range kvaluesMXFP4 {
					e := math.Abs(float64(l)*d - xv)
					if e < err {
						t.Fatalf("element %d: %v decoded as %v, but level %d (%v) is nearer", i, xv, yv, l, float64(l)*d)
					}
					if first < 0 && e == err {
						first = k
					}
				}
				nib := q[blk*mxfp4Len+1+(i%32)%16] >> (4 * ((i % 32) / 16)) & 15
				if int(nib) != first {
					t.Fatalf("element %d: nibble %d, want the first nearest %d", i, nib, first)
				}
				if math.Abs(xv) <= 12*d && err > 2*d || math.Abs(xv) > 12*d && math.Abs(yv) != 12*d {
					t.Fatalf("element %d: %v decoded as %v (scale %g)", i, xv, yv, d)
				}
			}
		}
		q2 := make([]byte, len(q))
		if err := QuantizeMXFP4(y, q2); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(q, q2) {
			t.Fatalf("trial %d: quantizing the dequantized row changed its bytes", trial)
		}
	}
}
