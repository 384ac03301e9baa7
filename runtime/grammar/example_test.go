package grammar_test

import (
	"context"
	"fmt"

	"github.com/zrtdev/zrt/runtime/grammar"
)

// words is a toy vocabulary: token i is words[i]; the last is the
// end-of-generation token.
type words []string

func (w words) NVocab() int           { return len(w) }
func (w words) Piece(id int32) []byte { return []byte(w[id]) }
func (w words) IsEOG(id int32) bool   { return int(id) == len(w)-1 }
func (w words) allowed(m []uint64) (out []string) {
	for i := range w {
		if m[i/64]&(1<<(i%64)) != 0 {
			out = append(out, w[i])
		}
	}
	return out
}

// A request constrained by a JSON Schema: each step masks the
// vocabulary, the sampler picks among the allowed tokens, the matcher
// accepts the pick.
func Example() {
	v := words{`{"ok":`, "true", "false", "}", " ", "x", "<eos>"}
	c := grammar.NewCompiler(v, grammar.Limits{})
	g, err := c.Compile(context.Background(), grammar.Spec{JSONSchema: []byte(`{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}`)})
	if err != nil {
		panic(err)
	}
	m := g.NewMatcher()
	mask := make([]uint64, (v.NVocab()+63)/64)
	for _, tok := range []int32{0, 1, 3} {
		m.Mask(mask)
		fmt.Println(v.allowed(mask))
		if err := m.Accept(tok); err != nil {
			panic(err)
		}
	}
	fmt.Println(m.Done())
	// Output:
	// [{"ok":]
	// [true false  ]
	// [}]
	// true
}
