package main

import (
	"fmt"

	"github.com/zrtdev/zrt/kernels/internal/asmgen"
)

// Layout of an interleaved Q4_K group (quant.Q4KInterleave): eight weight
// rows, super-block after super-block, each block k4i8Block bytes.
const (
	k4i8Scales = 1024 // 4 chunks x {even, odd} x 8 bytes
	k4i8Mins   = 1088 // the same of the mins
	k4i8D      = 1152 // 8 float16 d
	k4i8Dmin   = 1168 // 8 float16 dmin
	k4i8Block  = 1184
)

// q4kInterleaved writes the Q4_K kernels on interleaved groups of eight
// weight rows: in the repacked GEMM's order for four activation rows and
// for one, in the GEMV's (two more int32 totals per row) for four, two
// and one.
func q4kInterleaved(f *asmgen.File) {
	f.Raw(fmt.Sprintf(`
// ---- Q4_K · Q8_K on interleaved groups of eight weight rows
// (quant.Q4KInterleave, AVX-512 VNNI level), in the repacked GEMM's order:
// every float lane is one weight row, so no integer sum is ever reduced
// across lanes. Per 64-element chunk c of a block the quants are 4 x 64
// bytes, each 64 bytes eight qwords (qword j: row j's eight quant bytes
// 8p..8p+7 of the chunk); their low nibbles are sub-block 2c's elements
// 8p..8p+7 and their high ones sub-block 2c+1's. VPDPBUSD against the
// activations' matching eight bytes broadcast to every qword leaves row j's
// partial sums in dwords 2j and 2j+1; the scales (bytes at %d: per chunk,
// the even and the odd sub-block's of each row, widened into both dwords
// of row j) multiply them
// (VPMULLD), and the two dwords of each row are added: the chunk's exact
// scaled sum S_c, as an integer, in lane j after VPMOVQD. The mins term
// M_c is two VPDPWSSD of the Q8_K block's bsums (two words broadcast) by
// each row's min of the even and the odd sub-block (bytes at %d, widened
// to two equal words per dword). Then, as dotQ4_KGEMMAVX2Asm does per row, one FMA of
// S_c by d*xd into the scales' accumulator and one of M_c by dmin*xd into
// the mins' (d at %d, dmin at %d, eight float16 each, widened exactly), each product of d (dmin)
// with xd rounded once: every lane's result is bit-identical to the
// one-row kernel's on that weight row.
//
// Registers: Z0-Z3 the even sub-block's unpacked quants, Z4-Z7 the odd's,
// Z8/Z9 the chunk's scales, Y10/Y11 its mins, Y12 d, Y13 dmin, Z14 the
// nibble mask, Y16-Y23 the rows' accumulators (scales', mins'), Z15 and
// Z24-Z31 scratch.

// K4I8CHUNK unpacks chunk c of the interleaved block at SI.
#define K4I8CHUNK(c) \
	VMOVDQU64 256*c(SI), Z0 \
	VMOVDQU64 256*c+64(SI), Z1 \
	VMOVDQU64 256*c+128(SI), Z2 \
	VMOVDQU64 256*c+192(SI), Z3 \
	VPSRLW    $4, Z0, Z4 \
	VPSRLW    $4, Z1, Z5 \
	VPSRLW    $4, Z2, Z6 \
	VPSRLW    $4, Z3, Z7 \
	VPANDQ    Z14, Z0, Z0 \
	VPANDQ    Z14, Z1, Z1 \
	VPANDQ    Z14, Z2, Z2 \
	VPANDQ    Z14, Z3, Z3 \
	VPANDQ    Z14, Z4, Z4 \
	VPANDQ    Z14, Z5, Z5 \
	VPANDQ    Z14, Z6, Z6 \
	VPANDQ    Z14, Z7, Z7 \
	VPMOVZXBQ %d+16*c(SI), Z8 \
	VPMOVZXBQ %d+16*c+8(SI), Z9 \
	VPSHUFD   $0xa0, Z8, Z8 \
	VPSHUFD   $0xa0, Z9, Z9 \
	VPMOVZXBD %d+16*c(SI), Y10 \
	VPMOVZXBD %d+16*c+8(SI), Y11 \
	VPSLLD    $16, Y10, Y15 \
	VPSLLD    $16, Y11, Y24 \
	VPORD     Y15, Y10, Y10 \
	VPORD     Y24, Y11, Y11
`, k4i8Scales, k4i8Mins, k4i8D, k4i8Dmin, k4i8Scales, k4i8Scales, k4i8Mins, k4i8Mins))
	f.Raw(`
// K4I8SUMS forms, in Y24, each of the eight weight rows' scaled sum over
// chunk c of the activation row block at x (the quants' dot products
// times their sub-block scales, both halves added), the part K4I8ROW and
// K4I8ROWV share.`)
	f.Define("K4I8SUMS(c, x)", k4i8Sums)
	f.Raw(`
// K4I8ROW adds chunk c of the activation row block at x to the
// accumulators A (scales') and M (mins').
#define K4I8ROW(c, x, A, M) \
	K4I8SUMS(c, x) \
	VCVTDQ2PS    Y24, Y24 \
	VMULPS.BCST  (x), Y12, Y30 \
	VFMADD231PS  Y30, Y24, A \
	VPXORD       Y31, Y31, Y31 \
	VPDPWSSD.BCST 260+8*c(x), Y10, Y31 \
	VPDPWSSD.BCST 264+8*c(x), Y11, Y31 \
	VCVTDQ2PS    Y31, Y31 \
	VMULPS.BCST  (x), Y13, Y30 \
	VFMADD231PS  Y30, Y31, M

// K4I8ROWV is K4I8ROW in the repacked GEMV's order: the chunk's S_c and
// M_c added to the row's int32 totals of the block, S and M.
#define K4I8ROWV(c, x, S, M) \
	K4I8SUMS(c, x) \
	VPADDD       Y24, S, S \
	VPDPWSSD.BCST 260+8*c(x), Y10, M \
	VPDPWSSD.BCST 264+8*c(x), Y11, M

// K4I8FMAV ends a block of the activation row at x in the GEMV's order:
// its totals S and M, one FMA each by d*xd and dmin*xd into A and AM, and
// clears S and M.
#define K4I8FMAV(x, S, M, A, AM) \
	VCVTDQ2PS    S, Y24 \
	VMULPS.BCST  (x), Y12, Y30 \
	VFMADD231PS  Y30, Y24, A \
	VCVTDQ2PS    M, Y31 \
	VMULPS.BCST  (x), Y13, Y30 \
	VFMADD231PS  Y30, Y31, AM \
	VPXORD       S, S, S \
	VPXORD       M, M, M
`)
	type kern struct {
		gemv bool
		rows int
	}
	for _, k := range []kern{{false, 4}, {false, 1}, {true, 4}, {true, 2}, {true, 1}} {
		mode, per := "GEMM", 2 // accumulators per row
		if k.gemv {
			mode, per = "GEMV", 4
		}
		rows := k.rows
		// Four rows in the GEMV's order would need sixteen accumulators,
		// the scratch registers' room: their float ones (A, AM), which a
		// block touches once, live in the frame, 64 bytes a row.
		spill := k.gemv && rows == 4
		name := fmt.Sprintf("dotQ4_K%si8x%dAsm", mode, rows)
		f.P("")
		f.P("// func %s(w, x *byte, stride, nb int, out *float32)", name)
		f.P("//")
		f.P("// %d activation row(s) at x (stride bytes apart) against the interleaved", rows)
		f.P("// group at w in the repacked %s's order: out[8r+j] is row r's product", mode)
		f.P("// with weight row j.")
		frame := 0
		if spill {
			frame = 64 * rows
			f.P("// Row r's float accumulators are at 64r(SP) and 64r+32(SP).")
		}
		f.Text(name, frame, 40)
		f.Args(asmgen.Arg{Name: "w", Reg: "SI"}, asmgen.Arg{Name: "x", Reg: "DI"}, asmgen.Arg{Name: "stride", Reg: "DX"}, asmgen.Arg{Name: "nb", Reg: "CX"})
		f.Raw(`
	LEAQ (DI)(DX*1), R8
	LEAQ (DI)(DX*2), R9
	LEAQ (R9)(DX*1), R13
	MOVL $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z14`)
		reg := func(r, i int) string { return asmgen.Reg("Y", 16+per*r+i) }
		if spill {
			// S and M of row r in Y16+2r, Y17+2r; A and AM in the frame.
			reg = func(r, i int) string {
				if i < 2 {
					return fmt.Sprintf("%d(SP)", 64*r+32*i)
				}
				return asmgen.Reg("Y", 16+2*r+i-2)
			}
			f.Ins("VPXORD", "Y24", "Y24", "Y24")
			for r := 0; r < rows; r++ {
				f.Ins("VMOVUPS", "Y24", reg(r, 0))
				f.Ins("VMOVUPS", "Y24", reg(r, 1))
				f.Ins("VPXORD", reg(r, 2), reg(r, 2), reg(r, 2))
				f.Ins("VPXORD", reg(r, 3), reg(r, 3), reg(r, 3))
			}
		} else {
			for r := 0; r < per*rows; r++ {
				a := asmgen.Reg("Y", 16+r)
				f.Ins("VPXORD", a, a, a)
			}
		}
		label := fmt.Sprintf("q4k%si8x%dloop", mode, rows)
		f.P("")
		f.P("%s:", label)
		f.Ins("VCVTPH2PS", fmt.Sprintf("%d(SI)", k4i8D), "Y12")
		f.Ins("VCVTPH2PS", fmt.Sprintf("%d(SI)", k4i8Dmin), "Y13")
		xs := []string{"DI", "R8", "R9", "R13"}
		for c := 0; c < 4; c++ {
			f.P("\tK4I8CHUNK(%d)", c)
			for r := 0; r < rows; r++ {
				if k.gemv {
					f.P("\tK4I8ROWV(%d, %s, %s, %s)", c, xs[r], reg(r, 2), reg(r, 3))
				} else {
					f.P("\tK4I8ROW(%d, %s, %s, %s)", c, xs[r], reg(r, 0), reg(r, 1))
				}
			}
		}
		if k.gemv {
			for r := 0; r < rows; r++ {
				if spill {
					k4i8FMAVFrame(f, xs[r], reg(r, 2), reg(r, 3), reg(r, 0), reg(r, 1))
					continue
				}
				f.P("\tK4I8FMAV(%s, %s, %s, %s, %s)", xs[r], reg(r, 2), reg(r, 3), reg(r, 0), reg(r, 1))
			}
		}
		var st []step
		st = append(st, step{"SI", k4i8Block})
		st = append(st, steps(292, xs[:rows]...)...)
		loopTail(f, label, st...)
		f.P("")
		f.Ins("MOVQ", "out+32(FP)", "AX")
		for r := 0; r < rows; r++ {
			a := reg(r, 0)
			if spill {
				f.Ins("VMOVUPS", a, "Y24")
				a = "Y24"
			}
			f.Ins("VSUBPS", reg(r, 1), a, a)
			f.Ins("VMOVUPS", a, fmt.Sprintf("%d(AX)", 32*r))
		}
		f.Ins("VZEROUPPER")
		f.Ins("RET")
	}
	// One activation row against a run of groups, as a decode step's
	// product over a whole matrix: per group, dotQ4_KGEMVi8x1Asm's
	// operations in its order (the accumulators cleared, the blocks,
	// acc - accm), without a call per group.
	f.P("")
	f.P("// func dotQ4_KGEMVi8MAsm(w, x *byte, nb, groups int, out *float32)")
	f.P("//")
	f.P("// One activation row at x against groups interleaved groups from w (nb")
	f.P("// blocks each, one after another): out[8g+j] is its product with group")
	f.P("// g's weight row j, bit for bit dotQ4_KGEMVi8x1Asm's.")
	f.Text("dotQ4_KGEMVi8MAsm", 0, 40)
	f.Args(asmgen.Arg{Name: "w", Reg: "SI"}, asmgen.Arg{Name: "x", Reg: "R11"}, asmgen.Arg{Name: "nb", Reg: "R12"},
		asmgen.Arg{Name: "groups", Reg: "R10"}, asmgen.Arg{Name: "out", Reg: "BX"})
	f.Raw(`
	MOVL $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z14

q4kGEMVi8mgroup:
	MOVQ R11, DI
	MOVQ R12, CX`)
	for r := 0; r < 4; r++ {
		a := asmgen.Reg("Y", 16+r)
		f.Ins("VPXORD", a, a, a)
	}
	f.P("")
	f.P("q4kGEMVi8mloop:")
	f.Ins("VCVTPH2PS", fmt.Sprintf("%d(SI)", k4i8D), "Y12")
	f.Ins("VCVTPH2PS", fmt.Sprintf("%d(SI)", k4i8Dmin), "Y13")
	for c := 0; c < 4; c++ {
		f.P("\tK4I8CHUNK(%d)", c)
		f.P("\tK4I8ROWV(%d, DI, Y18, Y19)", c)
	}
	f.P("\tK4I8FMAV(DI, Y18, Y19, Y16, Y17)")
	loopTail(f, "q4kGEMVi8mloop", step{"SI", k4i8Block}, step{"DI", 292})
	f.P("")
	f.Ins("VSUBPS", "Y17", "Y16", "Y16")
	f.Ins("VMOVUPS", "Y16", "(BX)")
	f.Ins("ADDQ", "$32", "BX")
	f.Ins("DECQ", "R10")
	f.Ins("JNZ", "q4kGEMVi8mgroup")
	f.Ins("VZEROUPPER")
	f.Ins("RET")
}

// k4i8FMAVFrame is K4I8FMAV with the float accumulators A and AM in
// memory: each loaded, FMAed as K4I8FMAV does (the same operation, so the
// same bits) and stored back.
func k4i8FMAVFrame(f *asmgen.File, x, s, m, a, am string) {
	f.Ins("VCVTDQ2PS", s, "Y24")
	f.Ins("VMULPS.BCST", "("+x+")", "Y12", "Y30")
	f.Ins("VMOVUPS", a, "Y25")
	f.Ins("VFMADD231PS", "Y30", "Y24", "Y25")
	f.Ins("VMOVUPS", "Y25", a)
	f.Ins("VCVTDQ2PS", m, "Y31")
	f.Ins("VMULPS.BCST", "("+x+")", "Y13", "Y30")
	f.Ins("VMOVUPS", am, "Y25")
	f.Ins("VFMADD231PS", "Y30", "Y31", "Y25")
	f.Ins("VMOVUPS", "Y25", am)
	f.Ins("VPXORD", s, s, s)
	f.Ins("VPXORD", m, m, m)
}

// q4kDotRows writes dotQ4_KDotx4Asm: Q4_K in vec_dot's order (OrderDot)
// for four activation rows, each weight block prepared once (Q4KPREP).
func q4kDotRows(f *asmgen.File) {
	f.Raw(`
// K4ROWDOT adds one activation row's block (at x) to its eight float
// lanes F and four mins lanes M as dotQ4_KAVX2Asm does: the same int32
// lanes (pairedInt), FMAed by d*xd (Y13 holds d in every lane), and the
// chunks' mins terms FMAed by dmin*xd (X15 holds dmin). Z0, Z1, Y2, Y3,
// Z12 scratch.`)
	f.Define("K4ROWDOT(x, F, M)", func(f *asmgen.File) {
		pairedInt(f, [4]string{"4(x)", "68(x)", "132(x)", "196(x)"})
		f.Ins("VCVTDQ2PS", "Y12", "Y12")
		f.Ins("VMULPS.BCST", "(x)", "Y13", "Y2")
		f.Ins("VFMADD231PS", "Y2", "Y12", "F")
		f.Ins("VMOVDQU", "260(x)", "X2")
		f.Ins("VMOVDQU", "276(x)", "X3")
		f.Ins("VPHADDW", "X3", "X2", "X2")
		f.Ins("VPMADDWD", "X14", "X2", "X2")
		f.Ins("VCVTDQ2PS", "X2", "X2")
		f.Ins("VMULPS.BCST", "(x)", "X15", "X1")
		f.Ins("VFMADD231PS", "X1", "X2", "M")
	})
	var init, end string
	for r := 0; r < 4; r++ {
		init += fmt.Sprintf("\tVXORPS X%d, X%d, X%d\n\tVXORPS X%d, X%d, X%d\n", 4+r, 4+r, 4+r, 8+r, 8+r, 8+r)
	}
	end = "\t// As dotQ4_KAVX2Asm ends, row by row: the mins lanes reduced as\n\t// (m0+m2) + (m1+m3), HSUM of the lanes, their difference.\n"
	for r := 0; r < 4; r++ {
		m := fmt.Sprintf("X%d", 8+r)
		end += fmt.Sprintf("\tVMOVHLPS %s, %s, X12\n\tVADDPS X12, %s, X12\n\tVMOVSHDUP X12, X13\n\tVADDSS X13, X12, %s\n", m, m, m, m)
	}
	end += "\tVINSERTPS $0x10, X9, X8, X8\n\tVINSERTPS $0x20, X10, X8, X8\n\tVINSERTPS $0x30, X11, X8, X8\n"
	end += "\tMOVQ out+32(FP), AX\n\tHSUM4(Y4, Y5, Y6, Y7)\n\tVSUBPS X8, X0, X0\n\tVMOVUPS X0, (AX)\n"
	(&rowsKernel{
		name: "dotQ4_KDotx4Asm", frame: 32, rows: 4,
		init: init, label: "q4kdotx4loop",
		prep: "Q4KPREP\n\tVMOVSHDUP X13, X15\n\tVBROADCASTSS X15, X15\n\tVBROADCASTSS X13, Y13",
		row: func(f *asmgen.File, x string, r int) {
			f.P("\tK4ROWDOT(%s, Y%d, X%d)", x, 4+r, 8+r)
		},
		wLen: 144, end: end,
	}).write(f)
}

// k4i8Sums is K4I8SUMS's body. Quant register k (Z0-Z3 the even
// sub-blocks', Z4-Z7 the odd ones') meets the activations' eight bytes
// at 4+64*c+8k (even) and +32 (odd) of x, broadcast to every qword; the
// broadcasts run two steps ahead of their VPDPBUSDs through two register
// pairs, so that each load has a step's work to hide behind.
func k4i8Sums(f *asmgen.File) {
	pairs := [2][2]string{{"Z26", "Z27"}, {"Z28", "Z29"}}
	bcast := func(k int) {
		for i, off := range []int{8 * k, 32 + 8*k} {
			at := "4+64*c"
			if off > 0 {
				at += fmt.Sprintf("+%d", off)
			}
			f.Ins("VPBROADCASTQ", at+"(x)", pairs[k%2][i])
		}
	}
	bcast(0)
	bcast(1)
	f.Ins("VPXORD", "Z24", "Z24", "Z24")
	f.Ins("VPXORD", "Z25", "Z25", "Z25")
	for k := 0; k < 4; k++ {
		f.Ins("VPDPBUSD", pairs[k%2][0], asmgen.Reg("Z", k), "Z24")
		f.Ins("VPDPBUSD", pairs[k%2][1], asmgen.Reg("Z", 4+k), "Z25")
		if k+2 < 4 {
			bcast(k + 2)
		}
	}
	// The eight rows' scales, then each row's two dwords added.
	f.Raw(`
	VPMULLD      Z8, Z24, Z24
	VPMULLD      Z9, Z25, Z25
	VPADDD       Z25, Z24, Z24
	VPSHUFD      $0xb1, Z24, Z25
	VPADDD       Z25, Z24, Z24
	VPMOVQD      Z24, Y24`)
}
