package server

import (
	"slices"
	"testing"

	"github.com/zrtdev/zrt/kernels"
)

// TestPrefixKeys: a key a whole page of prompt, each naming the
// prefix-cache scope and every token before its page's end — a prompt and
// its continuation share the keys of their common pages, a different
// first token or scope changes them all — and no more than routePages of
// them.
func TestPrefixKeys(t *testing.T) {
	const p = kernels.KVPageTokens
	prompt := make([]int32, 3*p+5)
	for i := range prompt {
		prompt[i] = int32(7*i + 1)
	}
	keys := prefixKeys("a", prompt)
	if len(keys) != 3 || len(prefixKeys("a", prompt[:p-1])) != 0 {
		t.Fatalf("%d keys for %d tokens, %d for %d", len(keys), len(prompt), len(prefixKeys("a", prompt[:p-1])), p-1)
	}
	longer := append(slices.Clone(prompt), make([]int32, 2*p)...)
	if got := prefixKeys("a", longer); !slices.Equal(got[:3], keys) || len(got) != 5 {
		t.Errorf("a continuation's keys %x do not start with the prompt's %x", got, keys)
	}
	other := slices.Clone(prompt)
	other[0]++
	for j, k := range prefixKeys("a", other) {
		if k == keys[j] {
			t.Errorf("key %d is the same with another first token", j)
		}
	}
	for j, k := range prefixKeys("b", prompt) {
		if k == keys[j] {
			t.Errorf("key %d is the same in another prefix-cache scope", j)
		}
	}
	if n := len(prefixKeys("a", make([]int32, (routePages+3)*p))); n != routePages {
		t.Errorf("%d keys for a prompt of %d pages, want at most %d", n, routePages+3, routePages)
	}
}

// TestRouterForgetsOldest: the router keeps at most routeKeys prefixes,
// forgetting the oldest first; a prefix sent again moves to its new
// replica in place.
func TestRouterForgetsOldest(t *testing.T) {
	var r router
	keys := make([]uint64, routeKeys+10)
	for i := range keys {
		keys[i] = uint64(i) + 1
	}
	r.remember(keys[:5], 0)
	r.remember(keys[:5], 1) // again: moved, not added
	r.remember(keys[5:], 0)
	if len(r.where) != routeKeys {
		t.Fatalf("%d prefixes remembered, want %d", len(r.where), routeKeys)
	}
	for i, k := range keys {
		at, ok := r.where[k]
		if want := i >= 10; ok != want {
			t.Fatalf("prefix %d remembered %v, want %v", i, ok, want)
		}
		if ok && at != 0 {
			t.Fatalf("prefix %d at replica %d, want 0", i, at)
		}
	}
}
