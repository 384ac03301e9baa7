package kernels

import "testing"

// TestTargets: every target's name is its code's name in the .zrt format,
// and every fused family it claims is in the catalog.
func TestTargets(t *testing.T) {
	seen := map[string]bool{}
	for _, tg := range Targets() {
		if seen[tg.Name] {
			t.Errorf("target %s listed twice", tg.Name)
		}
		seen[tg.Name] = true
		if tg.Code.String() != tg.Name {
			t.Errorf("target %s has code %#x, which the .zrt format names %s", tg.Name, uint16(tg.Code), tg.Code)
		}
		if tg.Tier == "" {
			t.Errorf("target %s names no tier", tg.Name)
		}
		for _, f := range tg.Fused {
			if _, ok := Lookup(f); !ok {
				t.Errorf("target %s fuses %s, which is not a catalog family", tg.Name, f)
			}
		}
	}
}

func TestComputeCapability(t *testing.T) {
	for name, want := range map[string][2]int{"cuda:sm_90": {9, 0}, "cuda:sm_80": {8, 0}} {
		tg, ok := LookupTarget(name)
		if !ok {
			t.Fatalf("no target %s", name)
		}
		major, minor, ok := tg.ComputeCapability()
		if !ok || major != want[0] || minor != want[1] {
			t.Errorf("%s: %d.%d %v, want %d.%d", name, major, minor, ok, want[0], want[1])
		}
	}
	cpu, _ := LookupTarget("cpu")
	if _, _, ok := cpu.ComputeCapability(); ok {
		t.Error("cpu has a compute capability")
	}
}
