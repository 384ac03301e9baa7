package grammar

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// fuzzLimits keep a fuzz input's compilation small.
var fuzzLimits = Limits{CompileTime: time.Second, GrammarSize: 20000, Repeat: 100, SchemaDepth: 16, Enum: 64}

var fuzzVocab = byteVocab{words: []string{`{"`, `":`, `"}`, "true", "null", `","`, "abc", "\xc3\xa9"}}

// walkFirst drives a matcher, taking the end-of-generation token when
// allowed and else the lowest allowed token, checking that Mask and
// Accept agree; it returns the output and whether it completed.
func walkFirst(t *testing.T, g *Grammar, steps int) (string, bool) {
	m := g.NewMatcher()
	n := fuzzVocab.NVocab()
	mask := make([]uint64, (n+63)/64)
	var out []byte
	for i := 0; i < steps; i++ {
		if m.Done() {
			return string(out), true
		}
		m.Mask(mask)
		eog := int32(n - 1)
		if mask[eog/64]&(1<<(eog%64)) != 0 {
			if err := m.Accept(eog); err != nil {
				t.Fatalf("allowed EOG refused: %v", err)
			}
			return string(out), true
		}
		pick := int32(-1)
		for id := 0; id < n; id++ {
			if mask[id/64]&(1<<(id%64)) != 0 {
				pick = int32(id)
				break
			}
		}
		if pick < 0 {
			return string(out), false
		}
		if err := m.Accept(pick); err != nil {
			t.Fatalf("allowed token %d refused: %v", pick, err)
		}
		out = append(out, fuzzVocab.Piece(pick)...)
	}
	return string(out), false
}

func FuzzGBNF(f *testing.F) {
	for _, s := range []string{
		jsonObjectGBNF,
		`root ::= "a" | "b" root`,
		`root ::= [a-z]{2,4} ("-" [0-9]+)? # comment`,
		"root ::= (\n  \"x\" |\n  \"y\"\n)* \"\\u00e9\"",
		`root ::= [^\x00-\x1f"]* . "\U0001F600"`,
		`root ::= a
a ::= "q" a | ""`,
		`root ::= root "a"`,
		`root ::= "a"{3}{2}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		g, err := NewCompiler(fuzzVocab, fuzzLimits).Compile(context.Background(), Spec{GBNF: src})
		if err != nil {
			return
		}
		walkFirst(t, g, 30)
	})
}

func FuzzSchema(f *testing.F) {
	files, _ := filepath.Glob("testdata/schemas/*.json")
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	for _, s := range []string{`{}`, `true`, `{"type":"array","items":{"$ref":"#"}}`, `{"enum":[1,"a",null,{"b":[]}]}`,
		`{"type":"integer","minimum":-7,"exclusiveMaximum":1e3}`, `{"type":"string","pattern":"a|b\\d"}`,
		`{"properties":{"a":{}},"additionalProperties":{"type":"null"}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, schema []byte) {
		if text, err := SchemaGBNF(schema, "tool-x"); err == nil && !strings.HasPrefix(text, "tool-x ::= ") {
			t.Fatalf("entry rule is not first: %.80q", text)
		}
		g, err := NewCompiler(fuzzVocab, fuzzLimits).Compile(context.Background(), Spec{JSONSchema: schema})
		if err != nil {
			return
		}
		walkFirst(t, g, 30)
	})
}

func FuzzRegex(f *testing.F) {
	for _, s := range []string{`[a-z]+@x\.com`, `^\d{2,3}(-\d+)?$`, `(?i)ab|c*`, `\w\s.`, `a{1000}{1000}`, `[^a]é?`, `x\by`, `()*`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, re string) {
		g, err := NewCompiler(fuzzVocab, fuzzLimits).Compile(context.Background(), Spec{Regex: re})
		if err != nil {
			return
		}
		out, done := walkFirst(t, g, 40)
		if !done {
			return
		}
		body := strings.TrimSuffix(strings.TrimPrefix(re, "^"), "$")
		if strings.HasSuffix(re, `\$`) {
			body = strings.TrimPrefix(re, "^")
		}
		full, err := regexp.Compile(`^(?:` + body + `)$`)
		if err != nil {
			return
		}
		if !full.MatchString(out) {
			t.Fatalf("output %q does not match %q", out, re)
		}
	})
}
