package main

import (
	"fmt"
	"strings"

	"github.com/zrtdev/zrt/kernels/internal/asmgen"
)

// constants writes the vector constants the kernels share.
func constants(f *asmgen.File) {
	for _, c := range []struct {
		name string
		b    byte
	}{{"c0F", 0x0f}, {"c80", 0x80}, {"c08", 0x08}, {"c30", 0x30}, {"c01", 0x01}} {
		f.Splat(c.name, c.b, 32)
		f.P("")
	}
	f.Quads("ones16", asmgen.Repeat(1, 2, 16)...)
	f.P("")
	// q6shuf: VPSHUFB indices, entry m (16 bytes) copying byte 2m to bytes
	// 0-7 and byte 2m+1 to bytes 8-15 (Q6KQ).
	var q []uint64
	for b := 0; b < 16; b++ {
		q = append(q, asmgen.Repeat(uint64(b), 1, 8)...)
	}
	f.Quads("q6shuf", q...)
	f.P("")
	// lane4: VPERMPS indices, entry r (32 bytes) selecting lane r.
	q = nil
	for r := 0; r < 4; r++ {
		q = append(q, asmgen.Repeat(uint64(r), 4, 8)...)
	}
	f.Quads("lane4", q...)
	f.P("")
	// lane8: VPERMPS indices, entry r (32 bytes) selecting lane r, so
	// that entries 2p and 2p+1 (64 bytes) spread lanes 2p and 2p+1 over a
	// ZMM register's halves (dotQ8_0x8PrepAsm).
	q = nil
	for r := 0; r < 8; r++ {
		q = append(q, asmgen.Repeat(uint64(r), 4, 8)...)
	}
	f.Quads("lane8", q...)
	f.P("")
}

// spread returns VPERMW indices: n scale words, each repeated per times.
func spread(n, per int) []uint64 {
	var q []uint64
	for s := 0; s < n; s++ {
		q = append(q, asmgen.Repeat(uint64(s), 2, per)...)
	}
	return q
}

// mvKernel is a many-row (matVec) kernel: rows consecutive weight rows at
// SI against the activation row at R8 (nb blocks), one float32 each to
// out (R11). Every one has this row loop; the table rows give the blocks.
type mvKernel struct {
	name  string
	doc   string
	init  string // constants loaded once
	label string // prefix of the labels
	zero  []string
	pairs bool                 // two blocks per step, an odd last one apart
	body  func(f *asmgen.File) // one step (block or pair of blocks)
	tail  func(f *asmgen.File) // the odd last block, when pairs
	wLen  int                  // weight bytes per step
	xLen  int                  // activation bytes per step
	end   string               // before the HSUM
}

func (k *mvKernel) write(f *asmgen.File) {
	f.P("\n// func %s(w, x *byte, nb, rows int, out *float32)\n//", k.name)
	f.Raw(strings.TrimPrefix(k.doc, "\n"))
	f.Text(k.name, 0, 40)
	f.Args(asmgen.Arg{Name: "w", Reg: "SI"}, asmgen.Arg{Name: "x", Reg: "R8"}, asmgen.Arg{Name: "nb", Reg: "R9"},
		asmgen.Arg{Name: "rows", Reg: "R10"}, asmgen.Arg{Name: "out", Reg: "R11"})
	f.Raw(k.init)
	row, block := k.label+"row", k.label+"block"
	if k.pairs {
		block = k.label + "pair"
	}
	f.P("\n%s:", row)
	f.Ins("MOVQ", "R8", "DI")
	f.Ins("MOVQ", "R9", "CX")
	if k.pairs {
		f.Ins("SHRQ", "$1", "CX")
	}
	f.Zero("VXORPS", k.zero...)
	if k.pairs {
		f.Ins("JZ", k.label+"tail")
	}
	f.P("\n%s:", block)
	k.body(f)
	loopTail(f, block, step{"SI", k.wLen}, step{"DI", k.xLen})
	f.P("")
	if k.pairs {
		f.P("%stail:", k.label)
		f.Ins("TESTQ", "$1", "R9")
		f.Ins("JZ", k.label+"sum")
		k.tail(f)
		f.Ins("ADDQ", fmt.Sprintf("$%d", k.wLen/2), "SI")
		f.P("\n%ssum:", k.label)
	}
	if k.end != "" {
		f.Raw(k.end)
	}
	// HSUM's scratch is X11 in the block-per-step kernels and X1 in the
	// pair kernels, as they were first written; both are free here.
	scratch := "X11"
	if k.pairs {
		scratch = "X1"
	}
	f.P("\tHSUM(Y0, X0, %s)", scratch)
	f.Ins("VMOVSS", "X0", "(R11)")
	f.Ins("ADDQ", "$4", "R11")
	f.Ins("DECQ", "R10")
	f.Ins("JNZ", row)
	f.Ins("VZEROUPPER")
	f.Ins("RET")
	f.P("")
}

// matVec writes the many-row kernels.
func matVec(f *asmgen.File) {
	f.Raw(`
// ---- many weight rows · one activation row (decode), AVX-512
//
// The matVec kernels walk rows consecutive weight rows (one sequential
// stream) against the same activation row, writing one float per row, so
// a matrix-vector product is one call. Within a row they work on ZMM
// registers: 64 quants per instruction.

// PREFETCH3 prefetches 144 bytes at off(SI): three lines 48 bytes apart
// cover every line of a stream advancing 144 bytes per iteration.`)
	f.Define("PREFETCH3(off)", func(f *asmgen.File) {
		f.Ins("PREFETCHT0", "off(SI)")
		f.Ins("PREFETCHT0", "off+48(SI)")
		f.Ins("PREFETCHT0", "off+96(SI)")
	})
	f.Raw(`
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
`)
	init := "\tVPBROADCASTD c0F<>(SB), Z31\n"
	for i := 0; i < 4; i++ {
		init += fmt.Sprintf("\tVMOVDQU64 k4perm<>+%d(SB), Z%d\n", 64*i, 27+i)
	}
	for i := 0; i < 3; i++ {
		init += fmt.Sprintf("\tVMOVDQU64 k4unpack<>+%d(SB), X%d\n", 16*i, 26-i)
	}
	(&mvKernel{
		name: "matVecQ4_KGEMVAsm",
		doc: `
// Q4_K in the repacked GEMV's order (ggml_gemv_q4_K_8x8_q8_K), per weight
// row. Per block: the 12 scale bytes are unpacked in one XMM (the same
// field extraction as K4SCALES, one 32-bit word per lane), widened to
// words, and VPERMW spreads them into the four chunks' scale vectors; the
// mins term pairs the Q8_K bsums with VPHADDW as K4MINS does. Integer sums
// are exact (same ranges as dotQ4_KAVX2Asm); the block's scaled sums and
// its mins term are each reduced to one exact integer, and the float work
// is one FMA of each into its own accumulator (lanes 0 and 1 of X0, by
// d*xd and dmin*xd), their difference at the end: dotQ4_KGEMVAVX2Asm's
// operations, so every row's result is bit-identical to it.`,
		init: init, label: "mvq4k", zero: []string{"X0", "X1"},
		body: func(f *asmgen.File) {
			f.Raw(`
	PREFETCH3(1152)
	// scales (bytes sc0-7, mins m0-7) → words in Y3
	VMOVDQU    4(SI), X2
	VPSHUFD    $0x98, X2, X3
	VPSRLVD    X26, X3, X3
	VPANDD     X25, X3, X3
	VPSHUFD    $0x50, X2, X4
	VPSRLD     $2, X4, X4
	VPTERNLOGD $0xf8, X24, X4, X3
	VPMOVZXBW  X3, Y3`)
			permScales(f, 27, 16)
			f.Raw(`

	// mins: m_j*(bsum[2j]+bsum[2j+1]) in four int32 lanes
	VMOVDQU      260(DI), X5
	VPHADDW      276(DI), X5, X5
	VEXTRACTI128 $1, Y3, X6
	VPMADDWD     X6, X5, X5

	// [d, dmin]*xd (lanes 2-3 zero)
	VMOVD        (SI), X7
	VCVTPH2PS    X7, X7
	VBROADCASTSS (DI), X8
	VMULPS       X8, X7, X7

	VPXORD      Z15, Z15, Z15
	K4Q128(16, 4, Z16, Z17)
	K4Q128(80, 132, Z18, Z19)

	// [S, M, -, -]: the block's scaled sums and mins term, each one
	// exact int32 (int adds in any order), then one packed FMA by
	// [d*xd, dmin*xd, 0, 0] into X0 = [acc, accm, 0, 0]
	VEXTRACTI64X4 $1, Z15, Y14
	VPADDD        Y14, Y15, Y15
	VEXTRACTI128  $1, Y15, X14
	VPADDD        X14, X15, X15
	VPUNPCKLDQ    X5, X15, X14
	VPUNPCKHDQ    X5, X15, X15
	VPADDD        X14, X15, X15
	VMOVHLPS      X15, X15, X14
	VPADDD        X14, X15, X15
	VCVTDQ2PS     X15, X15
	VFMADD231PS   X7, X15, X0
`)
		},
		wLen: 144, xLen: 292,
		end: `
	// acc - accm alone in X0 (the HSUM below adds only zeros to it).
	VMOVSHDUP X0, X1
	VSUBSS    X1, X0, X1
	VINSERTPS $0x0e, X1, X1, X0`,
	}).write(f)
	f.P("// k4perm: VPERMW indices making chunk c's scale vector (words 0-15 take\n// scale 2c, words 16-31 scale 2c+1).")
	f.Quads("k4perm", spread(8, 16)...)
	f.Raw(`
// k4unpack: per-lane shift counts [0, 0, 0, 4], the masks [0x3f, 0x0f,
// 0x3f, 0x0f] and [0, 0x30, 0, 0x30] (bytewise) of the vector scale
// unpacking in matVecQ4_KAsm. Lanes (from [a, c, b, c] and [a, a, b, b],
// a, b, c the three words of the scale bytes): sc0-3 = a&0x3f, sc4-7 =
// c&0x0f | (a>>2)&0x30, m0-3 = b&0x3f, m4-7 = (c>>4)&0x0f | (b>>2)&0x30.`)
	f.Quads("k4unpack", asmgen.Dwords(0, 0, 0, 4, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f,
		0, 0x30303030, 0, 0x30303030)...)
	f.Raw(`
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
`)
	init = "\tVPBROADCASTD c0F<>(SB), Z29\n\tVPBROADCASTD c30<>(SB), Z30\n"
	for i := 0; i < 4; i++ {
		init += fmt.Sprintf("\tVMOVDQU64 q6perm<>+%d(SB), Z%d\n", 64*i, 25+i)
	}
	(&mvKernel{
		name: "matVecQ6_KAsm",
		doc: `
// The quants are stored biased by 32: as in dotQ6_KAVX2Asm the sum is
// sum(sc*q*y) - 32*sum_k sc_k*bsum_k, all in exact int32 lanes (a
// VPMADDUBSW pair is within 2*63*128, times a scale of magnitude <= 128),
// folded to dotQ6_KAVX2Asm's eight lanes; its FMAs and HSUM follow, so
// every row's result is bit-identical to the one-row kernel's.`,
		init: init, label: "mvq6k", zero: []string{"X0"},
		body: func(f *asmgen.File) {
			for i := 0; i < 4; i++ {
				f.Ins("PREFETCHT0", fmt.Sprintf("%d(SI)", 1680+60*i))
			}
			f.Raw(`

	// scales as words, spread per sixteen quants; the bias term
	VPMOVSXBW  192(SI), Y3`)
			permScales(f, 25, 16)
			f.Raw(`
	VPMADDWD   260(DI), Y3, Y4
	VPSLLD     $5, Y4, Y4
	VPXORD     Z15, Z15, Z15
	VPSUBD     Z4, Z15, Z15

	// d*xd
	VPBROADCASTW 208(SI), X7
	VCVTPH2PS    X7, Y7
	VMULPS.BCST  (DI), Y7, Y10

	Q6KH128(0, 128, 4, Z16, Z17)
	Q6KH128(64, 160, 132, Z18, Z19)`)
			foldFMA(f)
		},
		wLen: 210, xLen: 292,
	}).write(f)
	f.P("// q6perm: VPERMW indices spreading the sixteen scale words over 64 quants\n// (32 words) at a time: vector g takes scales 4g..4g+3, eight words each.")
	f.Quads("q6perm", spread(16, 8)...)
	f.Raw(`
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
`)
	(&mvKernel{
		name: "matVecQ8_0Asm",
		doc: `
// Two blocks per step in one ZMM: the Q80VNNI arithmetic (w+128 unsigned
// against signed x by VPDPBUSD, minus the same instruction's 128*x sums),
// exact in int32 lanes, then PAIRACC. An odd last block goes through the
// YMM form.`,
		init: "\tVPBROADCASTD c80<>(SB), Z15", label: "mvq80", zero: []string{"X0"}, pairs: true,
		body: func(f *asmgen.File) {
			f.Ins("PREFETCHT0", "1088(SI)")
			f.Ins("PREFETCHT0", "1152(SI)")
			pairLoad(f, "SI", "Z1", 34)
			f.Ins("VPXORD", "Z15", "Z1", "Z1")
			pairLoad(f, "DI", "Z2", 34)
			vnniCorrected(f, "Z", "Z2", "Z1", "Z15")
			f.P("\tPAIRSCALE(34)\n\tPAIRACC")
		},
		tail: q80Block,
		wLen: 68, xLen: 68,
	}).write(f)
	(&mvKernel{
		name: "matVecQ4_0Asm",
		doc: `
// Two blocks per step: their 32 quant bytes make [q0, q1], the nibbles
// [q0 low, q1 low, q0 high, q1 high] in 16-byte lanes, reordered to
// element order [q0 low, q0 high, q1 low, q1 high]; then dotQ4_0VNNIAsm's
// exact sum(q*x) - sum(8*x) by VPDPBUSD. An odd last block goes through
// the YMM form.`,
		init:  "\tVPBROADCASTD c0F<>(SB), Z15\n\tVPBROADCASTD c08<>(SB), Z13",
		label: "mvq40", zero: []string{"X0"}, pairs: true,
		body: func(f *asmgen.File) {
			f.Raw(`
	PREFETCHT0   576(SI)
	VMOVDQU      2(SI), X1
	VINSERTI128  $1, 20(SI), Y1, Y1
	VPSRLW       $4, Y1, Y2
	VINSERTI64X4 $1, Y2, Z1, Z1
	VPANDD       Z15, Z1, Z1
	VSHUFI64X2   $0xd8, Z1, Z1, Z1`)
			pairLoad(f, "DI", "Z2", 34)
			vnniCorrected(f, "Z", "Z2", "Z1", "Z13")
			f.P("\tPAIRSCALE(18)\n\tPAIRACC")
		},
		tail: func(f *asmgen.File) {
			f.P("\tQ40NIB(2(SI))")
			q40VNNI(f, "Y13")
		},
		wLen: 36, xLen: 68,
	}).write(f)
	f.P("")
}

// permScales spreads the scale words in Z3 into Z(dst)..Z(dst+3) with the
// VPERMW index vectors in Z(idx)..Z(idx+3).
func permScales(f *asmgen.File, idx, dst int) {
	for i := 0; i < 4; i++ {
		f.Ins("VPERMW", "Z3", asmgen.Reg("Z", idx+i), asmgen.Reg("Z", dst+i))
	}
}

// foldFMA folds the sixteen int32 lanes of Z15 to eight, converts them and
// adds them times Y10 to Y0: the one-row kernels' lanes and FMA.
func foldFMA(f *asmgen.File) {
	f.Ins("VEXTRACTI64X4", "$1", "Z15", "Y14")
	f.Ins("VPADDD", "Y14", "Y15", "Y15")
	f.Ins("VCVTDQ2PS", "Y15", "Y15")
	f.Ins("VFMADD231PS", "Y10", "Y15", "Y0")
	f.P("")
}

// pairLoad loads the quants of two consecutive blocks (block bytes apart,
// quants at 2) at base into the two halves of z.
func pairLoad(f *asmgen.File, base, z string, block int) {
	f.Ins("VMOVDQU", asmgen.Mem(2, base), "Y"+z[1:])
	f.Ins("VINSERTI64X4", "$1", asmgen.Mem(2+block, base), z, z)
}
