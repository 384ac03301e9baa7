package main

import (
	"fmt"
	"strings"

	"github.com/zrtdev/zrt/kernels/internal/asmgen"
)

// dotKernel is a one-row kernel: the weight blocks at SI against the
// activation blocks at DI, CX blocks (or pairs, or groups of 32 floats),
// one float32 result. Every one-row kernel has this frame; the table rows
// give what differs.
type dotKernel struct {
	sig    string   // the Go declaration, without "func "
	doc    string   // the comment under the declaration, "// "-prefixed lines
	frame  int      // bytes of locals
	args   []string // argument names, loaded into SI, DI, CX and R8
	pre    string   // instructions after the argument loads
	consts []konst  // constants loaded before the loop
	zero   []string // accumulators cleared before the loop
	label  string
	body   func(f *asmgen.File) // the block loop's body, before the steps
	wLen   int                  // weight bytes per iteration
	xLen   int                  // activation bytes per iteration
	end    func(f *asmgen.File) // after the loop; nil: HSUM(acc) to the result
	acc    int                  // the Y register reduced when end is nil
}

// konst is a constant vector loaded once: VMOVDQU sym(SB), reg.
type konst struct{ sym, reg string }

// argRegs are the registers of a one-row kernel's arguments, in order.
var argRegs = []string{"SI", "DI", "CX", "R8"}

// name is the kernel's symbol: its declaration up to the parenthesis.
func (k *dotKernel) name() string {
	n, _, _ := strings.Cut(k.sig, "(")
	return n
}

func (k *dotKernel) write(f *asmgen.File) {
	f.P("\n// func %s", k.sig)
	if k.doc != "" {
		f.P("//")
		f.Raw(strings.TrimPrefix(k.doc, "\n"))
	}
	f.Text(k.name(), k.frame, 8*len(k.args)+4)
	args := make([]asmgen.Arg, len(k.args))
	for i, a := range k.args {
		args[i] = asmgen.Arg{Name: a, Reg: argRegs[i]}
	}
	f.Args(args...)
	if k.pre != "" {
		f.Raw(k.pre)
	}
	for _, c := range k.consts {
		f.Ins("VMOVDQU", c.sym+"(SB)", c.reg)
	}
	f.Zero("VXORPS", k.zero...)
	f.P("")
	f.P("%s:", k.label)
	k.body(f)
	loopTail(f, k.label, step{"SI", k.wLen}, step{"DI", k.xLen})
	f.P("")
	if k.end != nil {
		k.end(f)
	} else {
		f.P("\tHSUM(Y%d, X%d, X1)", k.acc, k.acc)
		f.Ins("VMOVSS", fmt.Sprintf("X%d", k.acc), fmt.Sprintf("ret+%d(FP)", 8*len(k.args)))
	}
	f.Ins("VZEROUPPER")
	f.Ins("RET")
	f.P("")
}

// floatDot is dotF32x32 or dotF16x32: four independent FMA chains over 32
// elements per iteration, added pairwise and reduced by HSUM at the end.
func floatDot(name string, half bool) *dotKernel {
	k := &dotKernel{
		sig:   name + "(w, x *byte, n int) float32",
		args:  []string{"w", "x", "n"},
		pre:   "\tSHRQ $5, CX",
		zero:  asmgen.Regs("Y", 0, 1, 4),
		label: "f32loop",
		wLen:  128,
		xLen:  128,
		end: func(f *asmgen.File) {
			f.Ins("VADDPS", "Y1", "Y0", "Y0")
			f.Ins("VADDPS", "Y3", "Y2", "Y2")
			f.Ins("VADDPS", "Y2", "Y0", "Y0")
			f.P("\tHSUM(Y0, X0, X1)")
			f.Ins("VMOVSS", "X0", "ret+24(FP)")
		},
	}
	k.body = func(f *asmgen.File) {
		for i := 0; i < 4; i++ {
			f.Ins("VMOVUPS", asmgen.Mem(32*i, "SI"), asmgen.Reg("Y", 4+i))
		}
		for i := 0; i < 4; i++ {
			f.Ins("VFMADD231PS", asmgen.Mem(32*i, "DI"), asmgen.Reg("Y", 4+i), asmgen.Reg("Y", i))
		}
	}
	if half {
		k.label, k.wLen, k.xLen = "f16loop", 64, 64
		k.body = func(f *asmgen.File) {
			for i := 0; i < 8; i++ {
				f.Ins("VCVTPH2PS", asmgen.Mem(16*(i%4), []string{"SI", "DI"}[i/4]), asmgen.Reg("Y", 4+i))
			}
			for i := 0; i < 4; i++ {
				f.Ins("VFMADD231PS", asmgen.Reg("Y", 8+i), asmgen.Reg("Y", 4+i), asmgen.Reg("Y", i))
			}
		}
	}
	return k
}
