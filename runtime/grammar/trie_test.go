package grammar

import (
	"bytes"
	"context"
	"runtime"
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
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ResetTimer()
	t0 := threadCPU()
	for i := 0; i < b.N; i++ {
		g.computePosCache(q)
	}
	b.ReportMetric(float64((threadCPU()-t0).Microseconds())/float64(b.N), "cpu-µs/op")
}

// TestTrie: the preorder trie holds every token once, under the path of
// its bytes, and each node's subtree covers the tokens with its prefix.
func TestTrie(t *testing.T) {
	_, comp := qwen(t)
	vt := comp.vt
	seen := make([]int, vt.nvocab)
	path := []byte{}
	for i := 1; i < len(vt.nbyte); i++ {
		d := int(vt.depth[i])
		path = append(path[:d-1], vt.nbyte[i])
		for k := vt.tokLo[i]; k < vt.tokLo[vt.end[i]]; k++ {
			if !bytes.HasPrefix(vt.sorted[k], path) {
				t.Fatalf("node %d (%q): token %q in its subtree", i, path, vt.sorted[k])
			}
		}
		for k := vt.tokLo[i]; k < vt.tokHi[i]; k++ {
			if !bytes.Equal(vt.sorted[k], path) {
				t.Fatalf("node %d (%q): token %q ends there", i, path, vt.sorted[k])
			}
			seen[vt.toks[k]]++
		}
	}
	for id, n := range seen {
		if want := min(len(vt.pieces[id]), 1); n != want {
			t.Fatalf("token %d %q is in the trie %d times", id, vt.pieces[id], n)
		}
	}
	t.Logf("%d tokens with bytes, %d trie nodes, longest %d bytes", len(vt.toks), len(vt.nbyte), vt.maxDepth)
}
