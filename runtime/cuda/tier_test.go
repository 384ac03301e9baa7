package cuda

import (
	"strings"
	"testing"

	"github.com/zrtdev/zrt/format/bundle"

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

// TestCheckKV: Load accepts F16 caches and the quantized layouts T-CUDA
// instantiates (kcuda.KVLayouts), and refuses any other layout naming it,
// before it touches a GPU.
func TestCheckKV(t *testing.T) {
	for _, c := range []struct {
		k, v       string
		rotK, rotV int
		ok         bool
	}{
		{"", "", 0, 0, true},
		{"q8_0", "q8_0", 0, 0, true},
		{"q8_0", "q8_0", 64, 64, true},
		{"q8_0", "q8_0", 128, 64, true},
		{"q8_0", "q8_0", 256, 64, true},
		{"q8_0", "q8_0", 512, 64, false},
		{"q8_0", "f16", 128, 0, false},
		{"f16", "q8_0", 0, 64, false},
		{"fp8_e4m3", "fp8_e4m3", 0, 0, true},
		{"fp8_e4m3", "fp8_e4m3", 64, 0, false}, // FP8 rows are never rotated
		{"fp8_e4m3", "q8_0", 0, 0, false},
	} {
		h := &bundle.Hparams{HeadDim: 512, CacheTypeK: c.k, CacheTypeV: c.v, CacheRotK: c.rotK, CacheRotV: c.rotV}
		err := checkKV(h)
		if (err == nil) != c.ok {
			t.Errorf("cache %s/%s rotated %d/%d: checkKV = %v, want ok %v", c.k, c.v, c.rotK, c.rotV, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "cache_type_k") {
			t.Errorf("checkKV's error does not name the option: %v", err)
		}
	}
}
