package grammar

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func compileErr(t *testing.T, s Spec, lim Limits) error {
	t.Helper()
	_, err := NewCompiler(fuzzVocab, lim).Compile(context.Background(), s)
	return err
}

// TestLimits: each bound refuses a spec past it with a LimitError naming
// the limit.
func TestLimits(t *testing.T) {
	deep := `{"type":"string"}`
	for i := 0; i < 40; i++ {
		deep = `{"type":"array","items":` + deep + `}`
	}
	var enum []string
	for i := 0; i < 1500; i++ {
		enum = append(enum, fmt.Sprint(i))
	}
	cases := []struct {
		name  string
		spec  Spec
		lim   Limits
		limit string
	}{
		{"regex nested repeat", Spec{Regex: `(a{1000}){1000}`}, Limits{}, "Repeat"},
		{"gbnf repeat", Spec{GBNF: `root ::= "a"{2000}`}, Limits{}, "Repeat"},
		{"gbnf nested repeat", Spec{GBNF: `root ::= (("ab"{1000}){1000}){1000}`}, Limits{}, "GrammarSize"},
		{"grammar size", Spec{GBNF: `root ::= "` + strings.Repeat("x", 5000) + `"`}, Limits{GrammarSize: 1000}, "GrammarSize"},
		{"schema depth", Spec{JSONSchema: []byte(deep)}, Limits{}, "SchemaDepth"},
		{"enum", Spec{JSONSchema: []byte(`{"enum":[` + strings.Join(enum, ",") + `]}`)}, Limits{}, "Enum"},
		{"max items", Spec{JSONSchema: []byte(`{"type":"array","maxItems":100000}`)}, Limits{}, "Repeat"},
		{"spec bytes", Spec{GBNF: `root ::= "` + strings.Repeat("x", 5000) + `"`}, Limits{SpecBytes: 100}, "SpecBytes"},
	}
	for _, c := range cases {
		// A loaded machine must not turn a size limit into a time limit.
		c.lim.CompileTime = time.Minute
		err := compileErr(t, c.spec, c.lim)
		var le *LimitError
		if !errors.As(err, &le) || le.Limit != c.limit {
			t.Errorf("%s: got %v, want a LimitError on %s", c.name, err, c.limit)
		}
	}
}

func TestCompileTimeLimit(t *testing.T) {
	err := compileErr(t, Spec{GBNF: `root ::= (("ab"{100}){100}){10}`}, Limits{CompileTime: time.Microsecond})
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != "CompileTime" {
		t.Errorf("got %v, want a LimitError on CompileTime", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := NewCompiler(fuzzVocab, Limits{}).Compile(ctx, Spec{JSONSchema: []byte(`{"type":"object","properties":{"a":{"type":"string"}}}`)}); err == nil {
		t.Error("a cancelled context compiled")
	}
}

// TestGBNFDelimiters: a literal or class the text ends inside, an escape
// at its very end, and a class range upside down each say so, at the
// offset where the parser stopped.
func TestGBNFDelimiters(t *testing.T) {
	for src, want := range map[string]string{
		`root ::= "abc`:  "grammar: gbnf: at offset 13: unterminated literal",
		`root ::= "ab\`:  "grammar: gbnf: at offset 13: escape at end of text",
		`root ::= [a-`:   "grammar: gbnf: at offset 12: unterminated character class",
		`root ::= [ab`:   "grammar: gbnf: at offset 12: unterminated character class",
		`root ::= [z-a]`: "grammar: gbnf: at offset 13: class range 'z'-'a' is reversed",
	} {
		if err := compileErr(t, Spec{GBNF: src}, Limits{}); err == nil || err.Error() != want {
			t.Errorf("gbnf %q: got %v, want %q", src, err, want)
		}
	}
	for _, src := range []string{`root ::= [^a-c]+ "x\"y" [\]-]`, `root ::= "é\x41" [α-ω-]`} {
		if err := compileErr(t, Spec{GBNF: src}, Limits{}); err != nil {
			t.Errorf("gbnf %q: %v", src, err)
		}
	}
}

// TestBadSpecs: malformed specs give SyntaxError or SchemaError naming
// the place.
func TestBadSpecs(t *testing.T) {
	syntax := []string{
		`root ::= "abc`, `root ::= [a-`, `root ::= foo`, `root ::= root "a"`, `root ::= "a" | b
b ::= b "x"`, `x ::= "a"`, `root ::= "\q"`, `root ::= *`, `root ::= "a"{3,2}`, `root ::= ( "a"`,
		`root ::= "a"
root ::= "b"`,
	}
	for _, s := range syntax {
		var se *SyntaxError
		if err := compileErr(t, Spec{GBNF: s}, Limits{}); !errors.As(err, &se) {
			t.Errorf("gbnf %q: got %v, want a SyntaxError", s, err)
		}
	}
	// Go's parser refuses a{1000}{1000} outright as a nested repetition.
	for _, s := range []string{`a(b`, `x\by`, `a$b`, `[z-a]`, `a{1000}{1000}`} {
		var se *SyntaxError
		if err := compileErr(t, Spec{Regex: s}, Limits{}); !errors.As(err, &se) {
			t.Errorf("regex %q: got %v, want a SyntaxError", s, err)
		}
	}
	schemas := map[string]string{
		`{"type":"foo"}`:                                              "/type",
		`{"properties":{"a":{"not":{}}}}`:                             "/properties/a",
		`{"$ref":"#/$defs/missing"}`:                                  "/$ref",
		`{"type":"string","minLength":3,"maxLength":2}`:               "",
		`{"type":"integer","minimum":5,"maximum":4}`:                  "",
		`{"$ref":"http://example.com/s.json"}`:                        "/$ref",
		`{"type":"object","properties":{"a":false},"required":["a"]}`: "/properties/a",
		`[1,2]`: "",
		`{"type":"string","pattern":"a","format":"date"}`:                  "",
		`{"$ref":"#/$defs/a","type":"string","$defs":{"a":{}}}`:            "",
		`{"anyOf":[{"type":"string"}],"properties":{"a":{}}}`:              "",
		`{"$ref":"#/$defs/a","description":"ok","$defs":{"a":{"type":1}}}`: "/$defs/a/type",
		`{"type":1}`: "/type",
	}
	for s, path := range schemas {
		var se *SchemaError
		err := compileErr(t, Spec{JSONSchema: []byte(s)}, Limits{})
		if !errors.As(err, &se) || se.Path != path {
			t.Errorf("schema %s: got %v, want a SchemaError at %q", s, err, path)
		}
	}
	if err := compileErr(t, Spec{GBNF: "root ::= \"a\"", Regex: "a"}, Limits{}); err == nil {
		t.Error("a spec with two constraints compiled")
	}
	if err := compileErr(t, Spec{}, Limits{}); err == nil {
		t.Error("an empty spec compiled")
	}
}

// TestCache: the same spec compiles once; the cache is bounded.
func TestCache(t *testing.T) {
	c := NewCompiler(fuzzVocab, Limits{CacheEntries: 2})
	get := func(re string) *Grammar {
		g, err := c.Compile(context.Background(), Spec{Regex: re})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	a := get("a+")
	if get("a+") != a {
		t.Error("same spec compiled twice")
	}
	get("b+")
	get("c+")
	if get("a+") == a {
		t.Error("cache kept more than 2 entries")
	}
}

// TestSchemaGBNFCompose: rules of SchemaGBNF are all prefixed, so two
// schemas compose into one tool-call grammar.
func TestSchemaGBNFCompose(t *testing.T) {
	s1 := `{"type":"object","properties":{"city":{"type":"string","maxLength":3}},"required":["city"],"additionalProperties":false}`
	s2 := `{"type":"object","properties":{"n":{"type":"integer","minimum":0,"maximum":9},"tags":{"type":"array","items":{"enum":["x"]}}},"required":["n"]}`
	var rules []string
	for i, s := range []string{s1, s2} {
		name := fmt.Sprintf("f%d", i+1)
		text, err := SchemaGBNF([]byte(s), name)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
			rule, _, _ := strings.Cut(line, " ::= ")
			if rule != name && !strings.HasPrefix(rule, name+"-") {
				t.Errorf("rule %q of %s is not prefixed", rule, name)
			}
		}
		rules = append(rules, text)
	}
	gbnf := `root ::= "<tool_call>\n" ( "{\"name\":\"a\",\"arguments\":" f1 "}" | "{\"name\":\"b\",\"arguments\":" f2 "}" ) "\n</tool_call>"` + "\n" + strings.Join(rules, "")
	g, err := NewCompiler(fuzzVocab, Limits{}).Compile(context.Background(), Spec{GBNF: gbnf})
	if err != nil {
		t.Fatal(err)
	}
	m := g.NewMatcher()
	out := "<tool_call>\n{\"name\":\"b\",\"arguments\":{\"n\":7, \"tags\":[\"x\",\"x\"]}}\n</tool_call>"
	if err := m.AcceptBytes([]byte(out)); err != nil {
		t.Fatal(err)
	}
	if !m.Done() {
		t.Error("complete tool call is not done")
	}
	m = g.NewMatcher()
	if err := m.AcceptBytes([]byte("<tool_call>\n{\"name\":\"a\",\"arguments\":{\"city\":\"abcd")); err == nil {
		t.Error("maxLength 3 exceeded")
	}
}

// TestMatcherAccept: Accept refuses what Mask does not allow and leaves
// the matcher usable; EOG only when complete.
func TestMatcherAccept(t *testing.T) {
	g, err := NewCompiler(fuzzVocab, Limits{}).Compile(context.Background(), Spec{GBNF: `root ::= "abc" "!"?`})
	if err != nil {
		t.Fatal(err)
	}
	m := g.NewMatcher()
	eog := int32(fuzzVocab.NVocab() - 1)
	if err := m.Accept(eog); err == nil {
		t.Error("EOG accepted before a complete match")
	}
	if err := m.Accept('x'); err == nil {
		t.Error("x accepted")
	}
	if err := m.Accept(256 + 6); err != nil { // "abc"
		t.Fatal(err)
	}
	if m.Done() || !m.Complete() {
		t.Error("after abc: want complete, not done")
	}
	if err := m.Accept('!'); err != nil {
		t.Fatal(err)
	}
	if !m.Done() {
		t.Error("after abc!: want done")
	}
	if err := m.Accept(eog); err != nil {
		t.Errorf("EOG after a complete match: %v", err)
	}
}

// TestRightRecursion: a right-recursive rule (llama.cpp's usual way to
// write repetition) matches text far longer than the stack bound.
func TestRightRecursion(t *testing.T) {
	g, err := NewCompiler(fuzzVocab, Limits{StackDepth: 64}).Compile(context.Background(), Spec{GBNF: `root ::= "[" chars "]"
chars ::= [a-z] chars | ""`})
	if err != nil {
		t.Fatal(err)
	}
	m := g.NewMatcher()
	if err := m.AcceptBytes([]byte("[" + strings.Repeat("abc", 1000))); err != nil {
		t.Fatal(err)
	}
	if err := m.AcceptBytes([]byte("]")); err != nil || !m.Done() {
		t.Fatalf("closing: %v, done %v", err, m.Done())
	}
}

// TestPositionCacheBound: past its memory bound a grammar stops caching
// positions but still masks correctly.
func TestPositionCacheBound(t *testing.T) {
	g, err := NewCompiler(fuzzVocab, Limits{PositionCacheBytes: 1}).Compile(context.Background(), Spec{JSONObject: true})
	if err != nil {
		t.Fatal(err)
	}
	m := g.NewMatcher()
	mask := make([]uint64, (fuzzVocab.NVocab()+63)/64)
	for _, s := range []string{`{"`, "abc", `":`, "true", "}"} {
		m.Mask(mask)
		if err := m.AcceptBytes([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if g.cacheBytes != 0 || !m.Done() {
		t.Errorf("cached %d bytes past a 1-byte bound; done %v", g.cacheBytes, m.Done())
	}
}
