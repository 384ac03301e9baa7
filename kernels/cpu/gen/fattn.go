package main

import (
	"fmt"

	"github.com/zrtdev/zrt/kernels/internal/asmgen"
)

// fattnFile is fattn_amd64.s: the AVX-512 kernels of flash attention and
// expfs.
func fattnFile() []byte {
	f := asmgen.NewFile(generator)
	f.Raw(`
// AVX-512 kernels of flash attention; see fattn_amd64.go for the Go side
// and fattn.go for the arithmetic each one reproduces. Every kernel keeps
// ggml's operation order per output value, so the results are bitwise
// those of the pure-Go code.

// REDUCE16 leaves in the low lane of X0 GCC's _mm512_reduce_add_ps of Z0
// (halves added pairwise: 256, 128, 64 bits, then the last two lanes).
// Z0 and X1 are clobbered.`)
	f.Define("REDUCE16", func(f *asmgen.File) { reduce16(f, "VADDPS") })
	f.Raw(`
// F16RT rounds the float32 lanes of Z to F16 and back (exact values of
// the F16 accumulator kept in float32 registers); Y is scratch.
#define F16RT(Z, Y) \
	VCVTPS2PH $0, Z, Y \
	VCVTPH2PS Y, Z

// func faDotF16Keys(k *uint16, kstride int, q *float32, np, n int, out *float32, pf int, next *uint16)
//
// ggml_vec_dot_f16's groups of 64 for n keys kstride bytes apart: four
// 16-lane accumulators (F16 products are exact in float32, so the FMA is
// the add), folded as GGML_F32Cx16_REDUCE, then _mm512_reduce_add_ps. q
// is the F16 query already widened to float32. Each group's lines pf
// bytes on (the values the next pass reads) and at the same place from
// next on (the next page's keys) are prefetched.
TEXT ·faDotF16Keys(SB), NOSPLIT, $0-64`)
	f.Args(asmgen.Arg{Name: "k", Reg: "SI"}, asmgen.Arg{Name: "kstride", Reg: "R8"}, asmgen.Arg{Name: "q", Reg: "DI"},
		asmgen.Arg{Name: "np", Reg: "R9"}, asmgen.Arg{Name: "n", Reg: "CX"}, asmgen.Arg{Name: "out", Reg: "DX"},
		asmgen.Arg{Name: "pf", Reg: "R11"}, asmgen.Arg{Name: "next", Reg: "R12"})
	f.Raw(`
	SUBQ SI, R12
	SHRQ $6, R9

dkkey:`)
	f.Zero("VXORPS", asmgen.Regs("Z", 0, 1, 4)...)
	f.Raw(`
	MOVQ   SI, AX
	MOVQ   DI, BX
	MOVQ   R9, R10

dkgrp:`)
	for _, r := range []string{"R11", "R12"} {
		for _, off := range []int{0, 64} {
			f.Ins("PREFETCHT0", asmgen.Mem(off, "AX")+"("+r+"*1)")
		}
	}
	loads4(f, "VCVTPH2PS", "AX", 32, 4)
	group4(f, "VFMADD231PS", func(i int) []string { return []string{asmgen.Mem(64*i, "BX"), z(4 + i), z(i)} })
	f.Raw(`
	ADDQ        $128, AX
	ADDQ        $256, BX
	DECQ        R10
	JNZ         dkgrp
`)
	reduce4(f, "VADDPS")
	f.Raw(`
	REDUCE16
	VMOVSS X0, (DX)
	ADDQ   $4, DX
	ADDQ   R8, SI
	DECQ   CX
	JNZ    dkkey
	VZEROUPPER
	RET

// func faMadF16(acc *uint16, v *uint16, vstride int, coef *float32, n, hd int)
//
// For each of n keys (V rows vstride bytes apart) with coefficients
// (ms, vs) at coef: if ms != 1, acc = F16(acc*ms) (ggml_vec_scale_f16);
// then acc = F16(fma(v, vs, acc)) (ggml_vec_mad_f16). The accumulator is
// kept in float32 lanes between keys, rounded to F16 after every step.
// hd is a multiple of 16: groups of 64 columns, then of 16.
TEXT ·faMadF16(SB), NOSPLIT, $0-48`)
	madPrologue(f)
	madCols(f, 4, "mad1")
	madCols(f, 1, "maddone")
	f.Raw(`
maddone:
	VZEROUPPER
	RET

// func faMadF16x2(acc *uint16, accStride int, v *uint16, vstride int, coef *float32, n, hd int)
// func faMadF16x3(acc *uint16, accStride int, v *uint16, vstride int, coef *float32, n, hd int)
//
// faMadF16 for two or three query heads over the same value rows: head
// h's F16 accumulator at acc+h*accStride bytes and its coefficients at
// coef+h*faMadCoefStride bytes. Each value row is widened once for all
// the heads, whose accumulators are independent chains; every head's
// operations and their order are faMadF16's, so are its bits.`)
	for _, heads := range []int{2, 3} {
		f.Text(fmt.Sprintf("faMadF16x%d", heads), 0, 56)
		f.Args(asmgen.Arg{Name: "acc", Reg: "DI"}, asmgen.Arg{Name: "accStride", Reg: "R10"}, asmgen.Arg{Name: "v", Reg: "SI"},
			asmgen.Arg{Name: "vstride", Reg: "R8"}, asmgen.Arg{Name: "coef", Reg: "DX"}, asmgen.Arg{Name: "n", Reg: "R11"},
			asmgen.Arg{Name: "hd", Reg: "R9"})
		f.Ins("MOVL", "$0x3f800000", "AX")
		f.Ins("VMOVD", "AX", "X15")
		done := fmt.Sprintf("mh%ddone", heads)
		madColsHeads(f, heads, 4, fmt.Sprintf("mh%dc1", heads))
		madColsHeads(f, heads, 1, done)
		f.P("\n%s:", done)
		f.Raw(`
	VZEROUPPER
	RET`)
	}
	f.Raw(`
// func faMadQ8(acc *float32, v *byte, vstride int, coef *float32, n, hd int)
//
// faMadF16 for Q8_0 value rows and an F32 accumulator (VKQ32): for each
// of n keys (V rows vstride bytes apart, blocks of 32 int8s after an F16
// scale) with coefficients (ms, vs) at coef: if ms != 1, acc *= ms
// (ggml_vec_scale_f32); then acc = fma(float32(q)*d, vs, acc)
// (dequantize_row_q8_0, then ggml_vec_mad_f32). The accumulator of a
// column group stays in registers across the keys. hd is a multiple of
// 32: groups of two blocks, then of one.
TEXT ·faMadQ8(SB), NOSPLIT, $0-48`)
	madPrologue(f)
	madQ8Cols(f, 2, "q8mad1")
	madQ8Cols(f, 1, "q8maddone")
	f.Raw(`
q8maddone:
	VZEROUPPER
	RET

// func faRotate(h *float32, n int, x, out *float32)
//
// out = h·x for an n×n matrix h (rows n floats apart) and n values x, n
// a multiple of 16, as rotate computes it: per output one 16-lane FMA
// chain over the row, then _mm512_reduce_add_ps (REDUCE16).
TEXT ·faRotate(SB), NOSPLIT, $0-32`)
	f.Args(asmgen.Arg{Name: "h", Reg: "SI"}, asmgen.Arg{Name: "n", Reg: "CX"}, asmgen.Arg{Name: "x", Reg: "DX"},
		asmgen.Arg{Name: "out", Reg: "DI"})
	f.Raw(`
	MOVQ CX, R8

rotrow:
	VPXORD Z0, Z0, Z0
	MOVQ   DX, AX
	MOVQ   CX, R9

rotcol:
	VMOVUPS     (SI), Z2
	VFMADD231PS (AX), Z2, Z0
	ADDQ        $64, SI
	ADDQ        $64, AX
	SUBQ        $16, R9
	JNZ         rotcol
	REDUCE16
	VMOVSS      X0, (DI)
	ADDQ        $4, DI
	DECQ        R8
	JNZ         rotrow
	VZEROUPPER
	RET

// func faCvtRows(dst *float32, src *uint16, sstride, hd, n int)
//
// Converts n rows of hd halves (sstride bytes apart) to float32 rows
// packed hd apart. hd is a multiple of 16.`)
	f.Text("faCvtRows", 0, 40)
	f.Args(asmgen.Arg{Name: "dst", Reg: "DI"}, asmgen.Arg{Name: "src", Reg: "SI"}, asmgen.Arg{Name: "sstride", Reg: "R8"}, asmgen.Arg{Name: "hd", Reg: "R9"}, asmgen.Arg{Name: "n", Reg: "CX"})
	f.Raw(`
	SHRQ $4, R9

cvtrow:
	MOVQ SI, AX
	MOVQ R9, R10

cvtcol:
	VCVTPH2PS (AX), Z0
	VMOVUPS   Z0, (DI)
	ADDQ      $32, AX
	ADDQ      $64, DI
	DECQ      R10
	JNZ       cvtcol
	ADDQ      R8, SI
	DECQ      CX
	JNZ       cvtrow
	VZEROUPPER
	RET

// func faTransposeTile(dst, src *float32, hd int)
//
// dst[d*64+k] = src[k*hd+d] for 64 keys k and d < hd, by gathers of 16
// keys at a time.`)
	f.Text("faTransposeTile", 0, 24)
	f.Args(asmgen.Arg{Name: "dst", Reg: "DI"}, asmgen.Arg{Name: "src", Reg: "SI"}, asmgen.Arg{Name: "hd", Reg: "R9"})
	f.Raw(`
	VMOVDQU32    faIota<>(SB), Z31
	VPBROADCASTD R9, Z30
	VPMULLD      Z30, Z31, Z31 // lane l: l*hd
	MOVQ         R9, R10
	SHLQ         $6, R10       // 16 keys of hd floats, in bytes
	MOVQ         R9, CX

trd:
	MOVQ       SI, AX`)
	for i := 0; i < 4; i++ {
		if i > 0 {
			f.Ins("ADDQ", "R10", "AX")
		}
		k := fmt.Sprintf("K%d", i+1)
		f.Ins("KXNORW", k, k, k)
		f.Ins("VGATHERDPS", "(AX)(Z31*4)", k, z(i))
	}
	stores4(f, "VMOVUPS", "DI", 64, 0)
	f.Raw(`
	ADDQ       $4, SI
	ADDQ       $256, DI
	DECQ       CX
	JNZ        trd
	VZEROUPPER
	RET
`)
	tileScores(f, tileOne)
	f.Raw(`
// VEXPF is ggml_v_expf for AVX-512 on Z0 (result in Z0), with its
// constants in Z14 (+Inf) and Z16-Z27 (see faTileAcc): z = x*log2e + r,
// n = z - r, b = (x - n*c1) - n*c2, u = b*b, j = ((c5*b + c4)*u +
// (c3*b + c2))*u + (c1*b + 1), scalef(j, n); where |n| > 192 the result is
// 0 (n <= 0) or +Inf. Z1-Z6 and K5-K7 are clobbered.
#define VEXPF \
	VMOVAPS      Z16, Z1 \
	VFMADD231PS  Z17, Z0, Z1 \
	VSUBPS       Z16, Z1, Z1 \
	VMOVAPS      Z0, Z2 \
	VFNMADD231PS Z18, Z1, Z2 \
	VFNMADD231PS Z19, Z1, Z2 \
	VMULPS       Z2, Z2, Z3 \
	VMOVAPS      Z21, Z4 \
	VFMADD231PS  Z20, Z2, Z4 \
	VMOVAPS      Z23, Z5 \
	VFMADD231PS  Z22, Z2, Z5 \
	VMOVAPS      Z25, Z6 \
	VFMADD231PS  Z24, Z2, Z6 \
	VFMADD231PS  Z3, Z4, Z5 \
	VFMADD231PS  Z3, Z5, Z6 \
	VANDPS       Z26, Z1, Z2 \
	VCMPPS       $0x1e, Z27, Z2, K5 \
	VSCALEFPS    Z1, Z6, Z0 \
	VXORPS       Z3, Z3, Z3 \
	VCMPPS       $0x12, Z3, Z1, K5, K6 \
	VCMPPS       $0x1e, Z3, Z1, K5, K7 \
	VMOVAPS      Z3, K6, Z0 \
	VMOVAPS      Z14, K7, Z0
`)
	tileAcc(f, tileOne)
	f.Raw(`

// ggml_v_expf's constants: r, log2e, the two ln 2 parts, the polynomial
// (c5, c4, c3, c2, c1, 1), the abs mask, the saturation bound 192 and +Inf.`)
	consts := expfOrder()
	for i, c := range consts {
		f.P("DATA faExpC<>+%d(SB)/4, $0x%08x", 4*i, c.bits)
	}
	f.P("GLOBL faExpC<>(SB), RODATA|NOPTR, $%d\n", 4*len(consts))
	f.P("DATA faNegInf<>+0(SB)/4, $0xff800000\nGLOBL faNegInf<>(SB), RODATA|NOPTR, $4\n")
	iota := make([]uint32, 64)
	for i := range iota {
		iota[i] = uint32(i)
	}
	f.P("// faIota: the dwords 0..63, lane numbers.")
	f.Quads("faIota", asmgen.Dwords(iota...)...)
	expfs(f)
	faCoefs(f)
	tileScores(f, tilePair)
	tileAcc(f, tilePair)
	for heads := 1; heads <= faDotMaxHeads; heads++ {
		faDotKeysHeads(f, heads)
	}
	return f.Bytes()
}

// reduce4 folds four 16-lane accumulators Z0-Z3 into Z0 with op, as
// GGML_F32x16_REDUCE does: (Z0 op Z2) op (Z1 op Z3).
func reduce4(f *asmgen.File, op string) {
	f.P("")
	f.Ins(op, "Z2", "Z0", "Z0")
	f.Ins(op, "Z3", "Z1", "Z1")
	f.Ins(op, "Z1", "Z0", "Z0")
}

// reduce16 folds the sixteen lanes of Z0 to its low lane with op, the
// halves combined pairwise (_mm512_reduce_add_ps's order), through Y1/X1.
func reduce16(f *asmgen.File, op string) {
	f.Ins("VEXTRACTF64X4", "$1", "Z0", "Y1")
	f.Ins(op, "Y1", "Y0", "Y0")
	f.Fold(op, "Y0", "X0", "X1")
}

// madCols writes faMadF16's loop over column groups of 16n halves (n = 4
// or 1), jumping to next once fewer than 16n columns are left: per group,
// the accumulator in Z0.. across all the keys, scaled by ms when it is
// not 1, rounded to F16 after every step.
func madCols(f *asmgen.File, n int, next string) {
	l := fmt.Sprintf("mad%d", n)
	f.P("\n%s:", l)
	f.Ins("CMPQ", "R9", fmt.Sprintf("$%d", 16*n))
	f.Ins("JLT", next)
	for i := 0; i < n; i++ {
		f.Ins("VCVTPH2PS", asmgen.Mem(32*i, "DI"), z(i))
	}
	f.Raw(`
	MOVQ      SI, AX
	MOVQ      DX, BX
	MOVQ      R11, CX`)
	f.P("\n%skey:", l)
	f.Ins("VMOVSS", "(BX)", "X4")
	f.Ins("VUCOMISS", "X15", "X4")
	f.Ins("JNE", l+"scale")
	f.P("\n%smad:", l)
	f.Ins("VBROADCASTSS", "4(BX)", "Z5")
	for i := 0; i < n; i++ {
		f.Ins("VCVTPH2PS", asmgen.Mem(32*i, "AX"), z(6+i))
	}
	for i := 0; i < n; i++ {
		f.Ins("VFMADD231PS", "Z5", z(6+i), z(i))
	}
	f16rt(f, n)
	f.Raw(`
	ADDQ         R8, AX
	ADDQ         $8, BX
	DECQ         CX`)
	f.Ins("JNZ", l+"key")
	f.P("")
	for i := 0; i < n; i++ {
		f.Ins("VCVTPS2PH", "$0", z(i), asmgen.Mem(32*i, "DI"))
	}
	f.Ins("ADDQ", fmt.Sprintf("$%d", 32*n), "DI")
	f.Ins("ADDQ", fmt.Sprintf("$%d", 32*n), "SI")
	f.Ins("SUBQ", fmt.Sprintf("$%d", 16*n), "R9")
	f.Ins("JMP", l)
	f.P("\n%sscale:", l)
	f.Ins("VBROADCASTSS", "X4", "Z4")
	for i := 0; i < n; i++ {
		f.Ins("VMULPS", "Z4", z(i), z(i))
	}
	f16rt(f, n)
	f.Ins("JMP", l+"mad")
}

// f16rt rounds the accumulators Z0..Z(n-1) to F16 and back.
func f16rt(f *asmgen.File, n int) {
	for i := 0; i < n; i++ {
		f.P("\tF16RT(Z%d, Y%d)", i, 16+i)
	}
}

// expfs writes the expfs kernel and its constants.
func expfs(f *asmgen.File) {
	f.Raw(`
// expf's constants (expf.go): the clamp bounds, log2 e, the rounding
// constant, ln 2 in two parts, and the exponent bias.`)
	for i, c := range []struct {
		v       uint64
		comment string
	}{
		{0xc05b800000000000, "-110"},
		{0x4059000000000000, "100"},
		{0x3ff71547652b82fe, "expLog2E"},
		{0x4338000000000000, "expRound"},
		{0x3fe62e42fefa39ef, "expLn2Hi"},
		{0x3c7abc9e3b39803f, "expLn2Lo"},
		{1023, "the exponent bias"},
	} {
		f.P("DATA expk<>+%d(SB)/8, $0x%016x // %s", 8*i, c.v, c.comment)
	}
	f.Raw(`GLOBL expk<>(SB), RODATA|NOPTR, $56

// EXPTAYLOR is one Horner step of expf's series: P = P*R + expTaylor[k].
#define EXPTAYLOR(k) VFMADD213PD.BCST ·expTaylor+8*k(SB), Z4, Z5

// func expfs(x *float32, n int)
//
// expf in place on n floats, n a multiple of 8, eight float64 lanes at a
// time with expf's operations in its order (min and max pick x when it is
// NaN, as Go's min and max do).`)
	f.Text("expfs", 0, 16)
	f.Args(asmgen.Arg{Name: "x", Reg: "DI"}, asmgen.Arg{Name: "n", Reg: "CX"})
	f.Raw(`
	SHRQ         $3, CX
	JZ           expdone`)
	for i := 0; i < 7; i++ {
		f.Ins("VBROADCASTSD", fmt.Sprintf("expk<>+%d(SB)", 8*i), z(20+i))
	}
	f.Raw(`
	VBROADCASTSD ·expTaylor+0(SB), Z27

exploop:
	VCVTPS2PD   (DI), Z0
	VMINPD      Z0, Z21, Z1
	VMAXPD      Z1, Z20, Z1
	VMULPD      Z22, Z1, Z2
	VADDPD      Z23, Z2, Z2
	VSUBPD      Z23, Z2, Z3
	VMOVAPD     Z1, Z4
	VFNMADD231PD Z24, Z3, Z4
	VFNMADD231PD Z25, Z3, Z4
	VMOVAPD     Z27, Z5`)
	for k := 1; k <= 13; k++ {
		f.P("\tEXPTAYLOR(%d)", k)
	}
	f.Raw(`
	VPADDQ      Z26, Z2, Z6
	VPSLLQ      $52, Z6, Z6
	VMULPD      Z6, Z5, Z5
	VCVTPD2PS   Z5, Y5
	VMOVUPS     Y5, (DI)
	ADDQ        $32, DI
	DECQ        CX
	JNZ         exploop

expdone:
	VZEROUPPER
	RET`)
}

// madQ8Cols writes faMadQ8's loop over column groups of nb Q8_0 blocks
// (32nb columns, nb = 2 or 1), jumping to next once fewer are left: per
// group, the accumulator in Z0..Z(2nb-1) across all the keys, scaled by
// ms when it is not 1; each block's int8s are widened to float32 and
// multiplied by its scale (one rounding, as dequantize_row_q8_0) before
// the FMA.
func madQ8Cols(f *asmgen.File, nb int, next string) {
	l := fmt.Sprintf("q8mad%d", nb)
	f.P("\n%s:", l)
	f.Ins("CMPQ", "R9", fmt.Sprintf("$%d", 32*nb))
	f.Ins("JLT", next)
	for i := 0; i < 2*nb; i++ {
		f.Ins("VMOVUPS", asmgen.Mem(64*i, "DI"), z(i))
	}
	f.Raw(`
	MOVQ      SI, AX
	MOVQ      DX, BX
	MOVQ      R11, CX`)
	f.P("\n%skey:", l)
	f.Ins("VMOVSS", "(BX)", "X4")
	f.Ins("VUCOMISS", "X15", "X4")
	f.Ins("JNE", l+"scale")
	f.P("\n%smad:", l)
	f.Ins("VBROADCASTSS", "4(BX)", "Z5")
	for b := 0; b < nb; b++ {
		f.Ins("VPBROADCASTW", asmgen.Mem(34*b, "AX"), "Y12")
		f.Ins("VCVTPH2PS", "Y12", "Z12")
		for h := 0; h < 2; h++ {
			r := z(6 + 2*b + h)
			f.Ins("VPMOVSXBD", asmgen.Mem(34*b+2+16*h, "AX"), r)
			f.Ins("VCVTDQ2PS", r, r)
			f.Ins("VMULPS", "Z12", r, r)
		}
	}
	for i := 0; i < 2*nb; i++ {
		f.Ins("VFMADD231PS", "Z5", z(6+i), z(i))
	}
	f.Raw(`
	ADDQ         R8, AX
	ADDQ         $8, BX
	DECQ         CX`)
	f.Ins("JNZ", l+"key")
	f.P("")
	for i := 0; i < 2*nb; i++ {
		f.Ins("VMOVUPS", z(i), asmgen.Mem(64*i, "DI"))
	}
	f.Ins("ADDQ", fmt.Sprintf("$%d", 128*nb), "DI")
	f.Ins("ADDQ", fmt.Sprintf("$%d", 34*nb), "SI")
	f.Ins("SUBQ", fmt.Sprintf("$%d", 32*nb), "R9")
	f.Ins("JMP", l)
	f.P("\n%sscale:", l)
	f.Ins("VBROADCASTSS", "X4", "Z4")
	for i := 0; i < 2*nb; i++ {
		f.Ins("VMULPS", "Z4", z(i), z(i))
	}
	f.Ins("JMP", l+"mad")
}

// madPrologue loads the arguments the value-accumulating kernels (faMadF16,
// faMadQ8) share, and 1.0 into X15 for the "ms != 1" test.
func madPrologue(f *asmgen.File) {
	f.Args(asmgen.Arg{Name: "acc", Reg: "DI"}, asmgen.Arg{Name: "v", Reg: "SI"}, asmgen.Arg{Name: "vstride", Reg: "R8"},
		asmgen.Arg{Name: "coef", Reg: "DX"}, asmgen.Arg{Name: "n", Reg: "R11"}, asmgen.Arg{Name: "hd", Reg: "R9"})
	f.Ins("MOVL", "$0x3f800000", "AX")
	f.Ins("VMOVD", "AX", "X15")
}

// madCoefStride is how far apart, in bytes, faMadF16x2/x3 find the
// heads' coefficient arrays: 2 floats a key of a faGroupTile-key tile
// (kernels/cpu's faMadCoefStride).
const madCoefStride = 2 * 256 * 4

// madColsHeads writes faMadF16xH's loop over column groups of 16n halves
// (n = 4 or 1) for heads heads, jumping to next once fewer than 16n
// columns are left: per group, head h's accumulator in Z(n*h).., the
// value row widened once into Z16.. for all of them; per key each head
// is scaled by its ms when that is not 1, then takes its value times vs,
// rounded to F16 after every step, as madCols does for one head.
func madColsHeads(f *asmgen.File, heads, n int, next string) {
	l := fmt.Sprintf("mh%dc%d", heads, n)
	ptr := []string{"DI", "R12", "R13"}
	f.P("\n%s:", l)
	f.Ins("CMPQ", "R9", fmt.Sprintf("$%d", 16*n))
	f.Ins("JLT", next)
	f.Ins("LEAQ", "(DI)(R10*1)", "R12")
	f.Ins("LEAQ", "(DI)(R10*2)", "R13")
	for h := 0; h < heads; h++ {
		for i := 0; i < n; i++ {
			f.Ins("VCVTPH2PS", asmgen.Mem(32*i, ptr[h]), z(n*h+i))
		}
	}
	f.Raw(`
	MOVQ      SI, AX
	MOVQ      DX, BX
	MOVQ      R11, CX`)
	f.P("\n%skey:", l)
	for h := 0; h < heads; h++ {
		f.Ins("VMOVSS", asmgen.Mem(madCoefStride*h, "BX"), "X22")
		f.Ins("VUCOMISS", "X15", "X22")
		f.Ins("JNE", fmt.Sprintf("%sscale%d", l, h))
		f.P("\n%smad%d:", l, h)
	}
	for i := 0; i < n; i++ {
		f.Ins("VCVTPH2PS", asmgen.Mem(32*i, "AX"), z(16+i))
	}
	for h := 0; h < heads; h++ {
		f.Ins("VBROADCASTSS", asmgen.Mem(madCoefStride*h+4, "BX"), "Z20")
		for i := 0; i < n; i++ {
			f.Ins("VFMADD231PS", "Z20", z(16+i), z(n*h+i))
		}
		for i := 0; i < n; i++ {
			f.P("\tF16RT(Z%d, Y%d)", n*h+i, 24+(n*h+i)%8)
		}
	}
	f.Raw(`
	ADDQ         R8, AX
	ADDQ         $8, BX
	DECQ         CX`)
	f.Ins("JNZ", l+"key")
	f.P("")
	for h := 0; h < heads; h++ {
		for i := 0; i < n; i++ {
			f.Ins("VCVTPS2PH", "$0", z(n*h+i), asmgen.Mem(32*i, ptr[h]))
		}
	}
	f.Ins("ADDQ", fmt.Sprintf("$%d", 32*n), "DI")
	f.Ins("ADDQ", fmt.Sprintf("$%d", 32*n), "SI")
	f.Ins("SUBQ", fmt.Sprintf("$%d", 16*n), "R9")
	f.Ins("JMP", l)
	for h := 0; h < heads; h++ {
		f.P("\n%sscale%d:", l, h)
		f.Ins("VBROADCASTSS", "X22", "Z21")
		for i := 0; i < n; i++ {
			f.Ins("VMULPS", "Z21", z(n*h+i), z(n*h+i))
		}
		for i := 0; i < n; i++ {
			f.P("\tF16RT(Z%d, Y%d)", n*h+i, 24+(n*h+i)%8)
		}
		f.Ins("JMP", fmt.Sprintf("%smad%d", l, h))
	}
}

// faCoefs writes the faCoefs kernel: onlineCoefs for softcap-free
// scores, sixteen keys a block. A block's scaled scores take their
// running maximum by a prefix scan across the lanes (max is exact, so
// the scan gives the sequential loop's values), the keys that raise it
// (score > the maximum before it) are a mask, each key's argument is
// the sequential loop's subtraction, the exponentials are expf's
// float64 evaluation (expfs) in two halves of eight lanes, and (ms, vs)
// are selected by the mask and interleaved into coef. The sum S stays
// sequential: a block without a new maximum adds its vs in order
// (fma32(S, 1, vs) rounds S + vs once, as VADDSS does), one with a new
// maximum takes every key through expf's float64 FMA as fma32 does.
// Scores are numbers: with a NaN among them the scan's maximum may
// differ from the loop's (which skips a NaN only where it meets it).
func faCoefs(f *asmgen.File) {
	f.Raw(`
// func faCoefs(sc, coef *float32, n int, st *[3]float32)
//
// onlineCoefs (without soft-capping) over 16n raw dot products sc:
// st holds the running maximum M, the sum S (both updated) and the
// scale; coef receives each key's (ms, vs). sc is left as it was.`)
	f.Text("faCoefs", 0, 32)
	f.Args(asmgen.Arg{Name: "sc", Reg: "SI"}, asmgen.Arg{Name: "coef", Reg: "DI"}, asmgen.Arg{Name: "n", Reg: "CX"},
		asmgen.Arg{Name: "st", Reg: "DX"})
	f.Raw(`
	VBROADCASTSS (DX), Z30  // M
	VMOVSS       4(DX), X29 // S
	VBROADCASTSS 8(DX), Z31 // scale
	VBROADCASTSS faNegInf<>(SB), Z28
	MOVL         $0x3f800000, AX
	VPBROADCASTD AX, Z27
	VMOVDQU32    faCoefLo<>(SB), Z17
	VMOVDQU32    faCoefHi<>(SB), Z18
	MOVL         $15, AX
	VPBROADCASTD AX, Z16`)
	for i := 0; i < 7; i++ {
		f.Ins("VBROADCASTSD", fmt.Sprintf("expk<>+%d(SB)", 8*i), z(20+i))
	}
	f.Raw(`
	VBROADCASTSD ·expTaylor+0(SB), Z19

fcblock:
	VMULPS  (SI), Z31, Z0 // x: the scaled scores
	VMOVAPS Z0, Z1`)
	f.P("\t// Z1: the inclusive prefix maximum of the block's lanes.")
	for _, k := range []int{1, 2, 4, 8} {
		f.Ins("VALIGND", fmt.Sprintf("$%d", 16-k), "Z28", "Z1", "Z2")
		f.Ins("VMAXPS", "Z2", "Z1", "Z1")
	}
	f.Raw(`
	// Z3: each key's maximum before it (M for the first), then M takes
	// the block's.
	VALIGND $15, Z30, Z1, Z3
	VMAXPS  Z30, Z3, Z3
	VPERMPS Z1, Z16, Z4
	VMAXPS  Z30, Z4, Z30 // on a tie M stays, as the loop keeps it
	// K1: the keys that raise the maximum; their argument is M - x,
	// the others' x - M.
	VCMPPS  $0x1e, Z3, Z0, K1
	VSUBPS  Z3, Z0, Z5
	VSUBPS  Z0, Z3, K1, Z5
	VCVTPS2PD     Y5, Z6
	VEXTRACTF64X4 $1, Z5, Y11
	VCVTPS2PD     Y11, Z11`)
	// expf's float64 steps for both halves, interleaved: x, t, n, r, p in
	// Z6-Z10 and Z11-Z15.
	half := func(op string, args func(b int) []string) {
		for _, b := range []int{6, 11} {
			f.Ins(op, args(b)...)
		}
	}
	half("VMINPD", func(b int) []string { return []string{z(b), "Z21", z(b + 2)} })
	half("VMAXPD", func(b int) []string { return []string{z(b + 2), "Z20", z(b)} })
	half("VMULPD", func(b int) []string { return []string{"Z22", z(b), z(b + 1)} })
	half("VADDPD", func(b int) []string { return []string{"Z23", z(b + 1), z(b + 1)} })
	half("VSUBPD", func(b int) []string { return []string{"Z23", z(b + 1), z(b + 2)} })
	half("VMOVAPD", func(b int) []string { return []string{z(b), z(b + 3)} })
	half("VFNMADD231PD", func(b int) []string { return []string{"Z24", z(b + 2), z(b + 3)} })
	half("VFNMADD231PD", func(b int) []string { return []string{"Z25", z(b + 2), z(b + 3)} })
	half("VMOVAPD", func(b int) []string { return []string{"Z19", z(b + 4)} })
	for k := 1; k <= 13; k++ {
		half("VFMADD213PD.BCST", func(b int) []string {
			return []string{fmt.Sprintf("·expTaylor+%d(SB)", 8*k), z(b + 3), z(b + 4)}
		})
	}
	half("VPADDQ", func(b int) []string { return []string{"Z26", z(b + 1), z(b + 1)} })
	half("VPSLLQ", func(b int) []string { return []string{"$52", z(b + 1), z(b + 1)} })
	half("VMULPD", func(b int) []string { return []string{z(b + 1), z(b + 4), z(b + 4)} })
	half("VCVTPD2PS", func(b int) []string { return []string{z(b + 4), asmgen.Reg("Y", b+4)} })
	f.Raw(`
	VINSERTF64X4 $1, Y15, Z10, Z0 // the block's exponentials
	// ms = e and vs = 1 where the maximum rose, else ms = 1 and vs = e;
	// interleaved as (ms, vs) pairs.
	VMOVAPS   Z27, Z1
	VMOVAPS   Z0, K1, Z1
	VMOVAPS   Z0, Z2
	VMOVAPS   Z27, K1, Z2
	VMOVAPS   Z17, Z3
	VPERMI2PS Z2, Z1, Z3
	VMOVAPS   Z18, Z4
	VPERMI2PS Z2, Z1, Z4
	VMOVUPS   Z3, (DI)
	VMOVUPS   Z4, 64(DI)
	KMOVW     K1, AX
	TESTL     AX, AX
	JNZ       fcslow`)
	for j := 0; j < 16; j++ {
		f.Ins("VADDSS", asmgen.Mem(8*j+4, "DI"), "X29", "X29")
	}
	f.Raw(`
fcnext:
	ADDQ $64, SI
	ADDQ $128, DI
	DECQ CX
	JNZ  fcblock
	VMOVSS X30, (DX)
	VMOVSS X29, 4(DX)
	VZEROUPPER
	RET

fcslow:`)
	f.P("\t// S = float32(fma(float64(S), float64(ms), float64(vs))), key by key.")
	for j := 0; j < 16; j++ {
		f.Ins("VCVTSS2SD", "X29", "X29", "X5")
		f.Ins("VCVTSS2SD", asmgen.Mem(8*j, "DI"), "X4", "X4")
		f.Ins("VCVTSS2SD", asmgen.Mem(8*j+4, "DI"), "X6", "X6")
		f.Ins("VFMADD231SD", "X4", "X5", "X6")
		f.Ins("VCVTSD2SS", "X6", "X6", "X29")
	}
	f.Ins("JMP", "fcnext")
	lo, hi := make([]uint32, 16), make([]uint32, 16)
	for j := 0; j < 8; j++ {
		lo[2*j], lo[2*j+1] = uint32(j), uint32(16+j)
		hi[2*j], hi[2*j+1] = uint32(8+j), uint32(24+j)
	}
	f.P("\n// faCoefLo, faCoefHi: VPERMI2PS's indexes that interleave ms (0-15)\n// and vs (16-31) into (ms, vs) pairs, keys 0-7 and 8-15.")
	f.Quads("faCoefLo", asmgen.Dwords(lo...)...)
	f.Quads("faCoefHi", asmgen.Dwords(hi...)...)
}

// faDotMaxHeads is the most query heads faDotF16KeysH takes at once
// (kernels/cpu's faDotMaxHeads): four accumulators a head and the four
// widened key vectors fill the 32 registers at six.
const faDotMaxHeads = 6

// faDotKeysHeads writes faDotF16KeysH for heads query heads: each key
// row's groups of 64 halves are widened once and multiplied into every
// head's four accumulators (ggml_vec_dot_f16's, the FMA into a zeroed
// or running accumulator as faDotF16Keys does), which GGML_F32Cx16_REDUCE
// folds to one vector a head, stored for the butterfly. The butterfly
// then reduces a head's 16 vectors together with the adds of
// _mm512_reduce_add_ps (lanes l and l+8, then l and l+4, then 0+2 and
// 1+3, then the two), two keys an add: each key's sums and their order
// are REDUCE16's, so are its bits.
func faDotKeysHeads(f *asmgen.File, heads int) {
	name := fmt.Sprintf("faDotF16KeysH%d", heads)
	l := func(s string) string { return fmt.Sprintf("dh%d%s", heads, s) }
	f.P("")
	f.P("// func %s(k *uint16, kstride int, q *float32, np, n int, out *float32, ostride, pf int, next *uint16, scratch *float32)", name)
	f.Raw(`//
// The dot products of up to 16 key rows (n, kstride bytes apart) with
// the query heads' float32 queries packed by groups of 64 (group g of
// head h at q + (g*heads + h)*256 bytes), over np columns: head h's n
// scores go to out + h*ostride bytes. Each row's lines pf bytes on and
// at the same place from next on are prefetched. scratch holds 1 KiB a
// head.`)
	f.Text(name, 0, 80)
	f.Args(asmgen.Arg{Name: "k", Reg: "SI"}, asmgen.Arg{Name: "kstride", Reg: "R8"}, asmgen.Arg{Name: "q", Reg: "DI"},
		asmgen.Arg{Name: "np", Reg: "R9"}, asmgen.Arg{}, asmgen.Arg{}, asmgen.Arg{},
		asmgen.Arg{Name: "pf", Reg: "R11"}, asmgen.Arg{Name: "next", Reg: "R12"}, asmgen.Arg{Name: "scratch", Reg: "BX"})
	f.Raw(`
	SUBQ SI, R12
	SHRQ $6, R9
	XORQ DX, DX // the key`)
	f.P("\n%s:", l("key"))
	for h := 0; h < heads; h++ {
		f.Zero("VPXORD", asmgen.Regs("Z", 4*h, 1, 4)...)
	}
	f.Raw(`
	MOVQ SI, AX
	MOVQ DI, R13
	MOVQ R9, R10`)
	f.P("\n%s:", l("grp"))
	for _, r := range []string{"R11", "R12"} {
		for _, off := range []int{0, 64} {
			f.Ins("PREFETCHT0", asmgen.Mem(off, "AX")+"("+r+"*1)")
		}
	}
	loads4(f, "VCVTPH2PS", "AX", 32, 28)
	for h := 0; h < heads; h++ {
		group4(f, "VFMADD231PS", func(i int) []string { return []string{asmgen.Mem(256*h+64*i, "R13"), z(28 + i), z(4*h + i)} })
	}
	f.Ins("ADDQ", "$128", "AX")
	f.Ins("ADDQ", fmt.Sprintf("$%d", 256*heads), "R13")
	f.Ins("DECQ", "R10")
	f.Ins("JNZ", l("grp"))
	f.P("")
	for h := 0; h < heads; h++ {
		f.Ins("VADDPS", z(4*h+2), z(4*h), z(4*h))
		f.Ins("VADDPS", z(4*h+3), z(4*h+1), z(4*h+1))
		f.Ins("VADDPS", z(4*h+1), z(4*h), z(4*h))
	}
	f.Raw(`
	// Key j's vector goes to slot 4*(j%4) + j/4 of its head's 16, where
	// the butterfly leaves its sum in lane j.
	MOVQ DX, AX
	ANDQ $3, AX
	SHLQ $2, AX
	MOVQ DX, R10
	SHRQ $2, R10
	ORQ  R10, AX
	SHLQ $6, AX`)
	for h := 0; h < heads; h++ {
		f.Ins("VMOVUPS", z(4*h), fmt.Sprintf("%d(BX)(AX*1)", 1024*h))
	}
	f.Ins("ADDQ", "R8", "SI")
	f.Ins("INCQ", "DX")
	f.Ins("CMPQ", "DX", "n+32(FP)")
	f.Ins("JLT", l("key"))
	f.Raw(`
	MOVQ  out+40(FP), DX
	MOVQ  ostride+48(FP), R10
	MOVQ  n+32(FP), CX
	MOVL  $1, AX
	SHLL  CX, AX
	DECL  AX
	KMOVW AX, K1`)
	for h := 0; h < heads; h++ {
		base := 1024 * h
		for a := 0; a < 8; a++ {
			f.Ins("VMOVUPS", asmgen.Mem(base+128*a, "BX"), "Z16")
			f.Ins("VMOVUPS", asmgen.Mem(base+128*a+64, "BX"), "Z17")
			f.Ins("VSHUFF64X2", "$0x44", "Z17", "Z16", "Z18")
			f.Ins("VSHUFF64X2", "$0xee", "Z17", "Z16", "Z19")
			f.Ins("VADDPS", "Z19", "Z18", z(a))
		}
		for b := 0; b < 4; b++ {
			f.Ins("VSHUFF64X2", "$0x88", z(2*b+1), z(2*b), "Z18")
			f.Ins("VSHUFF64X2", "$0xdd", z(2*b+1), z(2*b), "Z19")
			f.Ins("VADDPS", "Z19", "Z18", z(8+b))
		}
		for c := 0; c < 2; c++ {
			f.Ins("VUNPCKLPD", z(9+2*c), z(8+2*c), "Z18")
			f.Ins("VUNPCKHPD", z(9+2*c), z(8+2*c), "Z19")
			f.Ins("VADDPS", "Z19", "Z18", z(12+c))
		}
		f.Ins("VSHUFPS", "$0x88", "Z13", "Z12", "Z18")
		f.Ins("VSHUFPS", "$0xdd", "Z13", "Z12", "Z19")
		f.Ins("VADDPS", "Z19", "Z18", "Z20")
		f.Ins("VMOVUPS", "Z20", "K1", "(DX)")
		if h < heads-1 {
			f.Ins("ADDQ", "R10", "DX")
		}
	}
	f.Raw(`
	VZEROUPPER
	RET`)
}

// tileKernel is a tiled-path kernel's frame for its query vectors (one,
// or two that see the same keys, whose vectors each get the one-vector
// kernel's arithmetic): its name, its Go declaration and what it does, its
// argument bytes, and per vector the operands of its arguments and
// results (query or scores, scores' output, running maximum, rescale
// factor, accumulator, and the result: the maximum or the sum); then the
// shared ones.
type tileKernel struct {
	scores, acc           string // the two kernels' names
	scoresDoc, accDoc     string
	scoresSize, accSize   int
	q, out, max           []string // faTileScores*'s
	kq, m, ms, accum, sum []string // faTileAcc*'s
	kt, hd, scale, nvalid string   // faTileScores*'s
	vt, accHd, accNvalid  string   // faTileAcc*'s
	label                 string   // the kernels' label prefix
}

var tileOne = tileKernel{
	scores: "faTileScores", acc: "faTileAcc", label: "t",
	scoresDoc: `// func faTileScores(q, kt *float32, hd int, scale float32, nvalid int, out *float32) float32
//
// The tiled path's scores of one query row against a tile of 64 keys
// stored transposed (kt[d*64+k]): per key an FMA chain over d from 0, then
// times scale; keys from nvalid on are set to -Inf. Returns the maximum.`,
	accDoc: `// func faTileAcc(kq *float32, m, ms float32, acc, vt *float32, hd, nvalid int) float64
//
// The tiled path's update for one query row and tile: kq[k] =
// ggml_v_expf(kq[k] - m) for the 64 keys, summed per 16 lanes
// (_mm512_reduce_add_ps) into a float64 total, which is returned; then
// acc = acc*ms and acc += p_k * V_k as FMA chains over the first nvalid
// keys (vt holds the tile's values as float32 rows of hd).`,
	scoresSize: 52, accSize: 56,
	q: []string{"q+0(FP)"}, out: []string{"out+40(FP)"}, max: []string{"ret+48(FP)"},
	kt: "kt+8(FP)", hd: "hd+16(FP)", scale: "scale+24(FP)", nvalid: "nvalid+32(FP)",
	kq: []string{"kq+0(FP)"}, m: []string{"m+8(FP)"}, ms: []string{"ms+12(FP)"}, accum: []string{"acc+16(FP)"}, sum: []string{"ret+48(FP)"},
	vt: "vt+24(FP)", accHd: "hd+32(FP)", accNvalid: "nvalid+40(FP)",
}

var tilePair = tileKernel{
	scores: "faTileScores2", acc: "faTileAcc2", label: "t2",
	scoresDoc: `// func faTileScores2(q0, q1, kt *float32, hd int, scale float32, nvalid int, out0, out1 *float32) (m0, m1 float32)
//
// faTileScores of q0 into out0 and of q1 into out1 over one pass of kt:
// the two maxima.`,
	accDoc: `// func faTileAcc2(kq0, kq1 *float32, m0, m1, ms0, ms1 float32, acc0, acc1, vt *float32, hd, nvalid int) (s0, s1 float64)
//
// faTileAcc of (kq0, m0, ms0, acc0) and (kq1, m1, ms1, acc1) against the
// same values vt, each loaded once: the two sums.`,
	scoresSize: 72, accSize: 88,
	q: []string{"q0+0(FP)", "q1+8(FP)"}, out: []string{"out0+48(FP)", "out1+56(FP)"}, max: []string{"m0+64(FP)", "m1+68(FP)"},
	kt: "kt+16(FP)", hd: "hd+24(FP)", scale: "scale+32(FP)", nvalid: "nvalid+40(FP)",
	kq: []string{"kq0+0(FP)", "kq1+8(FP)"}, m: []string{"m0+16(FP)", "m1+20(FP)"}, ms: []string{"ms0+24(FP)", "ms1+28(FP)"},
	accum: []string{"acc0+32(FP)", "acc1+40(FP)"}, sum: []string{"s0+72(FP)", "s1+80(FP)"},
	vt: "vt+48(FP)", accHd: "hd+56(FP)", accNvalid: "nvalid+64(FP)",
}

// Registers of vector v of a tile kernel: its query or scores pointer,
// its accumulator pointer, its first of four accumulators (Z0.. and
// Z8..), its broadcast and its rescale factor.
var (
	tileQReg   = []string{"SI", "R10"}
	tileAccReg = []string{"DI", "DX"}
	tileZ      = []int{0, 8}
	tileBcast  = []string{"Z4", "Z5"}
	tileMs     = []string{"Z15", "Z13"}
)

// tileScores writes k's scores kernel: per d, the vectors' query
// elements broadcast and the tile's row of 64 keys loaded once (Z12-Z15)
// into each vector's four FMA chains; then times scale, the keys from
// nvalid on -Inf, stored; each vector's maximum (max is order-free, any
// tree gives it).
func tileScores(f *asmgen.File, k tileKernel) {
	f.P("\n%s", k.scoresDoc)
	f.Text(k.scores, 0, k.scoresSize)
	for v, q := range k.q {
		f.Ins("MOVQ", q, tileQReg[v])
	}
	f.Ins("MOVQ", k.kt, "DI")
	f.Ins("MOVQ", k.hd, "CX")
	for v := range k.q {
		f.Zero("VXORPS", asmgen.Regs("Z", tileZ[v], 1, 4)...)
	}
	l := k.label + "sd"
	f.P("\n%s:", l)
	for v := range k.q {
		f.Ins("VBROADCASTSS", "("+tileQReg[v]+")", tileBcast[v])
	}
	group4(f, "VMOVUPS", func(i int) []string { return []string{asmgen.Mem(64*i, "DI"), z(12 + i)} })
	for v := range k.q {
		group4(f, "VFMADD231PS", func(i int) []string { return []string{z(12 + i), tileBcast[v], z(tileZ[v] + i)} })
	}
	for v := range k.q {
		f.Ins("ADDQ", "$4", tileQReg[v])
	}
	f.Ins("ADDQ", "$256", "DI")
	f.Ins("DECQ", "CX")
	f.Ins("JNZ", l)
	f.P("")
	f.Ins("VBROADCASTSS", k.scale, "Z6")
	for v := range k.q {
		group4(f, "VMULPS", func(i int) []string { return []string{"Z6", z(tileZ[v] + i), z(tileZ[v] + i)} })
	}
	f.Ins("MOVQ", k.nvalid, "AX")
	f.Ins("VPBROADCASTD", "AX", "Z6")
	f.Ins("VBROADCASTSS", "faNegInf<>(SB)", "Z7")
	group4(f, "VMOVDQU32", func(i int) []string { return []string{fmt.Sprintf("faIota<>+%d(SB)", 64*i), z(12 + i)} })
	f.P("\t// Lanes at or past nvalid (VPCMPD's $5, not less than) take -Inf.")
	group4(f, "VPCMPD", func(i int) []string { return []string{"$5", "Z6", z(12 + i), fmt.Sprintf("K%d", i+1)} })
	for v := range k.q {
		group4(f, "VMOVAPS", func(i int) []string { return []string{"Z7", fmt.Sprintf("K%d", i+1), z(tileZ[v] + i)} })
	}
	for v, out := range k.out {
		f.Ins("MOVQ", out, "DX")
		stores4(f, "VMOVUPS", "DX", 64, tileZ[v])
	}
	for v, ret := range k.max {
		if tileZ[v] != 0 {
			group4(f, "VMOVAPS", func(i int) []string { return []string{z(tileZ[v] + i), z(i)} })
		}
		f.Ins("VMAXPS", "Z1", "Z0", "Z0")
		f.Ins("VMAXPS", "Z3", "Z2", "Z2")
		f.Ins("VMAXPS", "Z2", "Z0", "Z0")
		reduce16(f, "VMAXPS")
		f.Ins("VMOVSS", "X0", ret)
	}
	f.Ins("VZEROUPPER")
	f.Ins("RET")
}

// tileAcc writes k's update kernel: each vector's exponentials of its
// scores less its maximum (VEXPF, constants in Z14 and Z16-Z27), summed
// in float64 per 16 lanes, then the value columns in groups of 64 and of
// 16 (accCols).
func tileAcc(f *asmgen.File, k tileKernel) {
	f.P("\n%s", k.accDoc)
	f.Text(k.acc, 0, k.accSize)
	consts := expfOrder()
	for i := range consts {
		dst := z(16 + i)
		if i == len(consts)-1 {
			dst = "Z14"
		}
		f.Ins("VBROADCASTSS", fmt.Sprintf("faExpC<>+%d(SB)", 4*i), dst)
	}
	for v := range k.kq {
		l := fmt.Sprintf("%sagrp%d", k.label, v)
		f.Ins("MOVQ", k.kq[v], "SI")
		f.Ins("VBROADCASTSS", k.m[v], "Z28")
		f.Ins("VXORPD", "X29", "X29", "X29")
		f.Ins("MOVQ", "$4", "CX")
		f.P("\n%s:", l)
		f.Raw(`
	VMOVUPS   (SI), Z0
	VSUBPS    Z28, Z0, Z0
	VEXPF
	VMOVUPS   Z0, (SI)
	REDUCE16
	VCVTSS2SD X0, X0, X0
	VADDSD    X0, X29, X29
	ADDQ      $64, SI
	DECQ      CX`)
		f.Ins("JNZ", l)
		f.Ins("VMOVSD", "X29", k.sum[v])
	}
	for v := range k.kq {
		f.Ins("MOVQ", k.kq[v], tileQReg[v])
		f.Ins("MOVQ", k.accum[v], tileAccReg[v])
		f.Ins("VBROADCASTSS", k.ms[v], tileMs[v])
	}
	f.Ins("MOVQ", k.vt, "R8")
	f.Ins("MOVQ", k.accHd, "R9")
	f.Ins("MOVQ", k.accNvalid, "R11")
	f.Ins("MOVQ", "R9", "R12")
	f.P("\tSHLQ         $2, R12 // V row stride in bytes")
	done := k.label + "adone"
	accCols(f, k, 4, fmt.Sprintf("%sa1", k.label))
	accCols(f, k, 1, done)
	f.P("\n%s:", done)
	f.Ins("VZEROUPPER")
	f.Ins("RET")
}

// accCols writes tileAcc's loop over column groups of 16n floats (n = 4
// or 1), jumping to next once fewer than 16n columns are left: per group,
// each vector's acc*ms, then per valid key its value columns loaded once
// (Z16..) into each vector's FMA chains, weighed by the vector's
// exponential.
func accCols(f *asmgen.File, k tileKernel, n int, next string) {
	nv := len(k.kq)
	l := fmt.Sprintf("%sa%d", k.label, n)
	f.P("\n%s:", l)
	f.Ins("CMPQ", "R9", fmt.Sprintf("$%d", 16*n))
	f.Ins("JLT", next)
	for v := range nv {
		for i := 0; i < n; i++ {
			f.Ins("VMULPS", asmgen.Mem(64*i, tileAccReg[v]), tileMs[v], z(tileZ[v]+i))
		}
	}
	walk := []string{"BX", "R13"} // each vector's exponentials, key by key
	for v := range nv {
		f.Ins("MOVQ", tileQReg[v], walk[v])
	}
	f.Ins("MOVQ", "R8", "AX")
	f.Ins("MOVQ", "R11", "CX")
	f.P("\n%skey:", l)
	for v := range nv {
		f.Ins("VBROADCASTSS", "("+walk[v]+")", tileBcast[v])
	}
	for i := 0; i < n; i++ {
		f.Ins("VMOVUPS", asmgen.Mem(64*i, "AX"), z(16+i))
	}
	for v := range nv {
		for i := 0; i < n; i++ {
			f.Ins("VFMADD231PS", z(16+i), tileBcast[v], z(tileZ[v]+i))
		}
	}
	for v := range nv {
		f.Ins("ADDQ", "$4", walk[v])
	}
	f.Ins("ADDQ", "R12", "AX")
	f.Ins("DECQ", "CX")
	f.Ins("JNZ", l+"key")
	f.P("")
	for v := range nv {
		for i := 0; i < n; i++ {
			f.Ins("VMOVUPS", z(tileZ[v]+i), asmgen.Mem(64*i, tileAccReg[v]))
		}
		f.Ins("ADDQ", fmt.Sprintf("$%d", 64*n), tileAccReg[v])
	}
	f.Ins("ADDQ", fmt.Sprintf("$%d", 64*n), "R8")
	f.Ins("SUBQ", fmt.Sprintf("$%d", 16*n), "R9")
	f.Ins("JMP", l)
}
