package grammar

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"testing"
)

// byteVocab is a vocabulary of every single byte plus a few words, and
// one end-of-generation token (the last).
type byteVocab struct{ words []string }

func (v byteVocab) NVocab() int { return 256 + len(v.words) + 1 }
func (v byteVocab) Piece(id int32) []byte {
	switch {
	case id < 256:
		return []byte{byte(id)}
	case int(id) < 256+len(v.words):
		return []byte(v.words[id-256])
	}
	return nil
}
func (v byteVocab) IsEOG(id int32) bool { return int(id) == 256+len(v.words) }

func TestSmoke(t *testing.T) {
	v := byteVocab{words: []string{`{"`, `":`, `"}`, "true", "abc", `","`}}
	c := NewCompiler(v, Limits{})
	g, err := c.Compile(context.Background(), Spec{JSONSchema: []byte(`{"type":"object","properties":{"a":{"type":"boolean"},"b":{"type":"string","maxLength":3}},"required":["a"]}`)})
	if err != nil {
		t.Fatal(err)
	}
	m := g.NewMatcher()
	mask := make([]uint64, (v.NVocab()+63)/64)
	want := map[int]string{0: `["{" "{\""]`, 3: `[" " "f" "t" "true"]`, 4: `["," "}"]`, 10: `["\"" "\"}"]`}
	for i, s := range []string{`{"`, "a", `":`, "true", ",", `"`, "b", `":`, `"`, "abc", `"}`} {
		m.Mask(mask)
		var allowed []string
		for id := 0; id < v.NVocab(); id++ {
			if mask[id/64]&(1<<(id%64)) != 0 {
				allowed = append(allowed, string(v.Piece(int32(id))))
			}
		}
		if w, ok := want[i]; ok && fmt.Sprintf("%q", allowed) != w {
			t.Errorf("step %d: allowed %q, want %s", i, allowed, w)
		}
		if err := m.AcceptBytes([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if !m.Done() {
		t.Fatal("not done")
	}
}

// TestWarm: a warmed grammar has every position cached, and a compiler
// that warms in the background gives grammars whose masks are the cold
// grammar's, mask for mask, over random runs; a compiler that does not
// warm leaves positions uncached until matching reaches them.
func TestWarm(t *testing.T) {
	v := byteVocab{words: []string{`{"`, `":`, `"}`, "true", "abc", `","`, "null", "12"}}
	schema := []byte(`{"type":"object","properties":{"a":{"type":"boolean"},"b":{"type":"string","maxLength":3},"c":{"type":["integer","null"]}},"required":["a","c"]}`)
	cold, err := NewCompiler(v, Limits{}).Compile(context.Background(), Spec{JSONSchema: schema})
	if err != nil {
		t.Fatal(err)
	}
	uncached := func(g *Grammar) int {
		g.cacheMu.Lock()
		defer g.cacheMu.Unlock()
		n := 0
		for _, pc := range g.cache {
			if pc == nil {
				n++
			}
		}
		return n
	}
	if uncached(cold) != cold.Positions() {
		t.Fatalf("a fresh grammar has %d of %d positions uncached", uncached(cold), cold.Positions())
	}
	c := NewCompiler(v, Limits{})
	c.WarmInBackground()
	warm, err := c.Compile(context.Background(), Spec{JSONSchema: schema})
	if err != nil {
		t.Fatal(err)
	}
	warm.Warm(context.Background()) // (the background one may still run: both fill the same cache)
	if n := uncached(warm); n != 0 {
		t.Fatalf("warmed: %d of %d positions uncached", n, warm.Positions())
	}
	n := v.NVocab()
	a, b := make([]uint64, (n+63)/64), make([]uint64, (n+63)/64)
	for seed := range int64(20) {
		rng := rand.New(rand.NewSource(seed))
		mc, mw := cold.NewMatcher(), warm.NewMatcher()
		for step := 0; step < 40 && !mc.Done(); step++ {
			mc.Mask(a)
			mw.Mask(b)
			if !slices.Equal(a, b) {
				t.Fatalf("seed %d step %d: masks differ, cold %x, warm %x", seed, step, a, b)
			}
			var allowed []int32
			for id := range n {
				if a[id/64]&(1<<(id%64)) != 0 && !v.IsEOG(int32(id)) {
					allowed = append(allowed, int32(id))
				}
			}
			if len(allowed) == 0 {
				break
			}
			tok := allowed[rng.Intn(len(allowed))]
			if err := errors.Join(mc.Accept(tok), mw.Accept(tok)); err != nil {
				t.Fatal(err)
			}
		}
	}
}
