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
	f.Text("roundF16AVX512", 0, 16)
	f.Args(asmgen.Arg{Name: "x", Reg: "DI"}, asmgen.Arg{Name: "n", Reg: "CX"})
	f.Raw(`
roundloop:
	VMOVUPS   (DI), Z0
	VCVTPS2PH $0, Z0, Y1
	VCVTPH2PS Y1, Z0
	VMOVUPS   Z0, (DI)
	ADDQ      $64, DI
	SUBQ      $16, CX
	JNZ       roundloop
	VZEROUPPER
	RET
`)
	// VPERMPS's indices gathering the four outputs of a reduced group (the
	// low lane of each 128-bit lane) into the low four lanes.
	f.Quads("tbgather", asmgen.Dwords(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)...)
	return f.Bytes()
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
