//go:build amd64 && !purego

#include "textflag.h"

// AVX-512 kernels of flash attention; see fattn_amd64.go for the Go side
// and fattn.go for the arithmetic each one reproduces. Every kernel keeps
// ggml's operation order per output value, so the results are bitwise
// those of the pure-Go code.

// REDUCE16 leaves in the low lane of X0 GCC's _mm512_reduce_add_ps of Z0
// (halves added pairwise: 256, 128, 64 bits, then the last two lanes).
// Z0 and X1 are clobbered.
#define REDUCE16 \
	VEXTRACTF64X4 $1, Z0, Y1 \
	VADDPS        Y1, Y0, Y0 \
	VEXTRACTF128  $1, Y0, X1 \
	VADDPS        X1, X0, X0 \
	VPSHUFD       $0x4e, X0, X1 \
	VADDPS        X1, X0, X0 \
	VPSHUFD       $0xb1, X0, X1 \
	VADDPS        X1, X0, X0

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
TEXT ·faDotF16Keys(SB), NOSPLIT, $0-64
	MOVQ k+0(FP), SI
	MOVQ kstride+8(FP), R8
	MOVQ q+16(FP), DI
	MOVQ np+24(FP), R9
	MOVQ n+32(FP), CX
	MOVQ out+40(FP), DX
	MOVQ pf+48(FP), R11
	MOVQ next+56(FP), R12
	SUBQ SI, R12
	SHRQ $6, R9

dkkey:
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3
	MOVQ   SI, AX
	MOVQ   DI, BX
	MOVQ   R9, R10

dkgrp:
	PREFETCHT0  (AX)(R11*1)
	PREFETCHT0  64(AX)(R11*1)
	PREFETCHT0  (AX)(R12*1)
	PREFETCHT0  64(AX)(R12*1)
	VCVTPH2PS   (AX), Z4
	VCVTPH2PS   32(AX), Z5
	VCVTPH2PS   64(AX), Z6
	VCVTPH2PS   96(AX), Z7
	VFMADD231PS (BX), Z4, Z0
	VFMADD231PS 64(BX), Z5, Z1
	VFMADD231PS 128(BX), Z6, Z2
	VFMADD231PS 192(BX), Z7, Z3
	ADDQ        $128, AX
	ADDQ        $256, BX
	DECQ        R10
	JNZ         dkgrp

	VADDPS Z2, Z0, Z0
	VADDPS Z3, Z1, Z1
	VADDPS Z1, Z0, Z0
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
TEXT ·faMadF16(SB), NOSPLIT, $0-48
	MOVQ  acc+0(FP), DI
	MOVQ  v+8(FP), SI
	MOVQ  vstride+16(FP), R8
	MOVQ  coef+24(FP), DX
	MOVQ  n+32(FP), R11
	MOVQ  hd+40(FP), R9
	MOVL  $0x3f800000, AX
	VMOVD AX, X15

mad4:
	CMPQ      R9, $64
	JLT       mad1
	VCVTPH2PS (DI), Z0
	VCVTPH2PS 32(DI), Z1
	VCVTPH2PS 64(DI), Z2
	VCVTPH2PS 96(DI), Z3
	MOVQ      SI, AX
	MOVQ      DX, BX
	MOVQ      R11, CX

mad4key:
	VMOVSS   (BX), X4
	VUCOMISS X15, X4
	JNE      mad4scale

mad4mad:
	VBROADCASTSS 4(BX), Z5
	VCVTPH2PS    (AX), Z6
	VCVTPH2PS    32(AX), Z7
	VCVTPH2PS    64(AX), Z8
	VCVTPH2PS    96(AX), Z9
	VFMADD231PS  Z5, Z6, Z0
	VFMADD231PS  Z5, Z7, Z1
	VFMADD231PS  Z5, Z8, Z2
	VFMADD231PS  Z5, Z9, Z3
	F16RT(Z0, Y16)
	F16RT(Z1, Y17)
	F16RT(Z2, Y18)
	F16RT(Z3, Y19)
	ADDQ         R8, AX
	ADDQ         $8, BX
	DECQ         CX
	JNZ          mad4key

	VCVTPS2PH $0, Z0, (DI)
	VCVTPS2PH $0, Z1, 32(DI)
	VCVTPS2PH $0, Z2, 64(DI)
	VCVTPS2PH $0, Z3, 96(DI)
	ADDQ      $128, DI
	ADDQ      $128, SI
	SUBQ      $64, R9
	JMP       mad4

mad4scale:
	VBROADCASTSS X4, Z4
	VMULPS       Z4, Z0, Z0
	VMULPS       Z4, Z1, Z1
	VMULPS       Z4, Z2, Z2
	VMULPS       Z4, Z3, Z3
	F16RT(Z0, Y16)
	F16RT(Z1, Y17)
	F16RT(Z2, Y18)
	F16RT(Z3, Y19)
	JMP          mad4mad

mad1:
	CMPQ      R9, $16
	JLT       maddone
	VCVTPH2PS (DI), Z0
	MOVQ      SI, AX
	MOVQ      DX, BX
	MOVQ      R11, CX

mad1key:
	VMOVSS   (BX), X4
	VUCOMISS X15, X4
	JNE      mad1scale

mad1mad:
	VBROADCASTSS 4(BX), Z5
	VCVTPH2PS    (AX), Z6
	VFMADD231PS  Z5, Z6, Z0
	F16RT(Z0, Y16)
	ADDQ         R8, AX
	ADDQ         $8, BX
	DECQ         CX
	JNZ          mad1key

	VCVTPS2PH $0, Z0, (DI)
	ADDQ      $32, DI
	ADDQ      $32, SI
	SUBQ      $16, R9
	JMP       mad1

mad1scale:
	VBROADCASTSS X4, Z4
	VMULPS       Z4, Z0, Z0
	F16RT(Z0, Y16)
	JMP          mad1mad

maddone:
	VZEROUPPER
	RET

// func faCvtRows(dst *float32, src *uint16, sstride, hd, n int)
//
// Converts n rows of hd halves (sstride bytes apart) to float32 rows
// packed hd apart. hd is a multiple of 16.
TEXT ·faCvtRows(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ sstride+16(FP), R8
	MOVQ hd+24(FP), R9
	MOVQ n+32(FP), CX
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
// keys at a time.
TEXT ·faTransposeTile(SB), NOSPLIT, $0-24
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         hd+16(FP), R9
	VMOVDQU32    faIota<>(SB), Z31
	VPBROADCASTD R9, Z30
	VPMULLD      Z30, Z31, Z31 // lane l: l*hd
	MOVQ         R9, R10
	SHLQ         $6, R10       // 16 keys of hd floats, in bytes
	MOVQ         R9, CX

trd:
	MOVQ       SI, AX
	KXNORW     K1, K1, K1
	VGATHERDPS (AX)(Z31*4), K1, Z0
	ADDQ       R10, AX
	KXNORW     K2, K2, K2
	VGATHERDPS (AX)(Z31*4), K2, Z1
	ADDQ       R10, AX
	KXNORW     K3, K3, K3
	VGATHERDPS (AX)(Z31*4), K3, Z2
	ADDQ       R10, AX
	KXNORW     K4, K4, K4
	VGATHERDPS (AX)(Z31*4), K4, Z3
	VMOVUPS    Z0, (DI)
	VMOVUPS    Z1, 64(DI)
	VMOVUPS    Z2, 128(DI)
	VMOVUPS    Z3, 192(DI)
	ADDQ       $4, SI
	ADDQ       $256, DI
	DECQ       CX
	JNZ        trd
	VZEROUPPER
	RET

// func faTileScores(q, kt *float32, hd int, scale float32, nvalid int, out *float32) float32
//
// The tiled path's scores of one query row against a tile of 64 keys
// stored transposed (kt[d*64+k]): per key an FMA chain over d from 0, then
// times scale; keys from nvalid on are set to -Inf. Returns the maximum.
TEXT ·faTileScores(SB), NOSPLIT, $0-52
	MOVQ   q+0(FP), SI
	MOVQ   kt+8(FP), DI
	MOVQ   hd+16(FP), CX
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3

tsd:
	VBROADCASTSS (SI), Z4
	VFMADD231PS  (DI), Z4, Z0
	VFMADD231PS  64(DI), Z4, Z1
	VFMADD231PS  128(DI), Z4, Z2
	VFMADD231PS  192(DI), Z4, Z3
	ADDQ         $4, SI
	ADDQ         $256, DI
	DECQ         CX
	JNZ          tsd

	VBROADCASTSS scale+24(FP), Z5
	VMULPS       Z5, Z0, Z0
	VMULPS       Z5, Z1, Z1
	VMULPS       Z5, Z2, Z2
	VMULPS       Z5, Z3, Z3
	MOVQ         nvalid+32(FP), AX
	VPBROADCASTD AX, Z6
	VBROADCASTSS faNegInf<>(SB), Z7
	VMOVDQU32    faIota<>(SB), Z8
	VMOVDQU32    faIota<>+64(SB), Z9
	VMOVDQU32    faIota<>+128(SB), Z10
	VMOVDQU32    faIota<>+192(SB), Z11
	VPCMPD       $5, Z6, Z8, K1    // lane >= nvalid
	VPCMPD       $5, Z6, Z9, K2
	VPCMPD       $5, Z6, Z10, K3
	VPCMPD       $5, Z6, Z11, K4
	VMOVAPS      Z7, K1, Z0
	VMOVAPS      Z7, K2, Z1
	VMOVAPS      Z7, K3, Z2
	VMOVAPS      Z7, K4, Z3
	MOVQ         out+40(FP), DX
	VMOVUPS      Z0, (DX)
	VMOVUPS      Z1, 64(DX)
	VMOVUPS      Z2, 128(DX)
	VMOVUPS      Z3, 192(DX)
	VMAXPS       Z1, Z0, Z0
	VMAXPS       Z3, Z2, Z2
	VMAXPS       Z2, Z0, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VMAXPS       Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS       X1, X0, X0
	VPSHUFD      $0x4e, X0, X1
	VMAXPS       X1, X0, X0
	VPSHUFD      $0xb1, X0, X1
	VMAXPS       X1, X0, X0
	VMOVSS       X0, ret+48(FP)
	VZEROUPPER
	RET

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

// func faTileAcc(kq *float32, m, ms float32, acc, vt *float32, hd, nvalid int) float64
//
// The tiled path's update for one query row and tile: kq[k] =
// ggml_v_expf(kq[k] - m) for the 64 keys, summed per 16 lanes
// (_mm512_reduce_add_ps) into a float64 total, which is returned; then
// acc = acc*ms and acc += p_k * V_k as FMA chains over the first nvalid
// keys (vt holds the tile's values as float32 rows of hd).
TEXT ·faTileAcc(SB), NOSPLIT, $0-56
	MOVQ         kq+0(FP), SI
	VBROADCASTSS faExpC<>+0(SB), Z16
	VBROADCASTSS faExpC<>+4(SB), Z17
	VBROADCASTSS faExpC<>+8(SB), Z18
	VBROADCASTSS faExpC<>+12(SB), Z19
	VBROADCASTSS faExpC<>+16(SB), Z20
	VBROADCASTSS faExpC<>+20(SB), Z21
	VBROADCASTSS faExpC<>+24(SB), Z22
	VBROADCASTSS faExpC<>+28(SB), Z23
	VBROADCASTSS faExpC<>+32(SB), Z24
	VBROADCASTSS faExpC<>+36(SB), Z25
	VBROADCASTSS faExpC<>+40(SB), Z26
	VBROADCASTSS faExpC<>+44(SB), Z27
	VBROADCASTSS faExpC<>+48(SB), Z14
	VBROADCASTSS m+8(FP), Z28
	VXORPD       X29, X29, X29 // the float64 sum
	MOVQ         $4, CX

tagrp:
	VMOVUPS   (SI), Z0
	VSUBPS    Z28, Z0, Z0
	VEXPF
	VMOVUPS   Z0, (SI)
	REDUCE16
	VCVTSS2SD X0, X0, X0
	VADDSD    X0, X29, X29
	ADDQ      $64, SI
	DECQ      CX
	JNZ       tagrp
	VMOVSD    X29, ret+48(FP)

	MOVQ         kq+0(FP), SI
	MOVQ         acc+16(FP), DI
	MOVQ         vt+24(FP), R8
	MOVQ         hd+32(FP), R9
	MOVQ         nvalid+40(FP), R11
	VBROADCASTSS ms+12(FP), Z15
	MOVQ         R9, R12
	SHLQ         $2, R12 // V row stride in bytes

ta4:
	CMPQ    R9, $64
	JLT     ta1
	VMULPS  (DI), Z15, Z0
	VMULPS  64(DI), Z15, Z1
	VMULPS  128(DI), Z15, Z2
	VMULPS  192(DI), Z15, Z3
	MOVQ    SI, BX
	MOVQ    R8, AX
	MOVQ    R11, CX

ta4key:
	VBROADCASTSS (BX), Z4
	VFMADD231PS  (AX), Z4, Z0
	VFMADD231PS  64(AX), Z4, Z1
	VFMADD231PS  128(AX), Z4, Z2
	VFMADD231PS  192(AX), Z4, Z3
	ADDQ         $4, BX
	ADDQ         R12, AX
	DECQ         CX
	JNZ          ta4key

	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	VMOVUPS Z2, 128(DI)
	VMOVUPS Z3, 192(DI)
	ADDQ    $256, DI
	ADDQ    $256, R8
	SUBQ    $64, R9
	JMP     ta4

ta1:
	CMPQ   R9, $16
	JLT    tadone
	VMULPS (DI), Z15, Z0
	MOVQ   SI, BX
	MOVQ   R8, AX
	MOVQ   R11, CX

ta1key:
	VBROADCASTSS (BX), Z4
	VFMADD231PS  (AX), Z4, Z0
	ADDQ         $4, BX
	ADDQ         R12, AX
	DECQ         CX
	JNZ          ta1key

	VMOVUPS Z0, (DI)
	ADDQ    $64, DI
	ADDQ    $64, R8
	SUBQ    $16, R9
	JMP     ta1

tadone:
	VZEROUPPER
	RET

// ggml_v_expf's constants: r, log2e, the two ln 2 parts, the polynomial
// (c5, c4, c3, c2, c1, 1), the abs mask, the saturation bound 192 and +Inf.
DATA faExpC<>+0(SB)/4, $0x4b400000
DATA faExpC<>+4(SB)/4, $0x3fb8aa3b
DATA faExpC<>+8(SB)/4, $0x3f317200
DATA faExpC<>+12(SB)/4, $0x35bfbe8e
DATA faExpC<>+16(SB)/4, $0x3c072010
DATA faExpC<>+20(SB)/4, $0x3d2b9f17
DATA faExpC<>+24(SB)/4, $0x3e2aaf33
DATA faExpC<>+28(SB)/4, $0x3efffedb
DATA faExpC<>+32(SB)/4, $0x3f7ffff6
DATA faExpC<>+36(SB)/4, $0x3f800000
DATA faExpC<>+40(SB)/4, $0x7fffffff
DATA faExpC<>+44(SB)/4, $0x43400000
DATA faExpC<>+48(SB)/4, $0x7f800000
GLOBL faExpC<>(SB), RODATA|NOPTR, $52

DATA faNegInf<>+0(SB)/4, $0xff800000
GLOBL faNegInf<>(SB), RODATA|NOPTR, $4

DATA faIota<>+0(SB)/8, $0x0000000100000000
DATA faIota<>+8(SB)/8, $0x0000000300000002
DATA faIota<>+16(SB)/8, $0x0000000500000004
DATA faIota<>+24(SB)/8, $0x0000000700000006
DATA faIota<>+32(SB)/8, $0x0000000900000008
DATA faIota<>+40(SB)/8, $0x0000000b0000000a
DATA faIota<>+48(SB)/8, $0x0000000d0000000c
DATA faIota<>+56(SB)/8, $0x0000000f0000000e
DATA faIota<>+64(SB)/8, $0x0000001100000010
DATA faIota<>+72(SB)/8, $0x0000001300000012
DATA faIota<>+80(SB)/8, $0x0000001500000014
DATA faIota<>+88(SB)/8, $0x0000001700000016
DATA faIota<>+96(SB)/8, $0x0000001900000018
DATA faIota<>+104(SB)/8, $0x0000001b0000001a
DATA faIota<>+112(SB)/8, $0x0000001d0000001c
DATA faIota<>+120(SB)/8, $0x0000001f0000001e
DATA faIota<>+128(SB)/8, $0x0000002100000020
DATA faIota<>+136(SB)/8, $0x0000002300000022
DATA faIota<>+144(SB)/8, $0x0000002500000024
DATA faIota<>+152(SB)/8, $0x0000002700000026
DATA faIota<>+160(SB)/8, $0x0000002900000028
DATA faIota<>+168(SB)/8, $0x0000002b0000002a
DATA faIota<>+176(SB)/8, $0x0000002d0000002c
DATA faIota<>+184(SB)/8, $0x0000002f0000002e
DATA faIota<>+192(SB)/8, $0x0000003100000030
DATA faIota<>+200(SB)/8, $0x0000003300000032
DATA faIota<>+208(SB)/8, $0x0000003500000034
DATA faIota<>+216(SB)/8, $0x0000003700000036
DATA faIota<>+224(SB)/8, $0x0000003900000038
DATA faIota<>+232(SB)/8, $0x0000003b0000003a
DATA faIota<>+240(SB)/8, $0x0000003d0000003c
DATA faIota<>+248(SB)/8, $0x0000003f0000003e
GLOBL faIota<>(SB), RODATA|NOPTR, $256

// expf's constants (expf.go): the clamp bounds, log2 e, the rounding
// constant, ln 2 in two parts, and the exponent bias.
DATA expk<>+0(SB)/8, $0xc05b800000000000  // -110
DATA expk<>+8(SB)/8, $0x4059000000000000  // 100
DATA expk<>+16(SB)/8, $0x3ff71547652b82fe // expLog2E
DATA expk<>+24(SB)/8, $0x4338000000000000 // expRound
DATA expk<>+32(SB)/8, $0x3fe62e42fefa39ef // expLn2Hi
DATA expk<>+40(SB)/8, $0x3c7abc9e3b39803f // expLn2Lo
DATA expk<>+48(SB)/8, $1023
GLOBL expk<>(SB), RODATA|NOPTR, $56

// EXPTAYLOR is one Horner step of expf's series: P = P*R + expTaylor[k].
#define EXPTAYLOR(k) VFMADD213PD.BCST ·expTaylor+8*k(SB), Z4, Z5

// func expfs(x *float32, n int)
//
// expf in place on n floats, n a multiple of 8, eight float64 lanes at a
// time with expf's operations in its order (min and max pick x when it is
// NaN, as Go's min and max do).
TEXT ·expfs(SB), NOSPLIT, $0-16
	MOVQ         x+0(FP), DI
	MOVQ         n+8(FP), CX
	SHRQ         $3, CX
	JZ           expdone
	VBROADCASTSD expk<>+0(SB), Z20
	VBROADCASTSD expk<>+8(SB), Z21
	VBROADCASTSD expk<>+16(SB), Z22
	VBROADCASTSD expk<>+24(SB), Z23
	VBROADCASTSD expk<>+32(SB), Z24
	VBROADCASTSD expk<>+40(SB), Z25
	VBROADCASTSD expk<>+48(SB), Z26
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
	VMOVAPD     Z27, Z5
	EXPTAYLOR(1)
	EXPTAYLOR(2)
	EXPTAYLOR(3)
	EXPTAYLOR(4)
	EXPTAYLOR(5)
	EXPTAYLOR(6)
	EXPTAYLOR(7)
	EXPTAYLOR(8)
	EXPTAYLOR(9)
	EXPTAYLOR(10)
	EXPTAYLOR(11)
	EXPTAYLOR(12)
	EXPTAYLOR(13)
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
	RET
