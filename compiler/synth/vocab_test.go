package synth

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/zrtdev/zrt/format/gguf"
)

// TestTokenizerFrom: a model written with another GGUF's tokenizer carries
// its tokenizer.* keys unchanged and a vocabulary of its size.
func TestTokenizerFrom(t *testing.T) {
	path := filepath.Join("..", "..", "..", "shared", "models", "vocab", "ggml-vocab-qwen2.gguf")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("no shared vocab file: %v", err)
	}
	vf, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer vf.Close()
	s := Tiny
	if err := s.TokenizerFrom(vf); err != nil {
		t.Fatal(err)
	}
	m := parsed(t, s)
	want, _ := vf.Lookup("tokenizer.ggml.tokens")
	got, ok := m.Lookup("tokenizer.ggml.tokens")
	if !ok || got.Len() != want.Len() || got.String() != want.String() {
		t.Fatalf("tokens: %d, want %d", got.Len(), want.Len())
	}
	emb, _ := m.Tensor("token_embd.weight")
	if emb == nil || emb.Dims[1] != int64(want.Len()) {
		t.Fatalf("token_embd %v for a vocabulary of %d", emb, want.Len())
	}
	model, _ := m.String("tokenizer.ggml.model")
	if model != "gpt2" {
		t.Errorf("tokenizer model %q, want the vocab file's gpt2", model)
	}
}
