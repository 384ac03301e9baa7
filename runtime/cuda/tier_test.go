package cuda

import (
	"testing"

	kcuda "github.com/zrtdev/zrt/kernels/cuda"
)

// TestOmits: an Options.Omit item names a launch by its kernel family, its
// instance or its entry point, and nothing else (an empty item, another
// family that shares a prefix, another type of the same family).
func TestOmits(t *testing.T) {
	stage := &Launch{Name: "rms_norm_gate_up.q4_k", Shape: kcuda.Launch{Entry: kcuda.EntryStage}}
	tile := &Launch{Name: "rms_norm_gate_up.q4_k", Shape: kcuda.Launch{Entry: kcuda.EntryTile16}}
	norm := &Launch{Name: "rms_norm"}
	for _, c := range []struct {
		item string
		l    *Launch
		want bool
	}{
		{"rms_norm_gate_up", stage, true},
		{"rms_norm_gate_up.q4_k", tile, true},
		{"stage", stage, true},
		{"stage", tile, false},
		{"tile16", tile, true},
		{"rms_norm", norm, true},
		{"rms_norm", tile, false},
		{"rms_norm_gate_up.q6_k", tile, false},
		{"", norm, false},
	} {
		if got := omits(c.item, c.l); got != c.want {
			t.Errorf("omits(%q, %s%s) = %v, want %v", c.item, c.l.Name, c.l.Shape.Entry.Suffix(), got, c.want)
		}
	}
}
