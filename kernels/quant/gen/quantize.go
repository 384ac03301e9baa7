package main

import (
	"fmt"

	"github.com/zrtdev/zrt/kernels/internal/asmgen"
)

// maxLanes leaves in the low lane of X0 the largest of the sixteen float
// lanes of Z0 (halving: 256, 128, 64 bits, then the last two lanes),
// through Y1/X1. max is order-free, so any tree gives quantQ8_K's amax.
func maxLanes(f *asmgen.File) {
	f.Ins("VEXTRACTF64X4", "$1", "Z0", "Y1")
	f.Ins("VMAXPS", "Y0", "Y1", "Y0")
	f.Ins("VEXTRACTF128", "$1", "Y0", "X1")
	f.Ins("VMAXPS", "X0", "X1", "X0")
	for _, imm := range []string{"$0x4e", "$0xb1"} {
		f.Ins("VPERMILPS", imm, "X0", "X1")
		f.Ins("VMAXPS", "X0", "X1", "X0")
	}
}

// quantizers writes the activation quantizers.
func quantizers(f *asmgen.File) {
	f.Raw(`
// ---- activation quantization

// func quantQ8_KAsm(x *float32, dst *byte, nb int)
//
// quantQ8_K, block by block, with the same float operations in the same
// order per element, so the bytes are identical: amax is the largest
// |x| (a max tree, order-free), mx the first element with |x| == amax,
// iscale = -127/mx, q = min(127, nearestInt(iscale*x)) with nearestInt's
// 1.5*2^23 trick, d = 1/iscale. bsums come from the stored quants:
// VPDPBUSD against 0x01 bytes sums them by four, two rounds of
// VPACKSSDW/VPMADDWD by sixteen, and VPERMD restores group order.`)
	f.Text("quantQ8_KAsm", 0, 24)
	f.Args(asmgen.Arg{Name: "x", Reg: "SI"}, asmgen.Arg{Name: "dst", Reg: "DI"}, asmgen.Arg{Name: "nb", Reg: "CX"})
	for i, c := range []string{"absmask", "q8kmagic", "mant23", "q8kbias", "c127", "c01", "ones16"} {
		f.Ins("VPBROADCASTD", c+"<>(SB)", asmgen.Reg("Z", 16+i))
	}
	f.Ins("VMOVDQU64", "bsumidx<>(SB)", "Z23")
	f.P("\nq8kblock:\n\t// amax over the 256 values (Z24-Z31 hold |x| of the first half)")
	// A max tree: |x| of 128 values into eight registers, maxed pairwise
	// into four, for each half; then the eight partial maxima to one.
	for h, r := range []struct{ abs, max int }{{24, 0}, {4, 12}} {
		for i := 0; i < 8; i++ {
			f.Ins("VANDPS", asmgen.Mem(512*h+64*i, "SI"), "Z16", asmgen.Reg("Z", r.abs+i))
		}
		for i := 0; i < 4; i++ {
			f.Ins("VMAXPS", asmgen.Reg("Z", r.abs+2*i), asmgen.Reg("Z", r.abs+2*i+1), asmgen.Reg("Z", r.max+i))
		}
	}
	for _, p := range [][3]int{{0, 1, 0}, {2, 3, 2}, {12, 13, 12}, {14, 15, 14}, {0, 2, 0}, {12, 14, 12}, {0, 12, 0}} {
		f.Ins("VMAXPS", asmgen.Reg("Z", p[0]), asmgen.Reg("Z", p[1]), asmgen.Reg("Z", p[2]))
	}
	maxLanes(f)
	f.Raw(`
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
`)
	for off := 0; off < 1024; off += 64 {
		f.P("\tQ8KQ(%d)", off)
	}
	f.P("\n\t// bsums: group g is bytes 16g..16g+15 of the quants")
	for i := 0; i < 4; i++ {
		f.Ins("VPXORD", asmgen.Reg("Z", 4+i), asmgen.Reg("Z", 4+i), asmgen.Reg("Z", 4+i))
		f.Ins("VPDPBUSD", asmgen.Mem(4+64*i, "DI"), "Z21", asmgen.Reg("Z", 4+i))
	}
	f.Raw(`
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
	VPXORD    Z1, Z1, Z1`)
	// The block's 292 bytes: four 64-byte stores, the last one overlapping.
	for _, off := range []int{0, 64, 128, 192, 228} {
		f.Ins("VMOVDQU64", "Z1", asmgen.Mem(off, "DI"))
	}
	f.Ins("JMP", "q8knext")
	f.P("")
	for _, c := range []struct {
		name    string
		v       uint32
		comment string
	}{
		{"absmask", 0x7fffffff, ""},
		{"q8kmagic", 0x4b400000, "12582912 = 1.5*2^23"},
		{"mant23", 0x007fffff, ""},
		{"q8kbias", 0x00400000, ""},
		{"c127", 127, ""},
		{"negc127", 0xc2fe0000, "-127.0"},
		{"onef", 0x3f800000, "1.0"},
	} {
		long(f, c.name, c.v, c.comment)
	}
	f.P("\n// bsumidx: after the packing rounds dword 4k+j holds group 4j+k; VPERMD\n// indices putting group g at dword g.")
	var idx []uint32
	for p := uint32(0); p < 16; p++ {
		idx = append(idx, 4*(p%4)+p/4)
	}
	f.Quads("bsumidx", asmgen.Dwords(idx...)...)
	f.Raw(`
// func quantQ8_0Asm(x *float32, dst *byte, nb int)
//
// quantQ8_0 (q8Block) block by block with the same float operations: amax
// by a max tree, d = amax/127, id = 127/amax (0 for an all-zero block),
// q = x*id rounded half to even by VCVTPS2DQ under the default rounding
// mode, d stored by VCVTPS2PH with round-to-nearest-even, as F32ToF16.`)
	f.Text("quantQ8_0Asm", 0, 24)
	f.Args(asmgen.Arg{Name: "x", Reg: "SI"}, asmgen.Arg{Name: "dst", Reg: "DI"}, asmgen.Arg{Name: "nb", Reg: "CX"})
	f.Raw(`
	VPBROADCASTD absmask<>(SB), Z16
	VMOVSS       c127f<>(SB), X17

q80qblock:
	VANDPS       (SI), Z16, Z0
	VANDPS       64(SI), Z16, Z1
	VMAXPS       Z0, Z1, Z0`)
	maxLanes(f)
	f.Raw(`
	// X0: amax
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
`)
	long(f, "c127f", 0x42fe0000, "127.0")
	f.Raw(`
// func quantF16AVX2Asm(x *float32, dst *byte, n int)
//
// Converts n float32 values (a multiple of 8) to F16 with VCVTPS2PH's
// immediate round-to-nearest-even: IEEE conversion, as F32ToF16 computes
// it (subnormal results, infinities and NaN payloads included).`)
	f.Text("quantF16AVX2Asm", 0, 24)
	f.Args(asmgen.Arg{Name: "x", Reg: "SI"}, asmgen.Arg{Name: "dst", Reg: "DI"}, asmgen.Arg{Name: "n", Reg: "CX"})
	f.Raw(`
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
	RET`)
}

// long writes the read-only 4-byte symbol name<> holding v, with an
// optional trailing comment saying what v is.
func long(f *asmgen.File, name string, v uint32, comment string) {
	line := fmt.Sprintf("DATA %s<>+0(SB)/4, $0x%08x", name, v)
	if comment != "" {
		line += " // " + comment
	}
	f.P("%s", line)
	f.P("GLOBL %s<>(SB), RODATA|NOPTR, $4", name)
}
