package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/zrtdev/zrt/format/ggml"
)

// Exact f16 encodings used by the hand-built blocks.
const (
	h1       = 0x3c00 // 1.0
	hHalf    = 0x3800 // 0.5
	hQuarter = 0x3400 // 0.25
	hMinus2  = 0xc000 // -2.0
)

var weightTypes = []ggml.Type{
	ggml.F32, ggml.F16, ggml.BF16,
	ggml.Q4_0, ggml.Q4_1, ggml.Q5_0, ggml.Q5_1, ggml.Q8_0,
	ggml.Q2_K, ggml.Q3_K, ggml.Q4_K, ggml.Q5_K, ggml.Q6_K,
	ggml.IQ4_NL, ggml.IQ4_XS, ggml.IQ3_S,
}

func put16(b []byte, v uint16) { binary.LittleEndian.PutUint16(b, v) }

func dequant(t *testing.T, typ ggml.Type, src []byte, n int) []float32 {
	t.Helper()
	dst := make([]float32, n)
	if err := Dequantize(typ, src, dst); err != nil {
		t.Fatalf("Dequantize(%v): %v", typ, err)
	}
	return dst
}

func expectEqual(t *testing.T, typ ggml.Type, got, want []float32) {
	t.Helper()
	for i := range want {
		if got[i] != want[i] && !(math.IsNaN(float64(got[i])) && math.IsNaN(float64(want[i]))) {
			t.Fatalf("%v element %d: got %v, want %v", typ, i, got[i], want[i])
		}
	}
}

// ---- 1. hand-built blocks

func TestDequantizeFloatTypes(t *testing.T) {
	f := make([]byte, 12)
	binary.LittleEndian.PutUint32(f[0:], math.Float32bits(1.5))
	binary.LittleEndian.PutUint32(f[4:], math.Float32bits(-2))
	binary.LittleEndian.PutUint32(f[8:], math.Float32bits(float32(math.Inf(1))))
	expectEqual(t, ggml.F32, dequant(t, ggml.F32, f, 3), []float32{1.5, -2, float32(math.Inf(1))})

	h := []byte{0, 0x3c, 0, 0xc0, 1, 0, 0, 0x7c, 0x55, 0x35, 0xff, 0x7b}
	expectEqual(t, ggml.F16, dequant(t, ggml.F16, h, 6),
		[]float32{1, -2, 0x1p-24, float32(math.Inf(1)), 0.333251953125, 65504})

	bf := []byte{0x80, 0x3f, 0x40, 0xc0, 0x49, 0x40}
	expectEqual(t, ggml.BF16, dequant(t, ggml.BF16, bf, 3), []float32{1, -3, 3.140625})
}

func TestDequantizeQ4Q5Q8(t *testing.T) {
	// Nibble pattern: qs[j] = j | (15-j)<<4, so element j is j and element
	// 16+j is 15-j (before offsets).
	var qs [16]byte
	for j := range qs {
		qs[j] = byte(j) | byte(15-j)<<4
	}
	nib := func(e int) int {
		if e < 16 {
			return e
		}
		return 15 - (e - 16)
	}

	b := make([]byte, 18)
	put16(b, hHalf)
	copy(b[2:], qs[:])
	got := dequant(t, ggml.Q4_0, b, 32)
	want := make([]float32, 32)
	for e := range want {
		want[e] = float32(nib(e)-8) * 0.5
	}
	expectEqual(t, ggml.Q4_0, got, want)
	if got[0] != -4 || got[15] != 3.5 || got[16] != 3.5 || got[31] != -4 {
		t.Fatalf("Q4_0 spot values %v", got)
	}

	b = make([]byte, 20)
	put16(b, hHalf)
	put16(b[2:], hQuarter)
	copy(b[4:], qs[:])
	for e := range want {
		want[e] = float32(nib(e))*0.5 + 0.25
	}
	expectEqual(t, ggml.Q4_1, dequant(t, ggml.Q4_1, b, 32), want)

	// Q5: bit e of qh is element e's fifth bit.
	const qh = 0xA5A5F00F
	fifth := func(e int) int { return int(qh>>e&1) << 4 }
	b = make([]byte, 22)
	put16(b, hHalf)
	binary.LittleEndian.PutUint32(b[2:], qh)
	copy(b[6:], qs[:])
	for e := range want {
		want[e] = float32(nib(e)+fifth(e)-16) * 0.5
	}
	got = dequant(t, ggml.Q5_0, b, 32)
	expectEqual(t, ggml.Q5_0, got, want)
	// qh bits 0 and 12 are set, bit 4 is clear: (0+16-16)/2, (4-16)/2,
	// (12+16-16)/2; element 31 is nibble 0 with bit 31 set.
	if got[0] != 0 || got[4] != -6 || got[12] != 6 || got[31] != 0 {
		t.Fatalf("Q5_0 spot values %v %v %v %v", got[0], got[4], got[12], got[31])
	}

	b = make([]byte, 24)
	put16(b, hMinus2)
	put16(b[2:], hQuarter)
	binary.LittleEndian.PutUint32(b[4:], qh)
	copy(b[8:], qs[:])
	for e := range want {
		want[e] = float32(nib(e)+fifth(e))*-2 + 0.25
	}
	expectEqual(t, ggml.Q5_1, dequant(t, ggml.Q5_1, b, 32), want)

	b = make([]byte, 34)
	put16(b, hQuarter)
	for j := 0; j < 32; j++ {
		b[2+j] = byte(int8(j*8 - 128))
		want[j] = float32(j*8-128) * 0.25
	}
	expectEqual(t, ggml.Q8_0, dequant(t, ggml.Q8_0, b, 32), want)

	b = make([]byte, 36)
	put16(b, hQuarter)
	put16(b[2:], h1)
	for j := 0; j < 32; j++ {
		b[4+j] = byte(int8(127 - j*8))
		want[j] = float32(127-j*8) * 0.25
	}
	expectEqual(t, ggml.Q8_1, dequant(t, ggml.Q8_1, b, 32), want)
}

// Hand-written scales bytes for Q4_K/Q5_K: scales 1,2,3,4,33,50,17,63 and
// mins 5,6,7,8,40,21,9,62. Sub-blocks 4..7 need the top bits stored in bytes
// 0..7, which is get_scale_min_k4's second path. Worked by hand:
// byte0 = 1 | (33>>4)<<6 = 129, byte4 = 5 | (40>>4)<<6 = 133,
// byte8 = (33&15) | (40&15)<<4 = 129, and so on.
var (
	k4Scales = [12]byte{129, 194, 67, 196, 133, 70, 7, 200, 129, 82, 145, 239}
	k4Sc     = [8]int{1, 2, 3, 4, 33, 50, 17, 63}
	k4Mn     = [8]int{5, 6, 7, 8, 40, 21, 9, 62}
)

// The encoders below build k-quant blocks from logical values following the
// block layout (not ggml's decoding loops), so decoding them is an
// independent check.

func encodeQ2K(q *[256]int, sc, mn *[16]int, d, dmin uint16) []byte {
	b := make([]byte, 84)
	for s := 0; s < 16; s++ {
		b[s] = byte(sc[s] | mn[s]<<4)
	}
	for e := 0; e < 256; e++ {
		// element e: chunk e/128, bit pair (e%128)/32, byte e%32 of the chunk
		b[16+32*(e/128)+e%32] |= byte(q[e]) << (2 * ((e % 128) / 32))
	}
	put16(b[80:], d)
	put16(b[82:], dmin)
	return b
}

func encodeQ3K(q *[256]int, sc *[16]int, d uint16) []byte {
	b := make([]byte, 110)
	for e := 0; e < 256; e++ {
		u := q[e] + 4 // 0..7
		b[32+32*(e/128)+e%32] |= byte(u&3) << (2 * ((e % 128) / 32))
		b[e%32] |= byte(u>>2) << (e / 32)
	}
	for j := 0; j < 16; j++ {
		u := sc[j] + 32 // 0..63
		if j < 8 {
			b[96+j] |= byte(u & 15)
		} else {
			b[96+j-8] |= byte(u&15) << 4
		}
		b[96+8+j%4] |= byte(u>>4) << (2 * (j / 4))
	}
	put16(b[108:], d)
	return b
}

func encodeScalesK4(sc, mn *[8]int) [12]byte {
	var s [12]byte
	for j := 0; j < 4; j++ {
		s[j] = byte(sc[j] | (sc[j+4]>>4)<<6)
		s[j+4] = byte(mn[j] | (mn[j+4]>>4)<<6)
		s[j+8] = byte(sc[j+4]&15 | (mn[j+4]&15)<<4)
	}
	return s
}

func encodeQ4K(q *[256]int, sc, mn *[8]int, d, dmin uint16) []byte {
	b := make([]byte, 144)
	put16(b[0:], d)
	put16(b[2:], dmin)
	s := encodeScalesK4(sc, mn)
	copy(b[4:], s[:])
	for e := 0; e < 256; e++ {
		// chunk e/64: low nibbles hold its first 32 elements, high the rest
		b[16+32*(e/64)+e%32] |= byte(q[e]&15) << (4 * ((e % 64) / 32))
	}
	return b
}

func encodeQ5K(q *[256]int, sc, mn *[8]int, d, dmin uint16) []byte {
	b := make([]byte, 176)
	put16(b[0:], d)
	put16(b[2:], dmin)
	s := encodeScalesK4(sc, mn)
	copy(b[4:], s[:])
	for e := 0; e < 256; e++ {
		b[48+32*(e/64)+e%32] |= byte(q[e]&15) << (4 * ((e % 64) / 32))
		b[16+e%32] |= byte(q[e]>>4) << (e / 32)
	}
	return b
}

func encodeQ6K(q *[256]int, sc *[16]int, d uint16) []byte {
	b := make([]byte, 210)
	for e := 0; e < 256; e++ {
		u := q[e] + 32 // 0..63
		h, p := e/128, e%128
		b[64*h+p%64] |= byte(u&15) << (4 * (p / 64))
		b[128+32*h+p%32] |= byte(u>>4) << (2 * (p / 32))
	}
	for j := 0; j < 16; j++ {
		b[192+j] = byte(int8(sc[j]))
	}
	put16(b[208:], d)
	return b
}

func TestDequantizeKQuantsHandBuilt(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var q [256]int
	want := make([]float32, 256)

	// Q4_K with the hand-written scales bytes.
	var sc8, mn8 [8]int
	copy(sc8[:], k4Sc[:])
	copy(mn8[:], k4Mn[:])
	if encodeScalesK4(&sc8, &mn8) != k4Scales {
		t.Fatalf("test encoder disagrees with hand-worked scales: %v", encodeScalesK4(&sc8, &mn8))
	}
	for e := range q {
		q[e] = rng.Intn(16)
	}
	q[5*32] = 7
	got := dequant(t, ggml.Q4_K, encodeQ4K(&q, &sc8, &mn8, hHalf, hQuarter), 256)
	for e := range want {
		want[e] = float32(0.5*float64(k4Sc[e/32])*float64(q[e]) - 0.25*float64(k4Mn[e/32]))
	}
	expectEqual(t, ggml.Q4_K, got, want)
	// Sub-block 5 (upper-bit path): scale 50, min 21: 0.5*50*7 - 0.25*21.
	if got[5*32] != 169.75 {
		t.Fatalf("Q4_K element 160 = %v, want 169.75", got[5*32])
	}

	for e := range q {
		q[e] = rng.Intn(32)
	}
	got = dequant(t, ggml.Q5_K, encodeQ5K(&q, &sc8, &mn8, hHalf, hQuarter), 256)
	for e := range want {
		want[e] = float32(0.5*float64(k4Sc[e/32])*float64(q[e]) - 0.25*float64(k4Mn[e/32]))
	}
	expectEqual(t, ggml.Q5_K, got, want)

	var sc16, mn16 [16]int
	for s := range sc16 {
		sc16[s], mn16[s] = rng.Intn(16), rng.Intn(16)
	}
	sc16[3], mn16[3] = 15, 15
	for e := range q {
		q[e] = rng.Intn(4)
	}
	got = dequant(t, ggml.Q2_K, encodeQ2K(&q, &sc16, &mn16, hHalf, hQuarter), 256)
	for e := range want {
		want[e] = float32(0.5*float64(sc16[e/16])*float64(q[e]) - 0.25*float64(mn16[e/16]))
	}
	expectEqual(t, ggml.Q2_K, got, want)

	for s := range sc16 {
		sc16[s] = rng.Intn(64) - 32
	}
	sc16[0], sc16[15] = -32, 31
	for e := range q {
		q[e] = rng.Intn(8) - 4
	}
	q[0], q[255] = -4, 3
	got = dequant(t, ggml.Q3_K, encodeQ3K(&q, &sc16, hHalf), 256)
	for e := range want {
		want[e] = float32(0.5 * float64(sc16[e/16]) * float64(q[e]))
	}
	expectEqual(t, ggml.Q3_K, got, want)
	if got[0] != 64 || got[255] != 46.5 {
		t.Fatalf("Q3_K corners %v %v, want 64 46.5", got[0], got[255])
	}

	for s := range sc16 {
		sc16[s] = rng.Intn(256) - 128
	}
	for e := range q {
		q[e] = rng.Intn(64) - 32
	}
	got = dequant(t, ggml.Q6_K, encodeQ6K(&q, &sc16, hQuarter), 256)
	for e := range want {
		want[e] = float32(0.25 * float64(sc16[e/16]) * float64(q[e]))
	}
	expectEqual(t, ggml.Q6_K, got, want)

	b := make([]byte, 292)
	binary.LittleEndian.PutUint32(b, math.Float32bits(-0.125))
	for j := 0; j < 256; j++ {
		b[4+j] = byte(int8(j - 128))
		want[j] = float32(j-128) * -0.125
	}
	expectEqual(t, ggml.Q8_K, dequant(t, ggml.Q8_K, b, 256), want)
}

// ---- 2. VecDot against the dequantized rows

// randomRow returns nb random blocks of t: random quant bytes with small
// f16 scales written over the scale fields.
func randomRow(rng *rand.Rand, t ggml.Type, n int) []byte {
	ti, _ := t.Info()
	b := make([]byte, n/ti.BlockSize*ti.BlockBytes)
	rng.Read(b)
	scale := func() uint16 {
		v := float32(0.001 + 0.05*rng.Float64())
		if rng.Intn(2) == 0 {
			v = -v
		}
		return F32ToF16(v)
	}
	switch t {
	case ggml.F32:
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(rng.NormFloat64())))
		}
	case ggml.F16:
		for i := 0; i < n; i++ {
			put16(b[2*i:], F32ToF16(float32(rng.NormFloat64())))
		}
	case ggml.BF16:
		for i := 0; i < n; i++ {
			put16(b[2*i:], F32ToBF16(float32(rng.NormFloat64())))
		}
	}
	for o := 0; o < len(b); o += ti.BlockBytes {
		for _, f := range scaleFields(t) {
			put16(b[o+f:], scale())
		}
	}
	return b
}

// scaleFields are the byte offsets of the F16 scales (d, and dmin where
// there is one) in a block of t; none for the float types.
func scaleFields(t ggml.Type) []int {
	switch t {
	case ggml.Q4_0, ggml.Q5_0, ggml.Q8_0, ggml.IQ3_S, ggml.IQ4_NL, ggml.IQ4_XS:
		return []int{0}
	case ggml.Q4_1, ggml.Q5_1, ggml.Q4_K, ggml.Q5_K:
		return []int{0, 2}
	case ggml.Q2_K:
		return []int{80, 82}
	case ggml.Q3_K:
		return []int{108}
	case ggml.Q6_K:
		return []int{208}
	}
	return nil
}

func randomActivations(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 3)
	}
	return x
}

// quantizedRandom returns n random activations quantized to vt.
func quantizedRandom(tb testing.TB, rng *rand.Rand, vt ggml.Type, n int) []byte {
	tb.Helper()
	vti, _ := vt.Info()
	xq := make([]byte, n/vti.BlockSize*vti.BlockBytes)
	if err := QuantizeRow(vt, randomActivations(rng, n), xq); err != nil {
		tb.Fatal(err)
	}
	return xq
}

func TestVecDotMatchesDequantized(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for _, typ := range weightTypes {
		ti, _ := typ.Info()
		vt := VecDotType(typ)
		unit := ti.BlockSize
		if unit == 1 {
			unit = 64 // float types: "blocks" of 64 elements
		}
		for nb := 1; nb <= 8; nb++ {
			for trial := 0; trial < 4; trial++ {
				n := nb * unit
				w := randomRow(rng, typ, n)
				x := randomActivations(rng, n)
				vti, _ := vt.Info()
				xq := make([]byte, n/vti.BlockSize*vti.BlockBytes)
				if err := QuantizeRow(vt, x, xq); err != nil {
					t.Fatal(err)
				}
				if err := CheckVecDot(typ, n, len(w), len(xq)); err != nil {
					t.Fatal(err)
				}
				got := VecDot(typ, n, w, xq)

				wd := dequant(t, typ, w, n)
				xd := dequant(t, vt, xq, n)
				var ref, mag float64
				for i := range wd {
					p := float64(wd[i]) * float64(xd[i])
					ref += p
					mag += math.Abs(p)
				}
				if vt == ggml.Q8_1 {
					// ggml applies the weight's offset m with the block's
					// stored s = f16(d*sum(q)), not with the dequantized
					// activations; put that rounding into the reference.
					for blk := 0; blk < n/32; blk++ {
						m := float64(fp16(w[blk*ti.BlockBytes+2:]))
						xb := xq[blk*36:]
						var sq int
						for j := 0; j < 32; j++ {
							sq += int(int8(xb[4+j]))
						}
						corr := m * (float64(fp16(xb[2:])) - float64(fp16(xb[0:]))*float64(sq))
						ref += corr
						mag += math.Abs(corr)
					}
				}
				if diff := math.Abs(float64(got) - ref); diff > 1e-5*mag+1e-30 {
					t.Fatalf("%v n=%d: VecDot = %v, reference %v (diff %g, sum|p| %g)", typ, n, got, ref, diff, mag)
				}
			}
		}
	}
}

func TestVecDotDoesNotAllocate(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for _, typ := range weightTypes {
		const n = 512
		w := randomRow(rng, typ, n)
		xq := quantizedRandom(t, rng, VecDotType(typ), n)
		if a := testing.AllocsPerRun(10, func() { VecDot(typ, n, w, xq) }); a != 0 {
			t.Errorf("%v: VecDot allocates %v times", typ, a)
		}
	}
}

func TestVecDotType(t *testing.T) {
	want := map[ggml.Type]ggml.Type{
		ggml.F32: ggml.F32, ggml.F16: ggml.F16, ggml.BF16: ggml.BF16,
		ggml.Q4_0: ggml.Q8_0, ggml.Q5_0: ggml.Q8_0, ggml.Q8_0: ggml.Q8_0,
		ggml.Q4_1: ggml.Q8_1, ggml.Q5_1: ggml.Q8_1,
		ggml.Q2_K: ggml.Q8_K, ggml.Q3_K: ggml.Q8_K, ggml.Q4_K: ggml.Q8_K,
		ggml.Q5_K: ggml.Q8_K, ggml.Q6_K: ggml.Q8_K,
		ggml.IQ3_S: ggml.Q8_K, ggml.IQ4_NL: ggml.Q8_0, ggml.IQ4_XS: ggml.Q8_K,
	}
	for w, v := range want {
		if got := VecDotType(w); got != v {
			t.Errorf("VecDotType(%v) = %v, want %v", w, got, v)
		}
	}
}

// ---- 3. activation quantization and conversions

func TestQuantizeRowRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewSource(4))
	for _, vt := range []ggml.Type{ggml.Q8_0, ggml.Q8_1, ggml.Q8_K} {
		ti, _ := vt.Info()
		bs := ti.BlockSize
		for _, scale := range []float64{1e-3, 1, 300} {
			n := 4 * bs
			x := randomActivations(rng, n)
			for i := range x {
				x[i] *= float32(scale)
			}
			for i := bs; i < 2*bs; i++ { // an all-zero block
				x[i] = 0
			}
			q := make([]byte, n/bs*ti.BlockBytes)
			if err := QuantizeRow(vt, x, q); err != nil {
				t.Fatal(err)
			}
			xd := dequant(t, vt, q, n)
			for blk := 0; blk < n/bs; blk++ {
				b := q[blk*ti.BlockBytes:]
				xb := x[blk*bs : (blk+1)*bs]
				var amax float64
				for _, v := range xb {
					amax = math.Max(amax, math.Abs(float64(v)))
				}
				var bound float64
				switch vt {
				case ggml.Q8_K:
					d := float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
					bound = math.Abs(d)/2*(1+1e-5) + 1e-30
					// bsums must be the group sums of the quants.
					for g := 0; g < 16; g++ {
						var s int
						for l := 0; l < 16; l++ {
							s += int(int8(b[4+16*g+l]))
						}
						if got := int(int16(binary.LittleEndian.Uint16(b[260+2*g:]))); got != s {
							t.Fatalf("Q8_K bsums[%d] = %d, want %d", g, got, s)
						}
					}
				default:
					d32 := amax / 127
					d16 := float64(fp16(b))
					bound = d32/2*(1+1e-5) + 127*math.Abs(d32-d16) + 1e-30
					if vt == ggml.Q8_1 {
						var s int
						for j := 0; j < 32; j++ {
							s += int(int8(b[4+j]))
						}
						if sv := float64(fp16(b[2:])); math.Abs(sv-d32*float64(s)) > 1e-3*math.Abs(d32*float64(s))+1e-7 {
							t.Fatalf("Q8_1 s = %v, want ≈ %v", sv, d32*float64(s))
						}
					}
				}
				for i, v := range xb {
					if e := math.Abs(float64(v) - float64(xd[blk*bs+i])); e > bound {
						t.Fatalf("%v scale %v block %d element %d: %v → %v, error %g > %g", vt, scale, blk, i, v, xd[blk*bs+i], e, bound)
					}
				}
			}
		}
	}
}

func TestQuantizeQ8_0RoundsHalfToEven(t *testing.T) {
	x := make([]float32, 32)
	x[0] = 127 // amax 127: d = 1, id = 1, so x*id is x itself
	copy(x[1:], []float32{2.5, 3.5, -2.5, -0.5, 0.5, 1.5, -126.5, 0.49999997})
	want := []int8{127, 2, 4, -2, 0, 0, 2, -126, 0}
	for _, vt := range []ggml.Type{ggml.Q8_0, ggml.Q8_1} {
		ti, _ := vt.Info()
		q := make([]byte, ti.BlockBytes)
		if err := QuantizeRow(vt, x, q); err != nil {
			t.Fatal(err)
		}
		if d := binary.LittleEndian.Uint16(q); d != h1 {
			t.Fatalf("%v d = %#x, want 0x3c00", vt, d)
		}
		qs := q[ti.BlockBytes-32:]
		for i, w := range want {
			if int8(qs[i]) != w {
				t.Fatalf("%v q[%d] = %d, want %d", vt, i, int8(qs[i]), w)
			}
		}
		if vt == ggml.Q8_1 { // s = d*sum = 127+2+4-2+0+0+2-126 = 7
			if s := binary.LittleEndian.Uint16(q[2:]); s != 0x4700 {
				t.Fatalf("Q8_1 s = %#x, want 7 (0x4700)", s)
			}
		}
	}
}

func TestQuantizeQ8_K(t *testing.T) {
	x := make([]float32, 256)
	for i := range x {
		x[i] = float32(i%7) - 3
	}
	x[10] = 6.35 // the largest magnitude, positive: iscale = -127/6.35 = -20
	x[11] = -6.35
	q := make([]byte, 292)
	if err := QuantizeRow(ggml.Q8_K, x, q); err != nil {
		t.Fatal(err)
	}
	d := math.Float32frombits(binary.LittleEndian.Uint32(q))
	iscale := float32(-127) / float32(6.35)
	if d != 1/iscale || d >= 0 {
		t.Fatalf("Q8_K d = %v, want 1/(-127/6.35) = %v", d, 1/iscale)
	}
	if int8(q[4+10]) != -127 || int8(q[4+11]) != 127 {
		t.Fatalf("Q8_K extremes %d %d, want -127 127", int8(q[4+10]), int8(q[4+11]))
	}
	for i, v := range x {
		if i == 10 || i == 11 {
			continue
		}
		if want := int8(math.RoundToEven(float64(iscale * v))); int8(q[4+i]) != want {
			t.Fatalf("Q8_K q[%d] = %d, want %d", i, int8(q[4+i]), want)
		}
	}

	// All zero: everything zero, including bsums.
	for i := range q {
		q[i] = 0xff
	}
	if err := QuantizeRow(ggml.Q8_K, make([]float32, 256), q); err != nil {
		t.Fatal(err)
	}
	for i, b := range q {
		if b != 0 {
			t.Fatalf("zero block byte %d = %#x", i, b)
		}
	}
}

func TestF16RoundTripExhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		f := F16ToF32(h)
		if h&0x7c00 == 0x7c00 && h&0x3ff != 0 {
			if !math.IsNaN(float64(f)) {
				t.Fatalf("F16ToF32(%#04x) = %v, want NaN", h, f)
			}
			continue
		}
		if back := F32ToF16(f); back != h {
			t.Fatalf("F32ToF16(F16ToF32(%#04x) = %v) = %#04x", h, f, back)
		}
		// Cross-check the value against a float64 decode of the fields.
		exp, mant := int(h>>10&31), float64(h&0x3ff)
		var v float64
		switch exp {
		case 0:
			v = mant * 0x1p-24
		case 31:
			v = math.Inf(1)
		default:
			v = (1 + mant/1024) * math.Ldexp(1, exp-15)
		}
		if h&0x8000 != 0 {
			v = -v
		}
		if float64(f) != v {
			t.Fatalf("F16ToF32(%#04x) = %v, want %v", h, f, v)
		}
	}
}

func TestF32ToF16Rounding(t *testing.T) {
	cases := []struct {
		f    float32
		want uint16
	}{
		{1, 0x3c00},
		{1 + 0x1p-11, 0x3c00},           // tie, down to even
		{1 + 3*0x1p-11, 0x3c02},         // tie, up to even
		{1 + 0x1p-11 + 0x1p-20, 0x3c01}, // just above the tie
		{-(1 + 3*0x1p-11), 0xbc02},      // sign
		{65504, 0x7bff},                 // largest finite
		{65519.996, 0x7bff},             // below the overflow tie
		{65520, 0x7c00},                 // tie between 65504 and 2^16: to inf
		{1e10, 0x7c00},                  // overflow
		{-1e10, 0xfc00},                 // overflow
		{0x1p-24, 0x0001},               // smallest subnormal
		{0x1p-25, 0x0000},               // tie to zero
		{0x1p-25 * 1.0000001, 0x0001},   // above the tie
		{3 * 0x1p-25, 0x0002},           // tie between 1 and 2 ulps
		{0x1p-14 - 0x1p-25, 0x0400},     // rounds up into the normals
		{0x1p-14 - 0x1p-24, 0x03ff},     // largest subnormal
		{-0x1p-24, 0x8001},              // negative subnormal
		{1e-10, 0x0000},                 // underflow
		{float32(math.Copysign(0, -1)), 0x8000},
		{float32(math.Inf(-1)), 0xfc00},
		{float32(math.NaN()), 0x7e00},
	}
	for _, c := range cases {
		if got := F32ToF16(c.f); got != c.want {
			t.Errorf("F32ToF16(%g) = %#04x, want %#04x", c.f, got, c.want)
		}
	}
}

func TestBF16(t *testing.T) {
	cases := []struct {
		f    float32
		want uint16
	}{
		{1, 0x3f80},
		{1 + 0x1p-8, 0x3f80},   // tie, to even
		{1 + 3*0x1p-8, 0x3f82}, // tie, to even
		{-3, 0xc040},
		{float32(math.Inf(1)), 0x7f80},
	}
	for _, c := range cases {
		if got := F32ToBF16(c.f); got != c.want {
			t.Errorf("F32ToBF16(%g) = %#04x, want %#04x", c.f, got, c.want)
		}
		if c.f == 1 || c.f == -3 {
			if back := BF16ToF32(c.want); back != c.f {
				t.Errorf("BF16ToF32(%#04x) = %v", c.want, back)
			}
		}
	}
	if h := F32ToBF16(math.Float32frombits(0x7f800001)); h&0x7fc0 != 0x7fc0 {
		t.Errorf("signalling NaN → %#04x, want a quiet NaN", h)
	}
}

// ---- 4. errors

func TestErrors(t *testing.T) {
	dst := make([]float32, 32)
	if err := Dequantize(ggml.Q4_0, make([]byte, 17), dst); err == nil {
		t.Error("short src accepted")
	}
	if err := Dequantize(ggml.Q4_0, make([]byte, 18), dst); err != nil {
		t.Errorf("exact src rejected: %v", err)
	}
	if err := Dequantize(ggml.Q4_0, make([]byte, 100), dst[:31]); err == nil {
		t.Error("n not a multiple of 32 accepted")
	}
	if err := Dequantize(ggml.Q4_K, make([]byte, 1000), dst); err == nil {
		t.Error("n not a multiple of 256 accepted")
	}
	for _, bad := range []ggml.Type{4, 5, 16, 29, 99, 1 << 31} {
		if err := Dequantize(bad, make([]byte, 1000), dst); err == nil {
			t.Errorf("Dequantize of unknown type %v accepted", bad)
		}
		if err := QuantizeRow(bad, dst, make([]byte, 1000)); err == nil {
			t.Errorf("QuantizeRow to unknown type %v accepted", bad)
		}
		if err := CheckVecDot(bad, 32, 1000, 1000); err == nil {
			t.Errorf("CheckVecDot of unknown type %v accepted", bad)
		}
		if VecDotType(bad) != bad {
			t.Errorf("VecDotType(%v) invented a type", bad)
		}
	}
	if err := QuantizeRow(ggml.Q4_0, dst, make([]byte, 100)); err == nil {
		t.Error("QuantizeRow to a weight-only type accepted")
	}
	if err := QuantizeRow(ggml.Q8_0, dst, make([]byte, 33)); err == nil {
		t.Error("QuantizeRow into short dst accepted")
	}
	if err := QuantizeRow(ggml.Q8_K, dst, make([]byte, 1000)); err == nil {
		t.Error("QuantizeRow of 32 elements to Q8_K accepted")
	}
	if err := CheckVecDot(ggml.Q4_K, 256, 144, 292); err != nil {
		t.Errorf("valid CheckVecDot rejected: %v", err)
	}
	for _, c := range []struct {
		t             ggml.Type
		n, wLen, xLen int
	}{
		{ggml.Q4_K, 256, 143, 292},
		{ggml.Q4_K, 256, 144, 291},
		{ggml.Q4_K, 128, 144, 292},
		{ggml.Q4_0, 48, 1000, 1000},
		{ggml.Q8_K, 256, 292, 292}, // Q8_K is never a weight in ggml's CPU backend
		{ggml.Q8_1, 32, 36, 36},
		{ggml.F16, -2, 0, 0},
	} {
		if err := CheckVecDot(c.t, c.n, c.wLen, c.xLen); err == nil {
			t.Errorf("CheckVecDot(%v, %d, %d, %d) accepted", c.t, c.n, c.wLen, c.xLen)
		}
	}
}

// ---- benchmarks

func BenchmarkVecDot(b *testing.B) {
	vecDotRows(b, func(typ ggml.Type, n int, w, xq []byte) {
		b.Run(fmt.Sprint(typ), benchVecDot(typ, n, w, xq))
	})
}

// vecDotRows calls f with a random row of n = 4096 elements of each
// weight type and random activations quantized to its vec-dot type, the
// same rows on every call.
func vecDotRows(b *testing.B, f func(typ ggml.Type, n int, w, xq []byte)) {
	const n = 4096
	rng := rand.New(rand.NewSource(5))
	for _, typ := range weightTypes {
		w := randomRow(rng, typ, n)
		f(typ, n, w, quantizedRandom(b, rng, VecDotType(typ), n))
	}
}

// benchVecDot is a benchmark of VecDot of the weight row w (n elements of
// typ) with the activations xq.
func benchVecDot(typ ggml.Type, n int, w, xq []byte) func(*testing.B) {
	return func(b *testing.B) {
		b.SetBytes(int64(len(w)))
		var s float32
		for b.Loop() {
			s += VecDot(typ, n, w, xq)
		}
		sink = s
	}
}

func BenchmarkQuantizeRow(b *testing.B) {
	const n = 4096
	x := randomActivations(rand.New(rand.NewSource(6)), n)
	for _, vt := range []ggml.Type{ggml.F16, ggml.Q8_0, ggml.Q8_1, ggml.Q8_K} {
		vti, _ := vt.Info()
		dst := make([]byte, n/vti.BlockSize*vti.BlockBytes)
		b.Run(fmt.Sprint(vt), func(b *testing.B) {
			for b.Loop() {
				_ = QuantizeRow(vt, x, dst)
			}
		})
	}
}

var sink float32
