package grammar

import (
	"context"
	"testing"
)

// BenchmarkPosCache times filling the cache of one position inside a
// string (a walk of the whole vocabulary trie).
func BenchmarkPosCache(b *testing.B) {
	_, comp := qwen(b)
	g, err := comp.Compile(context.Background(), Spec{GBNF: `root ::= "\"" [^"\\]{0,50} "\""`})
	if err != nil {
		b.Fatal(err)
	}
	m := g.NewMatcher()
	if err := m.AcceptBytes([]byte(`"ab`)); err != nil {
		b.Fatal(err)
	}
	q := m.m.frames[m.m.states[m.st].stacks[0]].pos
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		g.computePosCache(q)
	}
}

func TestTrieSize(t *testing.T) {
	_, comp := qwen(t)
	t.Logf("tokens %d, trie nodes %d, longest %d", len(comp.vt.toks), len(comp.vt.nbyte), comp.vt.maxDepth)
}
