package main

import (
	"fmt"

	"github.com/zrtdev/zrt/kernels/internal/asmgen"
)

// tinyBLASRows is the widest micro-tile's activation rows: four weight rows
// times six activation rows keep 24 accumulators, the four converted weight
// vectors and one activation vector in 29 of the 32 ZMM registers.
const tinyBLASRows = 6

// tinyBLASFile is tinyblas_amd64.s: the micro-kernels of the F16 prompt
// products in tinyBLAS's arithmetic, one per activation row count, and
// the activations' rounding through F16.
func tinyBLASFile() []byte {
	f := asmgen.NewFile(generator)
	f.Raw(`
// The micro-kernels compute a tile of 4 weight rows (F16, ldw bytes apart)
// times n activation rows (float32 already rounded to F16, ldx bytes
// apart) over k columns (a multiple of 16). Each output is one 16-lane
// accumulator of fused multiply-adds over k in steps of 16, as tinyBLAS's
// tinyBLAS<16, __m512, __m512, ggml_fp16_t, ggml_fp16_t> keeps it, and is
// then reduced as _mm512_reduce_add_ps does: the upper eight lanes onto
// the lower, then four, then (0+2)+(1+3). The reduction is done for four
// outputs at once: the four accumulators' halves are interleaved by
// 256-bit and then 128-bit shuffles so that every add pairs exactly the
// lanes the one-output order pairs. out receives the outputs activation
// row by activation row, the four weight rows' results of a row together:
// out[4*r+m] is weight row m times activation row r.
//
// Registers: Z0-Z23 the accumulators (Z(4r+m)), Z24-Z27 the weight rows'
// 16 columns converted from F16, Z28 an activation row's 16 columns; the
// weight rows at SI, SI+R8, SI+2*R8, SI+R9 (R9 = 3*ldw), the activation
// rows at DX + {0, R10, 2*R10, R11, 4*R10, R12} (R11 = 3*ldx, R12 =
// 5*ldx).`)
	for n := 1; n <= tinyBLASRows; n++ {
		tinyBLASTile(f, n)
	}
	f.Raw(`
// func roundF16AVX512(x *float32, n int)
//
// x[i] = float32(float16(x[i])) over n elements (a multiple of 16): the
// conversion rounds to nearest even (VCVTPS2PH's immediate 0), as ggml's
// GGML_FP32_TO_FP16 does on an F16C build.`)
	roundF16(f, "roundF16AVX512", "roundloop", "Z", "Y", 16)
	// VPERMPS's indices gathering the four outputs of a reduced group (the
	// low lane of each 128-bit lane) into the low four lanes.
	f.Quads("tbgather", asmgen.Dwords(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)...)
	return f.Bytes()
}

// roundF16 writes the activations' rounding through F16, lanes floats a
// pass: wide is the register of lanes floats, half the one of their halves.
func roundF16(f *asmgen.File, name, loop, wide, half string, lanes int) {
	f.Text(name, 0, 16)
	f.Args(asmgen.Arg{Name: "x", Reg: "DI"}, asmgen.Arg{Name: "n", Reg: "CX"})
	f.Raw(fmt.Sprintf(`
%[1]s:
	VMOVUPS   (DI), %[2]s0
	VCVTPS2PH $0, %[2]s0, %[3]s1
	VCVTPH2PS %[3]s1, %[2]s0
	VMOVUPS   %[2]s0, (DI)
	ADDQ      $%[4]d, DI
	SUBQ      $%[5]d, CX
	JNZ       %[1]s
	VZEROUPPER
	RET
`, loop, wide, half, 4*lanes, lanes))
}

// tinyBLASTile writes tinyBLAS4x<n>AVX512, the micro-kernel of 4 weight
// rows times n activation rows.
func tinyBLASTile(f *asmgen.File, n int) {
	name := fmt.Sprintf("tinyBLAS4x%dAVX512", n)
	f.P("\n// func %s(w *uint16, ldw int, x *float32, ldx int, k int, out *float32)", name)
	f.Text(name, 0, 48)
	f.Args(asmgen.Arg{Name: "w", Reg: "SI"}, asmgen.Arg{Name: "ldw", Reg: "R8"}, asmgen.Arg{Name: "x", Reg: "DX"},
		asmgen.Arg{Name: "ldx", Reg: "R10"}, asmgen.Arg{Name: "k", Reg: "CX"}, asmgen.Arg{Name: "out", Reg: "DI"})
	f.Ins("LEAQ", "(R8)(R8*2)", "R9")
	if n > 3 {
		f.Ins("LEAQ", "(R10)(R10*2)", "R11")
	}
	if n > 5 {
		f.Ins("LEAQ", "(R10)(R10*4)", "R12")
	}
	f.Zero("VPXORD", asmgen.Regs("Z", 0, 1, 4*n)...)
	wRow := []string{"(SI)", "(SI)(R8*1)", "(SI)(R8*2)", "(SI)(R9*1)"}
	xRow := []string{"(DX)", "(DX)(R10*1)", "(DX)(R10*2)", "(DX)(R11*1)", "(DX)(R10*4)", "(DX)(R12*1)"}
	loop := fmt.Sprintf("tb%dloop", n)
	f.P("\n%s:", loop)
	for m := 0; m < 4; m++ {
		f.Ins("VCVTPH2PS", wRow[m], z(24+m))
	}
	for r := 0; r < n; r++ {
		f.Ins("VMOVUPS", xRow[r], "Z28")
		for m := 0; m < 4; m++ {
			f.Ins("VFMADD231PS", "Z28", z(24+m), z(4*r+m))
		}
	}
	f.Raw(`
	ADDQ $32, SI
	ADDQ $64, DX
	SUBQ $16, CX
	JNZ  ` + loop + `
	VMOVDQU32 tbgather<>(SB), Z31`)
	for r := 0; r < n; r++ {
		reduceTile4(f, 4*r, 16*r)
	}
	f.Ins("VZEROUPPER")
	f.Ins("RET")
}

// reduceTile4 reduces the four accumulators Z(a)..Z(a+3) (A, B, C, D) in
// _mm512_reduce_add_ps's order and stores the four sums at off(DI), using
// Z24-Z27 as scratch and Z31's gather indices.
func reduceTile4(f *asmgen.File, a, off int) {
	A, B, C, D := z(a), z(a+1), z(a+2), z(a+3)
	f.Raw(fmt.Sprintf(`
	VSHUFF64X2 $0x44, %[2]s, %[1]s, Z24 // A[0:8] B[0:8]
	VSHUFF64X2 $0xee, %[2]s, %[1]s, Z25 // A[8:16] B[8:16]
	VADDPS     Z25, Z24, Z24            // A[i]+A[i+8], B[i]+B[i+8]
	VSHUFF64X2 $0x44, %[4]s, %[3]s, Z25
	VSHUFF64X2 $0xee, %[4]s, %[3]s, Z26
	VADDPS     Z26, Z25, Z25            // the same for C and D
	VSHUFF32X4 $0x88, Z25, Z24, Z26     // lanes 0-3 of A, B, C, D
	VSHUFF32X4 $0xdd, Z25, Z24, Z27     // lanes 4-7
	VADDPS     Z27, Z26, Z26            // s[i] = lane i + lane i+4, per output
	VPERMILPS  $0x4e, Z26, Z27
	VADDPS     Z27, Z26, Z26            // s0+s2, s1+s3
	VPERMILPS  $0xb1, Z26, Z27
	VADDPS     Z27, Z26, Z26            // (s0+s2)+(s1+s3)
	VPERMPS    Z26, Z31, Z27
	VMOVUPS    X27, %[5]s`, A, B, C, D, asmgen.Mem(off, "DI")))
}

// tinyBLASAVX2File is tinyblas_avx2_amd64.s: the same micro-tiles and
// rounding for CPUs with AVX2, FMA and F16C but not AVX-512, in the same
// 16-lane arithmetic: each output's accumulator is two YMM registers
// (lanes 0-7 and 8-15) that see exactly the AVX-512 lanes' products in
// the same order, and the reduction's first fold adds the two.
func tinyBLASAVX2File() []byte {
	f := asmgen.NewFile(generator)
	f.Raw(`
// The 16 YMM registers hold 2 weight rows times up to 3 activation rows at
// a time (12 accumulators, Y((2r+m)*2+h) for activation row r, weight row
// m, lane half h; Y12-Y13 the weight rows' 8 columns, Y14 an activation
// row's, Y15 scratch), so a tile of 4 weight rows times n activation rows
// is computed in blocks: each group of up to 3 activation rows with each
// pair of weight rows, every block a pass over k of its own. The weight
// rows are at SI, BX, R8, R9 and the activation rows at DX, R10-R13, DI;
// AX is the byte offset into a weight row (twice that into an activation
// row), CX a weight row's length in bytes. out is as the AVX-512 kernels
// write it: out[4*r+m].`)
	for n := 1; n <= tinyBLASRows; n++ {
		tinyBLASTileAVX2(f, n)
	}
	f.Raw(`
// func roundF16AVX2(x *float32, n int)
//
// roundF16AVX512 eight values at a time.`)
	roundF16(f, "roundF16AVX2", "round2loop", "Y", "X", 8)
	return f.Bytes()
}

// tinyBLASTileAVX2 writes tinyBLAS4x<n>AVX2.
func tinyBLASTileAVX2(f *asmgen.File, n int) {
	name := fmt.Sprintf("tinyBLAS4x%dAVX2", n)
	f.P("\n// func %s(w *uint16, ldw int, x *float32, ldx int, k int, out *float32)", name)
	f.Text(name, 0, 48)
	f.Args(asmgen.Arg{Name: "w", Reg: "SI"}, asmgen.Arg{Name: "ldw", Reg: "R8"}, asmgen.Arg{Name: "x", Reg: "DX"},
		asmgen.Arg{Name: "ldx", Reg: "R10"}, asmgen.Arg{Name: "k", Reg: "CX"})
	wRow := []string{"SI", "BX", "R8", "R9"}
	xRow := []string{"DX", "R10", "R11", "R12", "R13", "DI"}
	// row pointers from the bases and strides (R8 and R10 hold the strides
	// until their own rows' pointers replace them)
	f.Ins("LEAQ", "(SI)(R8*1)", "BX")
	f.Ins("LEAQ", "(SI)(R8*2)", "R9")
	f.Ins("ADDQ", "R8", "R9")
	f.Ins("LEAQ", "(SI)(R8*2)", "R8")
	for r := 2; r < n; r++ {
		if r == 2 {
			f.Ins("LEAQ", "(DX)(R10*2)", "R11")
		} else {
			f.Ins("LEAQ", fmt.Sprintf("(%s)(R10*1)", xRow[r-1]), xRow[r])
		}
	}
	if n > 1 {
		f.Ins("ADDQ", "DX", "R10")
	}
	f.Ins("ADDQ", "CX", "CX")
	for r0 := 0; r0 < n; r0 += 3 {
		g := min(3, n-r0)
		for p := 0; p < 2; p++ {
			acc := func(r, m, h int) string { return asmgen.Reg("Y", (2*r+m)*2+h) }
			f.Zero("VPXOR", asmgen.Regs("Y", 0, 1, 4*g)...)
			f.Ins("XORL", "AX", "AX")
			loop := fmt.Sprintf("tb2x%d_%d_%d", n, r0, p)
			f.P("\n%s:", loop)
			for h := 0; h < 2; h++ {
				for m := 0; m < 2; m++ {
					f.Ins("VCVTPH2PS", asmgen.Mem(16*h, wRow[2*p+m])+"(AX*1)", asmgen.Reg("Y", 12+m))
				}
				for r := 0; r < g; r++ {
					f.Ins("VMOVUPS", asmgen.Mem(32*h, xRow[r0+r])+"(AX*2)", "Y14")
					for m := 0; m < 2; m++ {
						f.Ins("VFMADD231PS", "Y14", asmgen.Reg("Y", 12+m), acc(r, m, h))
					}
				}
			}
			f.Ins("ADDQ", "$32", "AX")
			f.Ins("CMPQ", "AX", "CX")
			f.Ins("JNE", loop)
			f.Ins("MOVQ", "out+40(FP)", "AX")
			for r := 0; r < g; r++ {
				for m := 0; m < 2; m++ {
					lo, hi := acc(r, m, 0), acc(r, m, 1)
					x := "X" + lo[1:]
					f.Ins("VADDPS", hi, lo, lo)
					f.Ins("VEXTRACTF128", "$1", lo, "X15")
					f.Ins("VADDPS", "X15", x, x)
					f.Ins("VPERMILPS", "$0x4e", x, "X15")
					f.Ins("VADDPS", "X15", x, x)
					f.Ins("VPERMILPS", "$0xb1", x, "X15")
					f.Ins("VADDPS", "X15", x, x)
					f.Ins("VMOVSS", x, asmgen.Mem(4*(4*(r0+r)+2*p+m), "AX"))
				}
			}
		}
	}
	f.Ins("VZEROUPPER")
	f.Ins("RET")
}
