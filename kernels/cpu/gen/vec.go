package main

import (
	"fmt"

	"github.com/zrtdev/zrt/kernels/internal/asmgen"
)

// siluFile is silu_amd64.s: swigluAVX512.
func siluFile() []byte {
	f := asmgen.NewFile(generator)
	f.Raw(`
// func swigluAVX512(y, gate, up *float32, nb int)
//
// ggml_v_silu (ggml-cpu/vec.h, AVX-512 form) times u, instruction for
// instruction: e = ggml_v_expf(0 - x), silu = x / (1 + e). The |n| > 192
// fix-up is done without a branch (the same values as ggml's blend).`)
	f.Text("swigluAVX512", 0, 32)
	f.Args(asmgen.Arg{Name: "y", Reg: "DI"}, asmgen.Arg{Name: "gate", Reg: "SI"}, asmgen.Arg{Name: "up", Reg: "DX"}, asmgen.Arg{Name: "nb", Reg: "CX"})
	// The constants in Z16-Z28: faExpC's order but the abs mask last.
	consts := []expfConst{expR, expLog2e, expC1, expC2}
	consts = append(consts, expPoly...)
	consts = append(consts, expOne, expBound, expInf, expAbs)
	for i, c := range consts {
		f.Ins("VBROADCASTSS", fmt.Sprintf("silu_%s<>(SB)", c.name), z(16+i))
	}
	f.Raw(`
	VPXORD       Z29, Z29, Z29

siluloop:
	VMOVUPS      (SI), Z0
	VSUBPS       Z0, Z29, Z1         // x' = 0 - x
	VMOVAPS      Z16, Z2
	VFMADD231PS  Z17, Z1, Z2         // z = x'*log2e + r
	VSUBPS       Z16, Z2, Z3         // n = z - r
	VMOVAPS      Z1, Z4
	VFNMADD231PS Z18, Z3, Z4         // x' - n*c1
	VFNMADD231PS Z19, Z3, Z4         // b = that - n*c2
	VPANDD       Z28, Z3, Z5
	VCMPPS       $0x1e, Z26, Z5, K1  // d = |n| > 192 (GT_OQ)
	VMULPS       Z4, Z4, Z5          // u = b*b
	VMOVAPS      Z21, Z6
	VFMADD231PS  Z20, Z4, Z6         // p0*b + p1
	VMOVAPS      Z23, Z7
	VFMADD231PS  Z22, Z4, Z7         // p2*b + p3
	VFMADD231PS  Z6, Z5, Z7          // (p0*b+p1)*u + (p2*b+p3)
	VMOVAPS      Z25, Z8
	VFMADD231PS  Z24, Z4, Z8         // p4*b + 1
	VFMADD231PS  Z7, Z5, Z8          // j
	VSCALEFPS    Z3, Z8, Z9          // j * 2^n
	VCMPPS       $0x12, Z29, Z3, K2  // n <= 0 (LE_OQ)
	VMOVAPS      Z27, Z10
	VMOVAPS      Z29, K2, Z10        // alt = n <= 0 ? 0 : inf
	VMOVAPS      Z10, K1, Z9         // d ? alt : res
	VADDPS       Z25, Z9, Z9         // 1 + e
	VDIVPS       Z9, Z0, Z9          // x / (1 + e)
	VMULPS       (DX), Z9, Z9
	VMOVUPS      Z9, (DI)
	ADDQ         $64, SI
	ADDQ         $64, DX
	ADDQ         $64, DI
	DECQ         CX
	JNZ          siluloop
	VZEROUPPER
	RET
`)
	for _, c := range consts {
		f.P("DATA silu_%s<>+0(SB)/4, $0x%08x\nGLOBL silu_%s<>(SB), RODATA|NOPTR, $4", c.name, c.bits, c.name)
	}
	return f.Bytes()
}

// vecf32File is vecf32_amd64.s: ggml's F32 vector ops for the gated
// DeltaNet and the 16x16 transpose.
func vecf32File() []byte {
	f := asmgen.NewFile(generator)
	f.Raw(`
// func dotF32AVX512(x, y *float32, np int, out *[16]float32)
//
// ggml_vec_dot_f32's AVX-512 body over np elements (a multiple of 64):
// four 16-lane accumulators, sum[j] = fma(x, y, sum[j]) for each group of
// 64, then GGML_F32x16_REDUCE's folds (sum0 += sum2, sum1 += sum3,
// sum0 += sum1), stored to out for the final 16-lane reduction.`)
	f.Text("dotF32AVX512", 0, 32)
	f.Args(asmgen.Arg{Name: "x", Reg: "SI"}, asmgen.Arg{Name: "y", Reg: "DX"}, asmgen.Arg{Name: "np", Reg: "CX"}, asmgen.Arg{Name: "out", Reg: "DI"})
	f.Zero("VPXORD", asmgen.Regs("Z", 0, 1, 4)...)
	f.P("\ndotloop:")
	loads4(f, "VMOVUPS", "SI", 64, 4)
	group4(f, "VFMADD231PS", func(i int) []string { return []string{asmgen.Mem(64*i, "DX"), z(4 + i), z(i)} })
	f.Raw(`
	ADDQ        $256, SI
	ADDQ        $256, DX
	SUBQ        $64, CX
	JNZ         dotloop`)
	reduce4(f, "VADDPS")
	f.Raw(`
	VMOVUPS Z0, (DI)
	VZEROUPPER
	RET

// func madF32AVX512(y, x *float32, v float32, n int)
//
// y[i] = fma(x[i], v, y[i]) over n elements (a multiple of 16):
// ggml_vec_mad_f32, lane by lane.`)
	f.Text("madF32AVX512", 0, 32)
	f.Args(asmgen.Arg{Name: "y", Reg: "DI"}, asmgen.Arg{Name: "x", Reg: "SI"})
	f.Raw(`
	VBROADCASTSS v+16(FP), Z1
	MOVQ         n+24(FP), CX

madloop:
	VMOVUPS     (DI), Z0
	VFMADD231PS (SI), Z1, Z0
	VMOVUPS     Z0, (DI)
	ADDQ        $64, SI
	ADDQ        $64, DI
	SUBQ        $16, CX
	JNZ         madloop
	VZEROUPPER
	RET

// func scaleF32AVX512(y *float32, v float32, n int)
//
// y[i] *= v over n elements (a multiple of 16): ggml_vec_scale_f32.`)
	f.Text("scaleF32AVX512", 0, 24)
	f.Args(asmgen.Arg{Name: "y", Reg: "DI"})
	f.Raw(`
	VBROADCASTSS v+8(FP), Z1
	MOVQ         n+16(FP), CX

scaleloop:
	VMULPS  (DI), Z1, Z0
	VMOVUPS Z0, (DI)
	ADDQ    $64, DI
	SUBQ    $16, CX
	JNZ     scaleloop
	VZEROUPPER
	RET

// TRPS interleaves the 32-bit elements of rows A and B, lane by lane,
// into L (the first two of each 128-bit lane's four) and H (the last two).
#define TRPS(A, B, L, H) \
	VUNPCKLPS B, A, L \
	VUNPCKHPS B, A, H

// TRPD interleaves the 64-bit elements of TRPS's outputs for four rows
// (A, B from rows 0-1, C, D from rows 2-3) into O0-O3: lane L of Om then
// holds the four rows' element 4L+m.
#define TRPD(A, B, C, D, O0, O1, O2, O3) \
	VUNPCKLPD C, A, O0 \
	VUNPCKHPD C, A, O1 \
	VUNPCKLPD D, B, O2 \
	VUNPCKHPD D, B, O3

// TRLANES ends transposeF32x16 for the output rows m, m+4, m+8, m+12
// (o = 8m, their pointers' offset in the table at DI): B0-B3 hold, in
// each 128-bit lane L, the row 4L+m's columns 0-3, 4-7, 8-11 and 12-15,
// which two rounds of 128-bit shuffles gather into whole rows.
#define TRLANES(o, B0, B1, B2, B3) \
	VSHUFF32X4 $0x44, B1, B0, Z16 \
	VSHUFF32X4 $0xee, B1, B0, Z17 \
	VSHUFF32X4 $0x44, B3, B2, Z18 \
	VSHUFF32X4 $0xee, B3, B2, Z19 \`)
	// Output row m+4j is the imm-th 128-bit lane pick of (Z16, Z18) for
	// j = 0, 1 and of (Z17, Z19) for j = 2, 3.
	for j := 0; j < 4; j++ {
		imm := []string{"$0x88", "$0xdd"}[j%2]
		lo := z(16 + j/2)
		f.P("\tVSHUFF32X4 %s, %s, %s, Z20 \\", imm, z(18+j/2), lo)
		if j == 0 {
			f.P("\tMOVQ o(DI), BX \\")
		} else {
			f.P("\tMOVQ o+%d(DI), BX \\", 32*j)
		}
		sep := " \\"
		if j == 3 {
			sep = ""
		}
		f.P("\tVMOVUPS Z20, (BX)%s", sep)
	}
	f.Raw(`
// func transposeF32x16(dst *[16]*float32, src *float32, stride int)
//
// dst[i][j] = src[j*stride+i] for i, j < 16: a 16x16 block of a tile
// (rows j stride floats apart) stored as 16 rows, by interleaving 32-bit
// then 64-bit elements and then 128-bit lanes.`)
	f.Text("transposeF32x16", 0, 24)
	f.Args(asmgen.Arg{Name: "dst", Reg: "DI"}, asmgen.Arg{Name: "src", Reg: "SI"}, asmgen.Arg{Name: "stride", Reg: "AX"})
	f.Raw(`
	SHLQ $2, AX`)
	for r := 0; r < 16; r++ {
		if r > 0 {
			f.Ins("ADDQ", "AX", "SI")
		}
		f.Ins("VMOVUPS", "(SI)", z(r))
	}
	for p := 0; p < 8; p++ {
		f.P("\tTRPS(Z%d, Z%d, Z%d, Z%d)", 2*p, 2*p+1, 16+2*p, 17+2*p)
	}
	for q := 0; q < 4; q++ {
		in, out := 16+4*q, 4*q
		f.P("\tTRPD(Z%d, Z%d, Z%d, Z%d, Z%d, Z%d, Z%d, Z%d)", in, in+1, in+2, in+3, out, out+1, out+2, out+3)
	}
	for m := 0; m < 4; m++ {
		f.P("\tTRLANES(%d, Z%d, Z%d, Z%d, Z%d)", 8*m, m, m+4, m+8, m+12)
	}
	f.Ins("VZEROUPPER")
	f.Ins("RET")
	return f.Bytes()
}
