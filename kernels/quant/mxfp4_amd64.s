//go:build amd64 && !purego

#include "textflag.h"

// MXFP4 · Q8_0 at the AVX2 level (see mxfp4_amd64.go): ggml's
// ggml_vec_dot_mxfp4_q8_0 AVX2 loop instruction for instruction, so that
// the result is bit-identical to the pure-Go dotMXFP4. Per block, VPSHUFB
// looks the levels (kvalues_mxfp4) up into one 256-bit register in element
// order (low nibbles' levels in the low half, high nibbles' in the high
// half); mul_add_epi8 takes VPSIGNB(level, level) = |level| and
// VPSIGNB(y, level) (y negated where the level is negative, so -128 stays
// -128, and zeroed where it is 0), VPMADDUBSW sums adjacent products into
// int16 (at most 2*12*128 in magnitude: no saturation), and VPMADDWD
// against ones gives the eight int32 lanes, lane k holding elements
// 4k..4k+3. The block scale is f16(y.d) * e8m0_half(e), rounded once.

// MXFP4ROW is the per-row half of a block product, for one of the rows sharing a
// weight block already unpacked (Y1 the levels, Y4 their magnitudes, BX
// its exponent): the row's activation block at xoff(x) into acc.
#define MXFP4ROW(x, xoff, acc) \
	VMOVDQU      xoff+2(x), Y3 \
	VPSIGNB      Y1, Y3, Y3 \
	VPMADDUBSW   Y3, Y4, Y3 \
	VPMADDWD     Y13, Y3, Y3 \
	VCVTDQ2PS    Y3, Y3 \
	MOVWLZX      xoff(x), AX \
	VMOVD        AX, X5 \
	VCVTPH2PS    X5, X5 \
	VMULSS       (R8)(BX*4), X5, X5 \
	VBROADCASTSS X5, Y5 \
	VFMADD231PS  Y5, Y3, acc

// MXFP4UNPACK unpacks the weight block at woff(SI) into Y1 (levels) and Y4
// (their magnitudes), and its exponent into BX.
#define MXFP4UNPACK(woff) \
	VMOVDQU     woff+1(SI), X1 \
	VPSRLW      $4, X1, X2 \
	VPAND       X15, X1, X1 \
	VPAND       X15, X2, X2 \
	VPSHUFB     X1, X14, X1 \
	VPSHUFB     X2, X14, X2 \
	VINSERTI128 $1, X2, Y1, Y1 \
	VPSIGNB     Y1, Y1, Y4 \
	MOVBLZX     woff(SI), BX

// MXFP4BLK adds one MXFP4 block (at woff(SI)) times its Q8_0 activation
// block (at xoff(DI)) to the float accumulator acc: lanes converted to
// float, fused with the block scale into acc. X15 holds the 0x0f mask, X14
// the level table, Y13 sixteen int16 ones, R8 the scale table.
#define MXFP4BLK(woff, xoff, acc) \
	MXFP4UNPACK(woff) \
	MXFP4ROW(DI, xoff, acc)

// MXFP4HSUM stores hsum8(a+b) (ggml's hsum_float_8 of the two
// accumulators) at dst, through Y0 and X1.
#define MXFP4HSUM(a, b, dst) \
	VADDPS       b, a, Y0 \
	VEXTRACTF128 $1, Y0, X1 \
	VADDPS       X1, X0, X0 \
	VPSHUFD      $0x4e, X0, X1 \
	VADDPS       X1, X0, X0 \
	VPSHUFD      $0xb1, X0, X1 \
	VADDPS       X1, X0, X0 \
	VMOVSS       X0, dst

// func dotMXFP4AVX2Asm(w, x *byte, npairs int, scales *[256]float32) float32
//
// ggml's loop over pairs of blocks: the even block of each pair goes to
// one accumulator (Y10), the odd one to another (Y11); they are added
// lane-wise and reduced as hsum_float_8. An odd last block is the caller's.
TEXT ·dotMXFP4AVX2Asm(SB), NOSPLIT, $0-36
	MOVQ    w+0(FP), SI
	MOVQ    x+8(FP), DI
	MOVQ    npairs+16(FP), CX
	MOVQ    scales+24(FP), R8
	VMOVDQU mxfp4mask<>(SB), X15
	VMOVDQU mxfp4levels<>(SB), X14
	VMOVDQU mxfp4ones<>(SB), Y13
	VXORPS  Y10, Y10, Y10
	VXORPS  Y11, Y11, Y11

mxfp4loop:
	MXFP4BLK(0, 0, Y10)
	MXFP4BLK(17, 34, Y11)
	ADDQ $34, SI
	ADDQ $68, DI
	DECQ CX
	JNZ  mxfp4loop

	MXFP4HSUM(Y10, Y11, ret+32(FP))
	VZEROUPPER
	RET

// func dotMXFP4x4AVX2Asm(w, x *byte, stride, npairs int, scales *[256]float32, out *float32)
//
// dotMXFP4AVX2Asm for four activation rows (stride bytes apart) at once:
// each weight block is unpacked once, and each row's instructions and
// accumulators (even blocks, odd blocks) are the one-row kernel's, so each
// out[r] is its result bit for bit.
TEXT ·dotMXFP4x4AVX2Asm(SB), NOSPLIT, $0-48
	MOVQ    w+0(FP), SI
	MOVQ    x+8(FP), DI
	MOVQ    stride+16(FP), DX
	MOVQ    npairs+24(FP), CX
	MOVQ    scales+32(FP), R8
	MOVQ    out+40(FP), R12
	LEAQ    (DI)(DX*1), R9
	LEAQ    (R9)(DX*1), R10
	LEAQ    (R10)(DX*1), R11
	VMOVDQU mxfp4mask<>(SB), X15
	VMOVDQU mxfp4levels<>(SB), X14
	VMOVDQU mxfp4ones<>(SB), Y13
	VXORPS  Y0, Y0, Y0
	VXORPS  Y6, Y6, Y6
	VXORPS  Y7, Y7, Y7
	VXORPS  Y8, Y8, Y8
	VXORPS  Y9, Y9, Y9
	VXORPS  Y10, Y10, Y10
	VXORPS  Y11, Y11, Y11
	VXORPS  Y12, Y12, Y12

	// Row r's even and odd accumulators: Y6/Y7, Y8/Y9, Y10/Y11, Y12/Y0.
mxfp4x4loop:
	MXFP4UNPACK(0)
	MXFP4ROW(DI, 0, Y6)
	MXFP4ROW(R9, 0, Y8)
	MXFP4ROW(R10, 0, Y10)
	MXFP4ROW(R11, 0, Y12)
	MXFP4UNPACK(17)
	MXFP4ROW(DI, 34, Y7)
	MXFP4ROW(R9, 34, Y9)
	MXFP4ROW(R10, 34, Y11)
	MXFP4ROW(R11, 34, Y0)
	ADDQ    $34, SI
	ADDQ    $68, DI
	ADDQ    $68, R9
	ADDQ    $68, R10
	ADDQ    $68, R11
	DECQ    CX
	JNZ     mxfp4x4loop

	// Row 3 first: the sums go through Y0.
	MXFP4HSUM(Y12, Y0, 12(R12))
	MXFP4HSUM(Y6, Y7, 0(R12))
	MXFP4HSUM(Y8, Y9, 4(R12))
	MXFP4HSUM(Y10, Y11, 8(R12))
	VZEROUPPER
	RET

DATA mxfp4mask<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA mxfp4mask<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL mxfp4mask<>(SB), RODATA|NOPTR, $16

// kvalues_mxfp4 as bytes: 0 1 2 3 4 6 8 12, then 0 -1 -2 -3 -4 -6 -8 -12
// (little-endian quadwords).
DATA mxfp4levels<>+0(SB)/8, $0x0c08060403020100
DATA mxfp4levels<>+8(SB)/8, $0xf4f8fafcfdfeff00
GLOBL mxfp4levels<>(SB), RODATA|NOPTR, $16

DATA mxfp4ones<>+0(SB)/8, $0x0001000100010001
DATA mxfp4ones<>+8(SB)/8, $0x0001000100010001
DATA mxfp4ones<>+16(SB)/8, $0x0001000100010001
DATA mxfp4ones<>+24(SB)/8, $0x0001000100010001
GLOBL mxfp4ones<>(SB), RODATA|NOPTR, $32
