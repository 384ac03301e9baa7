package tokenizer

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"os"
	"reflect"
	"sort"
	"testing"

	"github.com/zrtdev/zrt/format/vocab"
)

// TestPretokenizeGolden checks every pre-tokenizer against splits made by
// llama.cpp itself: testdata/pretokenize.jsonl was produced by compiling
// llama.cpp's src/unicode.cpp (commit c392e50, plus the current falcon and
// qwen35 regexes) into a small program that prints unicode_regex_split's
// byte-encoded words for random texts mixing the character classes that
// matter (ASCII and non-ASCII letters, marks, digits, punctuation, symbols,
// Unicode spaces, CJK, invalid UTF-8, contractions).
func TestPretokenizeGolden(t *testing.T) {
	f, err := os.Open("testdata/pretokenize.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		var c struct {
			Pre   string   `json:"pre"`
			Text  string   `json:"text"`
			Words []string `json:"words"`
		}
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		raw, err := hex.DecodeString(c.Text)
		if err != nil {
			t.Fatal(err)
		}
		p, ok := preTypes[c.Pre]
		if !ok {
			t.Fatalf("unknown pre %q", c.Pre)
		}
		cps := decodeCpts(string(raw), nil)
		var got []string
		pos := 0
		for _, k := range pretokenize(p.stages, cps) {
			var utf, w []byte
			for _, r := range cps[pos : pos+k] {
				utf = appendCpt(utf, r)
			}
			pos += k
			for _, b := range utf {
				w = append(w, byteUnicode[b]...)
			}
			got = append(got, string(w))
		}
		if len(c.Words) == 0 {
			c.Words = nil
		}
		if !reflect.DeepEqual(got, c.Words) {
			t.Errorf("%s %q:\n got %q\nwant %q", c.Pre, raw, got, c.Words)
		}
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d splits checked", n)
}

// TestPreTokenizerNames: format/vocab accepts exactly the pre-tokenizers
// this package splits with, so a vocabulary that builds always tokenizes.
func TestPreTokenizerNames(t *testing.T) {
	var ours []string
	for name := range preTypes {
		ours = append(ours, name)
	}
	sort.Strings(ours)
	if want := vocab.PreTokenizers(); !reflect.DeepEqual(ours, want) {
		t.Errorf("split table has %v\nformat/vocab has %v", ours, want)
	}
}
