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

// TestAdoptTake: adopted buffers are stored as they are, pushed out ones
// and refused ones come back to the caller, Take hands a page's buffer
// out and Return takes it back as the most recent, counted once.
func TestAdoptTake(t *testing.T) {
	s := New(2 * 64)
	a, b, c := Key{"L", 1}, Key{"L", 2}, Key{"L", 3}
	pa, pb, pc := page(1, 64), page(2, 64), page(3, 64)
	if free := s.Adopt(a, pa); len(free) != 0 {
		t.Fatalf("adopting a freed %d buffers", len(free))
	}
	s.Adopt(b, pb)
	if free := s.Adopt(a, page(7, 64)); len(free) != 1 || free[0][0] != 7 {
		t.Errorf("adopting a stored key again: %d buffers back, want the new one", len(free))
	}
	got, ok := s.Take(a)
	if !ok || &got[0] != &pa[0] || s.Has(a) || s.Bytes() != 64 {
		t.Fatalf("take a: %v, the same buffer %v, still stored %v, %d bytes", ok, ok && &got[0] == &pa[0], s.Has(a), s.Bytes())
	}
	if _, ok := s.Take(a); ok {
		t.Error("a taken twice")
	}
	if free := s.Return(a, got); len(free) != 0 {
		t.Errorf("returning a into room freed %d", len(free))
	}
	// b is now the least recent: c pushes it out, and its buffer comes back.
	if free := s.Adopt(c, pc); len(free) != 1 || &free[0][0] != &pb[0] || s.Has(b) {
		t.Errorf("adopting c: %d buffers back (b's: %v), b stored %v", len(free), len(free) == 1 && &free[0][0] == &pb[0], s.Has(b))
	}
	if free := s.Adopt(Key{"L", 9}, page(9, 3*64)); len(free) != 1 || s.Has(Key{"L", 9}) {
		t.Error("a page over the capacity was kept")
	}
	if st := s.Stats(); st.Stored != 3 || st.Evicted != 1 || st.Hits != 1 {
		t.Errorf("stats %+v, want 3 stored, 1 pushed out, 1 hit", st)
	}
}
