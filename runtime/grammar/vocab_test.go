package grammar

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/format/vocab"
	"github.com/zrtdev/zrt/runtime/internal/reference"
	"github.com/zrtdev/zrt/runtime/tokenizer"
)

// The real Qwen tokenizer (151k tokens) of a synthetic model in ../shared.
const qwenModel = "models/synthetic/syn-qwen3-chat-q8_0.gguf"

var (
	qwenOnce sync.Once
	qwenTok  *tokenizer.Tokenizer
	qwenErr  error
	qwenComp *Compiler
)

// qwen returns the Qwen tokenizer and a compiler for it, skipping the
// test when ../shared is not there.
func qwen(t testing.TB) (*tokenizer.Tokenizer, *Compiler) {
	t.Helper()
	path := filepath.Join(reference.SharedDir(), qwenModel)
	if _, err := os.Stat(path); err != nil {
		t.Skipf("shared model %s not available: %v", path, err)
	}
	qwenOnce.Do(func() {
		f, err := gguf.Open(path)
		if err != nil {
			qwenErr = err
			return
		}
		defer f.Close()
		v, err := vocab.FromGGUF(f)
		if err != nil {
			qwenErr = err
			return
		}
		if qwenTok, qwenErr = tokenizer.New(v); qwenErr == nil {
			qwenComp = NewCompiler(qwenTok, Limits{})
		}
	})
	if qwenErr != nil {
		t.Fatal(qwenErr)
	}
	return qwenTok, qwenComp
}
