package bytesize

import (
	"strings"
	"testing"
)

// TestParse: suffixes scale, a bare number is bytes, and what is not
// a size (a negative, NaN, an unknown unit, an overflow) is refused.
func TestParse(t *testing.T) {
	for in, want := range map[string]int64{"512MiB": 512 << 20, "16GiB": 16 << 30, "2T": 2 << 40, "1.5K": 1536, "100": 100, " 7 B": 7, "0": 0} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "NaN", "12XB", "9999999TiB", "GiB"} {
		if _, err := Parse(in); err == nil || !strings.Contains(err.Error(), "not a size") {
			t.Errorf("Parse(%q): %v, want an error", in, err)
		}
	}
}

// FuzzParse: any text gives a size no larger than the bound or an
// error, never a panic.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"512MiB", "16GiB", "1.5K", "0", "-3", "1e300T", "NaNGiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := Parse(s)
		if err == nil && (n < 0 || n > 1<<62) {
			t.Errorf("Parse(%q) = %d", s, n)
		}
	})
}

// TestFormat: bytes below a KiB print whole, larger counts with one
// decimal in the largest binary unit, and Parse reads them back.
func TestFormat(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 3 << 29: "1.5 GiB", 5 << 40: "5.0 TiB"} {
		if got := Format(n); got != want {
			t.Errorf("Format(%d) = %q, want %q", n, got, want)
		}
		if back, err := Parse(strings.ReplaceAll(want, " ", "")); err != nil || back != n {
			t.Errorf("Parse(Format(%d)) = %d, %v", n, back, err)
		}
	}
}
