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
