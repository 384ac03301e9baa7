// Command gen writes the amd64 assembly of package cpu — fattn_amd64.s,
// silu_amd64.s, tinyblas_amd64.s, tinyblas_avx2_amd64.s and
// vecf32_amd64.s — from the tables and loops here: the four-way unrolled
// column groups, the constant loads and tables, the 16x16 transpose's
// rounds and the tinyBLAS micro-tiles come from loops, and ggml_v_expf's
// constants from one table that both the flash-attention and the SwiGLU
// kernels read.
//
// Run it through `make generate` (go generate) after changing a kernel;
// its output depends on nothing else, so CI can check that the committed
// files are what it writes. The tests of package cpu compare every kernel
// with its pure-Go form bit for bit.
package main

import "github.com/zrtdev/zrt/kernels/internal/asmgen"

// generator is this command's path, named in every file's header.
const generator = "kernels/cpu/gen"

func main() { asmgen.Main("kernels/cpu", render) }

// render returns the generated files by base name.
func render() (map[string][]byte, error) {
	return map[string][]byte{
		"fattn_amd64.s":         fattnFile(),
		"silu_amd64.s":          siluFile(),
		"vecf32_amd64.s":        vecf32File(),
		"tinyblas_amd64.s":      tinyBLASFile(),
		"tinyblas_avx2_amd64.s": tinyBLASAVX2File(),
	}, nil
}

// z is the ZMM register n.
func z(n int) string { return asmgen.Reg("Z", n) }

// expfConst is one of ggml_v_expf's constants (AVX-512 form), as float32
// bits.
type expfConst struct {
	name string
	bits uint32
}

// The constants of ggml_v_expf in the order of faExpC: r (1.5*2^23), log2
// e, ln 2 in two parts, the polynomial c5..c1 and 1, the abs mask, the
// saturation bound 192 and +Inf.
var (
	expR     = expfConst{"r", 0x4b400000}
	expLog2e = expfConst{"log2e", 0x3fb8aa3b}
	expC1    = expfConst{"c1", 0x3f317200}
	expC2    = expfConst{"c2", 0x35bfbe8e}
	expPoly  = []expfConst{{"p0", 0x3c072010}, {"p1", 0x3d2b9f17}, {"p2", 0x3e2aaf33}, {"p3", 0x3efffedb}, {"p4", 0x3f7ffff6}}
	expOne   = expfConst{"one", 0x3f800000}
	expAbs   = expfConst{"abs", 0x7fffffff}
	expBound = expfConst{"192", 0x43400000}
	expInf   = expfConst{"inf", 0x7f800000}
)

// expfOrder is faExpC's layout of the constants.
func expfOrder() []expfConst {
	c := []expfConst{expR, expLog2e, expC1, expC2}
	c = append(c, expPoly...)
	return append(c, expOne, expAbs, expBound, expInf)
}

// group4 writes op over four consecutive 64-byte vectors: operand i is
// src(i) (a memory operand or register), the rest as args(i) gives them.
func group4(f *asmgen.File, op string, args func(i int) []string) {
	for i := 0; i < 4; i++ {
		f.Ins(op, args(i)...)
	}
}

// loads4 loads the four 64-column vectors at base+off, stride apart, into
// Z(dst)..Z(dst+3) with op (VCVTPH2PS from halves, VMOVUPS).
func loads4(f *asmgen.File, op, base string, stride, dst int) {
	group4(f, op, func(i int) []string { return []string{asmgen.Mem(stride*i, base), z(dst + i)} })
}

// stores4 stores Z(src)..Z(src+3) to the four vectors at base, stride
// apart, with op and any leading operands (VCVTPS2PH's $0).
func stores4(f *asmgen.File, op, base string, stride, src int, lead ...string) {
	group4(f, op, func(i int) []string {
		return append(append([]string{}, lead...), z(src+i), asmgen.Mem(stride*i, base))
	})
}
