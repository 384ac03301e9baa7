//go:build amd64 && !purego

#include "textflag.h"

// IQ4_NL · Q8_0 and IQ4_XS · Q8_K at the AVX2 level (see iq4_amd64.go).
// Both are ggml's AVX2 kernels with one change that keeps every integer sum
// exact for any int8 activation: the looked-up levels and the activations
// are sign-extended to int16 and multiplied with VPMADDWD, where ggml's
// mul_add_epi8 (VPSIGNB + VPMADDUBSW) would wrap an activation of -128
// (which ggml's quantizers never produce). The lanes, and with them the
// float order, are ggml's: lane k of a 32-element block is the sum of the
// products of its elements 4k..4k+3, so the results are bit-identical to
// the pure-Go dotIQ4_NL/dotIQ4_XS.

// IQ4LEVELS looks up the levels of the 16 nibble bytes at q: X1 gets the
// low nibbles' (elements 0..15) and X2 the high nibbles' (16..31), as
// signed bytes. X15 holds the 0x0f mask, X14 the level table.
#define IQ4LEVELS(q) \
	VMOVDQU q, X1 \
	VPSRLW  $4, X1, X2 \
	VPAND   X15, X1, X1 \
	VPAND   X15, X2, X2 \
	VPSHUFB X1, X14, X1 \
	VPSHUFB X2, X14, X2

// IQ4LANES turns the pair sums Y1 (elements 0..15: dword i = elements 2i,
// 2i+1) and Y2 (elements 16..31) into the eight lane sums in ggml's order.
// VPHADDD works within 128-bit halves and gives lanes 0,1,4,5 | 2,3,6,7;
// VPERMQ swaps the middle quadwords back. int32 adds: exact.
#define IQ4LANES \
	VPHADDD Y2, Y1, Y1 \
	VPERMQ  $0xd8, Y1, Y1

// IQ4NLBLK adds one IQ4_NL block (at woff(SI)) times its Q8_0 activation
// block (at xoff(DI)) to the float accumulator acc: lanes converted to
// float, times d_x*d_w rounded once, fused into acc.
#define IQ4NLBLK(woff, xoff, acc) \
	IQ4LEVELS(woff+2(SI)) \
	VPMOVSXBW   X1, Y1 \
	VPMOVSXBW   X2, Y2 \
	VPMOVSXBW   xoff+2(DI), Y3 \
	VPMOVSXBW   xoff+18(DI), Y4 \
	VPMADDWD    Y3, Y1, Y1 \
	VPMADDWD    Y4, Y2, Y2 \
	IQ4LANES \
	VCVTDQ2PS   Y1, Y1 \
	MOVWLZX     xoff(DI), AX \
	VMOVD       AX, X5 \
	VPINSRW     $1, woff(SI), X5, X5 \
	VCVTPH2PS   X5, X5 \
	VMOVSHDUP   X5, X6 \
	VMULSS      X6, X5, X5 \
	VBROADCASTSS X5, Y5 \
	VFMADD231PS Y5, Y1, acc

// func dotIQ4_NLAVX2Asm(w, x *byte, npairs int) float32
//
// ggml's loop over pairs of blocks: the even block of each pair goes to
// one accumulator (Y10), the odd one to another (Y11); they are added
// lane-wise and reduced as hsum_float_8. An odd last block is the caller's.
TEXT ·dotIQ4_NLAVX2Asm(SB), NOSPLIT, $0-28
	MOVQ    w+0(FP), SI
	MOVQ    x+8(FP), DI
	MOVQ    npairs+16(FP), CX
	VMOVDQU iq4mask<>(SB), X15
	VMOVDQU iq4levels<>(SB), X14
	VXORPS  Y10, Y10, Y10
	VXORPS  Y11, Y11, Y11

iq4nlloop:
	IQ4NLBLK(0, 0, Y10)
	IQ4NLBLK(18, 34, Y11)
	ADDQ $36, SI
	ADDQ $68, DI
	DECQ CX
	JNZ  iq4nlloop

	VADDPS       Y11, Y10, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VPSHUFD      $0x4e, X0, X1
	VADDPS       X1, X0, X0
	VPSHUFD      $0xb1, X0, X1
	VADDPS       X1, X0, X0
	VMOVSS       X0, ret+24(FP)
	VZEROUPPER
	RET

// IQ4XSSUB adds sub-block s of an IQ4_XS block to the pair-sum
// accumulators Y8 (elements 0..15 of each sub-block) and Y9 (16..31). The
// scale ls-32 (lo = nibble s%2 of scales_l[s/2], hi = bit pair s of
// scales_h, kept in DX) multiplies the levels as int16 first: |ls-32| <= 32
// and |level| <= 127, so the words stay within ±4064 and the VPMADDWD pair
// sums within ±2^20. loff = 4+s/2, lsh = 4*(s%2), hsh = 2*s, qoff = 8+16s,
// xoff = 4+32s.
#define IQ4XSSUB(loff, lsh, hsh, qoff, xoff) \
	MOVBLZX      loff(SI), AX \
	SHRL         $lsh, AX \
	ANDL         $15, AX \
	MOVL         DX, BX \
	SHRL         $hsh, BX \
	ANDL         $3, BX \
	SHLL         $4, BX \
	ORL          BX, AX \
	SUBL         $32, AX \
	VMOVD        AX, X7 \
	VPBROADCASTW X7, Y7 \
	IQ4LEVELS(qoff(SI)) \
	VPMOVSXBW    X1, Y1 \
	VPMOVSXBW    X2, Y2 \
	VPMULLW      Y7, Y1, Y1 \
	VPMULLW      Y7, Y2, Y2 \
	VPMOVSXBW    xoff(DI), Y3 \
	VPMOVSXBW    xoff+16(DI), Y4 \
	VPMADDWD     Y3, Y1, Y1 \
	VPMADDWD     Y4, Y2, Y2 \
	VPADDD       Y1, Y8, Y8 \
	VPADDD       Y2, Y9, Y9

// func dotIQ4_XSAVX2Asm(w, x *byte, nb int) float32
//
// Per super-block the eight sub-blocks' scaled pair sums are added as
// int32 (exact, and VPHADDD is linear, so the lanes are formed once per
// super-block), then one accumulator (Y0) takes fma(d_w*d_x, lane, acc);
// hsum_float_8 at the end.
TEXT ·dotIQ4_XSAVX2Asm(SB), NOSPLIT, $0-28
	MOVQ    w+0(FP), SI
	MOVQ    x+8(FP), DI
	MOVQ    nb+16(FP), CX
	VMOVDQU iq4mask<>(SB), X15
	VMOVDQU iq4levels<>(SB), X14
	VXORPS  Y0, Y0, Y0

iq4xsloop:
	VPXOR   Y8, Y8, Y8
	VPXOR   Y9, Y9, Y9
	MOVWLZX 2(SI), DX
	IQ4XSSUB(4, 0, 0, 8, 4)
	IQ4XSSUB(4, 4, 2, 24, 36)
	IQ4XSSUB(5, 0, 4, 40, 68)
	IQ4XSSUB(5, 4, 6, 56, 100)
	IQ4XSSUB(6, 0, 8, 72, 132)
	IQ4XSSUB(6, 4, 10, 88, 164)
	IQ4XSSUB(7, 0, 12, 104, 196)
	IQ4XSSUB(7, 4, 14, 120, 228)
	VMOVDQA      Y8, Y1
	VMOVDQA      Y9, Y2
	IQ4LANES
	VCVTDQ2PS    Y1, Y1
	MOVWLZX      (SI), AX
	VMOVD        AX, X5
	VCVTPH2PS    X5, X5
	VMULSS       (DI), X5, X5
	VBROADCASTSS X5, Y5
	VFMADD231PS  Y5, Y1, Y0
	ADDQ         $136, SI
	ADDQ         $292, DI
	DECQ         CX
	JNZ          iq4xsloop

	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VPSHUFD      $0x4e, X0, X1
	VADDPS       X1, X0, X0
	VPSHUFD      $0xb1, X0, X1
	VADDPS       X1, X0, X0
	VMOVSS       X0, ret+24(FP)
	VZEROUPPER
	RET

DATA iq4mask<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA iq4mask<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL iq4mask<>(SB), RODATA|NOPTR, $16

// kvalues_iq4nl as bytes: -127 -104 -83 -65 -49 -35 -22 -10, then
// 1 13 25 38 53 69 89 113 (little-endian quadwords).
DATA iq4levels<>+0(SB)/8, $0xf6eaddcfbfad9881
DATA iq4levels<>+8(SB)/8, $0x7159453526190d01
GLOBL iq4levels<>(SB), RODATA|NOPTR, $16
