package cpu

import (
	"testing"

	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/kernels/quant"
)

// TestEveryFamilyBound holds T-CPU to the catalog: it is the oracle and
// the tier every bundle can run on, so each catalog family needs an
// implementation here, and an implementation of a family the catalog
// lacks could never be bound.
func TestEveryFamilyBound(t *testing.T) {
	for _, fam := range kernels.Families() {
		abi, _ := kernels.Lookup(fam)
		if _, ok := families[fam]; !ok {
			t.Errorf("catalog family %s has no T-CPU implementation in families (kernel.go)", fam)
			continue
		}
		if abi.KVTyped {
			// T-CPU addresses every cache type the compiler lays out.
			for _, kv := range []kernels.KVTypes{kernels.F16KV, {K: ggml.Q8_0, V: ggml.Q8_0}, {K: ggml.Q8_0, V: ggml.F16}, {K: ggml.F16, V: ggml.Q8_0}} {
				if _, err := Bind(kernels.KVInstanceName(abi, kv)); err != nil {
					t.Errorf("Bind(%s): %v", kernels.KVInstanceName(abi, kv), err)
				}
			}
			continue
		}
		if !abi.Typed {
			if _, err := Bind(kernels.InstanceName(abi, 0)); err != nil {
				t.Errorf("Bind(%s): %v", fam, err)
			}
			continue
		}
		for _, typ := range ggml.Types() {
			if !quant.IsWeightType(typ) {
				continue
			}
			if _, err := Bind(kernels.InstanceName(abi, typ)); err != nil {
				t.Errorf("Bind(%s): %v", kernels.InstanceName(abi, typ), err)
			}
		}
	}
	for fam := range families {
		if _, ok := kernels.Lookup(fam); !ok {
			t.Errorf("T-CPU implements %s, which is not in the kernel catalog", fam)
		}
	}
}
