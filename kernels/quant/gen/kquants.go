package main

import (
	"fmt"
	"strings"

	"github.com/zrtdev/zrt/kernels/internal/asmgen"
)

// kquants writes the shared pieces of the Q4_K and Q5_K one-row kernels
// and dotQ4_KAVX2Asm.
func kquants(f *asmgen.File) {
	f.Raw(`
// ---- k-quants · Q8_K
//
// All three use VPMADDUBSW(unsigned quant, signed activation) followed by
// VPMADDWD with the sub-block scale as int16, which applies the scale and
// widens to int32 in one step. Ranges: quants are at most 63 (Q6_K), so a
// VPMADDUBSW pair is within 2*63*128 = 16128 (no saturation, for any int8
// activation), and VPMADDWD by a scale of magnitude <= 128 stays far inside
// int32. The per-super-block int32 lanes (at most a few million) convert
// to float32 exactly.

// K4SCALES unpacks the 12 scale bytes at 4(SI) of a Q4_K/Q5_K block into
// 16 words at 0(SP): scales 0..7, then mins 0..7 (ggml's get_scale_min_k4
// done on four 32-bit words at once, as ggml's SIMD kernels do: every mask
// keeps whole 6-, 4- or 2-bit fields within their bytes). Y0 keeps the
// words; AX, BX, DX, R8, R9 are clobbered.`)
	f.Define("K4SCALES", func(f *asmgen.File) { k4Unpack(f, "DX", "R8", "R9") })
	f.Raw(`
// K4MINS adds to Y13 the float mins term of a Q4_K/Q5_K block,
// dmin*xd * sum_j min_j*(bsum[2j]+bsum[2j+1]), in four lanes, and sets Y3
// to d*xd (all lanes). The mins are the high half of Y0 (K4SCALES). Pair
// sums of bsums are within ±4096 and the VPMADDWD with 6-bit mins is
// exact; VEX-encoded 128-bit ops zero the upper lanes, so Y1's upper four
// lanes add 0.
#define K4MINS \
	VMOVDQU      260(DI), X1 \
	VMOVDQU      276(DI), X2 \
	VPHADDW      X2, X1, X1 \
	VEXTRACTI128 $1, Y0, X2 \
	VPMADDWD     X2, X1, X1 \
	VCVTDQ2PS    Y1, Y1 \
	MOVWLZX      (SI), AX \
	VMOVD        AX, X2 \
	VPINSRW      $1, 2(SI), X2, X2 \
	VCVTPH2PS    X2, X2 \
	VBROADCASTSS (DI), X3 \
	VMULPS       X3, X2, X2 \
	VBROADCASTSS X2, Y3 \
	VMOVSHDUP    X2, X2 \
	VBROADCASTSS X2, Y2 \
	VFMADD231PS  Y2, Y1, Y13

// K4CHUNK adds to Y12 the scaled sums of one 64-element chunk c of a
// Q4_K/Q5_K block whose unsigned quants are in Y4 (elements 64c..64c+31)
// and Y5 (64c+32..64c+63). yoff is 4+64c, soff the byte offset 4c of
// scale 2c in the words at 0(SP).
#define K4CHUNK(yoff, soff) \
	VPMADDUBSW   yoff(DI), Y4, Y4 \
	VPMADDUBSW   yoff+32(DI), Y5, Y5 \
	VPBROADCASTW soff(SP), Y6 \
	VPBROADCASTW soff+2(SP), Y7 \
	VPMADDWD     Y6, Y4, Y4 \
	VPMADDWD     Y7, Y5, Y5 \
	VPADDD       Y4, Y12, Y12 \
	VPADDD       Y5, Y12, Y12

// Q4KNIB splits the 32 bytes at q into low nibbles (Y4) and high (Y5).
#define Q4KNIB(q) \
	VMOVDQU q, Y4 \
	VPSRLW  $4, Y4, Y5 \
	VPAND   Y15, Y4, Y4 \
	VPAND   Y15, Y5, Y5
`)
	k4Dot(f, "dotQ4_KAVX2Asm", nil, "q4kloop", 144, func(f *asmgen.File, c int) {
		f.P("\tQ4KNIB(%d(SI))", 16+32*c)
	})
}

// k4Dot writes the one-row kernel of a format with Q4_K's scales and mins
// (Q4_K, Q5_K): per block K4SCALES and K4MINS, then the four 64-element
// chunks, each unpacked by chunk into Y4/Y5 and summed by K4CHUNK.
func k4Dot(f *asmgen.File, name string, consts []konst, label string, wLen int, chunk func(f *asmgen.File, c int)) {
	(&dotKernel{
		sig:    name + "(w, x *byte, nb int) float32",
		frame:  32,
		args:   []string{"w", "x", "nb"},
		consts: append([]konst{{"c0F<>", "Y15"}}, consts...),
		zero:   []string{"Y14", "Y13"},
		label:  label,
		body: func(f *asmgen.File) {
			f.Raw(`
	K4SCALES
	K4MINS
	VPXOR Y12, Y12, Y12`)
			for c := 0; c < 4; c++ {
				chunk(f, c)
				f.P("\tK4CHUNK(%d, %d)", 4+64*c, 4*c)
			}
			f.Ins("VCVTDQ2PS", "Y12", "Y12")
			f.Ins("VFMADD231PS", "Y3", "Y12", "Y14")
		},
		wLen: wLen, xLen: 292,
		end: func(f *asmgen.File) {
			f.Ins("VSUBPS", "Y13", "Y14", "Y0")
			f.P("\tHSUM(Y0, X0, X1)")
			f.Ins("VMOVSS", "X0", "ret+24(FP)")
		},
	}).write(f)
}

// k4Unpack is get_scale_min_k4 on the 12 scale bytes at 4(SI), four 32-bit
// words at a time, leaving the eight scales and eight mins as words in Y0
// and at 0(SP). c, m and t are the scratch registers besides AX and BX.
func k4Unpack(f *asmgen.File, c, m, t string) {
	f.Ins("MOVL", "4(SI)", "AX")
	f.Ins("MOVL", "8(SI)", "BX")
	f.Ins("MOVL", "12(SI)", c)
	f.Ins("MOVL", c, m)
	f.Ins("SHRL", "$4", m)
	f.Ins("ANDL", "$0x0f0f0f0f", m)
	for i, src := range []string{"BX", "AX"} {
		f.Ins("MOVL", src, t)
		f.Ins("SHRL", "$6", t)
		f.Ins("ANDL", "$0x03030303", t)
		f.Ins("SHLL", "$4", t)
		if i == 0 {
			f.Ins("ORL", t, m)
		}
	}
	f.Ins("ANDL", "$0x0f0f0f0f", c)
	f.Ins("ORL", t, c)
	f.Ins("ANDL", "$0x3f3f3f3f", "AX")
	f.Ins("ANDL", "$0x3f3f3f3f", "BX")
	f.Ins("VMOVD", "AX", "X0")
	for i, r := range []string{c, "BX", m} {
		f.Ins("VPINSRD", fmt.Sprintf("$%d", i+1), r, "X0", "X0")
	}
	f.Ins("VPMOVZXBW", "X0", "Y0")
	f.Ins("VMOVDQU", "Y0", "(SP)")
}

// pairedInt sums one activation row's super-block against quants and
// scale words unpacked in chunk pairs (Z16/Z18/Z20/Z22 and
// Z24/Z26/Z28/Z30, even chunk in the low half): the chunks q0-q3 by
// VPMADDUBSW, scaled and added by VPMADDWD and VPDPWSSD into Z12, whose
// halves are then joined into the eight int32 lanes of Y12 (int32 adds,
// exact in any order, so the lanes are the one-row kernel's).
func pairedInt(f *asmgen.File, q [4]string) {
	for c := 0; c < 4; c++ {
		t := asmgen.Reg("Z", c%2)
		f.Ins("VPMADDUBSW", q[c], asmgen.Reg("Z", 16+2*c), t)
		if c == 0 {
			f.Ins("VPMADDWD", "Z24", t, "Z12")
		} else {
			f.Ins("VPDPWSSD", asmgen.Reg("Z", 24+2*c), t, "Z12")
		}
	}
	f.Ins("VEXTRACTI64X4", "$1", "Z12", "Y3")
	f.Ins("VPADDD", "Y3", "Y12", "Y12")
}

// chunks returns the four 64-byte chunk operands off, off+64, ... of base
// (a register or an expression in parentheses).
func chunks(off int, base string) [4]string {
	var q [4]string
	for c := range q {
		q[c] = fmt.Sprintf("%d%s", off+64*c, base)
	}
	return q
}

// rowsKernel is a multi-row kernel: one weight row against four or eight
// activation rows stride bytes apart (ROWSARGS), each weight block
// prepared once (prep) for the per-row macro (row).
type rowsKernel struct {
	name  string
	doc   string // the comment under the declaration, if any
	frame int
	rows  int
	init  string // constants and accumulator clearing
	label string
	prep  string
	row   func(f *asmgen.File, x string, r int)
	wLen  int
	end   string
}

// hiRows are the registers of rows 4-7, formed four strides past rows 0-3
// after each block's preparation (which uses them).
var hiRows = []string{"AX", "BX", "R10", "R11"}

func (k *rowsKernel) write(f *asmgen.File) {
	f.P("\n// func %s(w, x *byte, stride, nb int, out *float32)", k.name)
	if k.doc != "" {
		f.P("//")
		f.Raw(strings.TrimPrefix(k.doc, "\n"))
	}
	f.Text(k.name, k.frame, 40)
	f.P("\tROWSARGS")
	f.Raw(k.init)
	f.P("\n%s:", k.label)
	f.P("\t%s\n", k.prep)
	for r, x := range rows4 {
		k.row(f, x, r)
	}
	if k.rows == 8 {
		for r, x := range rows4 {
			f.Ins("LEAQ", fmt.Sprintf("(%s)(DX*4)", x), hiRows[r])
		}
		for r, x := range hiRows {
			k.row(f, x, 4+r)
		}
	}
	f.P("")
	loopTail(f, k.label, append(steps(k.wLen, "SI"), steps(292, rows4...)...)...)
	f.P("")
	f.Raw(k.end)
	f.Ins("VZEROUPPER")
	f.Ins("RET")
	f.P("")
}

// rowAcc is the float accumulator of row r in the multi-row k-quant
// kernels: Y4-Y7, then the odd Y17-Y23 (the even upper registers hold
// the prepared block).
func rowAcc(r int) string {
	if r < 4 {
		return asmgen.Reg("Y", 4+r)
	}
	return asmgen.Reg("Y", 17+2*(r-4))
}

// minsAcc is row r's mins accumulator in the multi-row Q4_K kernels.
func minsAcc(r int) string {
	if r < 4 {
		return asmgen.Reg("X", 8+r)
	}
	return asmgen.Reg("X", 25+2*(r-4))
}

// q4kRows writes the four- and eight-row Q4_K kernels and the eight-row
// one on prepared groups.
func q4kRows(f *asmgen.File) {
	f.Raw(`
// ---- Q4_K · Q8_K, four and eight activation rows (AVX-512 level: the
// EVEX forms reach Z16-Z31, which hold the block's unpacked quants and
// broadcast scales so that they are prepared once for all the rows). Each row's
// int32 lanes, FMAs and final reduction are dotQ4_KAVX2Asm's, so every
// result is bit-identical to the one-row kernel's on that row.

// K4ROW adds one activation row's block (at x) to the float accumulator F
// and the mins accumulator M (used in its low four lanes): the integer
// sums of the four 64-element chunks against Z16/Z18/Z20/Z22 (each the
// unsigned quants of two sub-blocks, the even one in the low half) scaled
// by Z24/Z26/Z28/Z30 (the two sub-blocks' scales, broadcast to their
// halves): VPDPWSSD fuses VPMADDWD and the add, the low half gathering the
// even sub-blocks and the high half the odd ones, which are joined once
// (int32 adds, exact in any order, so the lanes are the one-row kernel's);
// times d*xd; and dmin*xd times the mins dotted with the pair sums of x's
// bsums. Y13 holds d and X15 dmin in every lane (each product with xd is
// the one-row kernel's, a single rounding of the same two floats), X14 the
// eight mins as words. Z0, Z1, Y2, Y3, Z12 scratch.
#define K4ROW(x, F, M) \
	K4INT(4(x), 68(x), 132(x), 196(x)) \
	VMULPS.BCST   (x), Y13, Y2 \
	VFMADD231PS   Y2, Y12, F \
	VMOVDQU       260(x), X2 \
	VMOVDQU       276(x), X3 \
	VPHADDW       X3, X2, X2 \
	VPMADDWD      X14, X2, X2 \
	VCVTDQ2PS     X2, X2 \
	VMULPS.BCST   (x), X15, X1 \
	VFMADD231PS   X1, X2, M

// K4INT leaves in Y12, as floats, the scaled integer sums of one
// activation row's super-block whose quants are the 64-byte chunks q0-q3
// (see K4ROW).`)
	f.Define("K4INT(q0, q1, q2, q3)", func(f *asmgen.File) {
		pairedInt(f, [4]string{"q0", "q1", "q2", "q3"})
		f.Ins("VCVTDQ2PS", "Y12", "Y12")
	})
	f.Raw(`
// K4ROWP is K4ROW on row r of a prepared group (see prepQ4_Kx8) whose
// super-block is at DI: the quants at 256r, the pair sums of the bsums
// already formed at 2048+16r (VPMADDWD takes them from memory), xd at
// 2176+4r. The same integers and float operations as K4ROW, except that
// the products of the weight's d and dmin with the row's xd come from
// 32+4r(SP) and 64+4r(SP), formed for all eight rows at once.
#define K4ROWP(r, F, M) \
	K4INT(256*r(DI), 256*r+64(DI), 256*r+128(DI), 256*r+192(DI)) \
	VFMADD231PS.BCST 32+4*r(SP), Y12, F \
	VPMADDWD      2048+16*r(DI), X14, X2 \
	VCVTDQ2PS     X2, X2 \
	VFMADD231PS.BCST 64+4*r(SP), X2, M

// Q4KPAIR unpacks the 32 bytes at q into the 64 quants of two sub-blocks:
// low nibbles into the low half of Z (whose low half Ylo names), high
// nibbles into the high half.
#define Q4KPAIR(q, Ylo, Z, Yhi) \
	VMOVDQU      q, Y0 \
	VPSRLW       $4, Y0, Y1 \
	VPANDD       c0F<>(SB), Y0, Ylo \
	VPANDD       c0F<>(SB), Y1, Yhi \
	VINSERTI64X4 $1, Yhi, Z, Z

// K4SCALEPAIR broadcasts the scale words at soff(SP) and soff+2(SP) to the
// low and high halves of Z.
#define K4SCALEPAIR(soff, Z, Yhi) \
	VPBROADCASTW soff(SP), Z \
	VPBROADCASTW soff+2(SP), Yhi \
	VINSERTI64X4 $1, Yhi, Z, Z

// Q4KPREP prepares the Q4_K block at SI for the multi-row kernels: its
// scales as words at 0(SP) and broadcast in pairs to Z24/Z26/Z28/Z30, its
// mins as words in X14, d in every lane of Y13 and dmin in every lane of
// X15, and its quants in Z16/Z18/Z20/Z22 (K4ROW's layout). It uses AX,
// BX, R10-R12, Y0-Y3.`)
	f.Define("Q4KPREP", func(f *asmgen.File) {
		k4Unpack(f, "R10", "R11", "R12")
		f.Ins("VEXTRACTI128", "$1", "Y0", "X14")
		for c := 0; c < 4; c++ {
			f.P("\tK4SCALEPAIR(%d, Z%d, Y3)", 4*c, 24+2*c)
		}
		f.Raw(`
	MOVWLZX      (SI), AX
	VMOVD        AX, X13
	VPINSRW      $1, 2(SI), X13, X13
	VCVTPH2PS    X13, X13
	VMOVSHDUP    X13, X15
	VBROADCASTSS X15, X15
	VBROADCASTSS X13, Y13`)
		for c := 0; c < 4; c++ {
			f.P("\tQ4KPAIR(%d(SI), Y%d, Z%d, Y2)", 16+32*c, 16+2*c, 16+2*c)
		}
	})
	f.P("")
	k4row := func(f *asmgen.File, x string, r int) {
		f.P("\tK4ROW(%s, %s, %s)", x, rowAcc(r), minsAcc(r))
	}
	var x4init, x4end string
	for r := 0; r < 8; r++ {
		x4init += fmt.Sprintf("\tVXORPS X%d, X%d, X%d\n", 4+r, 4+r, 4+r)
	}
	x4end = "\t// As dotQ4_KAVX2Asm ends: the mins subtracted lane by lane (their\n\t// upper four lanes are zero), then each row's HSUM.\n"
	for r := 0; r < 4; r++ {
		x4end += fmt.Sprintf("\tVSUBPS Y%d, Y%d, Y%d\n", 8+r, 4+r, 4+r)
	}
	x4end += "\tMOVQ out+32(FP), AX\n\tHSUM4(Y4, Y5, Y6, Y7)\n\tVMOVUPS X0, (AX)"
	(&rowsKernel{
		name: "dotQ4_Kx4Asm", frame: 32, rows: 4,
		init: x4init, label: "q4kx4loop", prep: "Q4KPREP",
		row: k4row, wLen: 144, end: x4end,
	}).write(f)

	f.Raw(`
// K4X8ZERO clears the eight-row Q4_K kernels' accumulators: rows 0-3 in
// Y4-Y7 (mins X8-X11), rows 4-7 in Y17-Y23 (mins X25-X31), odd registers.`)
	f.Define("K4X8ZERO", func(f *asmgen.File) {
		f.Zero("VXORPS", asmgen.Regs("X", 4, 1, 8)...)
		f.Zero("VPXORD", asmgen.Regs("Y", 17, 2, 4)...)
		f.Zero("VPXORD", asmgen.Regs("X", 25, 2, 4)...)
	})
	f.Raw(`
// K4X8END ends the eight-row Q4_K kernels as dotQ4_KAVX2Asm ends, row by
// row: the mins subtracted lane by lane, then HSUM, the eight results
// stored at AX.`)
	f.Define("K4X8END", func(f *asmgen.File) {
		for h := 0; h < 2; h++ {
			for r := 4 * h; r < 4*h+4; r++ {
				f.Ins("VSUBPS", "Y"+minsAcc(r)[1:], rowAcc(r), asmgen.Reg("Y", 4+r%4))
			}
			f.P("\tHSUM4(Y4, Y5, Y6, Y7)")
			f.Ins("VMOVUPS", "X0", asmgen.Mem(16*h, "AX"))
		}
	})
	f.P("")
	(&rowsKernel{
		name: "dotQ4_Kx8Asm", frame: 32, rows: 8,
		doc: `
// Eight activation rows: rows 0-3 as dotQ4_Kx4Asm, rows 4-7 at four
// strides further (their pointers rebuilt after each block's preparation,
// which uses those registers), accumulating into Y17-Y23 and X25-X31.`,
		init: "\tK4X8ZERO", label: "q4kx8loop", prep: "Q4KPREP",
		row: k4row, wLen: 144, end: "\tMOVQ out+32(FP), AX\n\tK4X8END",
	}).write(f)

	f.Raw(`
// func dotQ4_Kx8PrepAsm(w, xp *byte, nb int, out *float32)
//
// dotQ4_Kx8Asm on a prepared group of eight activation rows (see
// prepQ4_Kx8): the same weight preparation, and each row's K4ROWP gives it
// K4ROW's integers and float operations in their order, so the results are
// bit-identical to dotQ4_Kx8Asm's.`)
	f.Text("dotQ4_Kx8PrepAsm", 96, 32)
	f.Args(asmgen.Arg{Name: "w", Reg: "SI"}, asmgen.Arg{Name: "xp", Reg: "DI"}, asmgen.Arg{Name: "nb", Reg: "CX"})
	f.Raw(`
	K4X8ZERO

q4kx8ploop:
	Q4KPREP
	VMULPS       2176(DI), Y13, Y0
	VMOVUPS      Y0, 32(SP)
	VBROADCASTSS X15, Y1
	VMULPS       2176(DI), Y1, Y0
	VMOVUPS      Y0, 64(SP)

`)
	for r := 0; r < 8; r++ {
		f.P("\tK4ROWP(%d, %s, %s)", r, rowAcc(r), minsAcc(r))
	}
	f.P("")
	loopTail(f, "q4kx8ploop", step{"SI", 144}, step{"DI", 2208})
	f.Raw(`

	MOVQ out+24(FP), AX
	K4X8END
	VZEROUPPER
	RET
`)
}

// q5k writes dotQ5_KAVX2Asm: Q4_K's kernel with the fifth bits ORed in.
func q5k(f *asmgen.File) {
	f.Raw(`
// Q5KHIGH ORs the fifth bits into Y4/Y5: bit 0 of each byte of Y8 (qh,
// shifted right once per sub-block so far) is the low nibble's, bit 1 the
// high nibble's. VPSRLW moves bits across bytes only into the top bits of
// each byte, which are never read before the four chunks are done.`)
	f.Define("Q5KHIGH", func(f *asmgen.File) {
		for _, y := range []string{"Y4", "Y5"} {
			f.Ins("VPAND", "Y9", "Y8", "Y10")
			f.Ins("VPSLLW", "$4", "Y10", "Y10")
			f.Ins("VPOR", "Y10", y, y)
			f.Ins("VPSRLW", "$1", "Y8", "Y8")
		}
	})
	f.P("")
	k4Dot(f, "dotQ5_KAVX2Asm", []konst{{"c01<>", "Y9"}}, "q5kloop", 176, func(f *asmgen.File, c int) {
		if c == 0 {
			f.Ins("VMOVDQU", "16(SI)", "Y8")
		}
		f.P("\tQ4KNIB(%d(SI))", 48+32*c)
		f.P("\tQ5KHIGH")
	})
}

// q6Chunk says how chunk c (0-3, 32 quants each) of a Q6_K half is
// unpacked from the half's two 32-byte ql registers and its qh register:
// which ql register holds its nibbles (lo for chunks 0 and 2, hi for 1
// and 3), whether they are the high nibbles (chunks 2 and 3), and the qh
// shift that brings its top two bits to bits 4-5 (left 4, left 2, none,
// right 2).
type q6Chunk struct {
	src     int    // 0: lo, 1: hi
	high    bool   // the high nibbles
	shiftOp string // VPSLLW, VPSRLW, or "" for none
	shift   string // its count
}

var q6Chunks = [4]q6Chunk{{0, false, "VPSLLW", "$4"}, {1, false, "VPSLLW", "$2"}, {0, true, "", ""}, {1, true, "VPSRLW", "$2"}}

// q6Unpack writes the instructions leaving chunk c's nibbles in nib and
// its top bits in top, from the ql registers src and the qh register qh,
// masked with andOp (VPAND; VPANDD in the AVX-512 kernels) against the
// 0x0f bytes in Y15 and the 0x30 bytes in Y10.
func q6Unpack(f *asmgen.File, c int, src [2]string, qh, nib, top, andOp string) {
	h := q6Chunks[c]
	if h.high {
		f.Ins("VPSRLW", "$4", src[h.src], nib)
		f.Ins(andOp, "Y15", nib, nib)
	} else {
		f.Ins(andOp, "Y15", src[h.src], nib)
	}
	if h.shiftOp == "" {
		f.Ins(andOp, "Y10", qh, top)
		return
	}
	f.Ins(h.shiftOp, h.shift, qh, top)
	f.Ins(andOp, "Y10", top, top)
}

// q6k writes dotQ6_KAVX2Asm.
func q6k(f *asmgen.File) {
	f.Raw(`
// Q6KQ adds to Y12 the scaled sums of 32 quants of a Q6_K half: Y0 holds
// their low nibbles, Y1 their top two bits already at bits 4-5; yoff is
// the offset of the 32 activations and moff = 16*m selects the scale pair
// m (sub-blocks 2m, 2m+1). VPSHUFB copies scale 2m to bytes 0-7 and 2m+1 to
// bytes 8-15 so that, sign-extended to words, the low 128-bit lane (the
// first 16 quants) is scaled by one and the high lane by the other.
#define Q6KQ(yoff, moff) \
	VPOR       Y1, Y0, Y0 \
	VPMADDUBSW yoff(DI), Y0, Y0 \
	VPSHUFB    q6shuf<>+moff(SB), X11, X1 \
	VPMOVSXBW  X1, Y1 \
	VPMADDWD   Y1, Y0, Y0 \
	VPADDD     Y0, Y12, Y12

// Q6KHALF handles 128 elements: ql at qoff(SI), qh at hoff(SI),
// activations from yoff(DI), scale pairs from moff/16 on.`)
	f.Define("Q6KHALF(qoff, hoff, yoff, moff)", func(f *asmgen.File) {
		f.Raw(`
	VMOVDQU qoff(SI), Y4
	VMOVDQU qoff+32(SI), Y5
	VMOVDQU hoff(SI), Y6`)
		for c := 0; c < 4; c++ {
			q6Unpack(f, c, [2]string{"Y4", "Y5"}, "Y6", "Y0", "Y1", "VPAND")
			if c == 0 {
				f.P("\tQ6KQ(yoff, moff)")
			} else {
				f.P("\tQ6KQ(yoff+%d, moff+%d)", 32*c, 16*c)
			}
		}
	})
	f.P("")
	(&dotKernel{
		sig: "dotQ6_KAVX2Asm(w, x *byte, nb int) float32",
		doc: `
// The quants are stored biased by 32: sum(sc*(q-32)*y) is computed as
// sum(sc*q*y) - 32*sum_k sc_k*bsum_k, using Q8_K's bsums (the sums of
// each 16 activations, which is what the format guarantees them to be).`,
		args:   []string{"w", "x", "nb"},
		consts: []konst{{"c0F<>", "Y15"}, {"c30<>", "Y10"}},
		zero:   []string{"Y14"},
		label:  "q6kloop",
		body: func(f *asmgen.File) {
			f.Raw(`
	VPMOVSXBW 192(SI), Y0
	VPMADDWD  260(DI), Y0, Y0
	VPSLLD    $5, Y0, Y0
	VPXOR     Y12, Y12, Y12
	VPSUBD    Y0, Y12, Y12
	VMOVDQU   192(SI), X11
	Q6KHALF(0, 128, 4, 0)
	Q6KHALF(64, 160, 132, 64)
	VCVTDQ2PS    Y12, Y12
	MOVWLZX      208(SI), AX
	VMOVD        AX, X2
	VCVTPH2PS    X2, X2
	VMULSS       (DI), X2, X2
	VBROADCASTSS X2, Y2
	VFMADD231PS  Y2, Y12, Y14`)
		},
		wLen: 210, xLen: 292, acc: 14,
	}).write(f)
}

// q6kRows writes the four- and eight-row Q6_K kernels.
func q6kRows(f *asmgen.File) {
	f.Raw(`
// ---- Q6_K · Q8_K, four and eight activation rows (AVX-512 level, like
// the Q4_K ones): each super-block's 256 quants are unpacked once (as the
// unsigned biased values, chunk c = elements 32c..32c+31) into chunk
// pairs in Z16-Z22 and the scale pairs spread to words (Q6KQ's VPSHUFB
// layout) in Z24-Z30; Y13 holds the 16 scales times -32 as words for the
// bias term and Y14 d. Each row's int32 lanes, FMAs and final HSUM are
// dotQ6_KAVX2Asm's, so every result is bit-identical to the one-row
// kernel's on that row.

// K6ROW adds one activation row's block (at x) to F: the exact int32
// lanes sum(sc*q*y) - 32*sum_k sc_k*bsum_k (as dotQ6_KAVX2Asm; the second
// term by one VPDPWSSD with the scales times -32), converted and times
// d*xd. The quants and scale words come in chunk pairs,
// Z16/Z18/Z20/Z22 and Z24/Z26/Z28/Z30 (Q6KPREP): the low half gathers the
// even chunks and the high half the odd ones, joined once by int32 adds,
// so the lanes are the one-row kernel's. Z0, Z1, Y2, Y3, Z12 scratch.`)
	f.Define("K6ROW(x, F)", func(f *asmgen.File) {
		pairedInt(f, chunks(4, "(x)"))
		f.Raw(`
	VPDPWSSD      260(x), Y13, Y12
	VCVTDQ2PS     Y12, Y12
	VMULPS.BCST   (x), Y14, Y1
	VFMADD231PS   Y1, Y12, F`)
	})
	f.Raw(`
// K6HALF unpacks half h of a Q6_K block (ql at qoff, qh at hoff) into the
// four registers A-D, as Q6KHALF does. Y0-Y3, Y12 scratch.`)
	f.Define("K6HALF(qoff, hoff, A, B, C, D)", func(f *asmgen.File) {
		f.Raw(`
	VMOVDQU qoff(SI), Y0
	VMOVDQU qoff+32(SI), Y1
	VMOVDQU hoff(SI), Y2`)
		for c, out := range []string{"A", "B", "C", "D"} {
			q6Unpack(f, c, [2]string{"Y0", "Y1"}, "Y2", "Y3", "Y12", "VPANDD")
			f.Ins("VPORD", "Y12", "Y3", out)
		}
	})
	f.Raw(`
// K6SC spreads scale pair m (16*m = moff) of the bytes in X11 to words.
#define K6SC(moff, R) \
	VPSHUFB   q6shuf<>+moff(SB), X11, X3 \
	VPMOVSXBW X3, R

// K6SCPAIR spreads scale pairs m and m+1 (moff = 16*m) to words in the low
// and high halves of Z (whose low half Ylo names), through Y8.
#define K6SCPAIR(moff, Ylo, Z) \
	K6SC(moff, Ylo) \
	K6SC(moff+16, Y8) \
	VINSERTI64X4 $1, Y8, Z, Z

// Q6KPREP prepares the Q6_K block at SI for the multi-row kernels: its 16
// scales times -32 as words in Y13, d in every lane of Y14, the scale words of chunk pairs in
// Z24/Z26/Z28/Z30 and the unsigned quants of chunk pairs in
// Z16/Z18/Z20/Z22 (K6ROW's layout), each odd chunk going through Y8/Y9
// into its pair's high half so that the odd upper registers stay free.
// It uses AX, X11, Y0-Y3, Y8, Y9 and Y12.`)
	f.Define("Q6KPREP", func(f *asmgen.File) {
		f.Raw(`
	VMOVDQU      192(SI), X11
	VPMOVSXBW    X11, Y13
	VPSLLW       $5, Y13, Y13
	VPXOR        Y12, Y12, Y12
	VPSUBW       Y13, Y12, Y13`)
		for p := 0; p < 4; p++ {
			f.P("\tK6SCPAIR(%d, Y%d, Z%d)", 32*p, 24+2*p, 24+2*p)
		}
		f.Raw(`
	MOVWLZX      208(SI), AX
	VMOVD        AX, X14
	VCVTPH2PS    X14, X14
	VBROADCASTSS X14, Y14`)
		for h := 0; h < 2; h++ {
			a, c := 16+4*h, 18+4*h
			f.P("\tK6HALF(%d, %d, Y%d, Y8, Y%d, Y9)", 64*h, 128+32*h, a, c)
			f.Ins("VINSERTI64X4", "$1", "Y8", asmgen.Reg("Z", a), asmgen.Reg("Z", a))
			f.Ins("VINSERTI64X4", "$1", "Y9", asmgen.Reg("Z", c), asmgen.Reg("Z", c))
		}
	})
	f.P("")
	k6row := func(f *asmgen.File, x string, r int) { f.P("\tK6ROW(%s, %s)", x, rowAcc(r)) }
	init := "\tVMOVDQU c0F<>(SB), Y15\n\tVMOVDQU c30<>(SB), Y10\n"
	for r := 0; r < 4; r++ {
		init += fmt.Sprintf("\tVXORPS X%d, X%d, X%d\n", 4+r, 4+r, 4+r)
	}
	(&rowsKernel{
		name: "dotQ6_Kx4Asm", rows: 4, init: init, label: "q6kx4loop", prep: "Q6KPREP",
		row: k6row, wLen: 210,
		end: "\t// Each row's lane sum in dotQ6_KAVX2Asm's order (HSUM).\n\tMOVQ out+32(FP), AX\n\tHSUM4(Y4, Y5, Y6, Y7)\n\tVMOVUPS X0, (AX)",
	}).write(f)
	for r := 4; r < 8; r++ {
		init += fmt.Sprintf("\tVPXORD %s, %s, %s\n", rowAcc(r), rowAcc(r), rowAcc(r))
	}
	end := "\tMOVQ out+32(FP), AX\n\tHSUM4(Y4, Y5, Y6, Y7)\n\tVMOVUPS X0, (AX)\n"
	for r := 4; r < 8; r++ {
		end += fmt.Sprintf("\tVMOVDQA64 %s, Y%d\n", rowAcc(r), r)
	}
	end += "\tHSUM4(Y4, Y5, Y6, Y7)\n\tVMOVUPS X0, 16(AX)"
	(&rowsKernel{
		name: "dotQ6_Kx8Asm", rows: 8,
		doc: `
// Eight activation rows: Q6KPREP leaves Y17-Y23 free for rows 4-7's
// accumulators; those rows sit four strides further, their pointers
// rebuilt after each block's preparation (which uses AX).`,
		init: init, label: "q6kx8loop", prep: "Q6KPREP",
		row: k6row, wLen: 210, end: end,
	}).write(f)
}
