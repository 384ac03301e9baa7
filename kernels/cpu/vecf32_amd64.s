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
