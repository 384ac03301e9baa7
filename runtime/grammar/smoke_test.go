package grammar

import (
	"context"
	"fmt"
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
