package tokenizer

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// vocabDir is the shared test data, relative to this package.
const vocabDir = "../../../shared/models/vocab"

// vectorCase is one llama.cpp test-tokenizer-0 case.
type vectorCase struct {
	text string
	ids  []int32
}

// readVectors reads X.gguf.inp / X.gguf.out.
func readVectors(t testing.TB, base string) []vectorCase {
	inp, err := os.ReadFile(base + ".inp")
	if err != nil {
		t.Fatal(err)
	}
	outb, err := os.ReadFile(base + ".out")
	if err != nil {
		t.Fatal(err)
	}
	const sep = "\n__ggml_vocab_test__\n"
	texts := strings.Split(string(inp), sep)
	if len(texts) > 0 && texts[len(texts)-1] == "" {
		texts = texts[:len(texts)-1]
	}
	lines := strings.Split(strings.TrimSuffix(string(outb), "\n"), "\n")
	if len(lines) != len(texts) {
		t.Fatalf("%s: %d inputs but %d outputs", base, len(texts), len(lines))
	}
	cases := make([]vectorCase, len(texts))
	for i, txt := range texts {
		var ids []int32
		for _, f := range strings.Fields(lines[i]) {
			x, err := strconv.ParseInt(f, 10, 32)
			if err != nil {
				t.Fatalf("%s line %d: %v", base, i+1, err)
			}
			ids = append(ids, int32(x))
		}
		cases[i] = vectorCase{txt, ids}
	}
	return cases
}

var (
	tokCacheMu sync.Mutex
	tokCache   = map[string]*Tokenizer{}
)

// loadTok builds (once per test binary) the tokenizer of a shared vocab.
func loadTok(t testing.TB, name string) *Tokenizer {
	t.Helper()
	path := filepath.Join(vocabDir, "ggml-vocab-"+name+".gguf")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("shared vocab %s not available: %v", path, err)
	}
	tokCacheMu.Lock()
	defer tokCacheMu.Unlock()
	if tk, ok := tokCache[name]; ok {
		return tk
	}
	tk, err := FromGGUF(path)
	if err != nil {
		t.Fatal(err)
	}
	tokCache[name] = tk
	return tk
}

// vectorVocabs lists the shared vocabs that have a GGUF and test vectors.
func vectorVocabs(t testing.TB) []string {
	matches, _ := filepath.Glob(filepath.Join(vocabDir, "ggml-vocab-*.gguf"))
	if len(matches) == 0 {
		t.Skipf("no shared vocabs under %s", vocabDir)
	}
	var names []string
	for _, m := range matches {
		if _, err := os.Stat(m + ".inp"); err != nil {
			continue
		}
		if _, err := os.Stat(m + ".out"); err != nil {
			continue
		}
		names = append(names, strings.TrimSuffix(strings.TrimPrefix(filepath.Base(m), "ggml-vocab-"), ".gguf"))
	}
	return names
}

func fmtIDs(ids []int32) string {
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, " %d", id)
	}
	return b.String()
}

func TestVectors(t *testing.T) {
	for _, name := range vectorVocabs(t) {
		t.Run(name, func(t *testing.T) {
			tk := loadTok(t, name)
			cases := readVectors(t, filepath.Join(vocabDir, "ggml-vocab-"+name+".gguf"))
			pass := 0
			for i, c := range cases {
				got := tk.Encode(c.text, false, false)
				if fmtIDs(got) != fmtIDs(c.ids) {
					t.Errorf("case %d %q:\n got %s\nwant %s", i, c.text, fmtIDs(got), fmtIDs(c.ids))
					continue
				}
				pass++
			}
			t.Logf("%s: %d/%d cases match", name, pass, len(cases))
		})
	}
}

// TestPieceTable: every shared vocabulary's kept pieces are what decoding
// each token's text gives (TokenToPiece without special), and a stream
// of the whole vocabulary gives, token by token, the text it gives
// through the buffer alone (addBuffered; the vocabulary's tokens split
// UTF-8 characters every way they can).
func TestPieceTable(t *testing.T) {
	for _, name := range vectorVocabs(t) {
		t.Run(name, func(t *testing.T) {
			tk := loadTok(t, name)
			sd, ref := tk.NewStreamDecoder(), tk.NewStreamDecoder()
			for id := range int32(tk.NVocab()) {
				want := tk.decodePiece(id, false)
				if got := tk.PieceText(id); got != string(want) {
					t.Fatalf("token %d: piece %q, its text decodes to %q", id, got, want)
				}
				if got, want := sd.Add(id), ref.addBuffered(string(want)); got != want {
					t.Fatalf("token %d: stream gave %q, buffered %q", id, got, want)
				}
			}
		})
	}
}

// BenchmarkStreamAdd is a server's text work for each token it sends:
// StreamDecoder.Add over the shared vocabularies' test texts, encoded.
func BenchmarkStreamAdd(b *testing.B) {
	for _, name := range vectorVocabs(b) {
		b.Run(name, func(b *testing.B) {
			tk := loadTok(b, name)
			var ids []int32
			for _, c := range readVectors(b, filepath.Join(vocabDir, "ggml-vocab-"+name+".gguf")) {
				ids = append(ids, c.ids...)
			}
			sd := tk.NewStreamDecoder()
			b.ResetTimer()
			for i := range b.N {
				sd.Add(ids[i%len(ids)])
			}
		})
	}
}
