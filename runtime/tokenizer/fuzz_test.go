package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzEncode feeds arbitrary text to an SPM and a byte-level BPE vocabulary:
// encoding must not panic, must only produce valid ids, and decoding the
// result must not panic either. For the BPE vocabulary (qwen2, which has no
// clean-up of spaces), valid UTF-8 without U+FFFD must come back unchanged:
// byte-level BPE loses nothing.
func FuzzEncode(f *testing.F) {
	inp, err := os.ReadFile(filepath.Join(vocabDir, "ggml-vocab-llama-spm.gguf.inp"))
	if err == nil {
		for _, s := range strings.Split(string(inp), "\n__ggml_vocab_test__\n") {
			f.Add(s, false)
			f.Add(s, true)
		}
	}
	f.Add("\xff\xfe\xc3", true)
	f.Add("<s>hello</s><unk>", true)
	spm := loadTok(f, "llama-spm")
	bpe := loadTok(f, "qwen2")
	f.Fuzz(func(t *testing.T, text string, special bool) {
		for _, tk := range []*Tokenizer{spm, bpe} {
			ids := tk.Encode(text, special, special)
			for _, id := range ids {
				if id < 0 || int(id) >= tk.NVocab() {
					t.Fatalf("id %d out of range", id)
				}
			}
			out := tk.Decode(ids)
			d := tk.NewStreamDecoder()
			for _, id := range ids {
				if s := d.Add(id); !utf8.ValidString(s) {
					t.Fatalf("stream gave invalid UTF-8 %q", s)
				}
			}
			d.Flush()
			if tk == bpe && !special && utf8.ValidString(text) && !strings.ContainsRune(text, utf8.RuneError) && out != text {
				t.Fatalf("bpe round trip %q -> %q", text, out)
			}
		}
	})
}
