package grammar

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// randomRun compiles spec (a failure names it as what) and drives a
// matcher of it with random choices among the allowed tokens, seeded with
// seed, until it is done or picks an allowed end-of-generation token, and
// returns the text and whether it completed within maxSteps. Half of the
// choices are among the allowed tokens made only of ASCII punctuation,
// so that strings and containers close as a model's would rather than
// running on as uniform choices over 151k tokens do.
func randomRun(t *testing.T, v Vocab, comp *Compiler, spec Spec, what string, seed int64, maxSteps int) (string, bool) {
	t.Helper()
	g, err := comp.Compile(context.Background(), spec)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	rng := rand.New(rand.NewSource(seed))
	m := g.NewMatcher()
	n := v.NVocab()
	mask := make([]uint64, (n+63)/64)
	var out bytes.Buffer
	var allowed, punct []int32
	punctTok := punctTokens(g)
	for step := 0; step < maxSteps; step++ {
		if m.Done() {
			return out.String(), true
		}
		m.Mask(mask)
		allowed, punct = allowed[:0], punct[:0]
		eog := int32(-1)
		for id := 0; id < n; id++ {
			if mask[id/64]&(1<<(id%64)) == 0 {
				continue
			}
			if m.eog[id] {
				eog = int32(id)
				continue
			}
			allowed = append(allowed, int32(id))
			if punctTok[id] {
				punct = append(punct, int32(id))
			}
		}
		if eog >= 0 && (len(allowed) == 0 || rng.Intn(2) == 0) {
			if err := m.Accept(eog); err != nil {
				t.Fatalf("accepting allowed EOG: %v", err)
			}
			return out.String(), true
		}
		if len(allowed) == 0 {
			t.Fatalf("no token allowed after %q", out.String())
		}
		pick := allowed
		if len(punct) > 0 && rng.Intn(2) == 0 {
			pick = punct
		}
		tok := pick[rng.Intn(len(pick))]
		if err := m.Accept(tok); err != nil {
			t.Fatalf("accepting allowed token %d %q after %q: %v", tok, v.Piece(tok), out.String(), err)
		}
		out.Write(g.vt.pieces[tok])
	}
	return out.String(), m.Done()
}

// punctTokens marks the tokens made only of ASCII punctuation.
func punctTokens(g *Grammar) []bool {
	p := make([]bool, g.vt.nvocab)
	for id, b := range g.vt.pieces {
		p[id] = len(b) > 0 && isPunct(b)
	}
	return p
}

func isPunct(b []byte) bool {
	for _, c := range b {
		if c < 0x21 || c > 0x7e || (c >= '0' && c <= '9') || (c|0x20 >= 'a' && c|0x20 <= 'z') {
			return false
		}
	}
	return true
}

func schemaFiles(t *testing.T) []string {
	files, _ := filepath.Glob("testdata/schemas/*.json")
	sort.Strings(files)
	if len(files) < 10 {
		t.Fatalf("want at least 10 schemas under testdata/schemas, have %d", len(files))
	}
	return files
}

// TestSchemasRandom generates from every test schema with random tokens
// of the Qwen vocabulary and validates each output with an independent
// JSON Schema validator (formats asserted).
func TestSchemasRandom(t *testing.T) {
	tok, comp := qwen(t)
	files := schemaFiles(t)
	runs := 100
	if testing.Short() {
		runs = 24
	}
	completed := 0
	for i := 0; i < runs; i++ {
		file := files[i%len(files)]
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		c := jsonschema.NewCompiler()
		c.AssertFormat()
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.AddResource(file, doc); err != nil {
			t.Fatal(err)
		}
		sch, err := c.Compile(file)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		out, done := randomRun(t, tok, comp, Spec{JSONSchema: raw}, file, int64(i), 3000)
		if !done {
			t.Logf("%s seed %d: not complete in 3000 tokens: %.200q", file, i, out)
			continue
		}
		completed++
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
		if err != nil {
			t.Errorf("%s seed %d: output is not JSON: %v\n%s", file, i, err, out)
			continue
		}
		if err := sch.Validate(v); err != nil {
			t.Errorf("%s seed %d: output does not validate: %v\n%s", file, i, err, out)
		}
		if i < len(files) {
			t.Logf("%s: %s", filepath.Base(file), out)
		}
	}
	if completed < runs*9/10 {
		t.Errorf("only %d of %d runs completed", completed, runs)
	}
}

// TestRegexRandom checks random outputs of regular expressions against Go's
// regexp.
func TestRegexRandom(t *testing.T) {
	tok, comp := qwen(t)
	res := []string{
		`[a-z]{2,5}@(x|yy)\.com`,
		`\d{3}-\d{2,4}`,
		`(ab|c)*d`,
		`\w+\s?\w*`,
		`^-?(0|[1-9][0-9]{0,3})(\.[0-9]{1,2})?$`,
		`[^a-z\n]{1,6}`,
		`(?i)hello|bye`,
		`é+ü?[α-ω]{1,3}`,
		`.{0,4}x`,
		`a?b?c?`,
	}
	for i := 0; i < 50; i++ {
		re := res[i%len(res)]
		out, done := randomRun(t, tok, comp, Spec{Regex: re}, re, int64(i), 200)
		if !done {
			t.Errorf("%s seed %d: not complete: %q", re, i, out)
			continue
		}
		full := regexp.MustCompile(`^(?:` + strings.TrimSuffix(strings.TrimPrefix(re, "^"), "$") + `)$`)
		if !full.MatchString(out) {
			t.Errorf("%s seed %d: %q does not match", re, i, out)
		}
	}
}

// TestGBNFRandom generates from GBNF grammars and checks the outputs with
// equivalent regular expressions or JSON parsing.
func TestGBNFRandom(t *testing.T) {
	tok, comp := qwen(t)
	cases := []struct {
		gbnf  string
		check func(string) error
	}{
		{`root ::= "(" expr ")"
expr ::= term ( [+*] term ){0,3}   # at most four terms
term ::= [0-9]{1,3} | "x"`, matchRe(`\((?:[0-9]{1,3}|x)(?:[+*](?:[0-9]{1,3}|x)){0,3}\)`)},
		{`root ::= item ("," item)*
item ::= "\u00e9t\u00e9" | [^,\x00-\x1f"]{1,3}`, matchRe(`(?:été|[^,\x00-\x1f"]{1,3})(?:,(?:été|[^,\x00-\x1f"]{1,3}))*`)},
		{`root ::= "<tool_call>\n" (call1 | call2) "\n</tool_call>"
call1 ::= "{\"name\":\"a\",\"arguments\":" ( "{}" | "{\"x\":" [0-9] "}" ) "}"
call2 ::= "{\"name\":\"b\",\"arguments\":{}}"`, func(s string) error {
			body, ok := strings.CutPrefix(s, "<tool_call>\n")
			body, ok2 := strings.CutSuffix(body, "\n</tool_call>")
			if !ok || !ok2 || !json.Valid([]byte(body)) {
				return fmt.Errorf("bad tool call")
			}
			return nil
		}},
		{jsonObjectGBNF, func(s string) error {
			var m map[string]any
			return json.Unmarshal([]byte(s), &m)
		}},
		{`root ::= ( "a" | "b" root "c" )`, func(s string) error {
			n := len(s) / 2
			if len(s)%2 == 0 || s != strings.Repeat("b", n)+"a"+strings.Repeat("c", n) {
				return fmt.Errorf("not b^n a c^n")
			}
			return nil
		}},
	}
	for i := 0; i < 40; i++ {
		c := cases[i%len(cases)]
		out, done := randomRun(t, tok, comp, Spec{GBNF: c.gbnf}, fmt.Sprintf("case %d", i%len(cases)), int64(i), 600)
		if !done {
			t.Logf("case %d seed %d: not complete: %.100q", i%len(cases), i, out)
			continue
		}
		if err := c.check(out); err != nil {
			t.Errorf("case %d seed %d: %q: %v", i%len(cases), i, out, err)
		}
	}
}

func matchRe(re string) func(string) error {
	r := regexp.MustCompile(`^(?:` + re + `)$`)
	return func(s string) error {
		if !r.MatchString(s) {
			return fmt.Errorf("does not match %s", re)
		}
		return nil
	}
}
