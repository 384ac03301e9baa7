// Command gen writes the amd64 assembly of package quant — simd_amd64.s,
// iq4_amd64.s and mxfp4_amd64.s — from the kernel tables in this
// directory. The kernels are hand-scheduled; what the generator removes is
// their hand unrolling: the per-row, per-chunk and per-block repetitions,
// the variants of one kernel that differ in rows, block size or registers,
// and the DATA tables, all come from loops over tables here.
//
// Run it through `make generate` (go generate) after changing a table; its
// output depends on nothing else, so CI can check that the committed files
// are what it writes. The bit-exactness tests of package quant compare
// every kernel with its pure-Go counterpart.
package main

import (
	"fmt"

	"github.com/zrtdev/zrt/kernels/internal/asmgen"
)

// generator is this command's path, named in every file's header.
const generator = "kernels/quant/gen"

func main() { asmgen.Main("kernels/quant", render) }

// render returns the generated files by base name.
func render() (map[string][]byte, error) {
	return map[string][]byte{
		"simd_amd64.s":  simdFile(),
		"iq4_amd64.s":   iq4File(),
		"mxfp4_amd64.s": mxfp4File(),
	}, nil
}

// loopTail advances each pointer register by its step and closes the
// block loop at label (CX counts the iterations).
func loopTail(f *asmgen.File, label string, steps ...step) {
	for _, s := range steps {
		f.Ins("ADDQ", fmt.Sprintf("$%d", s.n), s.reg)
	}
	f.Ins("DECQ", "CX")
	f.Ins("JNZ", label)
}

// step is one pointer advance of a block loop.
type step struct {
	reg string
	n   int
}

// steps pairs each register with the same advance n.
func steps(n int, regs ...string) []step {
	out := make([]step, len(regs))
	for i, r := range regs {
		out[i] = step{r, n}
	}
	return out
}
