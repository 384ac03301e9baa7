package prefix

import "testing"

func TestKeysAndLookup(t *testing.T) {
	c := New()
	a := make([]int32, 50) // 3 full chunks before the one with the last token
	for i := range a {
		a[i] = int32(i)
	}
	ka := c.Keys("t1", a)
	if len(ka) != 3 {
		t.Fatalf("%d keys for 50 tokens, want 3", len(ka))
	}
	if len(c.Keys("t1", a[:48])) != 2 || len(c.Keys("t1", a[:49])) != 3 {
		t.Error("the chunk holding the last token must not be keyed")
	}
	// Same tokens, another scope: other keys. A different first chunk
	// changes every later key (chained).
	if kb := c.Keys("t2", a); kb[0] == ka[0] || kb[2] == ka[2] {
		t.Error("scopes share keys")
	}
	b := append([]int32{99}, a[1:]...)
	if kb := c.Keys("t1", b); kb[1] == ka[1] || kb[2] == ka[2] {
		t.Error("keys are not chained")
	}
	for i, k := range ka[:2] {
		c.Insert(k, uint32(10+i), "t1")
	}
	if got := c.Lookup(ka); len(got) != 2 || got[0] != 10 || got[1] != 11 {
		t.Errorf("lookup %v", got)
	}
	if got := c.Lookup(c.Keys("t2", a)); len(got) != 0 {
		t.Errorf("another scope hit %v", got)
	}
	// Eviction takes the least recently used page no request maps.
	c.Lookup(ka[:1]) // page 10 now most recent
	if k, pg, ok := c.Evict(func(p uint32) bool { return false }); !ok || pg != 11 || k != ka[1] {
		t.Errorf("evicted %d %v under %x, want 11 under %x", pg, ok, k, ka[1])
	}
	if _, _, ok := c.Evict(func(p uint32) bool { return true }); ok {
		t.Error("evicted a page in use")
	}
	if c.Len() != 1 || c.Has(ka[1]) {
		t.Error("eviction did not remove the entry")
	}
}

// TestHeld: Held gives each cached page once with the count of keys
// Pages gives it under and Refs says, in page order, and forgets an
// evicted page.
func TestHeld(t *testing.T) {
	c := New()
	c.Insert(1, 40, "a")
	c.Insert(2, 3, "a")
	c.Insert(3, 40, "b") // a second key for page 40
	c.Insert(4, 7, "b")
	if _, pg, ok := c.Evict(func(pg uint32) bool { return pg == 40 }); !ok || pg != 3 {
		t.Fatalf("evicted page %d (%v), want 3", pg, ok)
	}
	fromPages := map[uint32]int{}
	c.Pages(func(pg uint32) { fromPages[pg]++ })
	var order []uint32
	c.Held(func(pg uint32, keys int) {
		order = append(order, pg)
		if keys != fromPages[pg] || keys != c.Refs(pg) {
			t.Errorf("page %d: Held says %d keys, Pages %d, Refs %d", pg, keys, fromPages[pg], c.Refs(pg))
		}
		delete(fromPages, pg)
	})
	if len(fromPages) != 0 || len(order) != 2 || order[0] != 7 || order[1] != 40 {
		t.Errorf("Held gave pages %v, Pages also %v", order, fromPages)
	}
	if c.Refs(3) != 0 || c.Refs(1000) != 0 {
		t.Errorf("an evicted or never cached page has references: %d, %d", c.Refs(3), c.Refs(1000))
	}
}
