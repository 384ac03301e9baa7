//go:build amd64 && !purego

#include "textflag.h"

// Integer and float dot-product kernels; see simd_amd64.go for the levels
// and the Go declarations. Conventions: SI walks the weight row, DI the
// activations, CX counts blocks. Every kernel keeps its float partial sums
// in vector lanes and reduces them once at the end, so per-block integer
// sums are never reduced horizontally.

// HSUM leaves in the low lane of X the sum of the eight float lanes of Y
// (X is Y's low half); T is scratch.
#define HSUM(Y, X, T) \
	VEXTRACTF128 $1, Y, T \
	VADDPS       T, X, X \
	VPSHUFD      $0x4e, X, T \
	VADDPS       T, X, X \
	VPSHUFD      $0xb1, X, T \
	VADDPS       T, X, X

// HSUM4 leaves in X0 [hsum(A), hsum(B), hsum(C), hsum(D)] for four
// accumulators, each summed with exactly HSUM's operations: per row
// s = lo128 + hi128, then (s0+s2) + (s1+s3). VPERM2F128 pairs the rows'
// halves (A with C, B with D) so that one VADDPS forms two rows' s; the
// VUNPCKLPS/VUNPCKHPS pair and a VADDPS give every row's s0+s2 and s1+s3,
// and VUNPCKLPD/VUNPCKHPD gather them for the last VADDPS. A-D must be
// among Y4-Y15; Y0-Y3 are scratch.
#define HSUM4(A, B, C, D) \
	VPERM2F128   $0x20, C, A, Y0 \
	VPERM2F128   $0x31, C, A, Y1 \
	VADDPS       Y1, Y0, Y0 \
	VPERM2F128   $0x20, D, B, Y1 \
	VPERM2F128   $0x31, D, B, Y2 \
	VADDPS       Y2, Y1, Y1 \
	VUNPCKLPS    Y1, Y0, Y2 \
	VUNPCKHPS    Y1, Y0, Y3 \
	VADDPS       Y3, Y2, Y2 \
	VEXTRACTF128 $1, Y2, X3 \
	VUNPCKLPD    X3, X2, X0 \
	VUNPCKHPD    X3, X2, X1 \
	VADDPS       X1, X0, X0

// HSUM8 leaves in Y0 the hsums of eight accumulators R0-R7 (lane r is
// hsum(Rr)), each with exactly HSUM's operations as in HSUM4: VSHUFF32X4
// (which reaches Y16-Y31) pairs row r with row r+4 in one vector, and the
// in-lane steps of HSUM4 then serve both 128-bit halves at once. Y1-Y6
// are scratch.
#define HSUM8(R0, R1, R2, R3, R4, R5, R6, R7) \
	VSHUFF32X4 $0, R4, R0, Y0 \
	VSHUFF32X4 $3, R4, R0, Y1 \
	VADDPS     Y1, Y0, Y0 \
	VSHUFF32X4 $0, R5, R1, Y1 \
	VSHUFF32X4 $3, R5, R1, Y2 \
	VADDPS     Y2, Y1, Y1 \
	VSHUFF32X4 $0, R6, R2, Y2 \
	VSHUFF32X4 $3, R6, R2, Y3 \
	VADDPS     Y3, Y2, Y2 \
	VSHUFF32X4 $0, R7, R3, Y3 \
	VSHUFF32X4 $3, R7, R3, Y4 \
	VADDPS     Y4, Y3, Y3 \
	VUNPCKLPS  Y1, Y0, Y4 \
	VUNPCKHPS  Y1, Y0, Y5 \
	VADDPS     Y5, Y4, Y4 \
	VUNPCKLPS  Y3, Y2, Y5 \
	VUNPCKHPS  Y3, Y2, Y6 \
	VADDPS     Y6, Y5, Y5 \
	VUNPCKLPD  Y5, Y4, Y0 \
	VUNPCKHPD  Y5, Y4, Y1 \
	VADDPS     Y1, Y0, Y0

// F16MUL sets Y (all lanes) to f16(a)*f16(b) as float32, rounded once like
// the Go kernels' fp16(a)*fp16(b). X is Y's low half, T scratch; AX is
// clobbered. VCVTPH2PS is exact.
#define F16MUL(a, b, X, Y, T) \
	MOVWLZX      a, AX \
	VMOVD        AX, X \
	VPINSRW      $1, b, X, X \
	VCVTPH2PS    X, X \
	VMOVSHDUP    X, T \
	VMULSS       T, X, X \
	VBROADCASTSS X, Y

// ROWSARGS loads a multi-row kernel's arguments (w, x, stride, nb) into
// SI, DI, DX and CX, and points R8, R9 and R13 at activation rows 1-3.
#define ROWSARGS \
	MOVQ w+0(FP), SI \
	MOVQ x+8(FP), DI \
	MOVQ stride+16(FP), DX \
	MOVQ nb+24(FP), CX \
	LEAQ (DI)(DX*1), R8 \
	LEAQ (DI)(DX*2), R9 \
	LEAQ (R9)(DX*1), R13

// ---- float rows

// func dotF32x32(w, x *byte, n int) float32
TEXT ·dotF32x32(SB), NOSPLIT, $0-28
	MOVQ   w+0(FP), SI
	MOVQ   x+8(FP), DI
	MOVQ   n+16(FP), CX
	SHRQ   $5, CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

f32loop:
	VMOVUPS     (SI), Y4
	VMOVUPS     32(SI), Y5
	VMOVUPS     64(SI), Y6
	VMOVUPS     96(SI), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ        $128, SI
	ADDQ        $128, DI
	DECQ        CX
	JNZ         f32loop

	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	HSUM(Y0, X0, X1)
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func dotF16x32(w, x *byte, n int) float32
TEXT ·dotF16x32(SB), NOSPLIT, $0-28
	MOVQ   w+0(FP), SI
	MOVQ   x+8(FP), DI
	MOVQ   n+16(FP), CX
	SHRQ   $5, CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

f16loop:
	VCVTPH2PS   (SI), Y4
	VCVTPH2PS   16(SI), Y5
	VCVTPH2PS   32(SI), Y6
	VCVTPH2PS   48(SI), Y7
	VCVTPH2PS   (DI), Y8
	VCVTPH2PS   16(DI), Y9
	VCVTPH2PS   32(DI), Y10
	VCVTPH2PS   48(DI), Y11
	VFMADD231PS Y8, Y4, Y0
	VFMADD231PS Y9, Y5, Y1
	VFMADD231PS Y10, Y6, Y2
	VFMADD231PS Y11, Y7, Y3
	ADDQ        $64, SI
	ADDQ        $64, DI
	DECQ        CX
	JNZ         f16loop

	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	HSUM(Y0, X0, X1)
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// ---- Q8_0 · Q8_0

// Q80VNNI adds to acc the block's 8 int32 partial sums of w*x times the
// scale in Y5, with w's prepared quants (w+128 as unsigned bytes) in Y1 and
// the activation block's quants at q. VPDPBUSD multiplies unsigned by
// signed bytes, so it gets w+128 (w XOR 0x80) in [0,255] and x in
// [-128,127]; subtracting the same instruction's sum of 128*x leaves
// exactly sum(w*x), with no saturation anywhere (unlike VPMADDUBSW, or
// the abs/sign trick, which is wrong for x = -128).
#define Q80VNNI(q, acc) \
	VMOVDQU     q, Y2 \
	VPXOR       Y3, Y3, Y3 \
	VPDPBUSD    Y2, Y1, Y3 \
	VPXOR       Y4, Y4, Y4 \
	VPDPBUSD    Y2, Y15, Y4 \
	VPSUBD      Y4, Y3, Y3 \
	VCVTDQ2PS   Y3, Y3 \
	VFMADD231PS Y5, Y3, acc

// func dotQ8_0VNNIAsm(w, x *byte, nb int) float32
TEXT ·dotQ8_0VNNIAsm(SB), NOSPLIT, $0-28
	MOVQ    w+0(FP), SI
	MOVQ    x+8(FP), DI
	MOVQ    nb+16(FP), CX
	VMOVDQU c80<>(SB), Y15
	VXORPS  Y0, Y0, Y0

q80vloop:
	VPXOR 2(SI), Y15, Y1
	F16MUL((SI), (DI), X5, Y5, X6)
	Q80VNNI(2(DI), Y0)
	ADDQ  $34, SI
	ADDQ  $34, DI
	DECQ  CX
	JNZ   q80vloop

	HSUM(Y0, X0, X1)
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// Q80X4ROW adds one activation row's block at x to acc (see
// dotQ8_0x4VNNIAsm): Y1 holds the weight quants, Y2 the negated
// correction, X0 the four rows' combined scales and idx the VPERMPS index
// selecting this row's.
#define Q80X4ROW(x, idx, acc) \
	VPXOR       2(x), Y15, Y4 \
	VMOVDQA     Y2, Y5 \
	VPDPBUSD    Y1, Y4, Y5 \
	VCVTDQ2PS   Y5, Y5 \
	VPERMPS     Y0, idx, Y6 \
	VFMADD231PS Y6, Y5, acc

// func dotQ8_0x4VNNIAsm(w, x *byte, stride, nb int, out *float32)
//
// Four activation rows (stride bytes apart) against one weight row. Here
// the roles are swapped relative to Q80VNNI so that the per-block work
// moves to the shared side: the activations go unsigned (x XOR 0x80 =
// x+128) and the weights stay signed, so sum(w*x) = VPDPBUSD(x+128, w) -
// 128*sum(w), and the correction 128*sum(w) is one VPDPBUSD per weight
// block for all four rows (each row's accumulator starts from its
// negation). The four rows' scales are converted together and picked out
// with VPERMPS. All integer sums are exact, as in Q80VNNI, and land in the
// same lanes, the FMAs are the same, and HSUM4 reduces each row in HSUM's
// order: every result is bit-identical to dotQ8_0VNNIAsm's on that row.
TEXT ·dotQ8_0x4VNNIAsm(SB), NOSPLIT, $0-40
	MOVQ      w+0(FP), SI
	MOVQ      x+8(FP), DI
	MOVQ      stride+16(FP), DX
	MOVQ      nb+24(FP), CX
	LEAQ      (DI)(DX*1), R8
	LEAQ      (DI)(DX*2), R9
	LEAQ      (R9)(DX*1), R13
	VMOVDQU   c80<>(SB), Y15
	VMOVDQU32 lane4<>+0(SB), Y16
	VMOVDQU32 lane4<>+32(SB), Y17
	VMOVDQU32 lane4<>+64(SB), Y18
	VMOVDQU32 lane4<>+96(SB), Y19
	VXORPS    Y10, Y10, Y10
	VXORPS    Y11, Y11, Y11
	VXORPS    Y12, Y12, Y12
	VXORPS    Y13, Y13, Y13

q80x4loop:
	VMOVDQU      2(SI), Y1
	VPXOR        Y2, Y2, Y2
	VPDPBUSD     Y1, Y15, Y2
	VPXOR        Y3, Y3, Y3
	VPSUBD       Y2, Y3, Y2
	MOVWLZX      (DI), AX
	VMOVD        AX, X0
	VPINSRW      $1, (R8), X0, X0
	VPINSRW      $2, (R9), X0, X0
	VPINSRW      $3, (R13), X0, X0
	VCVTPH2PS    X0, X0
	MOVWLZX      (SI), AX
	VMOVD        AX, X3
	VCVTPH2PS    X3, X3
	VBROADCASTSS X3, X3
	VMULPS       X3, X0, X0
	Q80X4ROW(DI, Y16, Y10)
	Q80X4ROW(R8, Y17, Y11)
	Q80X4ROW(R9, Y18, Y12)
	Q80X4ROW(R13, Y19, Y13)
	ADDQ         $34, SI
	ADDQ         $34, DI
	ADDQ         $34, R8
	ADDQ         $34, R9
	ADDQ         $34, R13
	DECQ         CX
	JNZ          q80x4loop

	// Each row's lane sum in dotQ8_0VNNIAsm's order (HSUM).
	MOVQ    out+32(FP), AX
	HSUM4(Y10, Y11, Y12, Y13)
	VMOVUPS X0, (AX)
	VZEROUPPER
	RET

// Q80X8ROW adds one activation row's block at x+BX to acc (see
// dotQ8_0x8VNNIAsm): Y1 holds the weight quants, Y2 the negated
// correction, and sc(SP) this row's combined scale, broadcast by the FMA;
// t and u are scratch.
#define Q80X8ROW(x, t, u, sc, acc) \
	VPXOR            2(x)(BX*1), Y15, t \
	VMOVDQA32        Y2, u \
	VPDPBUSD         Y1, t, u \
	VCVTDQ2PS        u, u \
	VFMADD231PS.BCST sc(SP), u, acc

// func dotQ8_0x8VNNIAsm(w, x *byte, stride, nb int, out *float32)
//
// Eight activation rows (stride bytes apart) against one weight row: the
// four-row kernel's arithmetic (see dotQ8_0x4VNNIAsm) with the weight
// block's load, its correction 128*sum(w) and its f16 scale shared by
// eight rows, and the eight rows' f16 scales gathered and converted in one
// VCVTPH2PS. The eight combined scales dx*dw go through the stack and are
// broadcast by the FMAs' memory operands. Every output gets exactly the
// one-row kernel's (dotQ8_0VNNIAsm's) operations in its order: per lane i
// of 8, acc[i] = fma(float(sum_i), dx*dw, acc[i]) over the blocks in
// order, then HSUM's ((acc[0]+acc[4])+(acc[2]+acc[6])) +
// ((acc[1]+acc[5])+(acc[3]+acc[7])), so its results are bit-identical to
// the one-row and four-row kernels'.
TEXT ·dotQ8_0x8VNNIAsm(SB), NOSPLIT, $32-40
	MOVQ      w+0(FP), SI
	MOVQ      x+8(FP), DI
	MOVQ      stride+16(FP), DX
	MOVQ      nb+24(FP), CX
	LEAQ      (DI)(DX*1), R8
	LEAQ      (DI)(DX*2), R9
	LEAQ      (R9)(DX*1), R10
	LEAQ      (R9)(DX*2), R11
	LEAQ      (R11)(DX*1), R12
	LEAQ      (R11)(DX*2), R13
	LEAQ      (R13)(DX*1), DX
	IMUL3Q    $34, CX, CX
	XORQ      BX, BX
	VMOVDQU   c80<>(SB), Y15
	VPXORD    Y16, Y16, Y16
	VPXORD    Y17, Y17, Y17
	VPXORD    Y18, Y18, Y18
	VPXORD    Y19, Y19, Y19
	VPXORD    Y20, Y20, Y20
	VPXORD    Y21, Y21, Y21
	VPXORD    Y22, Y22, Y22
	VPXORD    Y23, Y23, Y23

q80x8loop:
	VMOVDQU      2(SI)(BX*1), Y1
	VPXOR        Y2, Y2, Y2
	VPDPBUSD     Y1, Y15, Y2
	VPXOR        Y3, Y3, Y3
	VPSUBD       Y2, Y3, Y2
	MOVWLZX      (DI)(BX*1), AX
	VMOVD        AX, X0
	VPINSRW      $1, (R8)(BX*1), X0, X0
	VPINSRW      $2, (R9)(BX*1), X0, X0
	VPINSRW      $3, (R10)(BX*1), X0, X0
	VPINSRW      $4, (R11)(BX*1), X0, X0
	VPINSRW      $5, (R12)(BX*1), X0, X0
	VPINSRW      $6, (R13)(BX*1), X0, X0
	VPINSRW      $7, (DX)(BX*1), X0, X0
	VCVTPH2PS    X0, Y0
	VPBROADCASTW (SI)(BX*1), X3
	VCVTPH2PS    X3, Y3
	VMULPS       Y3, Y0, Y0
	VMOVUPS      Y0, (SP)
	Q80X8ROW(DI, Y4, Y24, 0, Y16)
	Q80X8ROW(R8, Y5, Y25, 4, Y17)
	Q80X8ROW(R9, Y6, Y26, 8, Y18)
	Q80X8ROW(R10, Y7, Y27, 12, Y19)
	Q80X8ROW(R11, Y8, Y28, 16, Y20)
	Q80X8ROW(R12, Y9, Y29, 20, Y21)
	Q80X8ROW(R13, Y10, Y30, 24, Y22)
	Q80X8ROW(DX, Y11, Y31, 28, Y23)
	ADDQ         $34, BX
	CMPQ         BX, CX
	JNE          q80x8loop

	// Each row's lane sum in dotQ8_0VNNIAsm's order (HSUM).
	MOVQ    out+32(FP), AX
	HSUM8(Y16, Y17, Y18, Y19, Y20, Y21, Y22, Y23)
	VMOVUPS Y0, (AX)
	VZEROUPPER
	RET

// Q80P8ROW adds the prepared activation row at off(DI) to acc (see
// dotQ8_0x8PrepAsm); as Q80X8ROW, with the flipped quants loaded rather
// than XORed.
#define Q80P8ROW(off, t, u, sc, acc) \
	VMOVDQU          off(DI), t \
	VMOVDQA32        Y2, u \
	VPDPBUSD         Y1, t, u \
	VCVTDQ2PS        u, u \
	VFMADD231PS.BCST sc(SP), u, acc

// func dotQ8_0x8PrepAsm(w, xp *byte, nb int, out *float32)
//
// dotQ8_0x8VNNIAsm on a prepared group of eight activation rows (see
// prepQ8_0x8): per block, the eight rows' quants already XORed with 0x80
// (32 bytes each, row after row) and then their scales as eight float32.
// The weight side and every output's operations and their order are
// dotQ8_0x8VNNIAsm's, so the results are bit-identical to it.
TEXT ·dotQ8_0x8PrepAsm(SB), NOSPLIT, $32-32
	MOVQ    w+0(FP), SI
	MOVQ    xp+8(FP), DI
	MOVQ    nb+16(FP), CX
	VMOVDQU c80<>(SB), Y15
	VPXORD  Y16, Y16, Y16
	VPXORD  Y17, Y17, Y17
	VPXORD  Y18, Y18, Y18
	VPXORD  Y19, Y19, Y19
	VPXORD  Y20, Y20, Y20
	VPXORD  Y21, Y21, Y21
	VPXORD  Y22, Y22, Y22
	VPXORD  Y23, Y23, Y23

q80p8loop:
	VMOVDQU      2(SI), Y1
	VPXOR        Y2, Y2, Y2
	VPDPBUSD     Y1, Y15, Y2
	VPXOR        Y3, Y3, Y3
	VPSUBD       Y2, Y3, Y2
	VPBROADCASTW (SI), X3
	VCVTPH2PS    X3, Y3
	VMULPS       256(DI), Y3, Y0
	VMOVUPS      Y0, (SP)
	Q80P8ROW(0, Y4, Y24, 0, Y16)
	Q80P8ROW(32, Y5, Y25, 4, Y17)
	Q80P8ROW(64, Y6, Y26, 8, Y18)
	Q80P8ROW(96, Y7, Y27, 12, Y19)
	Q80P8ROW(128, Y8, Y28, 16, Y20)
	Q80P8ROW(160, Y9, Y29, 20, Y21)
	Q80P8ROW(192, Y10, Y30, 24, Y22)
	Q80P8ROW(224, Y11, Y31, 28, Y23)
	ADDQ         $34, SI
	ADDQ         $288, DI
	DECQ         CX
	JNZ          q80p8loop

	MOVQ    out+24(FP), AX
	HSUM8(Y16, Y17, Y18, Y19, Y20, Y21, Y22, Y23)
	VMOVUPS Y0, (AX)
	VZEROUPPER
	RET

// func dotQ8_0AVX2Asm(w, x *byte, nb int) float32
//
// Without VNNI the quants are sign-extended to int16 and multiplied with
// VPMADDWD: exact for every int8 pair, including -128*-128.
TEXT ·dotQ8_0AVX2Asm(SB), NOSPLIT, $0-28
	MOVQ   w+0(FP), SI
	MOVQ   x+8(FP), DI
	MOVQ   nb+16(FP), CX
	VXORPS Y0, Y0, Y0

q80aloop:
	VPMOVSXBW   2(SI), Y1
	VPMOVSXBW   18(SI), Y2
	VPMOVSXBW   2(DI), Y3
	VPMOVSXBW   18(DI), Y4
	VPMADDWD    Y3, Y1, Y1
	VPMADDWD    Y4, Y2, Y2
	VPADDD      Y2, Y1, Y1
	VCVTDQ2PS   Y1, Y1
	F16MUL((SI), (DI), X5, Y5, X6)
	VFMADD231PS Y5, Y1, Y0
	ADDQ        $34, SI
	ADDQ        $34, DI
	DECQ        CX
	JNZ         q80aloop

	HSUM(Y0, X0, X1)
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// ---- Q4_0 · Q8_0

// Q40NIB loads a Q4_0 block's 16 quant bytes at q and leaves its 32
// unsigned nibbles in Y1 in element order (low nibbles, then high).
#define Q40NIB(q) \
	VMOVDQU     q, X1 \
	VPSRLW      $4, X1, X2 \
	VINSERTI128 $1, X2, Y1, Y1 \
	VPAND       Y15, Y1, Y1

// func dotQ4_0VNNIAsm(w, x *byte, nb int) float32
//
// sum((q-8)*x) = sum(q*x) - sum(8*x), both by VPDPBUSD with the unsigned
// nibbles (or 8s) and signed x: exact.
TEXT ·dotQ4_0VNNIAsm(SB), NOSPLIT, $0-28
	MOVQ    w+0(FP), SI
	MOVQ    x+8(FP), DI
	MOVQ    nb+16(FP), CX
	VMOVDQU c0F<>(SB), Y15
	VMOVDQU c08<>(SB), Y14
	VXORPS  Y0, Y0, Y0

q40vloop:
	Q40NIB(2(SI))
	VMOVDQU     2(DI), Y2
	VPXOR       Y3, Y3, Y3
	VPDPBUSD    Y2, Y1, Y3
	VPXOR       Y4, Y4, Y4
	VPDPBUSD    Y2, Y14, Y4
	VPSUBD      Y4, Y3, Y3
	VCVTDQ2PS   Y3, Y3
	F16MUL((SI), (DI), X5, Y5, X6)
	VFMADD231PS Y5, Y3, Y0
	ADDQ        $18, SI
	ADDQ        $34, DI
	DECQ        CX
	JNZ         q40vloop

	HSUM(Y0, X0, X1)
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func dotQ4_0AVX2Asm(w, x *byte, nb int) float32
//
// VPMADDUBSW of nibbles q <= 15 with x >= -128 gives pair sums within
// ±3840 and of 8s with x within ±2048: neither saturates, and their
// difference sum((q-8)*x) over a pair fits in int16, so VPSUBW is exact.
TEXT ·dotQ4_0AVX2Asm(SB), NOSPLIT, $0-28
	MOVQ    w+0(FP), SI
	MOVQ    x+8(FP), DI
	MOVQ    nb+16(FP), CX
	VMOVDQU c0F<>(SB), Y15
	VMOVDQU c08<>(SB), Y14
	VMOVDQU ones16<>(SB), Y13
	VXORPS  Y0, Y0, Y0

q40aloop:
	Q40NIB(2(SI))
	VPMADDUBSW  2(DI), Y1, Y3
	VPMADDUBSW  2(DI), Y14, Y4
	VPSUBW      Y4, Y3, Y3
	VPMADDWD    Y13, Y3, Y3
	VCVTDQ2PS   Y3, Y3
	F16MUL((SI), (DI), X5, Y5, X6)
	VFMADD231PS Y5, Y3, Y0
	ADDQ        $18, SI
	ADDQ        $34, DI
	DECQ        CX
	JNZ         q40aloop

	HSUM(Y0, X0, X1)
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// ---- k-quants · Q8_K
//
// All three use VPMADDUBSW(unsigned quant, signed activation) followed by
// VPMADDWD with the sub-block scale as int16, which applies the scale and
// widens to int32 in one step. Ranges: quants are at most 63 (Q6_K), so a
// VPMADDUBSW pair is within 2*63*128 = 16128 (no saturation, for any int8
// activation), and VPMADDWD by a scale of magnitude <= 128 stays far inside
// int32. The per-super-block int32 lanes (at most a few million) convert
// to float32 exactly.

// K4SCALES unpacks the 12 scale bytes at 4(SI) of a Q4_K/Q5_K block into
// 16 words at 0(SP): scales 0..7, then mins 0..7 (ggml's get_scale_min_k4
// done on four 32-bit words at once, as ggml's SIMD kernels do: every mask
// keeps whole 6-, 4- or 2-bit fields within their bytes). Y0 keeps the
// words; AX, BX, DX, R8, R9 are clobbered.
#define K4SCALES \
	MOVL       4(SI), AX \
	MOVL       8(SI), BX \
	MOVL       12(SI), DX \
	MOVL       DX, R8 \
	SHRL       $4, R8 \
	ANDL       $0x0f0f0f0f, R8 \
	MOVL       BX, R9 \
	SHRL       $6, R9 \
	ANDL       $0x03030303, R9 \
	SHLL       $4, R9 \
	ORL        R9, R8 \
	MOVL       AX, R9 \
	SHRL       $6, R9 \
	ANDL       $0x03030303, R9 \
	SHLL       $4, R9 \
	ANDL       $0x0f0f0f0f, DX \
	ORL        R9, DX \
	ANDL       $0x3f3f3f3f, AX \
	ANDL       $0x3f3f3f3f, BX \
	VMOVD      AX, X0 \
	VPINSRD    $1, DX, X0, X0 \
	VPINSRD    $2, BX, X0, X0 \
	VPINSRD    $3, R8, X0, X0 \
	VPMOVZXBW  X0, Y0 \
	VMOVDQU    Y0, (SP)

// K4MINS adds to Y13 the float mins term of a Q4_K/Q5_K block,
// dmin*xd * sum_j min_j*(bsum[2j]+bsum[2j+1]), in four lanes, and sets Y3
// to d*xd (all lanes). The mins are the high half of Y0 (K4SCALES). Pair
// sums of bsums are within ±4096 and the VPMADDWD with 6-bit mins is
// exact; VEX-encoded 128-bit ops zero the upper lanes, so Y1's upper four
// lanes add 0.
#define K4MINS \
	VMOVDQU      260(DI), X1 \
	VMOVDQU      276(DI), X2 \
	VPHADDW      X2, X1, X1 \
	VEXTRACTI128 $1, Y0, X2 \
	VPMADDWD     X2, X1, X1 \
	VCVTDQ2PS    Y1, Y1 \
	MOVWLZX      (SI), AX \
	VMOVD        AX, X2 \
	VPINSRW      $1, 2(SI), X2, X2 \
	VCVTPH2PS    X2, X2 \
	VBROADCASTSS (DI), X3 \
	VMULPS       X3, X2, X2 \
	VBROADCASTSS X2, Y3 \
	VMOVSHDUP    X2, X2 \
	VBROADCASTSS X2, Y2 \
	VFMADD231PS  Y2, Y1, Y13

// K4CHUNK adds to Y12 the scaled sums of one 64-element chunk c of a
// Q4_K/Q5_K block whose unsigned quants are in Y4 (elements 64c..64c+31)
// and Y5 (64c+32..64c+63). yoff is 4+64c, soff the byte offset 4c of
// scale 2c in the words at 0(SP).
#define K4CHUNK(yoff, soff) \
	VPMADDUBSW   yoff(DI), Y4, Y4 \
	VPMADDUBSW   yoff+32(DI), Y5, Y5 \
	VPBROADCASTW soff(SP), Y6 \
	VPBROADCASTW soff+2(SP), Y7 \
	VPMADDWD     Y6, Y4, Y4 \
	VPMADDWD     Y7, Y5, Y5 \
	VPADDD       Y4, Y12, Y12 \
	VPADDD       Y5, Y12, Y12

// Q4KNIB splits the 32 bytes at q into low nibbles (Y4) and high (Y5).
#define Q4KNIB(q) \
	VMOVDQU q, Y4 \
	VPSRLW  $4, Y4, Y5 \
	VPAND   Y15, Y4, Y4 \
	VPAND   Y15, Y5, Y5

// func dotQ4_KAVX2Asm(w, x *byte, nb int) float32
TEXT ·dotQ4_KAVX2Asm(SB), NOSPLIT, $32-28
	MOVQ    w+0(FP), SI
	MOVQ    x+8(FP), DI
	MOVQ    nb+16(FP), CX
	VMOVDQU c0F<>(SB), Y15
	VXORPS  Y14, Y14, Y14
	VXORPS  Y13, Y13, Y13

q4kloop:
	K4SCALES
	K4MINS
	VPXOR Y12, Y12, Y12
	Q4KNIB(16(SI))
	K4CHUNK(4, 0)
	Q4KNIB(48(SI))
	K4CHUNK(68, 4)
	Q4KNIB(80(SI))
	K4CHUNK(132, 8)
	Q4KNIB(112(SI))
	K4CHUNK(196, 12)
	VCVTDQ2PS   Y12, Y12
	VFMADD231PS Y3, Y12, Y14
	ADDQ        $144, SI
	ADDQ        $292, DI
	DECQ        CX
	JNZ         q4kloop

	VSUBPS Y13, Y14, Y0
	HSUM(Y0, X0, X1)
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// ---- Q4_K · Q8_K, four and eight activation rows (AVX-512 level: the
// EVEX forms reach Z16-Z31, which hold the block's unpacked quants and
// broadcast scales so that they are prepared once for all the rows). Each row's
// int32 lanes, FMAs and final reduction are dotQ4_KAVX2Asm's, so every
// result is bit-identical to the one-row kernel's on that row.

// K4ROW adds one activation row's block (at x) to the float accumulator F
// and the mins accumulator M (used in its low four lanes): the integer
// sums of the four 64-element chunks against Z16/Z18/Z20/Z22 (each the
// unsigned quants of two sub-blocks, the even one in the low half) scaled
// by Z24/Z26/Z28/Z30 (the two sub-blocks' scales, broadcast to their
// halves): VPDPWSSD fuses VPMADDWD and the add, the low half gathering the
// even sub-blocks and the high half the odd ones, which are joined once
// (int32 adds, exact in any order, so the lanes are the one-row kernel's);
// times d*xd; and dmin*xd times the mins dotted with the pair sums of x's
// bsums. Y13 holds d and X15 dmin in every lane (each product with xd is
// the one-row kernel's, a single rounding of the same two floats), X14 the
// eight mins as words. Z0, Z1, Y2, Y3, Z12 scratch.
#define K4ROW(x, F, M) \
	K4INT(4(x), 68(x), 132(x), 196(x)) \
	VMULPS.BCST   (x), Y13, Y2 \
	VFMADD231PS   Y2, Y12, F \
	VMOVDQU       260(x), X2 \
	VMOVDQU       276(x), X3 \
	VPHADDW       X3, X2, X2 \
	VPMADDWD      X14, X2, X2 \
	VCVTDQ2PS     X2, X2 \
	VMULPS.BCST   (x), X15, X1 \
	VFMADD231PS   X1, X2, M

// K4INT leaves in Y12, as floats, the scaled integer sums of one
// activation row's super-block whose quants are the 64-byte chunks q0-q3
// (see K4ROW).
#define K4INT(q0, q1, q2, q3) \
	VPMADDUBSW    q0, Z16, Z0 \
	VPMADDWD      Z24, Z0, Z12 \
	VPMADDUBSW    q1, Z18, Z1 \
	VPDPWSSD      Z26, Z1, Z12 \
	VPMADDUBSW    q2, Z20, Z0 \
	VPDPWSSD      Z28, Z0, Z12 \
	VPMADDUBSW    q3, Z22, Z1 \
	VPDPWSSD      Z30, Z1, Z12 \
	VEXTRACTI64X4 $1, Z12, Y3 \
	VPADDD        Y3, Y12, Y12 \
	VCVTDQ2PS     Y12, Y12

// K4ROWP is K4ROW on row r of a prepared group (see prepQ4_Kx8) whose
// super-block is at DI: the quants at 256r, the pair sums of the bsums
// already formed at 2048+16r (VPMADDWD takes them from memory), xd at
// 2176+4r. The same integers and float operations as K4ROW, except that
// the products of the weight's d and dmin with the row's xd come from
// 32+4r(SP) and 64+4r(SP), formed for all eight rows at once.
#define K4ROWP(r, F, M) \
	K4INT(256*r(DI), 256*r+64(DI), 256*r+128(DI), 256*r+192(DI)) \
	VFMADD231PS.BCST 32+4*r(SP), Y12, F \
	VPMADDWD      2048+16*r(DI), X14, X2 \
	VCVTDQ2PS     X2, X2 \
	VFMADD231PS.BCST 64+4*r(SP), X2, M

// Q4KPAIR unpacks the 32 bytes at q into the 64 quants of two sub-blocks:
// low nibbles into the low half of Z (whose low half Ylo names), high
// nibbles into the high half.
#define Q4KPAIR(q, Ylo, Z, Yhi) \
	VMOVDQU      q, Y0 \
	VPSRLW       $4, Y0, Y1 \
	VPANDD       c0F<>(SB), Y0, Ylo \
	VPANDD       c0F<>(SB), Y1, Yhi \
	VINSERTI64X4 $1, Yhi, Z, Z

// K4SCALEPAIR broadcasts the scale words at soff(SP) and soff+2(SP) to the
// low and high halves of Z.
#define K4SCALEPAIR(soff, Z, Yhi) \
	VPBROADCASTW soff(SP), Z \
	VPBROADCASTW soff+2(SP), Yhi \
	VINSERTI64X4 $1, Yhi, Z, Z

// Q4KPREP prepares the Q4_K block at SI for the multi-row kernels: its
// scales as words at 0(SP) and broadcast in pairs to Z24/Z26/Z28/Z30, its
// mins as words in X14, d in every lane of Y13 and dmin in every lane of
// X15, and its quants in Z16/Z18/Z20/Z22 (K4ROW's layout). It uses AX,
// BX, R10-R12, Y0-Y3.
#define Q4KPREP \
	MOVL         4(SI), AX \
	MOVL         8(SI), BX \
	MOVL         12(SI), R10 \
	MOVL         R10, R11 \
	SHRL         $4, R11 \
	ANDL         $0x0f0f0f0f, R11 \
	MOVL         BX, R12 \
	SHRL         $6, R12 \
	ANDL         $0x03030303, R12 \
	SHLL         $4, R12 \
	ORL          R12, R11 \
	MOVL         AX, R12 \
	SHRL         $6, R12 \
	ANDL         $0x03030303, R12 \
	SHLL         $4, R12 \
	ANDL         $0x0f0f0f0f, R10 \
	ORL          R12, R10 \
	ANDL         $0x3f3f3f3f, AX \
	ANDL         $0x3f3f3f3f, BX \
	VMOVD        AX, X0 \
	VPINSRD      $1, R10, X0, X0 \
	VPINSRD      $2, BX, X0, X0 \
	VPINSRD      $3, R11, X0, X0 \
	VPMOVZXBW    X0, Y0 \
	VMOVDQU      Y0, (SP) \
	VEXTRACTI128 $1, Y0, X14 \
	K4SCALEPAIR(0, Z24, Y3) \
	K4SCALEPAIR(4, Z26, Y3) \
	K4SCALEPAIR(8, Z28, Y3) \
	K4SCALEPAIR(12, Z30, Y3) \
	MOVWLZX      (SI), AX \
	VMOVD        AX, X13 \
	VPINSRW      $1, 2(SI), X13, X13 \
	VCVTPH2PS    X13, X13 \
	VMOVSHDUP    X13, X15 \
	VBROADCASTSS X15, X15 \
	VBROADCASTSS X13, Y13 \
	Q4KPAIR(16(SI), Y16, Z16, Y2) \
	Q4KPAIR(48(SI), Y18, Z18, Y2) \
	Q4KPAIR(80(SI), Y20, Z20, Y2) \
	Q4KPAIR(112(SI), Y22, Z22, Y2)

// func dotQ4_Kx4Asm(w, x *byte, stride, nb int, out *float32)
TEXT ·dotQ4_Kx4Asm(SB), NOSPLIT, $32-40
	ROWSARGS
	VXORPS  X4, X4, X4
	VXORPS  X5, X5, X5
	VXORPS  X6, X6, X6
	VXORPS  X7, X7, X7
	VXORPS  X8, X8, X8
	VXORPS  X9, X9, X9
	VXORPS  X10, X10, X10
	VXORPS  X11, X11, X11

q4kx4loop:
	Q4KPREP

	K4ROW(DI, Y4, X8)
	K4ROW(R8, Y5, X9)
	K4ROW(R9, Y6, X10)
	K4ROW(R13, Y7, X11)

	ADDQ $144, SI
	ADDQ $292, DI
	ADDQ $292, R8
	ADDQ $292, R9
	ADDQ $292, R13
	DECQ CX
	JNZ  q4kx4loop

	// As dotQ4_KAVX2Asm ends: the mins subtracted lane by lane (their
	// upper four lanes are zero), then each row's HSUM.
	VSUBPS  Y8, Y4, Y4
	VSUBPS  Y9, Y5, Y5
	VSUBPS  Y10, Y6, Y6
	VSUBPS  Y11, Y7, Y7
	MOVQ    out+32(FP), AX
	HSUM4(Y4, Y5, Y6, Y7)
	VMOVUPS X0, (AX)
	VZEROUPPER
	RET

// K4X8ZERO clears the eight-row Q4_K kernels' accumulators: rows 0-3 in
// Y4-Y7 (mins X8-X11), rows 4-7 in Y17-Y23 (mins X25-X31), odd registers.
#define K4X8ZERO \
	VXORPS X4, X4, X4 \
	VXORPS X5, X5, X5 \
	VXORPS X6, X6, X6 \
	VXORPS X7, X7, X7 \
	VXORPS X8, X8, X8 \
	VXORPS X9, X9, X9 \
	VXORPS X10, X10, X10 \
	VXORPS X11, X11, X11 \
	VPXORD Y17, Y17, Y17 \
	VPXORD Y19, Y19, Y19 \
	VPXORD Y21, Y21, Y21 \
	VPXORD Y23, Y23, Y23 \
	VPXORD X25, X25, X25 \
	VPXORD X27, X27, X27 \
	VPXORD X29, X29, X29 \
	VPXORD X31, X31, X31

// K4X8END ends the eight-row Q4_K kernels as dotQ4_KAVX2Asm ends, row by
// row: the mins subtracted lane by lane, then HSUM, the eight results
// stored at AX.
#define K4X8END \
	VSUBPS  Y8, Y4, Y4 \
	VSUBPS  Y9, Y5, Y5 \
	VSUBPS  Y10, Y6, Y6 \
	VSUBPS  Y11, Y7, Y7 \
	HSUM4(Y4, Y5, Y6, Y7) \
	VMOVUPS X0, (AX) \
	VSUBPS  Y25, Y17, Y4 \
	VSUBPS  Y27, Y19, Y5 \
	VSUBPS  Y29, Y21, Y6 \
	VSUBPS  Y31, Y23, Y7 \
	HSUM4(Y4, Y5, Y6, Y7) \
	VMOVUPS X0, 16(AX)

// func dotQ4_Kx8Asm(w, x *byte, stride, nb int, out *float32)
//
// Eight activation rows: rows 0-3 as dotQ4_Kx4Asm, rows 4-7 at four
// strides further (their pointers rebuilt after each block's preparation,
// which uses those registers), accumulating into Y17-Y23 and X25-X31.
TEXT ·dotQ4_Kx8Asm(SB), NOSPLIT, $32-40
	ROWSARGS
	K4X8ZERO

q4kx8loop:
	Q4KPREP

	K4ROW(DI, Y4, X8)
	K4ROW(R8, Y5, X9)
	K4ROW(R9, Y6, X10)
	K4ROW(R13, Y7, X11)
	LEAQ (DI)(DX*4), AX
	LEAQ (R8)(DX*4), BX
	LEAQ (R9)(DX*4), R10
	LEAQ (R13)(DX*4), R11
	K4ROW(AX, Y17, X25)
	K4ROW(BX, Y19, X27)
	K4ROW(R10, Y21, X29)
	K4ROW(R11, Y23, X31)

	ADDQ $144, SI
	ADDQ $292, DI
	ADDQ $292, R8
	ADDQ $292, R9
	ADDQ $292, R13
	DECQ CX
	JNZ  q4kx8loop

	MOVQ out+32(FP), AX
	K4X8END
	VZEROUPPER
	RET

// func dotQ4_Kx8PrepAsm(w, xp *byte, nb int, out *float32)
//
// dotQ4_Kx8Asm on a prepared group of eight activation rows (see
// prepQ4_Kx8): the same weight preparation, and each row's K4ROWP gives it
// K4ROW's integers and float operations in their order, so the results are
// bit-identical to dotQ4_Kx8Asm's.
TEXT ·dotQ4_Kx8PrepAsm(SB), NOSPLIT, $96-32
	MOVQ    w+0(FP), SI
	MOVQ    xp+8(FP), DI
	MOVQ    nb+16(FP), CX
	K4X8ZERO

q4kx8ploop:
	Q4KPREP
	VMULPS       2176(DI), Y13, Y0
	VMOVUPS      Y0, 32(SP)
	VBROADCASTSS X15, Y1
	VMULPS       2176(DI), Y1, Y0
	VMOVUPS      Y0, 64(SP)

	K4ROWP(0, Y4, X8)
	K4ROWP(1, Y5, X9)
	K4ROWP(2, Y6, X10)
	K4ROWP(3, Y7, X11)
	K4ROWP(4, Y17, X25)
	K4ROWP(5, Y19, X27)
	K4ROWP(6, Y21, X29)
	K4ROWP(7, Y23, X31)

	ADDQ $144, SI
	ADDQ $2208, DI
	DECQ CX
	JNZ  q4kx8ploop

	MOVQ out+24(FP), AX
	K4X8END
	VZEROUPPER
	RET

// Q5KHIGH ORs the fifth bits into Y4/Y5: bit 0 of each byte of Y8 (qh,
// shifted right once per sub-block so far) is the low nibble's, bit 1 the
// high nibble's. VPSRLW moves bits across bytes only into the top bits of
// each byte, which are never read before the four chunks are done.
#define Q5KHIGH \
	VPAND  Y9, Y8, Y10 \
	VPSLLW $4, Y10, Y10 \
	VPOR   Y10, Y4, Y4 \
	VPSRLW $1, Y8, Y8 \
	VPAND  Y9, Y8, Y10 \
	VPSLLW $4, Y10, Y10 \
	VPOR   Y10, Y5, Y5 \
	VPSRLW $1, Y8, Y8

// func dotQ5_KAVX2Asm(w, x *byte, nb int) float32
TEXT ·dotQ5_KAVX2Asm(SB), NOSPLIT, $32-28
	MOVQ    w+0(FP), SI
	MOVQ    x+8(FP), DI
	MOVQ    nb+16(FP), CX
	VMOVDQU c0F<>(SB), Y15
	VMOVDQU c01<>(SB), Y9
	VXORPS  Y14, Y14, Y14
	VXORPS  Y13, Y13, Y13

q5kloop:
	K4SCALES
	K4MINS
	VPXOR   Y12, Y12, Y12
	VMOVDQU 16(SI), Y8
	Q4KNIB(48(SI))
	Q5KHIGH
	K4CHUNK(4, 0)
	Q4KNIB(80(SI))
	Q5KHIGH
	K4CHUNK(68, 4)
	Q4KNIB(112(SI))
	Q5KHIGH
	K4CHUNK(132, 8)
	Q4KNIB(144(SI))
	Q5KHIGH
	K4CHUNK(196, 12)
	VCVTDQ2PS   Y12, Y12
	VFMADD231PS Y3, Y12, Y14
	ADDQ        $176, SI
	ADDQ        $292, DI
	DECQ        CX
	JNZ         q5kloop

	VSUBPS Y13, Y14, Y0
	HSUM(Y0, X0, X1)
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// Q6KQ adds to Y12 the scaled sums of 32 quants of a Q6_K half: Y0 holds
// their low nibbles, Y1 their top two bits already at bits 4-5; yoff is
// the offset of the 32 activations and moff = 16*m selects the scale pair
// m (sub-blocks 2m, 2m+1). VPSHUFB copies scale 2m to bytes 0-7 and 2m+1 to
// bytes 8-15 so that, sign-extended to words, the low 128-bit lane (the
// first 16 quants) is scaled by one and the high lane by the other.
#define Q6KQ(yoff, moff) \
	VPOR       Y1, Y0, Y0 \
	VPMADDUBSW yoff(DI), Y0, Y0 \
	VPSHUFB    q6shuf<>+moff(SB), X11, X1 \
	VPMOVSXBW  X1, Y1 \
	VPMADDWD   Y1, Y0, Y0 \
	VPADDD     Y0, Y12, Y12

// Q6KHALF handles 128 elements: ql at qoff(SI), qh at hoff(SI),
// activations from yoff(DI), scale pairs from moff/16 on.
#define Q6KHALF(qoff, hoff, yoff, moff) \
	VMOVDQU qoff(SI), Y4 \
	VMOVDQU qoff+32(SI), Y5 \
	VMOVDQU hoff(SI), Y6 \
	VPAND   Y15, Y4, Y0 \
	VPSLLW  $4, Y6, Y1 \
	VPAND   Y10, Y1, Y1 \
	Q6KQ(yoff, moff) \
	VPAND   Y15, Y5, Y0 \
	VPSLLW  $2, Y6, Y1 \
	VPAND   Y10, Y1, Y1 \
	Q6KQ(yoff+32, moff+16) \
	VPSRLW  $4, Y4, Y0 \
	VPAND   Y15, Y0, Y0 \
	VPAND   Y10, Y6, Y1 \
	Q6KQ(yoff+64, moff+32) \
	VPSRLW  $4, Y5, Y0 \
	VPAND   Y15, Y0, Y0 \
	VPSRLW  $2, Y6, Y1 \
	VPAND   Y10, Y1, Y1 \
	Q6KQ(yoff+96, moff+48)

// func dotQ6_KAVX2Asm(w, x *byte, nb int) float32
//
// The quants are stored biased by 32: sum(sc*(q-32)*y) is computed as
// sum(sc*q*y) - 32*sum_k sc_k*bsum_k, using Q8_K's bsums (the sums of
// each 16 activations, which is what the format guarantees them to be).
TEXT ·dotQ6_KAVX2Asm(SB), NOSPLIT, $0-28
	MOVQ    w+0(FP), SI
	MOVQ    x+8(FP), DI
	MOVQ    nb+16(FP), CX
	VMOVDQU c0F<>(SB), Y15
	VMOVDQU c30<>(SB), Y10
	VXORPS  Y14, Y14, Y14

q6kloop:
	VPMOVSXBW 192(SI), Y0
	VPMADDWD  260(DI), Y0, Y0
	VPSLLD    $5, Y0, Y0
	VPXOR     Y12, Y12, Y12
	VPSUBD    Y0, Y12, Y12
	VMOVDQU   192(SI), X11
	Q6KHALF(0, 128, 4, 0)
	Q6KHALF(64, 160, 132, 64)
	VCVTDQ2PS    Y12, Y12
	MOVWLZX      208(SI), AX
	VMOVD        AX, X2
	VCVTPH2PS    X2, X2
	VMULSS       (DI), X2, X2
	VBROADCASTSS X2, Y2
	VFMADD231PS  Y2, Y12, Y14
	ADDQ         $210, SI
	ADDQ         $292, DI
	DECQ         CX
	JNZ          q6kloop

	HSUM(Y14, X14, X1)
	VMOVSS X14, ret+24(FP)
	VZEROUPPER
	RET

// ---- Q6_K · Q8_K, four and eight activation rows (AVX-512 level, like
// the Q4_K ones): each super-block's 256 quants are unpacked once (as the
// unsigned biased values, chunk c = elements 32c..32c+31) into chunk
// pairs in Z16-Z22 and the scale pairs spread to words (Q6KQ's VPSHUFB
// layout) in Z24-Z30; Y13 holds the 16 scales times -32 as words for the
// bias term and Y14 d. Each row's int32 lanes, FMAs and final HSUM are
// dotQ6_KAVX2Asm's, so every result is bit-identical to the one-row
// kernel's on that row.

// K6ROW adds one activation row's block (at x) to F: the exact int32
// lanes sum(sc*q*y) - 32*sum_k sc_k*bsum_k (as dotQ6_KAVX2Asm; the second
// term by one VPDPWSSD with the scales times -32), converted and times
// d*xd. The quants and scale words come in chunk pairs,
// Z16/Z18/Z20/Z22 and Z24/Z26/Z28/Z30 (Q6KPREP): the low half gathers the
// even chunks and the high half the odd ones, joined once by int32 adds,
// so the lanes are the one-row kernel's. Z0, Z1, Y2, Y3, Z12 scratch.
#define K6ROW(x, F) \
	VPMADDUBSW    4(x), Z16, Z0 \
	VPMADDWD      Z24, Z0, Z12 \
	VPMADDUBSW    68(x), Z18, Z1 \
	VPDPWSSD      Z26, Z1, Z12 \
	VPMADDUBSW    132(x), Z20, Z0 \
	VPDPWSSD      Z28, Z0, Z12 \
	VPMADDUBSW    196(x), Z22, Z1 \
	VPDPWSSD      Z30, Z1, Z12 \
	VEXTRACTI64X4 $1, Z12, Y3 \
	VPADDD        Y3, Y12, Y12 \
	VPDPWSSD      260(x), Y13, Y12 \
	VCVTDQ2PS     Y12, Y12 \
	VMULPS.BCST   (x), Y14, Y1 \
	VFMADD231PS   Y1, Y12, F

// K6HALF unpacks half h of a Q6_K block (ql at qoff, qh at hoff) into the
// four registers A-D, as Q6KHALF does. Y0-Y3, Y12 scratch.
#define K6HALF(qoff, hoff, A, B, C, D) \
	VMOVDQU qoff(SI), Y0 \
	VMOVDQU qoff+32(SI), Y1 \
	VMOVDQU hoff(SI), Y2 \
	VPANDD  Y15, Y0, Y3 \
	VPSLLW  $4, Y2, Y12 \
	VPANDD  Y10, Y12, Y12 \
	VPORD   Y12, Y3, A \
	VPANDD  Y15, Y1, Y3 \
	VPSLLW  $2, Y2, Y12 \
	VPANDD  Y10, Y12, Y12 \
	VPORD   Y12, Y3, B \
	VPSRLW  $4, Y0, Y3 \
	VPANDD  Y15, Y3, Y3 \
	VPANDD  Y10, Y2, Y12 \
	VPORD   Y12, Y3, C \
	VPSRLW  $4, Y1, Y3 \
	VPANDD  Y15, Y3, Y3 \
	VPSRLW  $2, Y2, Y12 \
	VPANDD  Y10, Y12, Y12 \
	VPORD   Y12, Y3, D

// K6SC spreads scale pair m (16*m = moff) of the bytes in X11 to words.
#define K6SC(moff, R) \
	VPSHUFB   q6shuf<>+moff(SB), X11, X3 \
	VPMOVSXBW X3, R

// K6SCPAIR spreads scale pairs m and m+1 (moff = 16*m) to words in the low
// and high halves of Z (whose low half Ylo names), through Y8.
#define K6SCPAIR(moff, Ylo, Z) \
	K6SC(moff, Ylo) \
	K6SC(moff+16, Y8) \
	VINSERTI64X4 $1, Y8, Z, Z

// Q6KPREP prepares the Q6_K block at SI for the multi-row kernels: its 16
// scales times -32 as words in Y13, d in every lane of Y14, the scale words of chunk pairs in
// Z24/Z26/Z28/Z30 and the unsigned quants of chunk pairs in
// Z16/Z18/Z20/Z22 (K6ROW's layout), each odd chunk going through Y8/Y9
// into its pair's high half so that the odd upper registers stay free.
// It uses AX, X11, Y0-Y3, Y8, Y9 and Y12.
#define Q6KPREP \
	VMOVDQU      192(SI), X11 \
	VPMOVSXBW    X11, Y13 \
	VPSLLW       $5, Y13, Y13 \
	VPXOR        Y12, Y12, Y12 \
	VPSUBW       Y13, Y12, Y13 \
	K6SCPAIR(0, Y24, Z24) \
	K6SCPAIR(32, Y26, Z26) \
	K6SCPAIR(64, Y28, Z28) \
	K6SCPAIR(96, Y30, Z30) \
	MOVWLZX      208(SI), AX \
	VMOVD        AX, X14 \
	VCVTPH2PS    X14, X14 \
	VBROADCASTSS X14, Y14 \
	K6HALF(0, 128, Y16, Y8, Y18, Y9) \
	VINSERTI64X4 $1, Y8, Z16, Z16 \
	VINSERTI64X4 $1, Y9, Z18, Z18 \
	K6HALF(64, 160, Y20, Y8, Y22, Y9) \
	VINSERTI64X4 $1, Y8, Z20, Z20 \
	VINSERTI64X4 $1, Y9, Z22, Z22

// func dotQ6_Kx4Asm(w, x *byte, stride, nb int, out *float32)
TEXT ·dotQ6_Kx4Asm(SB), NOSPLIT, $0-40
	ROWSARGS
	VMOVDQU c0F<>(SB), Y15
	VMOVDQU c30<>(SB), Y10
	VXORPS  X4, X4, X4
	VXORPS  X5, X5, X5
	VXORPS  X6, X6, X6
	VXORPS  X7, X7, X7

q6kx4loop:
	Q6KPREP

	K6ROW(DI, Y4)
	K6ROW(R8, Y5)
	K6ROW(R9, Y6)
	K6ROW(R13, Y7)

	ADDQ $210, SI
	ADDQ $292, DI
	ADDQ $292, R8
	ADDQ $292, R9
	ADDQ $292, R13
	DECQ CX
	JNZ  q6kx4loop

	// Each row's lane sum in dotQ6_KAVX2Asm's order (HSUM).
	MOVQ    out+32(FP), AX
	HSUM4(Y4, Y5, Y6, Y7)
	VMOVUPS X0, (AX)
	VZEROUPPER
	RET

// func dotQ6_Kx8Asm(w, x *byte, stride, nb int, out *float32)
//
// Eight activation rows: Q6KPREP leaves Y17-Y23 free for rows 4-7's
// accumulators; those rows sit four strides further, their pointers
// rebuilt after each block's preparation (which uses AX).
TEXT ·dotQ6_Kx8Asm(SB), NOSPLIT, $0-40
	ROWSARGS
	VMOVDQU c0F<>(SB), Y15
	VMOVDQU c30<>(SB), Y10
	VXORPS  X4, X4, X4
	VXORPS  X5, X5, X5
	VXORPS  X6, X6, X6
	VXORPS  X7, X7, X7
	VPXORD  Y17, Y17, Y17
	VPXORD  Y19, Y19, Y19
	VPXORD  Y21, Y21, Y21
	VPXORD  Y23, Y23, Y23

q6kx8loop:
	Q6KPREP

	K6ROW(DI, Y4)
	K6ROW(R8, Y5)
	K6ROW(R9, Y6)
	K6ROW(R13, Y7)
	LEAQ (DI)(DX*4), AX
	LEAQ (R8)(DX*4), BX
	LEAQ (R9)(DX*4), R10
	LEAQ (R13)(DX*4), R11
	K6ROW(AX, Y17)
	K6ROW(BX, Y19)
	K6ROW(R10, Y21)
	K6ROW(R11, Y23)

	ADDQ $210, SI
	ADDQ $292, DI
	ADDQ $292, R8
	ADDQ $292, R9
	ADDQ $292, R13
	DECQ CX
	JNZ  q6kx8loop

	MOVQ    out+32(FP), AX
	HSUM4(Y4, Y5, Y6, Y7)
	VMOVUPS X0, (AX)
	VMOVDQA64 Y17, Y4
	VMOVDQA64 Y19, Y5
	VMOVDQA64 Y21, Y6
	VMOVDQA64 Y23, Y7
	HSUM4(Y4, Y5, Y6, Y7)
	VMOVUPS X0, 16(AX)
	VZEROUPPER
	RET

DATA c0F<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA c0F<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA c0F<>+16(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA c0F<>+24(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL c0F<>(SB), RODATA|NOPTR, $32

DATA c80<>+0(SB)/8, $0x8080808080808080
DATA c80<>+8(SB)/8, $0x8080808080808080
DATA c80<>+16(SB)/8, $0x8080808080808080
DATA c80<>+24(SB)/8, $0x8080808080808080
GLOBL c80<>(SB), RODATA|NOPTR, $32

DATA c08<>+0(SB)/8, $0x0808080808080808
DATA c08<>+8(SB)/8, $0x0808080808080808
DATA c08<>+16(SB)/8, $0x0808080808080808
DATA c08<>+24(SB)/8, $0x0808080808080808
GLOBL c08<>(SB), RODATA|NOPTR, $32

DATA c30<>+0(SB)/8, $0x3030303030303030
DATA c30<>+8(SB)/8, $0x3030303030303030
DATA c30<>+16(SB)/8, $0x3030303030303030
DATA c30<>+24(SB)/8, $0x3030303030303030
GLOBL c30<>(SB), RODATA|NOPTR, $32

DATA c01<>+0(SB)/8, $0x0101010101010101
DATA c01<>+8(SB)/8, $0x0101010101010101
DATA c01<>+16(SB)/8, $0x0101010101010101
DATA c01<>+24(SB)/8, $0x0101010101010101
GLOBL c01<>(SB), RODATA|NOPTR, $32

DATA ones16<>+0(SB)/8, $0x0001000100010001
DATA ones16<>+8(SB)/8, $0x0001000100010001
DATA ones16<>+16(SB)/8, $0x0001000100010001
DATA ones16<>+24(SB)/8, $0x0001000100010001
GLOBL ones16<>(SB), RODATA|NOPTR, $32

DATA q6shuf<>+0(SB)/8, $0x0000000000000000
DATA q6shuf<>+8(SB)/8, $0x0101010101010101
DATA q6shuf<>+16(SB)/8, $0x0202020202020202
DATA q6shuf<>+24(SB)/8, $0x0303030303030303
DATA q6shuf<>+32(SB)/8, $0x0404040404040404
DATA q6shuf<>+40(SB)/8, $0x0505050505050505
DATA q6shuf<>+48(SB)/8, $0x0606060606060606
DATA q6shuf<>+56(SB)/8, $0x0707070707070707
DATA q6shuf<>+64(SB)/8, $0x0808080808080808
DATA q6shuf<>+72(SB)/8, $0x0909090909090909
DATA q6shuf<>+80(SB)/8, $0x0a0a0a0a0a0a0a0a
DATA q6shuf<>+88(SB)/8, $0x0b0b0b0b0b0b0b0b
DATA q6shuf<>+96(SB)/8, $0x0c0c0c0c0c0c0c0c
DATA q6shuf<>+104(SB)/8, $0x0d0d0d0d0d0d0d0d
DATA q6shuf<>+112(SB)/8, $0x0e0e0e0e0e0e0e0e
DATA q6shuf<>+120(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL q6shuf<>(SB), RODATA|NOPTR, $128

DATA lane4<>+0(SB)/8, $0x0000000000000000
DATA lane4<>+8(SB)/8, $0x0000000000000000
DATA lane4<>+16(SB)/8, $0x0000000000000000
DATA lane4<>+24(SB)/8, $0x0000000000000000
DATA lane4<>+32(SB)/8, $0x0000000100000001
DATA lane4<>+40(SB)/8, $0x0000000100000001
DATA lane4<>+48(SB)/8, $0x0000000100000001
DATA lane4<>+56(SB)/8, $0x0000000100000001
DATA lane4<>+64(SB)/8, $0x0000000200000002
DATA lane4<>+72(SB)/8, $0x0000000200000002
DATA lane4<>+80(SB)/8, $0x0000000200000002
DATA lane4<>+88(SB)/8, $0x0000000200000002
DATA lane4<>+96(SB)/8, $0x0000000300000003
DATA lane4<>+104(SB)/8, $0x0000000300000003
DATA lane4<>+112(SB)/8, $0x0000000300000003
DATA lane4<>+120(SB)/8, $0x0000000300000003
GLOBL lane4<>(SB), RODATA|NOPTR, $128

// ---- many weight rows · one activation row (decode), AVX-512
//
// The matVec kernels walk rows consecutive weight rows (one sequential
// stream) against the same activation row, writing one float per row, so
// a matrix-vector product is one call. Within a row they work on ZMM
// registers: 64 quants per instruction.

// PREFETCH3 prefetches 144 bytes at off(SI): three lines 48 bytes apart
// cover every line of a stream advancing 144 bytes per iteration.
#define PREFETCH3(off) \
	PREFETCHT0 off(SI) \
	PREFETCHT0 off+48(SI) \
	PREFETCHT0 off+96(SI)

// K4Q128 adds to Z15 the scaled sums of 128 quants of a Q4_K block: qs
// bytes at q(SI) (64 of them: chunk 2h's 32 bytes, then chunk 2h+1's),
// activations at y(DI) (128), word scales for the four sub-blocks in SA
// (chunk 2h: sub-block 4h in words 0-15, 4h+1 in 16-31) and SB. The low
// and high nibbles of each 32-byte chunk are elements 0-31 and 32-63 of
// it, so VSHUFI64X2 pairs them in element order.
#define K4Q128(q, y, SA, SB) \
	VMOVDQU64  q(SI), Z11 \
	VPSRLW     $4, Z11, Z12 \
	VPANDD     Z31, Z11, Z11 \
	VPANDD     Z31, Z12, Z12 \
	VSHUFI64X2 $0x44, Z12, Z11, Z13 \
	VSHUFI64X2 $0xee, Z12, Z11, Z14 \
	VPMADDUBSW y(DI), Z13, Z13 \
	VPMADDUBSW y+64(DI), Z14, Z14 \
	VPDPWSSD   SA, Z13, Z15 \
	VPDPWSSD   SB, Z14, Z15

// func matVecQ4_KAsm(w, x *byte, nb, rows int, out *float32)
//
// Per block: the 12 scale bytes are unpacked in one XMM (the same field
// extraction as K4SCALES, one 32-bit word per lane), widened to words, and
// VPERMW spreads them into the four chunks' scale vectors; the mins term
// pairs the Q8_K bsums with VPHADDW as K4MINS does. Integer sums are exact
// (same ranges as dotQ4_KAVX2Asm) and the float work is d*xd times the
// block's int32 lanes (folded to eight: the same eight sums as
// dotQ4_KAVX2Asm's lanes), dmin*xd times the mins' four lanes, and the
// end is dotQ4_KAVX2Asm's (lanes minus mins, then HSUM): every row's
// result is bit-identical to the one-row kernel's.
TEXT ·matVecQ4_KAsm(SB), NOSPLIT, $0-40
	MOVQ         w+0(FP), SI
	MOVQ         x+8(FP), R8
	MOVQ         nb+16(FP), R9
	MOVQ         rows+24(FP), R10
	MOVQ         out+32(FP), R11
	VPBROADCASTD c0F<>(SB), Z31
	VMOVDQU64    k4perm<>+0(SB), Z27
	VMOVDQU64    k4perm<>+64(SB), Z28
	VMOVDQU64    k4perm<>+128(SB), Z29
	VMOVDQU64    k4perm<>+192(SB), Z30
	VMOVDQU64    k4unpack<>+0(SB), X26
	VMOVDQU64    k4unpack<>+16(SB), X25
	VMOVDQU64    k4unpack<>+32(SB), X24

mvq4krow:
	MOVQ   R8, DI
	MOVQ   R9, CX
	VXORPS X0, X0, X0
	VXORPS X1, X1, X1

mvq4kblock:
	PREFETCH3(1152)
	// scales (bytes sc0-7, mins m0-7) → words in Y3
	VMOVDQU    4(SI), X2
	VPSHUFD    $0x98, X2, X3
	VPSRLVD    X26, X3, X3
	VPANDD     X25, X3, X3
	VPSHUFD    $0x50, X2, X4
	VPSRLD     $2, X4, X4
	VPTERNLOGD $0xf8, X24, X4, X3
	VPMOVZXBW  X3, Y3
	VPERMW     Z3, Z27, Z16
	VPERMW     Z3, Z28, Z17
	VPERMW     Z3, Z29, Z18
	VPERMW     Z3, Z30, Z19

	// mins: sum_j m_j*(bsum[2j]+bsum[2j+1]) in four int32 lanes
	VMOVDQU      260(DI), X5
	VPHADDW      276(DI), X5, X5
	VEXTRACTI128 $1, Y3, X6
	VPMADDWD     X6, X5, X5
	VCVTDQ2PS    X5, X5

	// [d, dmin]*xd
	VMOVD        (SI), X7
	VCVTPH2PS    X7, X7
	VBROADCASTSS (DI), X8
	VMULPS       X8, X7, X7
	VPERMILPS    $0x55, X7, X9
	VFMADD231PS  X9, X5, X1
	VBROADCASTSS X7, Y10

	VPXORD      Z15, Z15, Z15
	K4Q128(16, 4, Z16, Z17)
	K4Q128(80, 132, Z18, Z19)
	VEXTRACTI64X4 $1, Z15, Y14
	VPADDD        Y14, Y15, Y15
	VCVTDQ2PS     Y15, Y15
	VFMADD231PS   Y10, Y15, Y0

	ADDQ $144, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  mvq4kblock

	// As dotQ4_KAVX2Asm ends: the mins (upper four lanes zero, as the
	// VEX-encoded FMA left them) subtracted lane by lane, then HSUM.
	VSUBPS Y1, Y0, Y0
	HSUM(Y0, X0, X11)
	VMOVSS X0, (R11)
	ADDQ   $4, R11
	DECQ   R10
	JNZ    mvq4krow
	VZEROUPPER
	RET

// k4perm: VPERMW indices making chunk c's scale vector (words 0-15 take
// scale 2c, words 16-31 scale 2c+1).
DATA k4perm<>+0(SB)/8, $0x0000000000000000
DATA k4perm<>+8(SB)/8, $0x0000000000000000
DATA k4perm<>+16(SB)/8, $0x0000000000000000
DATA k4perm<>+24(SB)/8, $0x0000000000000000
DATA k4perm<>+32(SB)/8, $0x0001000100010001
DATA k4perm<>+40(SB)/8, $0x0001000100010001
DATA k4perm<>+48(SB)/8, $0x0001000100010001
DATA k4perm<>+56(SB)/8, $0x0001000100010001
DATA k4perm<>+64(SB)/8, $0x0002000200020002
DATA k4perm<>+72(SB)/8, $0x0002000200020002
DATA k4perm<>+80(SB)/8, $0x0002000200020002
DATA k4perm<>+88(SB)/8, $0x0002000200020002
DATA k4perm<>+96(SB)/8, $0x0003000300030003
DATA k4perm<>+104(SB)/8, $0x0003000300030003
DATA k4perm<>+112(SB)/8, $0x0003000300030003
DATA k4perm<>+120(SB)/8, $0x0003000300030003
DATA k4perm<>+128(SB)/8, $0x0004000400040004
DATA k4perm<>+136(SB)/8, $0x0004000400040004
DATA k4perm<>+144(SB)/8, $0x0004000400040004
DATA k4perm<>+152(SB)/8, $0x0004000400040004
DATA k4perm<>+160(SB)/8, $0x0005000500050005
DATA k4perm<>+168(SB)/8, $0x0005000500050005
DATA k4perm<>+176(SB)/8, $0x0005000500050005
DATA k4perm<>+184(SB)/8, $0x0005000500050005
DATA k4perm<>+192(SB)/8, $0x0006000600060006
DATA k4perm<>+200(SB)/8, $0x0006000600060006
DATA k4perm<>+208(SB)/8, $0x0006000600060006
DATA k4perm<>+216(SB)/8, $0x0006000600060006
DATA k4perm<>+224(SB)/8, $0x0007000700070007
DATA k4perm<>+232(SB)/8, $0x0007000700070007
DATA k4perm<>+240(SB)/8, $0x0007000700070007
DATA k4perm<>+248(SB)/8, $0x0007000700070007
GLOBL k4perm<>(SB), RODATA|NOPTR, $256

// k4unpack: per-lane shift counts [0, 0, 0, 4], the masks [0x3f, 0x0f,
// 0x3f, 0x0f] and [0, 0x30, 0, 0x30] (bytewise) of the vector scale
// unpacking in matVecQ4_KAsm. Lanes (from [a, c, b, c] and [a, a, b, b],
// a, b, c the three words of the scale bytes): sc0-3 = a&0x3f, sc4-7 =
// c&0x0f | (a>>2)&0x30, m0-3 = b&0x3f, m4-7 = (c>>4)&0x0f | (b>>2)&0x30.
DATA k4unpack<>+0(SB)/8, $0x0000000000000000
DATA k4unpack<>+8(SB)/8, $0x0000000400000000
DATA k4unpack<>+16(SB)/8, $0x0f0f0f0f3f3f3f3f
DATA k4unpack<>+24(SB)/8, $0x0f0f0f0f3f3f3f3f
DATA k4unpack<>+32(SB)/8, $0x3030303000000000
DATA k4unpack<>+40(SB)/8, $0x3030303000000000
GLOBL k4unpack<>(SB), RODATA|NOPTR, $48

// Q6KH128 adds to Z15 the scale-weighted sums of one 128-quant half of a
// Q6_K block: ql bytes at ql(SI) (64), qh at qh(SI) (32), activations at
// y(DI). Low nibbles of ql are the half's elements 0-63 in order, high
// nibbles 64-127; their two top bits come from qh bits 0-1, 2-3 (elements
// 0-31, 32-63), 4-5 and 6-7 (64-95, 96-127), so [qh, qh>>2] shifted left
// by 4, or not, and masked with 0x30 supplies them for 64 quants at once.
// SA and SB are the word scale vectors of the half's sub-blocks 0-3 and
// 4-7 (eight words per sixteen quants). Z29 holds 0x0f bytes, Z30 0x30.
#define Q6KH128(ql, qh, y, SA, SB) \
	VMOVDQU64   ql(SI), Z11 \
	VMOVDQU     qh(SI), Y12 \
	VPSRLW      $2, Y12, Y13 \
	VINSERTI64X4 $1, Y13, Z12, Z12 \
	VPSLLW      $4, Z12, Z13 \
	VPANDD      Z30, Z13, Z13 \
	VPTERNLOGD  $0xf8, Z29, Z11, Z13 \
	VPSRLW      $4, Z11, Z11 \
	VPANDD      Z30, Z12, Z12 \
	VPTERNLOGD  $0xf8, Z29, Z11, Z12 \
	VPMADDUBSW  y(DI), Z13, Z13 \
	VPMADDUBSW  y+64(DI), Z12, Z12 \
	VPDPWSSD    SA, Z13, Z15 \
	VPDPWSSD    SB, Z12, Z15

// func matVecQ6_KAsm(w, x *byte, nb, rows int, out *float32)
//
// The quants are stored biased by 32: as in dotQ6_KAVX2Asm the sum is
// sum(sc*q*y) - 32*sum_k sc_k*bsum_k, all in exact int32 lanes (a
// VPMADDUBSW pair is within 2*63*128, times a scale of magnitude <= 128),
// folded to dotQ6_KAVX2Asm's eight lanes; its FMAs and HSUM follow, so
// every row's result is bit-identical to the one-row kernel's.
TEXT ·matVecQ6_KAsm(SB), NOSPLIT, $0-40
	MOVQ         w+0(FP), SI
	MOVQ         x+8(FP), R8
	MOVQ         nb+16(FP), R9
	MOVQ         rows+24(FP), R10
	MOVQ         out+32(FP), R11
	VPBROADCASTD c0F<>(SB), Z29
	VPBROADCASTD c30<>(SB), Z30
	VMOVDQU64    q6perm<>+0(SB), Z25
	VMOVDQU64    q6perm<>+64(SB), Z26
	VMOVDQU64    q6perm<>+128(SB), Z27
	VMOVDQU64    q6perm<>+192(SB), Z28

mvq6krow:
	MOVQ   R8, DI
	MOVQ   R9, CX
	VXORPS X0, X0, X0

mvq6kblock:
	PREFETCHT0 1680(SI)
	PREFETCHT0 1740(SI)
	PREFETCHT0 1800(SI)
	PREFETCHT0 1860(SI)

	// scales as words, spread per sixteen quants; the bias term
	VPMOVSXBW  192(SI), Y3
	VPERMW     Z3, Z25, Z16
	VPERMW     Z3, Z26, Z17
	VPERMW     Z3, Z27, Z18
	VPERMW     Z3, Z28, Z19
	VPMADDWD   260(DI), Y3, Y4
	VPSLLD     $5, Y4, Y4
	VPXORD     Z15, Z15, Z15
	VPSUBD     Z4, Z15, Z15

	// d*xd
	VPBROADCASTW 208(SI), X7
	VCVTPH2PS    X7, Y7
	VMULPS.BCST  (DI), Y7, Y10

	Q6KH128(0, 128, 4, Z16, Z17)
	Q6KH128(64, 160, 132, Z18, Z19)
	VEXTRACTI64X4 $1, Z15, Y14
	VPADDD        Y14, Y15, Y15
	VCVTDQ2PS     Y15, Y15
	VFMADD231PS   Y10, Y15, Y0

	ADDQ $210, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  mvq6kblock

	HSUM(Y0, X0, X11)
	VMOVSS X0, (R11)
	ADDQ   $4, R11
	DECQ   R10
	JNZ    mvq6krow
	VZEROUPPER
	RET

// q6perm: VPERMW indices spreading the sixteen scale words over 64 quants
// (32 words) at a time: vector g takes scales 4g..4g+3, eight words each.
DATA q6perm<>+0(SB)/8, $0x0000000000000000
DATA q6perm<>+8(SB)/8, $0x0000000000000000
DATA q6perm<>+16(SB)/8, $0x0001000100010001
DATA q6perm<>+24(SB)/8, $0x0001000100010001
DATA q6perm<>+32(SB)/8, $0x0002000200020002
DATA q6perm<>+40(SB)/8, $0x0002000200020002
DATA q6perm<>+48(SB)/8, $0x0003000300030003
DATA q6perm<>+56(SB)/8, $0x0003000300030003
DATA q6perm<>+64(SB)/8, $0x0004000400040004
DATA q6perm<>+72(SB)/8, $0x0004000400040004
DATA q6perm<>+80(SB)/8, $0x0005000500050005
DATA q6perm<>+88(SB)/8, $0x0005000500050005
DATA q6perm<>+96(SB)/8, $0x0006000600060006
DATA q6perm<>+104(SB)/8, $0x0006000600060006
DATA q6perm<>+112(SB)/8, $0x0007000700070007
DATA q6perm<>+120(SB)/8, $0x0007000700070007
DATA q6perm<>+128(SB)/8, $0x0008000800080008
DATA q6perm<>+136(SB)/8, $0x0008000800080008
DATA q6perm<>+144(SB)/8, $0x0009000900090009
DATA q6perm<>+152(SB)/8, $0x0009000900090009
DATA q6perm<>+160(SB)/8, $0x000a000a000a000a
DATA q6perm<>+168(SB)/8, $0x000a000a000a000a
DATA q6perm<>+176(SB)/8, $0x000b000b000b000b
DATA q6perm<>+184(SB)/8, $0x000b000b000b000b
DATA q6perm<>+192(SB)/8, $0x000c000c000c000c
DATA q6perm<>+200(SB)/8, $0x000c000c000c000c
DATA q6perm<>+208(SB)/8, $0x000d000d000d000d
DATA q6perm<>+216(SB)/8, $0x000d000d000d000d
DATA q6perm<>+224(SB)/8, $0x000e000e000e000e
DATA q6perm<>+232(SB)/8, $0x000e000e000e000e
DATA q6perm<>+240(SB)/8, $0x000f000f000f000f
DATA q6perm<>+248(SB)/8, $0x000f000f000f000f
GLOBL q6perm<>(SB), RODATA|NOPTR, $256

// PAIRSCALE sets Y6 to the first block's combined scale dw0*dx0 (all
// lanes) and Y7 to the second's, for weight blocks at (SI) and wb(SI) and
// activation blocks at (DI) and 34(DI). X5 is scratch, AX clobbered.
// VCVTPH2PS is exact and each product is rounded once, as in the one-block
// kernels.
#define PAIRSCALE(wb) \
	MOVWLZX      (SI), AX \
	VMOVD        AX, X5 \
	VPINSRW      $1, wb(SI), X5, X5 \
	VPINSRW      $2, (DI), X5, X5 \
	VPINSRW      $3, 34(DI), X5, X5 \
	VCVTPH2PS    X5, X5 \
	VMOVHLPS     X5, X5, X6 \
	VMULPS       X6, X5, X5 \
	VBROADCASTSS X5, Y6 \
	VMOVSHDUP    X5, X5 \
	VBROADCASTSS X5, Y7

// PAIRACC adds the two blocks' int32 sums in Z3 (first block in the low
// eight lanes) to Y0 block by block, scaled by Y6 and Y7: the same eight
// float lanes and the same order of multiply-adds as the one-block kernels
// (and ggml's AVX2 loop), so the results are bitwise the same.
#define PAIRACC \
	VCVTDQ2PS     Z3, Z3 \
	VFMADD231PS   Y6, Y3, Y0 \
	VEXTRACTF64X4 $1, Z3, Y3 \
	VFMADD231PS   Y7, Y3, Y0

// func matVecQ8_0Asm(w, x *byte, nb, rows int, out *float32)
//
// Two blocks per step in one ZMM: the Q80VNNI arithmetic (w+128 unsigned
// against signed x by VPDPBUSD, minus the same instruction's 128*x sums),
// exact in int32 lanes, then PAIRACC. An odd last block goes through the
// YMM form.
TEXT ·matVecQ8_0Asm(SB), NOSPLIT, $0-40
	MOVQ         w+0(FP), SI
	MOVQ         x+8(FP), R8
	MOVQ         nb+16(FP), R9
	MOVQ         rows+24(FP), R10
	MOVQ         out+32(FP), R11
	VPBROADCASTD c80<>(SB), Z15

mvq80row:
	MOVQ   R8, DI
	MOVQ   R9, CX
	SHRQ   $1, CX
	VXORPS X0, X0, X0
	JZ     mvq80tail

mvq80pair:
	PREFETCHT0   1088(SI)
	PREFETCHT0   1152(SI)
	VMOVDQU      2(SI), Y1
	VINSERTI64X4 $1, 36(SI), Z1, Z1
	VPXORD       Z15, Z1, Z1
	VMOVDQU      2(DI), Y2
	VINSERTI64X4 $1, 36(DI), Z2, Z2
	VPXORD       Z3, Z3, Z3
	VPDPBUSD     Z2, Z1, Z3
	VPXORD       Z4, Z4, Z4
	VPDPBUSD     Z2, Z15, Z4
	VPSUBD       Z4, Z3, Z3
	PAIRSCALE(34)
	PAIRACC
	ADDQ         $68, SI
	ADDQ         $68, DI
	DECQ         CX
	JNZ          mvq80pair

mvq80tail:
	TESTQ         $1, R9
	JZ            mvq80sum
	VPXOR         2(SI), Y15, Y1
	F16MUL((SI), (DI), X5, Y5, X6)
	Q80VNNI(2(DI), Y0)
	ADDQ          $34, SI

mvq80sum:
	HSUM(Y0, X0, X1)
	VMOVSS X0, (R11)
	ADDQ   $4, R11
	DECQ   R10
	JNZ    mvq80row
	VZEROUPPER
	RET

// func matVecQ4_0Asm(w, x *byte, nb, rows int, out *float32)
//
// Two blocks per step: their 32 quant bytes make [q0, q1], the nibbles
// [q0 low, q1 low, q0 high, q1 high] in 16-byte lanes, reordered to
// element order [q0 low, q0 high, q1 low, q1 high]; then dotQ4_0VNNIAsm's
// exact sum(q*x) - sum(8*x) by VPDPBUSD. An odd last block goes through
// the YMM form.
TEXT ·matVecQ4_0Asm(SB), NOSPLIT, $0-40
	MOVQ         w+0(FP), SI
	MOVQ         x+8(FP), R8
	MOVQ         nb+16(FP), R9
	MOVQ         rows+24(FP), R10
	MOVQ         out+32(FP), R11
	VPBROADCASTD c0F<>(SB), Z15
	VPBROADCASTD c08<>(SB), Z13

mvq40row:
	MOVQ   R8, DI
	MOVQ   R9, CX
	SHRQ   $1, CX
	VXORPS X0, X0, X0
	JZ     mvq40tail

mvq40pair:
	PREFETCHT0   576(SI)
	VMOVDQU      2(SI), X1
	VINSERTI128  $1, 20(SI), Y1, Y1
	VPSRLW       $4, Y1, Y2
	VINSERTI64X4 $1, Y2, Z1, Z1
	VPANDD       Z15, Z1, Z1
	VSHUFI64X2   $0xd8, Z1, Z1, Z1
	VMOVDQU      2(DI), Y2
	VINSERTI64X4 $1, 36(DI), Z2, Z2
	VPXORD       Z3, Z3, Z3
	VPDPBUSD     Z2, Z1, Z3
	VPXORD       Z4, Z4, Z4
	VPDPBUSD     Z2, Z13, Z4
	VPSUBD       Z4, Z3, Z3
	PAIRSCALE(18)
	PAIRACC
	ADDQ         $36, SI
	ADDQ         $68, DI
	DECQ         CX
	JNZ          mvq40pair

mvq40tail:
	TESTQ         $1, R9
	JZ            mvq40sum
	Q40NIB(2(SI))
	VMOVDQU       2(DI), Y2
	VPXOR         Y3, Y3, Y3
	VPDPBUSD      Y2, Y1, Y3
	VPXOR         Y4, Y4, Y4
	VPDPBUSD      Y2, Y13, Y4
	VPSUBD        Y4, Y3, Y3
	VCVTDQ2PS     Y3, Y3
	F16MUL((SI), (DI), X5, Y5, X6)
	VFMADD231PS   Y5, Y3, Y0
	ADDQ          $18, SI

mvq40sum:
	HSUM(Y0, X0, X1)
	VMOVSS X0, (R11)
	ADDQ   $4, R11
	DECQ   R10
	JNZ    mvq40row
	VZEROUPPER
	RET


// ---- activation quantization

// func quantQ8_KAsm(x *float32, dst *byte, nb int)
//
// quantQ8_K, block by block, with the same float operations in the same
// order per element, so the bytes are identical: amax is the largest
// |x| (a max tree, order-free), mx the first element with |x| == amax,
// iscale = -127/mx, q = min(127, nearestInt(iscale*x)) with nearestInt's
// 1.5*2^23 trick, d = 1/iscale. bsums come from the stored quants:
// VPDPBUSD against 0x01 bytes sums them by four, two rounds of
// VPACKSSDW/VPMADDWD by sixteen, and VPERMD restores group order.
TEXT ·quantQ8_KAsm(SB), NOSPLIT, $0-24
	MOVQ         x+0(FP), SI
	MOVQ         dst+8(FP), DI
	MOVQ         nb+16(FP), CX
	VPBROADCASTD absmask<>(SB), Z16
	VPBROADCASTD q8kmagic<>(SB), Z17
	VPBROADCASTD mant23<>(SB), Z18
	VPBROADCASTD q8kbias<>(SB), Z19
	VPBROADCASTD c127<>(SB), Z20
	VPBROADCASTD c01<>(SB), Z21
	VPBROADCASTD ones16<>(SB), Z22
	VMOVDQU64    bsumidx<>(SB), Z23

q8kblock:
	// amax over the 256 values (Z24-Z31 hold |x| of the first half)
	VANDPS   (SI), Z16, Z24
	VANDPS   64(SI), Z16, Z25
	VANDPS   128(SI), Z16, Z26
	VANDPS   192(SI), Z16, Z27
	VANDPS   256(SI), Z16, Z28
	VANDPS   320(SI), Z16, Z29
	VANDPS   384(SI), Z16, Z30
	VANDPS   448(SI), Z16, Z31
	VMAXPS   Z24, Z25, Z0
	VMAXPS   Z26, Z27, Z1
	VMAXPS   Z28, Z29, Z2
	VMAXPS   Z30, Z31, Z3
	VANDPS   512(SI), Z16, Z4
	VANDPS   576(SI), Z16, Z5
	VANDPS   640(SI), Z16, Z6
	VANDPS   704(SI), Z16, Z7
	VANDPS   768(SI), Z16, Z8
	VANDPS   832(SI), Z16, Z9
	VANDPS   896(SI), Z16, Z10
	VANDPS   960(SI), Z16, Z11
	VMAXPS   Z4, Z5, Z12
	VMAXPS   Z6, Z7, Z13
	VMAXPS   Z8, Z9, Z14
	VMAXPS   Z10, Z11, Z15
	VMAXPS   Z0, Z1, Z0
	VMAXPS   Z2, Z3, Z2
	VMAXPS   Z12, Z13, Z12
	VMAXPS   Z14, Z15, Z14
	VMAXPS   Z0, Z2, Z0
	VMAXPS   Z12, Z14, Z12
	VMAXPS   Z0, Z12, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VMAXPS   Y0, Y1, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS   X0, X1, X0
	VPERMILPS $0x4e, X0, X1
	VMAXPS   X0, X1, X0
	VPERMILPS $0xb1, X0, X1
	VMAXPS   X0, X1, X0
	VXORPS   X1, X1, X1
	VUCOMISS X1, X0
	JEQ      q8kzero
	VBROADCASTSS X0, Z0

	// index of the first |x| == amax
	XORQ AX, AX

q8kfind:
	VANDPS   (SI)(AX*4), Z16, Z1
	VCMPPS   $0, Z0, Z1, K1
	KMOVW    K1, DX
	TESTL    DX, DX
	JNZ      q8kfound
	ADDQ     $16, AX
	JMP      q8kfind

q8kfound:
	BSFL   DX, DX
	ADDQ   DX, AX
	VMOVSS (SI)(AX*4), X1
	VMOVSS negc127<>(SB), X2
	VDIVSS X1, X2, X2               // iscale = -127/mx
	VMOVSS onef<>(SB), X3
	VDIVSS X2, X3, X3               // d = 1/iscale
	VMOVSS X3, (DI)
	VBROADCASTSS X2, Z2

#define Q8KQ(off) \
	VMULPS  off(SI), Z2, Z1 \
	VADDPS  Z17, Z1, Z1 \
	VPANDD  Z18, Z1, Z1 \
	VPSUBD  Z19, Z1, Z1 \
	VPMINSD Z20, Z1, Z1 \
	VPMOVDB Z1, 4+off/4(DI)

	Q8KQ(0)
	Q8KQ(64)
	Q8KQ(128)
	Q8KQ(192)
	Q8KQ(256)
	Q8KQ(320)
	Q8KQ(384)
	Q8KQ(448)
	Q8KQ(512)
	Q8KQ(576)
	Q8KQ(640)
	Q8KQ(704)
	Q8KQ(768)
	Q8KQ(832)
	Q8KQ(896)
	Q8KQ(960)

	// bsums: group g is bytes 16g..16g+15 of the quants
	VPXORD    Z4, Z4, Z4
	VPDPBUSD  4(DI), Z21, Z4
	VPXORD    Z5, Z5, Z5
	VPDPBUSD  68(DI), Z21, Z5
	VPXORD    Z6, Z6, Z6
	VPDPBUSD  132(DI), Z21, Z6
	VPXORD    Z7, Z7, Z7
	VPDPBUSD  196(DI), Z21, Z7
	VPACKSSDW Z5, Z4, Z4
	VPACKSSDW Z7, Z6, Z6
	VPMADDWD  Z22, Z4, Z4
	VPMADDWD  Z22, Z6, Z6
	VPACKSSDW Z6, Z4, Z4
	VPMADDWD  Z22, Z4, Z4
	VPERMD    Z4, Z23, Z4
	VPMOVDW   Z4, 260(DI)

q8knext:
	ADDQ $1024, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  q8kblock
	VZEROUPPER
	RET

q8kzero:
	VPXORD    Z1, Z1, Z1
	VMOVDQU64 Z1, (DI)
	VMOVDQU64 Z1, 64(DI)
	VMOVDQU64 Z1, 128(DI)
	VMOVDQU64 Z1, 192(DI)
	VMOVDQU64 Z1, 228(DI)
	JMP       q8knext

DATA absmask<>+0(SB)/4, $0x7fffffff
GLOBL absmask<>(SB), RODATA|NOPTR, $4
DATA q8kmagic<>+0(SB)/4, $0x4b400000 // 12582912 = 1.5*2^23
GLOBL q8kmagic<>(SB), RODATA|NOPTR, $4
DATA mant23<>+0(SB)/4, $0x007fffff
GLOBL mant23<>(SB), RODATA|NOPTR, $4
DATA q8kbias<>+0(SB)/4, $0x00400000
GLOBL q8kbias<>(SB), RODATA|NOPTR, $4
DATA c127<>+0(SB)/4, $127
GLOBL c127<>(SB), RODATA|NOPTR, $4
DATA negc127<>+0(SB)/4, $0xc2fe0000 // -127.0
GLOBL negc127<>(SB), RODATA|NOPTR, $4
DATA onef<>+0(SB)/4, $0x3f800000 // 1.0
GLOBL onef<>(SB), RODATA|NOPTR, $4

// bsumidx: after the packing rounds dword 4k+j holds group 4j+k; VPERMD
// indices putting group g at dword g.
DATA bsumidx<>+0(SB)/8, $0x0000000400000000
DATA bsumidx<>+8(SB)/8, $0x0000000c00000008
DATA bsumidx<>+16(SB)/8, $0x0000000500000001
DATA bsumidx<>+24(SB)/8, $0x0000000d00000009
DATA bsumidx<>+32(SB)/8, $0x0000000600000002
DATA bsumidx<>+40(SB)/8, $0x0000000e0000000a
DATA bsumidx<>+48(SB)/8, $0x0000000700000003
DATA bsumidx<>+56(SB)/8, $0x0000000f0000000b
GLOBL bsumidx<>(SB), RODATA|NOPTR, $64

// func quantQ8_0Asm(x *float32, dst *byte, nb int)
//
// quantQ8_0 (q8Block) block by block with the same float operations: amax
// by a max tree, d = amax/127, id = 127/amax (0 for an all-zero block),
// q = x*id rounded half to even by VCVTPS2DQ under the default rounding
// mode, d stored by VCVTPS2PH with round-to-nearest-even, as F32ToF16.
TEXT ·quantQ8_0Asm(SB), NOSPLIT, $0-24
	MOVQ         x+0(FP), SI
	MOVQ         dst+8(FP), DI
	MOVQ         nb+16(FP), CX
	VPBROADCASTD absmask<>(SB), Z16
	VMOVSS       c127f<>(SB), X17

q80qblock:
	VANDPS       (SI), Z16, Z0
	VANDPS       64(SI), Z16, Z1
	VMAXPS       Z0, Z1, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VMAXPS       Y0, Y1, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS       X0, X1, X0
	VPERMILPS    $0x4e, X0, X1
	VMAXPS       X0, X1, X0
	VPERMILPS    $0xb1, X0, X1
	VMAXPS       X0, X1, X0         // amax
	VDIVSS       X17, X0, X2        // d = amax/127
	VXORPS       X3, X3, X3
	VUCOMISS     X3, X0
	JEQ          q80qid
	VDIVSS       X0, X17, X3        // id = 127/amax

q80qid:
	VBROADCASTSS X3, Z3
	VMULPS       (SI), Z3, Z4
	VMULPS       64(SI), Z3, Z5
	VCVTPS2DQ    Z4, Z4
	VCVTPS2DQ    Z5, Z5
	VPMOVDB      Z4, 2(DI)
	VPMOVDB      Z5, 18(DI)
	VCVTPS2PH    $0, X2, X2
	VMOVD        X2, AX
	MOVW         AX, (DI)
	ADDQ         $128, SI
	ADDQ         $34, DI
	DECQ         CX
	JNZ          q80qblock
	VZEROUPPER
	RET

DATA c127f<>+0(SB)/4, $0x42fe0000 // 127.0
GLOBL c127f<>(SB), RODATA|NOPTR, $4

// func quantF16AVX2Asm(x *float32, dst *byte, n int)
//
// Converts n float32 values (a multiple of 8) to F16 with VCVTPS2PH's
// immediate round-to-nearest-even: IEEE conversion, as F32ToF16 computes
// it (subnormal results, infinities and NaN payloads included).
TEXT ·quantF16AVX2Asm(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ dst+8(FP), DI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   f16done

f16loop:
	VMOVUPS   (SI), Y0
	VCVTPS2PH $0, Y0, (DI)
	ADDQ      $32, SI
	ADDQ      $16, DI
	DECQ      CX
	JNZ       f16loop

f16done:
	VZEROUPPER
	RET
