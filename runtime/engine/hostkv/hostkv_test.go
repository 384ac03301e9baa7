package hostkv

import (
	"bytes"
	"testing"
)

func page(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }

// TestStore: pages round-trip exactly, the least recently used go first
// when the bound is reached, and a key of another layout, or a buffer of
// another size, finds nothing.
func TestStore(t *testing.T) {
	s := New(3 * 64)
	a, b, c, d := Key{"L", 1}, Key{"L", 2}, Key{"L", 3}, Key{"L", 4}
	for i, k := range []Key{a, b, c} {
		if !s.Put(k, page(byte(i+1), 64)) {
			t.Fatalf("put %v refused", k)
		}
	}
	dst := make([]byte, 64)
	if !s.Get(a, dst) || !bytes.Equal(dst, page(1, 64)) {
		t.Fatalf("a came back as %v", dst[:4])
	}
	// a is now the most recent: d pushes b out.
	s.Put(d, page(4, 64))
	if s.Has(b) || !s.Has(a) || !s.Has(c) || !s.Has(d) {
		t.Errorf("after the 4th page: a %v b %v c %v d %v, want b gone", s.Has(a), s.Has(b), s.Has(c), s.Has(d))
	}
	if s.Len() != 3 || s.Bytes() != 3*64 {
		t.Errorf("%d pages of %d bytes", s.Len(), s.Bytes())
	}
	if s.Get(Key{"other layout", 1}, dst) {
		t.Error("a key of another layout found a's bytes")
	}
	if s.Get(a, make([]byte, 32)) {
		t.Error("a buffer of another size took a's bytes")
	}
	if !s.Get(c, dst) || !bytes.Equal(dst, page(3, 64)) {
		t.Errorf("c came back as %v", dst[:4])
	}
	if s.Put(Key{"L", 9}, page(9, 4*64)) || s.Has(Key{"L", 9}) {
		t.Error("a page over the capacity was kept")
	}
	st := s.Stats()
	if st.Stored != 4 || st.Evicted != 1 || st.Hits != 2 {
		t.Errorf("stats %+v", st)
	}
	// Putting a stored key again changes nothing but its recency.
	s.Put(a, page(7, 64))
	if !s.Get(a, dst) || dst[0] != 1 {
		t.Errorf("a's bytes changed to %d", dst[0])
	}
}
