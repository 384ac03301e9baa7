package kernels

import (
	"fmt"
	"testing"
)

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
	for name, want := range map[string][2]int{"cuda:sm_90": {9, 0}, "cuda:sm_80": {8, 0}, "cuda:sm_86": {8, 6}, "cuda:sm_89": {8, 9}} {
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

// TestPTX: every CUDA target names the archive architecture of its PTX,
// one no later than its own compute capability (the driver compiles PTX
// only forward), and Ampere's and Ada's targets share sm_80's.
func TestPTX(t *testing.T) {
	for _, tg := range Targets() {
		if tg.Tier != TierCUDA {
			if tg.PTX != "" {
				t.Errorf("%s is no CUDA target but names PTX %s", tg.Name, tg.PTX)
			}
			continue
		}
		major, minor, _ := tg.ComputeCapability()
		var n int
		if _, err := fmt.Sscanf(tg.PTX, "sm_%d", &n); err != nil || n > 10*major+minor {
			t.Errorf("%s (%d.%d) names PTX %q", tg.Name, major, minor, tg.PTX)
		}
	}
	for _, name := range []string{"cuda:sm_80", "cuda:sm_86", "cuda:sm_89"} {
		if tg, _ := LookupTarget(name); tg.PTX != "sm_80" {
			t.Errorf("%s carries %s PTX, want sm_80", name, tg.PTX)
		}
	}
}
