package ir

import (
	"testing"

	"github.com/zrtdev/zrt/format/ggml"
)

func TestSourceColumns(t *testing.T) {
	s, err := ParseSource("blk.0.ffn_down.weight{256:768/1024}")
	if err != nil || !s.Cols || s.Lo != 256 || s.Hi != 768 || s.Period != 1024 || s.String() != "blk.0.ffn_down.weight{256:768/1024}" {
		t.Fatalf("parsed %+v, %v", s, err)
	}
	// Three rows of 1024 Q4_K columns (4 blocks of 144 bytes each).
	rb, _ := ggml.Q4_K.RowBytes(1024)
	got, err := s.Ranges(3, 3*rb, ggml.Q4_K.RowBytes)
	if err != nil {
		t.Fatal(err)
	}
	for r, g := range got {
		if want := [2]int64{int64(r)*rb + 144, int64(r)*rb + 3*144}; g != want {
			t.Errorf("row %d: bytes %v, want %v", r, g, want)
		}
	}
	// A slice that cuts a block is refused, not rounded.
	if _, err := (Source{Tensor: "t", Lo: 128, Hi: 768, Period: 1024, Cols: true}).Ranges(3, 3*rb, ggml.Q4_K.RowBytes); err == nil {
		t.Error("a column slice inside a Q4_K block was accepted")
	}
	if _, err := ParseSource("t{5:2/8}"); err == nil {
		t.Error("an empty column slice parsed")
	}
}

// FuzzParseSource holds ParseSource and String to a round trip, and
// Ranges to in-bounds byte ranges or an error, for any text.
func FuzzParseSource(f *testing.F) {
	for _, s := range []string{"t", "t[0:2/4]", "t{0:32/64}", "a.b[1:2/3]{4:5/6}", "t{", "t{1:2}", "t[-1:2/4]"} {
		f.Add(s, int64(4), int64(256))
	}
	f.Fuzz(func(t *testing.T, text string, rows, size int64) {
		s, err := ParseSource(text)
		if err != nil {
			return
		}
		if back, err := ParseSource(s.String()); err != nil || back != s {
			t.Fatalf("%q → %+v → %q → %+v, %v", text, s, s.String(), back, err)
		}
		if rows < 1 || rows > 1<<12 || size < 0 || size > 1<<24 {
			return
		}
		ranges, err := s.Ranges(rows, size, ggml.Q8_0.RowBytes)
		if err != nil {
			return
		}
		for _, r := range ranges {
			if r[0] < 0 || r[1] < r[0] || r[1] > size {
				t.Fatalf("%s over %d rows of %d bytes: range %v", s, rows, size, r)
			}
		}
	})
}
