package lebin

import (
	"bytes"
	"errors"
	"math"
	"testing"
)

// TestSticky: fields read in order; the first overrun sets Err (Short's,
// with where the read started) and every later read returns zero.
func TestSticky(t *testing.T) {
	r := &Reader{B: []byte{1, 2, 0, 3, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 9}}
	if a, b, c, d := r.U8(), r.U16(), r.U32(), r.U64(); a != 1 || b != 2 || c != 3 || d != 4 || r.Err != nil || r.Left() != 1 {
		t.Fatalf("read %d %d %d %d, err %v, %d left", a, b, c, d, r.Err, r.Left())
	}
	if v := r.U16(); v != 0 || !errors.Is(r.Err, ErrShort) {
		t.Fatalf("overrun read %d, err %v", v, r.Err)
	}
	if v := r.U8(); v != 0 || r.Off != 15 {
		t.Fatalf("read %d after a failure, at %d", v, r.Off)
	}
	var at, need int
	r = &Reader{B: []byte{1}, Short: func(r *Reader, n int) error { at, need = r.Off, n; return errors.New("short") }}
	if r.Take(-1) != nil || r.Err == nil || at != 0 || need != -1 {
		t.Fatalf("negative take: err %v, at %d need %d", r.Err, at, need)
	}
}

// TestFloat32s: Float32Bytes writes each value's bits little-endian, and
// Float32s reads them back, NaN payloads and signed zeros included,
// ignoring a partial last value.
func TestFloat32s(t *testing.T) {
	v := []float32{1, -2.5, float32(math.Copysign(0, -1)), math.Float32frombits(0x7fc00001), math.MaxFloat32}
	b := Float32Bytes(v)
	if want := []byte{0, 0, 0x80, 0x3f}; !bytes.Equal(b[:4], want) {
		t.Fatalf("1.0 encoded as % x, want % x", b[:4], want)
	}
	got := Float32s(append(b, 0xff, 0xff))
	if len(got) != len(v) {
		t.Fatalf("%d values read back, want %d", len(got), len(v))
	}
	for i := range v {
		if math.Float32bits(got[i]) != math.Float32bits(v[i]) {
			t.Errorf("value %d: bits %#x, want %#x", i, math.Float32bits(got[i]), math.Float32bits(v[i]))
		}
	}
}
