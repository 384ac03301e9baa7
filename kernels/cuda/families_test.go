package cuda

import (
	"os"
	"regexp"
	"testing"

	"github.com/zrtdev/zrt/kernels"
)

// TestFamiliesCoverTargets holds the family table to the catalog and the
// target registry: every family a CUDA-tier target can lower onto (each
// catalog family no target lists as fused, and each fused family the
// target lists) has a number, numbers are distinct, and every family in
// the table is in the catalog. A new catalog family or a new fusion for
// cuda:sm_90 thus cannot go without a CUDA kernel unnoticed.
func TestFamiliesCoverTargets(t *testing.T) {
	ids := map[int]string{}
	implemented := map[string]bool{}
	for _, f := range Families() {
		if f.ID <= 0 {
			t.Errorf("family %s: number %d, want a positive one", f.Name, f.ID)
		}
		if prev, ok := ids[f.ID]; ok {
			t.Errorf("families %s and %s share number %d", prev, f.Name, f.ID)
		}
		ids[f.ID] = f.Name
		if implemented[f.Name] {
			t.Errorf("family %s listed twice", f.Name)
		}
		implemented[f.Name] = true
		if _, ok := kernels.Lookup(f.Name); !ok {
			t.Errorf("family %s is not in the kernel catalog", f.Name)
		}
	}
	fused := map[string]bool{}
	for _, tg := range kernels.Targets() {
		for _, fam := range tg.Fused {
			fused[fam] = true
		}
	}
	cudaTargets := 0
	for _, tg := range kernels.Targets() {
		if tg.Tier != kernels.TierCUDA {
			continue
		}
		cudaTargets++
		for _, fam := range kernels.Families() {
			if (!fused[fam] || tg.Fuses(fam)) && !implemented[fam] {
				t.Errorf("target %s lowers onto family %s, which has no CUDA family number in families.go", tg.Name, fam)
			}
		}
	}
	if cudaTargets == 0 {
		t.Error("no target of tier cuda in kernels.Targets")
	}
}

// TestInstances checks that every typed family is instantiated for every
// T-CUDA weight type and every plain family once, that each instance's
// source is in this directory, and that Shape knows its launch.
func TestInstances(t *testing.T) {
	insts, err := Instances()
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, in := range insts {
		per[in.Family.Name]++
		if _, err := os.Stat(in.Entry() + ".cu"); err != nil {
			t.Errorf("instance %s: %v (run make generate)", in.Name, err)
		}
		abi, typ, err := kernels.SplitInstance(in.Name)
		if err != nil || abi != in.ABI || (abi.Typed && typ != in.Type) {
			t.Errorf("instance %s does not split back into its family and type: %v", in.Name, err)
		}
		// Values large enough for every family's shape arithmetic.
		vals := make([]uint32, 16)
		for i := range vals {
			vals[i] = 256
		}
		if _, err := Shape(in.Name, vals, vals, 4, false); err != nil {
			t.Errorf("instance %s has no launch shape: %v", in.Name, err)
		}
	}
	for _, f := range Families() {
		abi, _ := kernels.Lookup(f.Name)
		want := 1
		if abi.Typed {
			want = len(InstanceTypes())
		}
		if per[f.Name] != want {
			t.Errorf("family %s: %d instances, want %d", f.Name, per[f.Name], want)
		}
	}
}

// TestTemplatesUseFamilyNames checks that each family's template emits a
// kernel for it (a family without an #if block would compile to a PTX
// with no entry, found only on a machine with nvcc), and that no template
// tests FAMILY against a bare number.
func TestTemplatesUseFamilyNames(t *testing.T) {
	src := map[string]string{}
	for _, name := range []string{"typed.cuh", "plain.cuh"} {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		src[name] = string(b)
		if m := regexp.MustCompile(`FAMILY\s*==\s*[0-9]`).FindString(src[name]); m != "" {
			t.Errorf("%s tests a family by number (%q): use families.cuh's names", name, m)
		}
	}
	for _, f := range Families() {
		abi, _ := kernels.Lookup(f.Name)
		name := "plain.cuh"
		if abi.Typed {
			name = "typed.cuh"
		}
		if !regexp.MustCompile(`FAMILY == ` + f.Macro() + `\b`).MatchString(src[name]) {
			t.Errorf("%s has no kernel for family %s (FAMILY == %s)", name, f.Name, f.Macro())
		}
	}
	macros := map[string]bool{}
	for _, f := range Families() {
		macros[f.Macro()] = true
	}
	for name, s := range src {
		for _, m := range regexp.MustCompile(`FAMILY_[A-Z0-9_]+`).FindAllString(s, -1) {
			if !macros[m] {
				t.Errorf("%s names %s, which is no family", name, m)
				macros[m] = true // once
			}
		}
	}
}
