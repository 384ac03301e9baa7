//go:build amd64 && !purego

#include "textflag.h"

// func swigluAVX512(y, gate, up *float32, nb int)
//
// ggml_v_silu (ggml-cpu/vec.h, AVX-512 form) times u, instruction for
// instruction: e = ggml_v_expf(0 - x), silu = x / (1 + e). The |n| > 192
// fix-up is done without a branch (the same values as ggml's blend).
TEXT ·swigluAVX512(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	MOVQ gate+8(FP), SI
	MOVQ up+16(FP), DX
	MOVQ nb+24(FP), CX
	VBROADCASTSS silu_r<>(SB), Z16
	VBROADCASTSS silu_log2e<>(SB), Z17
	VBROADCASTSS silu_c1<>(SB), Z18
	VBROADCASTSS silu_c2<>(SB), Z19
	VBROADCASTSS silu_p0<>(SB), Z20
	VBROADCASTSS silu_p1<>(SB), Z21
	VBROADCASTSS silu_p2<>(SB), Z22
	VBROADCASTSS silu_p3<>(SB), Z23
	VBROADCASTSS silu_p4<>(SB), Z24
	VBROADCASTSS silu_one<>(SB), Z25
	VBROADCASTSS silu_192<>(SB), Z26
	VBROADCASTSS silu_inf<>(SB), Z27
	VBROADCASTSS silu_abs<>(SB), Z28
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

DATA silu_r<>+0(SB)/4, $0x4b400000
GLOBL silu_r<>(SB), RODATA|NOPTR, $4
DATA silu_log2e<>+0(SB)/4, $0x3fb8aa3b
GLOBL silu_log2e<>(SB), RODATA|NOPTR, $4
DATA silu_c1<>+0(SB)/4, $0x3f317200
GLOBL silu_c1<>(SB), RODATA|NOPTR, $4
DATA silu_c2<>+0(SB)/4, $0x35bfbe8e
GLOBL silu_c2<>(SB), RODATA|NOPTR, $4
DATA silu_p0<>+0(SB)/4, $0x3c072010
GLOBL silu_p0<>(SB), RODATA|NOPTR, $4
DATA silu_p1<>+0(SB)/4, $0x3d2b9f17
GLOBL silu_p1<>(SB), RODATA|NOPTR, $4
DATA silu_p2<>+0(SB)/4, $0x3e2aaf33
GLOBL silu_p2<>(SB), RODATA|NOPTR, $4
DATA silu_p3<>+0(SB)/4, $0x3efffedb
GLOBL silu_p3<>(SB), RODATA|NOPTR, $4
DATA silu_p4<>+0(SB)/4, $0x3f7ffff6
GLOBL silu_p4<>(SB), RODATA|NOPTR, $4
DATA silu_one<>+0(SB)/4, $0x3f800000
GLOBL silu_one<>(SB), RODATA|NOPTR, $4
DATA silu_192<>+0(SB)/4, $0x43400000
GLOBL silu_192<>(SB), RODATA|NOPTR, $4
DATA silu_inf<>+0(SB)/4, $0x7f800000
GLOBL silu_inf<>(SB), RODATA|NOPTR, $4
DATA silu_abs<>+0(SB)/4, $0x7fffffff
GLOBL silu_abs<>(SB), RODATA|NOPTR, $4
