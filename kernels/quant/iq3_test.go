package quant

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"math/rand"
	"testing"

	"github.com/zrtdev/zrt/format/ggml"
)

// TestIQ3SGridIsTheFormatsCodebook pins the embedded codebook to
// ggml-common.h's iq3s_grid: its CRC-32 (IEEE) over the 512 little-endian
// words, computed from the C header, and a few entries read off it by
// hand. It also checks the shape the format relies on: every byte is an odd
// magnitude 1..15 and no point repeats.
func TestIQ3SGridIsTheFormatsCodebook(t *testing.T) {
	b := make([]byte, 0, 4*len(iq3sGrid))
	seen := map[uint32]bool{}
	for i, p := range iq3sGrid {
		b = binary.LittleEndian.AppendUint32(b, p)
		if seen[p] {
			t.Errorf("point %d (%#08x) repeats", i, p)
		}
		seen[p] = true
		for j := 0; j < 4; j++ {
			if m := byte(p >> (8 * j)); m%2 == 0 || m > 15 {
				t.Errorf("point %d (%#08x) byte %d is %d, not an odd 1..15", i, p, j, m)
			}
		}
	}
	if c := crc32.ChecksumIEEE(b); c != 0xf576e4f3 {
		t.Errorf("codebook CRC-32 %#08x, want 0xf576e4f3 (ggml's iq3s_grid)", c)
	}
	for i, want := range map[int]uint32{0: 0x01010101, 1: 0x01010103, 255: 0x05090501, 256: 0x05090507, 257: 0x05090705, 511: 0x0f0f0101} {
		if iq3sGrid[i] != want {
			t.Errorf("iq3sGrid[%d] = %#08x, want %#08x", i, iq3sGrid[i], want)
		}
	}
}

// encodeIQ3S builds an IQ3_S block from logical values following the
// block layout: idx[8s+g] is group g of sub-block s's 9-bit grid index,
// neg[32s+e] says element e of sub-block s is negative, and sc[s] is the
// sub-block's 4-bit scale.
func encodeIQ3S(idx *[64]int, neg *[256]bool, sc *[8]int, d uint16) []byte {
	b := make([]byte, 110)
	put16(b, d)
	for k, v := range idx {
		s, g := k/8, k%8
		b[2+k] = byte(v)           // qs: low eight bits
		b[66+s] |= byte(v>>8) << g // qh: the ninth bit, one byte per sub-block
	}
	for e, n := range neg {
		if n {
			b[74+e/8] |= 1 << (e % 8) // signs: one bit per element, in order
		}
	}
	for s, v := range sc {
		b[106+s/2] |= byte(v) << (4 * (s % 2)) // scales: two nibbles a byte
	}
	return b
}

// iq3SMagnitude returns the grid magnitude of element e (0..255) of a block
// built from idx.
func iq3SMagnitude(idx *[64]int, e int) float32 {
	return float32(byte(iq3sGrid[idx[e/4]] >> (8 * (e % 4))))
}

func TestDequantizeIQ3_SHandBuilt(t *testing.T) {
	// Sub-block scales 0, 1, 15, 7, 3, 8, 14, 2: factors 1+2*sc = 1, 3, 31,
	// 15, 7, 17, 29, 5; packed two a byte, low nibble first, as 0x10, 0x7f,
	// 0x83, 0x2e.
	sc := [8]int{0, 1, 15, 7, 3, 8, 14, 2}
	var idx [64]int
	for k := range idx {
		idx[k] = (37*k + 11) % 512 // both halves of the grid
	}
	// Sub-block 0's first groups, worked by hand below; sub-block 2
	// (factor 31) starts with the point of the largest magnitudes.
	idx[0], idx[1], idx[2], idx[3], idx[16] = 511, 0, 256, 257, 511
	var neg [256]bool
	for e := range neg {
		neg[e] = e%3 == 1
	}
	neg[9], neg[64+2], neg[64+3] = true, false, true

	b := encodeIQ3S(&idx, &neg, &sc, hQuarter)
	if got := b[106:110]; got[0] != 0x10 || got[1] != 0x7f || got[2] != 0x83 || got[3] != 0x2e {
		t.Fatalf("test encoder's scales bytes % x, want 10 7f 83 2e", got)
	}
	// A second super-block: the first's quants with d = -2, to check the
	// block stride and a negative super-scale.
	b2 := append([]byte(nil), b...)
	put16(b2, hMinus2)
	row := append(b, b2...)

	got := dequant(t, ggml.IQ3_S, row, 512)
	want := make([]float32, 512)
	for e := 0; e < 256; e++ {
		v := float32(1+2*sc[e/32]) * iq3SMagnitude(&idx, e)
		if neg[e] {
			v = -v
		}
		want[e] = 0.25 * v
		want[256+e] = -2 * v
	}
	expectEqual(t, ggml.IQ3_S, got, want)

	// By hand, sub-block 0 (factor 1, d = 0.25): index 511 = qs 0xff with
	// qh bit 0 set is 0x0f0f0101, magnitudes 1,1,15,15, element 1 negative
	// (e%3 == 1); index 0 is 0x01010101, element 4 negative; index 256 = qs
	// 0 with qh bit 2 set is 0x05090507, magnitudes 7,5,9,5 for elements
	// 8..11, elements 9 (set by hand) and 10 negative; index 257 = qs 1
	// with qh bit 3 is 0x05090705, element 12 magnitude 5.
	// Sub-block 2 (factor 31): index 511 again, elements 66 (positive) and
	// 67 (negative) 0.25*31*15 = 116.25.
	for _, c := range []struct {
		e int
		v float32
	}{{0, 0.25}, {1, -0.25}, {2, 3.75}, {3, 3.75}, {4, -0.25}, {8, 1.75}, {9, -1.25}, {10, -2.25},
		{12, 1.25}, {66, 116.25}, {67, -116.25}, {256 + 66, -930}, {256 + 67, 930}} {
		if got[c.e] != c.v {
			t.Errorf("IQ3_S element %d = %v, want %v", c.e, got[c.e], c.v)
		}
	}

	// d = 0: every element is zero whatever the quants.
	put16(b, 0)
	for i, v := range dequant(t, ggml.IQ3_S, b, 256) {
		if v != 0 {
			t.Fatalf("d = 0: element %d = %v", i, v)
		}
	}
}

// genericOrderIQ3S restates ggml_vec_dot_iq3_s_q8_K_generic's arithmetic
// independently of the kernel: per super-block the exact integer sum of
// level times activation over its 256 elements (the levels lv carry the
// sub-block factors and signs), then sum = fma(d_w*d_x, float(bsum), sum)
// rounded once through big.Float.
func genericOrderIQ3S(n int, w, xq []byte, lv []int32) float32 {
	var sum float32
	for i := 0; i < n/256; i++ {
		xd := math.Float32frombits(binary.LittleEndian.Uint32(xq[i*292:]))
		var bsum int32
		for e := 0; e < 256; e++ {
			bsum += lv[256*i+e] * int32(int8(xq[i*292+4+e]))
		}
		d := F16ToF32(binary.LittleEndian.Uint16(w[i*110:])) * xd
		sum = bigFMA32(d, float32(bsum), sum)
	}
	return sum
}

// TestIQ3SDotFollowsGenericC holds the IQ3_S dot product, at every SIMD
// level, bit for bit to ggml's generic C order, restated above, for 1..9
// super-blocks, with -128 activations and zero or negative scales among
// the blocks.
func TestIQ3SDotFollowsGenericC(t *testing.T) {
	rng := rand.New(rand.NewSource(24))
	for nb := 1; nb <= 9; nb++ {
		for trial := 0; trial < 3; trial++ {
			n := nb * 256
			w := awkwardRow(rng, ggml.IQ3_S, n)
			xq := quantizedActivations(t, rng, ggml.Q8_K, n)
			want := genericOrderIQ3S(n, w, xq, levelsFromDequant(t, ggml.IQ3_S, n, w))
			for _, l := range levels() {
				atLevel(l, func() {
					if got := VecDot(ggml.IQ3_S, n, w, xq); got != want {
						t.Fatalf("n=%d level %s: VecDot %v, generic C order %v", n, levelNames[l], got, want)
					}
				})
			}
		}
	}
}

// TestIQ3SDotExtremes: the largest magnitudes and factors against -128
// activations, with every element negative, give the largest integer sum
// the format allows per group ((1+1+15+15)*128 = 4096, 64 groups, factor
// 31), exact in float32.
func TestIQ3SDotExtremes(t *testing.T) {
	var idx [64]int
	var neg [256]bool
	sc := [8]int{15, 15, 15, 15, 15, 15, 15, 15}
	for k := range idx {
		idx[k] = 511 // magnitudes 1, 1, 15, 15
	}
	for e := range neg {
		neg[e] = true
	}
	w := encodeIQ3S(&idx, &neg, &sc, h1)
	xq := make([]byte, 292)
	binary.LittleEndian.PutUint32(xq, math.Float32bits(1))
	for e := 0; e < 256; e++ {
		xq[4+e] = 0x80 // -128; IQ3_S does not read the bsums
	}
	if got, want := VecDot(ggml.IQ3_S, 256, w, xq), float32(31*4096*64); got != want {
		t.Fatalf("extreme block: VecDot %v, want %v", got, want)
	}
}

// TestIQ3SPathsAgreeBitwise: VecDotRows and MatVec have no multi-row
// kernels for IQ3_S and must give VecDot's exact bits.
func TestIQ3SPathsAgreeBitwise(t *testing.T) {
	checkPathsBitwise(t, rand.New(rand.NewSource(25)), ggml.IQ3_S)
}

func TestIQ3SIsWeightType(t *testing.T) {
	if !IsWeightType(ggml.IQ3_S) || VecDotType(ggml.IQ3_S) != ggml.Q8_K {
		t.Errorf("IsWeightType(IQ3_S) = %v, VecDotType = %v; want true, Q8_K", IsWeightType(ggml.IQ3_S), VecDotType(ggml.IQ3_S))
	}
}
