package ir

import (
	"slices"
	"testing"

	"github.com/zrtdev/zrt/kernels"
)

// TestOpKernelsInCatalog holds the opcode table to the kernel catalog:
// every opcode lowers onto a catalog family, a typed family names the
// weight role that picks its instance and an untyped one names none, and
// every role an opcode names is one of the family's buffers. The check
// lives here rather than in package kernels, which must not import the
// compiler.
func TestOpKernelsInCatalog(t *testing.T) {
	n := 0
	for o := OpInvalid + 1; ; o++ {
		info, ok := o.Info()
		if !ok {
			break
		}
		n++
		abi, ok := kernels.Lookup(info.Kernel)
		if !ok {
			t.Errorf("%s: kernel family %q is not in the catalog (kernels/abi.go)", info.Name, info.Kernel)
			continue
		}
		if abi.Typed != (info.TypedBy != "") {
			t.Errorf("%s: TypedBy %q, but family %s has Typed=%v", info.Name, info.TypedBy, abi.Name, abi.Typed)
		}
		for _, role := range append(slices.Clone(info.InPlace), info.TypedBy) {
			if role != "" && !slices.Contains(abi.Bufs, role) {
				t.Errorf("%s: role %q is not a buffer of family %s %v", info.Name, role, abi.Name, abi.Bufs)
			}
		}
	}
	if n != len(opTable) {
		t.Errorf("opcodes 1..%d have table entries, but the table has %d: a gap in the numbering hides some from this test", n, len(opTable))
	}
}
