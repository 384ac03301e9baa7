package grammar

import (
	"context"
	"testing"
)

// TestGBNFSyntax: each construct of llama.cpp's GBNF matches what it
// should and nothing else.
func TestGBNFSyntax(t *testing.T) {
	cases := []struct {
		gbnf     string
		yes, not []string
	}{
		{"# a comment line\nroot ::=\n  \"a\" |   # after an alternative\n  \"b\" tail\ntail ::= \"c\"", []string{"a", "bc"}, []string{"b", "ac", ""}},
		{`root ::= ( "x" ( "y"
  | "z" ) )+`, []string{"xy", "xzxy"}, []string{"x", "xyx"}},
		{`root ::= [a-c]{2} [0-9]{1,} "!"{0,2} "?"{3}`, []string{"ab1???", "cc123!!???"}, []string{"a1???", "ab???", "ab1!!!???", "ab1??"}},
		{`root ::= "\x41\u00e9\U0001F600\t\n\r\\\"\[\]"`, []string{"Aé😀\t\n\r\\\"[]"}, []string{"A"}},
		{`root ::= [^a-z\n] . [\]\-^x]`, []string{"Aé]", "1\n-", "Zz^", "..x"}, []string{"aé]", "\nx]", "AAy"}},
		{`root ::= item ("," item)*
item ::= "\"" [^"]* "\""`, []string{`"a"`, `"","b c"`}, []string{`"a`, `"a",`}},
		{`root ::= "a" root-b
root-b ::= "b"?`, []string{"a", "ab"}, []string{"abb"}},
	}
	for i, c := range cases {
		g, err := NewCompiler(fuzzVocab, Limits{}).Compile(context.Background(), Spec{GBNF: c.gbnf})
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		for _, s := range c.yes {
			if !accepts(g, s) {
				t.Errorf("case %d: %q refused", i, s)
			}
		}
		for _, s := range c.not {
			if accepts(g, s) {
				t.Errorf("case %d: %q accepted", i, s)
			}
		}
	}
}

// TestRegexSemantics: regular expressions match like Go's regexp on
// whole strings.
func TestRegexSemantics(t *testing.T) {
	cases := []struct {
		re       string
		yes, not []string
	}{
		{`^\d{2}-\w+$`, []string{"12-ab_9"}, []string{"1-a", "12-", "x12-ab"}},
		{`(?i)ab|c\s`, []string{"AB", "aB", "c "}, []string{"abc", "c"}},
		{`a.c`, []string{"abc", "aéc"}, []string{"a\nc", "ac"}},
		{`(?s)a.c`, []string{"a\nc"}, nil},
		{`[^\d\s]{1,3}`, []string{"a", "xyz", "é"}, []string{"1", "a b", "abcd"}},
		{`x*y?`, []string{"", "xxx", "y", "xy"}, []string{"yx", "yy"}},
	}
	for _, c := range cases {
		g, err := NewCompiler(fuzzVocab, Limits{}).Compile(context.Background(), Spec{Regex: c.re})
		if err != nil {
			t.Fatalf("%s: %v", c.re, err)
		}
		for _, s := range c.yes {
			if !accepts(g, s) {
				t.Errorf("%s: %q refused", c.re, s)
			}
		}
		for _, s := range c.not {
			if accepts(g, s) {
				t.Errorf("%s: %q accepted", c.re, s)
			}
		}
	}
}

func TestLiteral(t *testing.T) {
	s := "a\"b\\c\n\x01é[]"
	g, err := NewCompiler(fuzzVocab, Limits{}).Compile(context.Background(), Spec{GBNF: "root ::= " + Literal(s)})
	if err != nil {
		t.Fatal(err)
	}
	if !accepts(g, s) || accepts(g, s+"x") {
		t.Errorf("Literal(%q) = %s does not match exactly", s, Literal(s))
	}
}
