package main

import (
	"fmt"
	"strings"

	"github.com/zrtdev/zrt/kernels/internal/asmgen"
)

// hsumRet ends a kernel the ggml way (hsum_float_8): the eight lanes of
// Y0 reduced to X0 through X1, stored as the result at ret+off(FP).
func hsumRet(f *asmgen.File, off int) {
	f.Fold("VADDPS", "Y0", "X0", "X1")
	f.Ins("VMOVSS", "X0", fmt.Sprintf("ret+%d(FP)", off))
}

// pairsKernel is the one-row dot kernel of a 32-element format whose
// blocks (wBlock bytes each) ggml's loop takes in pairs against two Q8_0
// activation blocks: the block macro blk(woff, xoff, acc) adds the even
// block to Y10 and the odd one to Y11, and end combines and stores them.
func pairsKernel(sig string, args []string, consts []konst, label, blk string, wBlock int, end func(f *asmgen.File)) *dotKernel {
	return &dotKernel{
		sig: sig,
		doc: `
// ggml's loop over pairs of blocks: the even block of each pair goes to
// one accumulator (Y10), the odd one to another (Y11); they are added
// lane-wise and reduced as hsum_float_8. An odd last block is the caller's.`,
		args:   args,
		consts: consts,
		zero:   []string{"Y10", "Y11"},
		label:  label,
		body: func(f *asmgen.File) {
			f.P("\t%s(0, 0, Y10)\n\t%s(%d, 34, Y11)", blk, blk, wBlock)
		},
		wLen: 2 * wBlock, xLen: 68,
		end: end,
	}
}

// nibbleLevels looks up the levels of the 16 nibble bytes at q with
// VPSHUFB: X1 gets the low nibbles' and X2 the high nibbles', from the
// 0x0f mask in X15 and the level table in X14.
func nibbleLevels(f *asmgen.File, q string) {
	f.Ins("VMOVDQU", q, "X1")
	f.Ins("VPSRLW", "$4", "X1", "X2")
	f.Ins("VPAND", "X15", "X1", "X1")
	f.Ins("VPAND", "X15", "X2", "X2")
	f.Ins("VPSHUFB", "X1", "X14", "X1")
	f.Ins("VPSHUFB", "X2", "X14", "X2")
}

// levelTable writes a 16-byte VPSHUFB table of signed levels (what, say
// kvalues_iq4nl), under a comment listing them.
func levelTable(f *asmgen.File, name, what string, levels [16]int8) {
	var q [2]uint64
	for i, l := range levels {
		q[i/8] |= uint64(uint8(l)) << (8 * (i % 8))
	}
	f.P("\n// %s as bytes: %v\n// (little-endian quadwords).", what, strings.Trim(fmt.Sprint(levels), "[]"))
	f.Quads(name, q[:]...)
}

// iq4File is iq4_amd64.s: IQ4_NL · Q8_0 and IQ4_XS · Q8_K.
func iq4File() []byte {
	f := asmgen.NewFile(generator)
	f.Raw(`
// IQ4_NL · Q8_0 and IQ4_XS · Q8_K at the AVX2 level (see iq4_amd64.go).
// Both are ggml's AVX2 kernels with one change that keeps every integer sum
// exact for any int8 activation: the looked-up levels and the activations
// are sign-extended to int16 and multiplied with VPMADDWD, where ggml's
// mul_add_epi8 (VPSIGNB + VPMADDUBSW) would wrap an activation of -128
// (which ggml's quantizers never produce). The lanes, and with them the
// float order, are ggml's: lane k of a 32-element block is the sum of the
// products of its elements 4k..4k+3, so the results are bit-identical to
// the pure-Go dotIQ4_NL/dotIQ4_XS.

// IQ4LEVELS looks up the levels of the 16 nibble bytes at q: X1 gets the
// low nibbles' (elements 0..15) and X2 the high nibbles' (16..31), as
// signed bytes. X15 holds the 0x0f mask, X14 the level table.`)
	f.Define("IQ4LEVELS(q)", func(f *asmgen.File) { nibbleLevels(f, "q") })
	f.Raw(`
// IQ4LANES turns the pair sums Y1 (elements 0..15: dword i = elements 2i,
// 2i+1) and Y2 (elements 16..31) into the eight lane sums in ggml's order.
// VPHADDD works within 128-bit halves and gives lanes 0,1,4,5 | 2,3,6,7;
// VPERMQ swaps the middle quadwords back. int32 adds: exact.
#define IQ4LANES \
	VPHADDD Y2, Y1, Y1 \
	VPERMQ  $0xd8, Y1, Y1

// IQ4NLBLK adds one IQ4_NL block (at woff(SI)) times its Q8_0 activation
// block (at xoff(DI)) to the float accumulator acc: lanes converted to
// float, times d_x*d_w rounded once, fused into acc.
#define IQ4NLBLK(woff, xoff, acc) \
	IQ4LEVELS(woff+2(SI)) \
	VPMOVSXBW   X1, Y1 \
	VPMOVSXBW   X2, Y2 \
	VPMOVSXBW   xoff+2(DI), Y3 \
	VPMOVSXBW   xoff+18(DI), Y4 \
	VPMADDWD    Y3, Y1, Y1 \
	VPMADDWD    Y4, Y2, Y2 \
	IQ4LANES \
	VCVTDQ2PS   Y1, Y1 \
	MOVWLZX     xoff(DI), AX \
	VMOVD       AX, X5 \
	VPINSRW     $1, woff(SI), X5, X5 \
	VCVTPH2PS   X5, X5 \
	VMOVSHDUP   X5, X6 \
	VMULSS      X6, X5, X5 \
	VBROADCASTSS X5, Y5 \
	VFMADD231PS Y5, Y1, acc
`)
	iq4Consts := []konst{{"iq4mask<>", "X15"}, {"iq4levels<>", "X14"}}
	pairsKernel("dotIQ4_NLAVX2Asm(w, x *byte, npairs int) float32", []string{"w", "x", "npairs"}, iq4Consts,
		"iq4nlloop", "IQ4NLBLK", 18, func(f *asmgen.File) {
			f.Ins("VADDPS", "Y11", "Y10", "Y0")
			hsumRet(f, 24)
		}).write(f)
	f.Raw(`
// IQ4XSSUB adds sub-block s of an IQ4_XS block to the pair-sum
// accumulators Y8 (elements 0..15 of each sub-block) and Y9 (16..31). The
// scale ls-32 (lo = nibble s%2 of scales_l[s/2], hi = bit pair s of
// scales_h, kept in DX) multiplies the levels as int16 first: |ls-32| <= 32
// and |level| <= 127, so the words stay within ±4064 and the VPMADDWD pair
// sums within ±2^20. loff = 4+s/2, lsh = 4*(s%2), hsh = 2*s, qoff = 8+16s,
// xoff = 4+32s.
#define IQ4XSSUB(loff, lsh, hsh, qoff, xoff) \
	MOVBLZX      loff(SI), AX \
	SHRL         $lsh, AX \
	ANDL         $15, AX \
	MOVL         DX, BX \
	SHRL         $hsh, BX \
	ANDL         $3, BX \
	SHLL         $4, BX \
	ORL          BX, AX \
	SUBL         $32, AX \
	VMOVD        AX, X7 \
	VPBROADCASTW X7, Y7 \
	IQ4LEVELS(qoff(SI)) \
	VPMOVSXBW    X1, Y1 \
	VPMOVSXBW    X2, Y2 \
	VPMULLW      Y7, Y1, Y1 \
	VPMULLW      Y7, Y2, Y2 \
	VPMOVSXBW    xoff(DI), Y3 \
	VPMOVSXBW    xoff+16(DI), Y4 \
	VPMADDWD     Y3, Y1, Y1 \
	VPMADDWD     Y4, Y2, Y2 \
	VPADDD       Y1, Y8, Y8 \
	VPADDD       Y2, Y9, Y9
`)
	(&dotKernel{
		sig: "dotIQ4_XSAVX2Asm(w, x *byte, nb int) float32",
		doc: `
// Per super-block the eight sub-blocks' scaled pair sums are added as
// int32 (exact, and VPHADDD is linear, so the lanes are formed once per
// super-block), then one accumulator (Y0) takes fma(d_w*d_x, lane, acc);
// hsum_float_8 at the end.`,
		args:   []string{"w", "x", "nb"},
		consts: iq4Consts,
		zero:   []string{"Y0"},
		label:  "iq4xsloop",
		body: func(f *asmgen.File) {
			f.Raw(`
	VPXOR   Y8, Y8, Y8
	VPXOR   Y9, Y9, Y9
	MOVWLZX 2(SI), DX`)
			for s := 0; s < 8; s++ {
				f.P("\tIQ4XSSUB(%d, %d, %d, %d, %d)", 4+s/2, 4*(s%2), 2*s, 8+16*s, 4+32*s)
			}
			f.Raw(`
	VMOVDQA      Y8, Y1
	VMOVDQA      Y9, Y2
	IQ4LANES
	VCVTDQ2PS    Y1, Y1
	MOVWLZX      (SI), AX
	VMOVD        AX, X5
	VCVTPH2PS    X5, X5
	VMULSS       (DI), X5, X5
	VBROADCASTSS X5, Y5
	VFMADD231PS  Y5, Y1, Y0`)
		},
		wLen: 136, xLen: 292,
		end: func(f *asmgen.File) { hsumRet(f, 24) },
	}).write(f)
	f.Splat("iq4mask", 0x0f, 16)
	levelTable(f, "iq4levels", "kvalues_iq4nl", [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113})
	return f.Bytes()
}

// mxfp4File is mxfp4_amd64.s: MXFP4 · Q8_0, one and four activation rows.
func mxfp4File() []byte {
	f := asmgen.NewFile(generator)
	f.Raw(`
// MXFP4 · Q8_0 at the AVX2 level (see mxfp4_amd64.go): ggml's
// ggml_vec_dot_mxfp4_q8_0 AVX2 loop instruction for instruction, so that
// the result is bit-identical to the pure-Go dotMXFP4. Per block, VPSHUFB
// looks the levels (kvalues_mxfp4) up into one 256-bit register in element
// order (low nibbles' levels in the low half, high nibbles' in the high
// half); mul_add_epi8 takes VPSIGNB(level, level) = |level| and
// VPSIGNB(y, level) (y negated where the level is negative, so -128 stays
// -128, and zeroed where it is 0), VPMADDUBSW sums adjacent products into
// int16 (at most 2*12*128 in magnitude: no saturation), and VPMADDWD
// against ones gives the eight int32 lanes, lane k holding elements
// 4k..4k+3. The block scale is f16(y.d) * e8m0_half(e), rounded once.

// MXFP4ROW is the per-row half of a block product, for one of the rows sharing a
// weight block already unpacked (Y1 the levels, Y4 their magnitudes, BX
// its exponent): the row's activation block at xoff(x) into acc.
#define MXFP4ROW(x, xoff, acc) \
	VMOVDQU      xoff+2(x), Y3 \
	VPSIGNB      Y1, Y3, Y3 \
	VPMADDUBSW   Y3, Y4, Y3 \
	VPMADDWD     Y13, Y3, Y3 \
	VCVTDQ2PS    Y3, Y3 \
	MOVWLZX      xoff(x), AX \
	VMOVD        AX, X5 \
	VCVTPH2PS    X5, X5 \
	VMULSS       (R8)(BX*4), X5, X5 \
	VBROADCASTSS X5, Y5 \
	VFMADD231PS  Y5, Y3, acc

// MXFP4UNPACK unpacks the weight block at woff(SI) into Y1 (levels) and Y4
// (their magnitudes), and its exponent into BX.`)
	f.Define("MXFP4UNPACK(woff)", func(f *asmgen.File) {
		nibbleLevels(f, "woff+1(SI)")
		f.Ins("VINSERTI128", "$1", "X2", "Y1", "Y1")
		f.Ins("VPSIGNB", "Y1", "Y1", "Y4")
		f.Ins("MOVBLZX", "woff(SI)", "BX")
	})
	f.Raw(`
// MXFP4BLK adds one MXFP4 block (at woff(SI)) times its Q8_0 activation
// block (at xoff(DI)) to the float accumulator acc: lanes converted to
// float, fused with the block scale into acc. X15 holds the 0x0f mask, X14
// the level table, Y13 sixteen int16 ones, R8 the scale table.
#define MXFP4BLK(woff, xoff, acc) \
	MXFP4UNPACK(woff) \
	MXFP4ROW(DI, xoff, acc)

// MXFP4HSUM stores hsum8(a+b) (ggml's hsum_float_8 of the two
// accumulators) at dst, through Y0 and X1.`)
	f.Define("MXFP4HSUM(a, b, dst)", func(f *asmgen.File) {
		f.Ins("VADDPS", "b", "a", "Y0")
		f.Fold("VADDPS", "Y0", "X0", "X1")
		f.Ins("VMOVSS", "X0", "dst")
	})
	f.P("")
	mxConsts := []konst{{"mxfp4mask<>", "X15"}, {"mxfp4levels<>", "X14"}, {"mxfp4ones<>", "Y13"}}
	pairsKernel("dotMXFP4AVX2Asm(w, x *byte, npairs int, scales *[256]float32) float32", []string{"w", "x", "npairs", "scales"}, mxConsts,
		"mxfp4loop", "MXFP4BLK", 17, func(f *asmgen.File) { f.P("\tMXFP4HSUM(Y10, Y11, ret+32(FP))") }).write(f)
	f.Raw(`
// func dotMXFP4x4AVX2Asm(w, x *byte, stride, npairs int, scales *[256]float32, out *float32)
//
// dotMXFP4AVX2Asm for four activation rows (stride bytes apart) at once:
// each weight block is unpacked once, and each row's instructions and
// accumulators (even blocks, odd blocks) are the one-row kernel's, so each
// out[r] is its result bit for bit.
TEXT ·dotMXFP4x4AVX2Asm(SB), NOSPLIT, $0-48`)
	f.Args(asmgen.Arg{Name: "w", Reg: "SI"}, asmgen.Arg{Name: "x", Reg: "DI"}, asmgen.Arg{Name: "stride", Reg: "DX"},
		asmgen.Arg{Name: "npairs", Reg: "CX"}, asmgen.Arg{Name: "scales", Reg: "R8"}, asmgen.Arg{Name: "out", Reg: "R12"})
	xs := []string{"DI", "R9", "R10", "R11"}
	for r := 1; r < 4; r++ {
		f.Ins("LEAQ", fmt.Sprintf("(%s)(DX*1)", xs[r-1]), xs[r])
	}
	for _, c := range mxConsts {
		f.Ins("VMOVDQU", c.sym+"(SB)", c.reg)
	}
	// Row r's even and odd accumulators: Y6/Y7, Y8/Y9, Y10/Y11, Y12/Y0.
	acc := func(r, odd int) string { return asmgen.Reg("Y", (6+2*r+odd)%13) }
	f.Zero("VXORPS", append([]string{"Y0"}, asmgen.Regs("Y", 6, 1, 7)...)...)
	f.P("\n\t// Row r's even and odd accumulators: Y6/Y7, Y8/Y9, Y10/Y11, Y12/Y0.\nmxfp4x4loop:")
	for b := 0; b < 2; b++ {
		f.P("\tMXFP4UNPACK(%d)", 17*b)
		for r, x := range xs {
			f.P("\tMXFP4ROW(%s, %d, %s)", x, 34*b, acc(r, b))
		}
	}
	loopTail(f, "mxfp4x4loop", append(steps(34, "SI"), steps(68, xs...)...)...)
	f.P("\n\t// Row 3 first: the sums go through Y0.")
	for _, r := range []int{3, 0, 1, 2} {
		f.P("\tMXFP4HSUM(%s, %s, %d(R12))", acc(r, 0), acc(r, 1), 4*r)
	}
	f.Raw(`
	VZEROUPPER
	RET
`)
	f.P("")
	f.Splat("mxfp4mask", 0x0f, 16)
	levelTable(f, "mxfp4levels", "kvalues_mxfp4", [16]int8{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12})
	f.P("")
	f.Quads("mxfp4ones", asmgen.Repeat(1, 2, 16)...)
	return f.Bytes()
}
