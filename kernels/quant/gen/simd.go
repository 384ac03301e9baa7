package main

import (
	"fmt"
	"strings"

	"github.com/zrtdev/zrt/kernels/internal/asmgen"
)

// simdFile is simd_amd64.s: the integer and float dot products of the
// level table in simd_amd64.go, the multi-row and many-row forms, and the
// activation quantizers.
func simdFile() []byte {
	f := asmgen.NewFile(generator)
	f.Raw(`
// Integer and float dot-product kernels; see simd_amd64.go for the levels
// and the Go declarations. Conventions: SI walks the weight row, DI the
// activations, CX counts blocks. Every kernel keeps its float partial sums
// in vector lanes and reduces them once at the end, so per-block integer
// sums are never reduced horizontally.
`)
	reductions(f)
	f.Raw(`
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
`)
	floatDot("dotF32x32", false).write(f)
	floatDot("dotF16x32", true).write(f)
	q80(f)
	q40(f)
	kquants(f)
	q4kRows(f)
	q4kInterleaved(f)
	q4kDotRows(f)
	q5k(f)
	q6k(f)
	q6kRows(f)
	constants(f)
	matVec(f)
	quantizers(f)
	return f.Bytes()
}

// reductions writes the horizontal sums every kernel ends with: HSUM of
// one accumulator, and HSUM4 and HSUM8, which give four or eight
// accumulators exactly HSUM's operations at once.
func reductions(f *asmgen.File) {
	f.Raw(`
// HSUM leaves in the low lane of X the sum of the eight float lanes of Y
// (X is Y's low half); T is scratch.`)
	f.Define("HSUM(Y, X, T)", func(f *asmgen.File) { f.Fold("VADDPS", "Y", "X", "T") })
	f.Raw(`
// HSUM4 leaves in X0 [hsum(A), hsum(B), hsum(C), hsum(D)] for four
// accumulators, each summed with exactly HSUM's operations: per row
// s = lo128 + hi128, then (s0+s2) + (s1+s3). VPERM2F128 pairs the rows'
// halves (A with C, B with D) so that one VADDPS forms two rows' s; the
// VUNPCKLPS/VUNPCKHPS pair and a VADDPS give every row's s0+s2 and s1+s3,
// and VUNPCKLPD/VUNPCKHPD gather them for the last VADDPS. A-D must be
// among Y4-Y15; Y0-Y3 are scratch.`)
	f.Define("HSUM4(A, B, C, D)", func(f *asmgen.File) {
		for i, p := range [][2]string{{"A", "C"}, {"B", "D"}} {
			f.Ins("VPERM2F128", "$0x20", p[1], p[0], asmgen.Reg("Y", i))
			f.Ins("VPERM2F128", "$0x31", p[1], p[0], asmgen.Reg("Y", i+1))
			f.Ins("VADDPS", asmgen.Reg("Y", i+1), asmgen.Reg("Y", i), asmgen.Reg("Y", i))
		}
		f.Raw(`
	VUNPCKLPS    Y1, Y0, Y2
	VUNPCKHPS    Y1, Y0, Y3
	VADDPS       Y3, Y2, Y2
	VEXTRACTF128 $1, Y2, X3
	VUNPCKLPD    X3, X2, X0
	VUNPCKHPD    X3, X2, X1
	VADDPS       X1, X0, X0`)
	})
	f.Raw(`
// HSUM8 leaves in Y0 the hsums of eight accumulators R0-R7 (lane r is
// hsum(Rr)), each with exactly HSUM's operations as in HSUM4: VSHUFF32X4
// (which reaches Y16-Y31) pairs row r with row r+4 in one vector, and the
// in-lane steps of HSUM4 then serve both 128-bit halves at once. Y1-Y6
// are scratch.`)
	f.Define("HSUM8(R0, R1, R2, R3, R4, R5, R6, R7)", func(f *asmgen.File) {
		for r := 0; r < 4; r++ {
			f.Ins("VSHUFF32X4", "$0", asmgen.Reg("R", r+4), asmgen.Reg("R", r), asmgen.Reg("Y", r))
			f.Ins("VSHUFF32X4", "$3", asmgen.Reg("R", r+4), asmgen.Reg("R", r), asmgen.Reg("Y", r+1))
			f.Ins("VADDPS", asmgen.Reg("Y", r+1), asmgen.Reg("Y", r), asmgen.Reg("Y", r))
		}
		for i := 0; i < 2; i++ {
			f.Ins("VUNPCKLPS", asmgen.Reg("Y", 2*i+1), asmgen.Reg("Y", 2*i), asmgen.Reg("Y", 4+i))
			f.Ins("VUNPCKHPS", asmgen.Reg("Y", 2*i+1), asmgen.Reg("Y", 2*i), asmgen.Reg("Y", 5+i))
			f.Ins("VADDPS", asmgen.Reg("Y", 5+i), asmgen.Reg("Y", 4+i), asmgen.Reg("Y", 4+i))
		}
		f.Ins("VUNPCKLPD", "Y5", "Y4", "Y0")
		f.Ins("VUNPCKHPD", "Y5", "Y4", "Y1")
		f.Ins("VADDPS", "Y1", "Y0", "Y0")
	})
	f.P("")
}

// rowPtrs are the registers of activation rows 0-7 in the eight-row
// Q8_0 kernel; rows 0-3 are also ROWSARGS's.
var rowPtrs = []string{"DI", "R8", "R9", "R10", "R11", "R12", "R13", "DX"}

// rows4 are ROWSARGS's activation row registers.
var rows4 = []string{"DI", "R8", "R9", "R13"}

// q80Block is one Q8_0 block of a one-row product, the weight block at SI
// and the activation block at DI, added to Y0: the weight quants made
// unsigned with c80 (in Y15), the two scales' product in Y5, then
// Q80VNNI. It is dotQ8_0VNNIAsm's loop body and matVecQ8_0Asm's odd last
// block, so that both give the same bits.
func q80Block(f *asmgen.File) {
	f.Raw(`
	VPXOR 2(SI), Y15, Y1
	F16MUL((SI), (DI), X5, Y5, X6)
	Q80VNNI(2(DI), Y0)`)
}

// q80 writes the Q8_0 · Q8_0 kernels.
func q80(f *asmgen.File) {
	f.Raw(`
// ---- Q8_0 · Q8_0

// Q80VNNI adds to acc the block's 8 int32 partial sums of w*x times the
// scale in Y5, with w's prepared quants (w+128 as unsigned bytes) in Y1 and
// the activation block's quants at q. VPDPBUSD multiplies unsigned by
// signed bytes, so it gets w+128 (w XOR 0x80) in [0,255] and x in
// [-128,127]; subtracting the same instruction's sum of 128*x leaves
// exactly sum(w*x), with no saturation anywhere (unlike VPMADDUBSW, or
// the abs/sign trick, which is wrong for x = -128).`)
	f.Define("Q80VNNI(q, acc)", func(f *asmgen.File) {
		f.Ins("VMOVDQU", "q", "Y2")
		vnniCorrected(f, "Y", "Y2", "Y1", "Y15")
		f.Ins("VCVTDQ2PS", "Y3", "Y3")
		f.Ins("VFMADD231PS", "Y5", "Y3", "acc")
	})
	f.P("")
	(&dotKernel{
		sig:    "dotQ8_0VNNIAsm(w, x *byte, nb int) float32",
		args:   []string{"w", "x", "nb"},
		consts: []konst{{"c80<>", "Y15"}},
		zero:   []string{"Y0"},
		label:  "q80vloop",
		body:   q80Block,
		wLen:   34, xLen: 34,
	}).write(f)

	f.Raw(`
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
	ROWSARGS
	VMOVDQU   c80<>(SB), Y15`)
	for r := 0; r < 4; r++ {
		f.Ins("VMOVDQU32", fmt.Sprintf("lane4<>+%d(SB)", 32*r), asmgen.Reg("Y", 16+r))
	}
	q80Loop(f, "VXORPS", asmgen.Regs("Y", 10, 1, 4), "q80x4loop", "")
	gatherScales(f, rows4, "")
	f.Raw(`
	VCVTPH2PS    X0, X0
	MOVWLZX      (SI), AX
	VMOVD        AX, X3
	VCVTPH2PS    X3, X3
	VBROADCASTSS X3, X3
	VMULPS       X3, X0, X0`)
	for r, x := range rows4 {
		f.P("\tQ80X4ROW(%s, Y%d, Y%d)", x, 16+r, 10+r)
	}
	loopTail(f, "q80x4loop", append(steps(34, "SI"), steps(34, rows4...)...)...)
	f.Raw(`

	// Each row's lane sum in dotQ8_0VNNIAsm's order (HSUM).
	MOVQ    out+32(FP), AX
	HSUM4(Y10, Y11, Y12, Y13)
	VMOVUPS X0, (AX)
	VZEROUPPER
	RET

// Q80X8ROW adds one activation row's block at x+BX to acc (see
// dotQ8_0x8VNNIAsm): Y1 holds the weight quants, Y2 the negated
// correction, and sc(SP) this row's combined scale, broadcast by the FMA;
// t and u are scratch.`)
	q80x8Row(f, "Q80X8ROW(x, t, u, sc, acc)", "VPXOR", "2(x)(BX*1), Y15")
	f.Raw(`
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
// the one-row and four-row kernels'.`)
	f.Text("dotQ8_0x8VNNIAsm", 32, 40)
	f.Args(asmgen.Arg{Name: "w", Reg: "SI"}, asmgen.Arg{Name: "x", Reg: "DI"}, asmgen.Arg{Name: "stride", Reg: "DX"}, asmgen.Arg{Name: "nb", Reg: "CX"})
	// Row r's pointer from row r-1's or r-2's: one LEAQ each, DX (the
	// stride) last, as row 7's register.
	for r := 1; r < 8; r++ {
		f.Ins("LEAQ", fmt.Sprintf("(%s)(DX*%d)", rowPtrs[2*((r-1)/2)], 1+(r-1)%2), rowPtrs[r])
	}
	f.Raw(`
	IMUL3Q    $34, CX, CX
	XORQ      BX, BX
	VMOVDQU   c80<>(SB), Y15`)
	q80Loop(f, "VPXORD", asmgen.Regs("Y", 16, 1, 8), "q80x8loop", "(BX*1)")
	gatherScales(f, rowPtrs, "(BX*1)")
	f.Raw(`
	VCVTPH2PS    X0, Y0
	VPBROADCASTW (SI)(BX*1), X3
	VCVTPH2PS    X3, Y3
	VMULPS       Y3, Y0, Y0
	VMOVUPS      Y0, (SP)`)
	for r, x := range rowPtrs {
		f.P("\tQ80X8ROW(%s, Y%d, Y%d, %d, Y%d)", x, 4+r, 24+r, 4*r, 16+r)
	}
	f.Raw(`
	ADDQ         $34, BX
	CMPQ         BX, CX
	JNE          q80x8loop

	// Each row's lane sum in dotQ8_0VNNIAsm's order (HSUM).`)
	eightRowSums(f, 32)
	f.Raw(`

// func dotQ8_0x8PrepAsm(w, xp *byte, nb int, out *float32)
//
// dotQ8_0x8VNNIAsm on a prepared group of eight activation rows (see
// prepQ8_0x8): per block, the eight rows' quants already XORed with 0x80
// (32 bytes each, row after row) and then their scales as eight float32.
// Two rows share a ZMM register: rows 2p and 2p+1 are adjacent in the
// group, so one 64-byte load brings both, one VPDPBUSD against the weight
// block broadcast to both halves gives both rows' eight lane sums, and
// one VCVTDQ2PS and one FMA (the combined scales spread by VPERMPS, row
// 2p's to the low half and 2p+1's to the high) update both rows'
// accumulators. Every lane still gets exactly dotQ8_0x8VNNIAsm's
// operations in its order (the exact integer sum, its conversion, the
// FMA with dx*dw), so the results are bit-identical to it.`)
	f.Text("dotQ8_0x8PrepAsm", 0, 32)
	f.Args(asmgen.Arg{Name: "w", Reg: "SI"}, asmgen.Arg{Name: "xp", Reg: "DI"}, asmgen.Arg{Name: "nb", Reg: "CX"})
	f.Ins("VPBROADCASTD", "c80<>(SB)", "Z15")
	for p := 0; p < 4; p++ {
		f.Ins("VMOVDQU32", fmt.Sprintf("lane8<>+%d(SB)", 64*p), asmgen.Reg("Z", 8+p))
	}
	f.Zero("VPXORD", asmgen.Regs("Z", 16, 1, 4)...)
	f.Raw(`
q80p8loop:
	VBROADCASTI64X4 2(SI), Z1
	VPXORD          Z2, Z2, Z2
	VPDPBUSD        Z1, Z15, Z2
	VPXORD          Z3, Z3, Z3
	VPSUBD          Z2, Z3, Z2
	VPBROADCASTW    (SI), X3
	VCVTPH2PS       X3, Y3
	VMULPS          256(DI), Y3, Y0`)
	for p := 0; p < 4; p++ {
		t, u, idx, acc := asmgen.Reg("Z", 4+p), asmgen.Reg("Z", 24+p), asmgen.Reg("Z", 8+p), asmgen.Reg("Z", 16+p)
		f.Ins("VMOVDQU32", fmt.Sprintf("%d(DI)", 64*p), t)
		f.Ins("VMOVDQA32", "Z2", u)
		f.Ins("VPDPBUSD", "Z1", t, u)
		f.Ins("VCVTDQ2PS", u, u)
		f.Ins("VPERMPS", "Z0", idx, t)
		f.Ins("VFMADD231PS", t, u, acc)
	}
	loopTail(f, "q80p8loop", step{"SI", 34}, step{"DI", 288})
	f.P("\n\t// Rows 2p+1 out of the high halves, then HSUM8 as eightRowSums.")
	for p := 0; p < 4; p++ {
		f.Ins("VEXTRACTF64X4", "$1", asmgen.Reg("Z", 16+p), asmgen.Reg("Y", 20+p))
	}
	f.Ins("MOVQ", "out+24(FP)", "AX")
	f.P("\tHSUM8(Y16, Y20, Y17, Y21, Y18, Y22, Y19, Y23)")
	f.Ins("VMOVUPS", "Y0", "(AX)")
	f.Ins("VZEROUPPER")
	f.Ins("RET")
	f.P("")
	q80x16(f)
	q80x16Rows(f)
	q80PrepWeights(f)
	q80PrepRows(f)
	(&dotKernel{
		sig: "dotQ8_0AVX2Asm(w, x *byte, nb int) float32",
		doc: `
// Without VNNI the quants are sign-extended to int16 and multiplied with
// VPMADDWD: exact for every int8 pair, including -128*-128.`,
		args:  []string{"w", "x", "nb"},
		zero:  []string{"Y0"},
		label: "q80aloop",
		body: func(f *asmgen.File) {
			for i, q := range []string{"2(SI)", "18(SI)", "2(DI)", "18(DI)"} {
				f.Ins("VPMOVSXBW", q, asmgen.Reg("Y", 1+i))
			}
			f.Raw(`
	VPMADDWD    Y3, Y1, Y1
	VPMADDWD    Y4, Y2, Y2
	VPADDD      Y2, Y1, Y1`)
			scaledAcc(f, "Y1")
		},
		wLen: 34, xLen: 34,
	}).write(f)
}

// vnniCorrected leaves in k3 (k the register kind) the exact sum of the
// products of the unsigned bytes u with the signed bytes s, less the
// products of the bytes c with s: two VPDPBUSD from zero and a VPSUBD,
// through k4 (the EVEX VPXORD clears ZMM registers).
func vnniCorrected(f *asmgen.File, k, s, u, c string) {
	xor := "VPXOR"
	if k == "Z" {
		xor = "VPXORD"
	}
	f.Ins(xor, k+"3", k+"3", k+"3")
	f.Ins("VPDPBUSD", s, u, k+"3")
	f.Ins(xor, k+"4", k+"4", k+"4")
	f.Ins("VPDPBUSD", s, c, k+"4")
	f.Ins("VPSUBD", k+"4", k+"3", k+"3")
}

// eightRowSums ends an eight-row Q8_0 kernel: the rows' accumulators
// Y16-Y23 reduced with HSUM's operations (HSUM8) and stored to out, the
// argument at off(FP); then it returns.
func eightRowSums(f *asmgen.File, off int) {
	f.Ins("MOVQ", fmt.Sprintf("out+%d(FP)", off), "AX")
	f.P("\tHSUM8(%s)", strings.Join(asmgen.Regs("Y", 16, 1, 8), ", "))
	f.Ins("VMOVUPS", "Y0", "(AX)")
	f.Ins("VZEROUPPER")
	f.Ins("RET")
}

// q80Loop opens a multi-row Q8_0 kernel's block loop: its accumulators
// accs cleared with the instruction clear, the loop's label, and what
// every block starts with: the weight quants of the Q8_0 block at SI
// (indexed by idx) loaded into Y1 and the negated correction -128*sum(w)
// left in Y2.
func q80Loop(f *asmgen.File, clear string, accs []string, label, idx string) {
	f.Zero(clear, accs...)
	f.P("\n%s:", label)
	f.Ins("VMOVDQU", "2(SI)"+idx, "Y1")
	f.Raw(`
	VPXOR        Y2, Y2, Y2
	VPDPBUSD     Y1, Y15, Y2
	VPXOR        Y3, Y3, Y3
	VPSUBD       Y2, Y3, Y2`)
}

// gatherScales gathers the f16 scales of the activation blocks at ptrs
// (each indexed by idx) into the words of X0, through AX.
func gatherScales(f *asmgen.File, ptrs []string, idx string) {
	f.Ins("MOVWLZX", asmgen.Mem(0, ptrs[0])+idx, "AX")
	f.Ins("VMOVD", "AX", "X0")
	for r := 1; r < len(ptrs); r++ {
		f.Ins("VPINSRW", fmt.Sprintf("$%d", r), asmgen.Mem(0, ptrs[r])+idx, "X0", "X0")
	}
}

// q80x8Row defines the per-row macro of an eight-row Q8_0 kernel, whose
// first instruction (op src, t) brings the row's flipped quants into t.
func q80x8Row(f *asmgen.File, name, op, src string) {
	f.Define(name, func(f *asmgen.File) {
		f.Ins(op, src, "t")
		f.Raw(`
	VMOVDQA32        Y2, u
	VPDPBUSD         Y1, t, u
	VCVTDQ2PS        u, u
	VFMADD231PS.BCST sc(SP), u, acc`)
	})
	f.P("")
}

// q40 writes the Q4_0 · Q8_0 kernels.
func q40(f *asmgen.File) {
	f.Raw(`
// ---- Q4_0 · Q8_0

// Q40NIB loads a Q4_0 block's 16 quant bytes at q and leaves its 32
// unsigned nibbles in Y1 in element order (low nibbles, then high).
#define Q40NIB(q) \
	VMOVDQU     q, X1 \
	VPSRLW      $4, X1, X2 \
	VINSERTI128 $1, X2, Y1, Y1 \
	VPAND       Y15, Y1, Y1
`)
	(&dotKernel{
		sig: "dotQ4_0VNNIAsm(w, x *byte, nb int) float32",
		doc: `
// sum((q-8)*x) = sum(q*x) - sum(8*x), both by VPDPBUSD with the unsigned
// nibbles (or 8s) and signed x: exact.`,
		args:   []string{"w", "x", "nb"},
		consts: []konst{{"c0F<>", "Y15"}, {"c08<>", "Y14"}},
		zero:   []string{"Y0"},
		label:  "q40vloop",
		body: func(f *asmgen.File) {
			f.P("\tQ40NIB(2(SI))")
			q40VNNI(f, "Y14")
		},
		wLen: 18, xLen: 34,
	}).write(f)
	(&dotKernel{
		sig: "dotQ4_0AVX2Asm(w, x *byte, nb int) float32",
		doc: `
// VPMADDUBSW of nibbles q <= 15 with x >= -128 gives pair sums within
// ±3840 and of 8s with x within ±2048: neither saturates, and their
// difference sum((q-8)*x) over a pair fits in int16, so VPSUBW is exact.`,
		args:   []string{"w", "x", "nb"},
		consts: []konst{{"c0F<>", "Y15"}, {"c08<>", "Y14"}, {"ones16<>", "Y13"}},
		zero:   []string{"Y0"},
		label:  "q40aloop",
		body: func(f *asmgen.File) {
			f.Raw(`
	Q40NIB(2(SI))
	VPMADDUBSW  2(DI), Y1, Y3
	VPMADDUBSW  2(DI), Y14, Y4
	VPSUBW      Y4, Y3, Y3
	VPMADDWD    Y13, Y3, Y3`)
			scaledAcc(f, "Y3")
		},
		wLen: 18, xLen: 34,
	}).write(f)
}

// q40VNNI adds to Y0 the Q4_0 block whose nibbles are in Y1 against the
// activation block at 2(DI), with the 8s in eights: dotQ4_0VNNIAsm's
// block, which matVecQ4_0Asm's odd last block repeats.
func q40VNNI(f *asmgen.File, eights string) {
	f.Ins("VMOVDQU", "2(DI)", "Y2")
	vnniCorrected(f, "Y", "Y2", "Y1", eights)
	scaledAcc(f, "Y3")
}

// scaledAcc ends a one-row kernel's block: its eight int32 lane sums in
// sums made float, times the weight and activation blocks' f16 scales
// (at SI and DI: F16MUL's one rounding), added to Y0.
func scaledAcc(f *asmgen.File, sums string) {
	f.Ins("VCVTDQ2PS", sums, sums)
	f.P("\tF16MUL((SI), (DI), X5, Y5, X6)")
	f.Ins("VFMADD231PS", "Y5", sums, "Y0")
}

// q80PrepW is the size of a prepared Q8_0 weight block (quant's
// q80PrepWBlock): the 32 quants, the eight dwords of the VNNI correction
// −128·(sum of each four quants), and the f16 scale as a float32.
const q80PrepW = 68

// q80x16 writes dotQ8_0x16PrepAsm.
func q80x16(f *asmgen.File) {
	f.Raw(`
// func dotQ8_0x16PrepAsm(w, xp *byte, nb int, out *float32)
//
// dotQ8_0x8PrepAsm on two consecutive prepared groups (the second nb*288
// bytes after the first), sixteen outputs: the weight block's broadcast,
// correction and f16 scale are done once for sixteen activation rows
// rather than eight. Each group's rows get exactly dotQ8_0x8PrepAsm's
// operations in its order, so the results are bit-identical to it.`)
	f.Text("dotQ8_0x16PrepAsm", 0, 32)
	f.Args(asmgen.Arg{Name: "w", Reg: "SI"}, asmgen.Arg{Name: "xp", Reg: "DI"}, asmgen.Arg{Name: "nb", Reg: "CX"})
	f.Ins("IMUL3Q", "$288", "CX", "R8")
	f.Ins("VPBROADCASTD", "c80<>(SB)", "Z15")
	q80x16Lanes(f)
	f.Zero("VPXORD", asmgen.Regs("Z", 16, 1, 8)...)
	q80x16Loop(f, false, "q80p16loop")
	f.Ins("MOVQ", "out+24(FP)", "AX")
	q80x16Sums(f)
	f.Ins("VZEROUPPER")
	f.Ins("RET")
	f.P("")
}

// q80x16Rows writes dotQ8_0x16PrepWRowsAsm: dotQ8_0x16PrepAsm on rows
// consecutive weight rows laid out by prepQ8_0WeightsAsm, each row's
// sixteen outputs outStride floats after the previous row's, in one call.
// It loads each block's correction and scale where dotQ8_0x16PrepAsm
// computes them: the same values, so the same bits, for four fewer
// instructions a block, one of them a VPDPBUSD on the multiply ports the
// loop is bound by.
func q80x16Rows(f *asmgen.File) {
	f.Raw(`
// func dotQ8_0x16PrepWRowsAsm(wp, xp *byte, nb, rows int, out *float32, outStride int)
//
// dotQ8_0x16PrepAsm on each of rows prepared weight rows at wp (nb
// blocks each, one after another, as prepQ8_0WeightsAsm lays them out)
// against the same two groups at xp, row j's sixteen outputs at
// out[j*outStride:]: the same bits.`)
	f.Text("dotQ8_0x16PrepWRowsAsm", 0, 48)
	f.Args(asmgen.Arg{Name: "wp", Reg: "SI"}, asmgen.Arg{Name: "xp", Reg: "R12"}, asmgen.Arg{Name: "nb", Reg: "R10"},
		asmgen.Arg{Name: "rows", Reg: "BX"}, asmgen.Arg{Name: "out", Reg: "AX"}, asmgen.Arg{Name: "outStride", Reg: "R11"})
	f.Ins("SHLQ", "$2", "R11")
	f.Ins("IMUL3Q", "$288", "R10", "R8")
	q80x16Lanes(f)
	f.P("\nq80pwrrow:")
	f.Zero("VPXORD", asmgen.Regs("Z", 16, 1, 8)...)
	f.Ins("MOVQ", "R10", "CX")
	f.Ins("MOVQ", "R12", "DI")
	q80x16Loop(f, true, "q80pwrloop")
	q80x16Sums(f)
	f.Ins("ADDQ", "R11", "AX")
	f.Ins("DECQ", "BX")
	f.Ins("JNZ", "q80pwrrow")
	f.Ins("VZEROUPPER")
	f.Ins("RET")
	f.P("")
}

// q80x16Lanes loads the sixteen-row kernels' VPERMPS indices (Z8-Z11).
func q80x16Lanes(f *asmgen.File) {
	for p := 0; p < 4; p++ {
		f.Ins("VMOVDQU32", fmt.Sprintf("lane8<>+%d(SB)", 64*p), asmgen.Reg("Z", 8+p))
	}
}

// q80x16Loop is the sixteen-row kernels' loop over the CX blocks of a
// weight row at SI (raw, or prepared) against the two groups at DI and
// DI+R8, accumulating in Z16-Z23.
func q80x16Loop(f *asmgen.File, prepared bool, label string) {
	wStep := 34
	f.P("\n%s:", label)
	if prepared {
		wStep = q80PrepW
		f.Raw(`
	VBROADCASTI64X4 (SI), Z1
	VBROADCASTI64X4 32(SI), Z2
	VBROADCASTSS    64(SI), Y3`)
	} else {
		f.Raw(`
	VBROADCASTI64X4 2(SI), Z1
	VPXORD          Z2, Z2, Z2
	VPDPBUSD        Z1, Z15, Z2
	VPXORD          Z3, Z3, Z3
	VPSUBD          Z2, Z3, Z2
	VPBROADCASTW    (SI), X3
	VCVTPH2PS       X3, Y3`)
	}
	f.Raw(`
	VMULPS          256(DI), Y3, Y0
	VMULPS          256(DI)(R8*1), Y3, Y12`)
	for g, sc := range []string{"Z0", "Z12"} {
		idx := ""
		if g == 1 {
			idx = "(R8*1)"
		}
		for p := 0; p < 4; p++ {
			t, u, ix, acc := asmgen.Reg("Z", 4+p), asmgen.Reg("Z", 24+4*g+p), asmgen.Reg("Z", 8+p), asmgen.Reg("Z", 16+4*g+p)
			f.Ins("VMOVDQU32", fmt.Sprintf("%d(DI)%s", 64*p, idx), t)
			f.Ins("VMOVDQA32", "Z2", u)
			f.Ins("VPDPBUSD", "Z1", t, u)
			f.Ins("VCVTDQ2PS", u, u)
			f.Ins("VPERMPS", sc, ix, t)
			f.Ins("VFMADD231PS", t, u, acc)
		}
	}
	loopTail(f, label, step{"SI", wStep}, step{"DI", 288})
}

// q80x16Sums stores the sixteen rows' sums at AX: each group as
// dotQ8_0x8PrepAsm ends, rows 2p+1 out of the high halves, then HSUM8.
func q80x16Sums(f *asmgen.File) {
	f.P("\n\t// Each group as dotQ8_0x8PrepAsm ends: rows 2p+1 out of the high\n\t// halves, then HSUM8.")
	for g := 0; g < 2; g++ {
		for p := 0; p < 4; p++ {
			f.Ins("VEXTRACTF64X4", "$1", asmgen.Reg("Z", 16+4*g+p), asmgen.Reg("Y", 24+4*g+p))
		}
		var rs []string
		for p := 0; p < 4; p++ {
			rs = append(rs, asmgen.Reg("Y", 16+4*g+p), asmgen.Reg("Y", 24+4*g+p))
		}
		f.P("\tHSUM8(%s)", strings.Join(rs, ", "))
		f.Ins("VMOVUPS", "Y0", fmt.Sprintf("%d(AX)", 32*g))
	}
}

// q80PrepWeights writes prepQ8_0WeightsAsm, which lays nb Q8_0 weight
// blocks out as dotQ8_0x16PrepWRowsAsm reads them: per block the quants, the
// correction dotQ8_0x16PrepAsm computes (VPDPBUSD of 0x80 by the quants,
// negated) and the scale as VCVTPH2PS converts it.
func q80PrepWeights(f *asmgen.File) {
	f.Raw(`
// func prepQ8_0WeightsAsm(w *byte, nb int, wp *byte)
//
// The nb Q8_0 blocks at w as prepared weight blocks at wp (68 bytes each:
// the 32 quants, the eight dwords -128·(sum of each four quants), the
// scale as a float32), which dotQ8_0x16PrepWRowsAsm reads.`)
	f.Text("prepQ8_0WeightsAsm", 0, 24)
	f.Args(asmgen.Arg{Name: "w", Reg: "SI"}, asmgen.Arg{Name: "nb", Reg: "CX"}, asmgen.Arg{Name: "wp", Reg: "DI"})
	f.Raw(`
	VPBROADCASTD c80<>(SB), Y15

q80pwloop:
	VMOVDQU      2(SI), Y1
	VMOVDQU      Y1, (DI)
	VPXORD       Y2, Y2, Y2
	VPDPBUSD     Y1, Y15, Y2
	VPXORD       Y3, Y3, Y3
	VPSUBD       Y2, Y3, Y2
	VMOVDQU      Y2, 32(DI)
	VPBROADCASTW (SI), X3
	VCVTPH2PS    X3, X3
	VMOVSS       X3, 64(DI)`)
	loopTail(f, "q80pwloop", step{"SI", 34}, step{"DI", q80PrepW})
	f.Ins("VZEROUPPER")
	f.Ins("RET")
	f.P("")
}

// q80PrepRows writes prepQ8_0RowsAsm, the prepared group of eight Q8_0
// activation rows that dotQ8_0x8PrepAsm and the sixteen-row kernels read
// (quant's prepQ8_0x8): per block the eight rows' quants XORed with 0x80,
// row after row, then their scales as VCVTPH2PS converts them.
func q80PrepRows(f *asmgen.File) {
	f.Raw(`
// func prepQ8_0RowsAsm(xq *byte, stride, nb int, xp *byte)
//
// The eight Q8_0 activation rows at xq (stride bytes apart, nb blocks
// each) as a prepared group at xp: per block 288 bytes, the rows' 32
// quants XORed with 0x80 one row after another, then their eight scales
// as float32.`)
	f.Text("prepQ8_0RowsAsm", 0, 32)
	f.Args(asmgen.Arg{Name: "xq", Reg: "SI"}, asmgen.Arg{Name: "stride", Reg: "DX"}, asmgen.Arg{Name: "nb", Reg: "CX"}, asmgen.Arg{Name: "xp", Reg: "DI"})
	f.Raw(`
	VPBROADCASTD c80<>(SB), Y15

q80prloop:
	MOVQ         SI, R8
	XORQ         R9, R9

q80prrow:
	VPXORD       2(R8), Y15, Y1
	VMOVDQU      Y1, (DI)(R9*8)
	VPBROADCASTW (R8), X3
	VCVTPH2PS    X3, X3
	VMOVSS       X3, 256(DI)(R9*1)
	ADDQ         DX, R8
	ADDQ         $4, R9
	CMPQ         R9, $32
	JNE          q80prrow`)
	loopTail(f, "q80prloop", step{"SI", 34}, step{"DI", 288})
	f.Ins("VZEROUPPER")
	f.Ins("RET")
	f.P("")
}
