//go:build amd64 && !purego

#include "textflag.h"

// func dotF32AVX512(x, y *float32, np int, out *[16]float32)
//
// ggml_vec_dot_f32's AVX-512 body over np elements (a multiple of 64):
// four 16-lane accumulators, sum[j] = fma(x, y, sum[j]) for each group of
// 64, then GGML_F32x16_REDUCE's folds (sum0 += sum2, sum1 += sum3,
// sum0 += sum1), stored to out for the final 16-lane reduction.
TEXT ·dotF32AVX512(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ y+8(FP), DX
	MOVQ np+16(FP), CX
	MOVQ out+24(FP), DI
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3

dotloop:
	VMOVUPS     (SI), Z4
	VMOVUPS     64(SI), Z5
	VMOVUPS     128(SI), Z6
	VMOVUPS     192(SI), Z7
	VFMADD231PS (DX), Z4, Z0
	VFMADD231PS 64(DX), Z5, Z1
	VFMADD231PS 128(DX), Z6, Z2
	VFMADD231PS 192(DX), Z7, Z3
	ADDQ        $256, SI
	ADDQ        $256, DX
	SUBQ        $64, CX
	JNZ         dotloop

	VADDPS  Z2, Z0, Z0
	VADDPS  Z3, Z1, Z1
	VADDPS  Z1, Z0, Z0
	VMOVUPS Z0, (DI)
	VZEROUPPER
	RET

// func madF32AVX512(y, x *float32, v float32, n int)
//
// y[i] = fma(x[i], v, y[i]) over n elements (a multiple of 16):
// ggml_vec_mad_f32, lane by lane.
TEXT ·madF32AVX512(SB), NOSPLIT, $0-32
	MOVQ         y+0(FP), DI
	MOVQ         x+8(FP), SI
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
// y[i] *= v over n elements (a multiple of 16): ggml_vec_scale_f32.
TEXT ·scaleF32AVX512(SB), NOSPLIT, $0-24
	MOVQ         y+0(FP), DI
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
	VSHUFF32X4 $0xee, B3, B2, Z19 \
	VSHUFF32X4 $0x88, Z18, Z16, Z20 \
	MOVQ       o(DI), BX \
	VMOVUPS    Z20, (BX) \
	VSHUFF32X4 $0xdd, Z18, Z16, Z20 \
	MOVQ       o+32(DI), BX \
	VMOVUPS    Z20, (BX) \
	VSHUFF32X4 $0x88, Z19, Z17, Z20 \
	MOVQ       o+64(DI), BX \
	VMOVUPS    Z20, (BX) \
	VSHUFF32X4 $0xdd, Z19, Z17, Z20 \
	MOVQ       o+96(DI), BX \
	VMOVUPS    Z20, (BX)

// func transposeF32x16(dst *[16]*float32, src *float32, stride int)
//
// dst[i][j] = src[j*stride+i] for i, j < 16: a 16x16 block of a tile
// (rows j stride floats apart) stored as 16 rows, by interleaving 32-bit
// then 64-bit elements and then 128-bit lanes.
TEXT ·transposeF32x16(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ stride+16(FP), AX
	SHLQ $2, AX
	VMOVUPS (SI), Z0
	ADDQ    AX, SI
	VMOVUPS (SI), Z1
	ADDQ    AX, SI
	VMOVUPS (SI), Z2
	ADDQ    AX, SI
	VMOVUPS (SI), Z3
	ADDQ    AX, SI
	VMOVUPS (SI), Z4
	ADDQ    AX, SI
	VMOVUPS (SI), Z5
	ADDQ    AX, SI
	VMOVUPS (SI), Z6
	ADDQ    AX, SI
	VMOVUPS (SI), Z7
	ADDQ    AX, SI
	VMOVUPS (SI), Z8
	ADDQ    AX, SI
	VMOVUPS (SI), Z9
	ADDQ    AX, SI
	VMOVUPS (SI), Z10
	ADDQ    AX, SI
	VMOVUPS (SI), Z11
	ADDQ    AX, SI
	VMOVUPS (SI), Z12
	ADDQ    AX, SI
	VMOVUPS (SI), Z13
	ADDQ    AX, SI
	VMOVUPS (SI), Z14
	ADDQ    AX, SI
	VMOVUPS (SI), Z15
	TRPS(Z0, Z1, Z16, Z17)
	TRPS(Z2, Z3, Z18, Z19)
	TRPS(Z4, Z5, Z20, Z21)
	TRPS(Z6, Z7, Z22, Z23)
	TRPS(Z8, Z9, Z24, Z25)
	TRPS(Z10, Z11, Z26, Z27)
	TRPS(Z12, Z13, Z28, Z29)
	TRPS(Z14, Z15, Z30, Z31)
	TRPD(Z16, Z17, Z18, Z19, Z0, Z1, Z2, Z3)
	TRPD(Z20, Z21, Z22, Z23, Z4, Z5, Z6, Z7)
	TRPD(Z24, Z25, Z26, Z27, Z8, Z9, Z10, Z11)
	TRPD(Z28, Z29, Z30, Z31, Z12, Z13, Z14, Z15)
	TRLANES(0, Z0, Z4, Z8, Z12)
	TRLANES(8, Z1, Z5, Z9, Z13)
	TRLANES(16, Z2, Z6, Z10, Z14)
	TRLANES(24, Z3, Z7, Z11, Z15)
	VZEROUPPER
	RET
