package tokenizer

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestHang(t *testing.T) {
	spm := loadTok(t, "llama-spm")
	bpe := loadTok(t, "qwen2")
	for _, f := range []string{"/tmp/fuzzcur.a", "/tmp/fuzzcur.b"} {
		b, _ := os.ReadFile(f)
		s := string(b)
		s = s[strings.Index(s, " ")+1:]
		text, err := strconv.Unquote(s)
		if err != nil {
			t.Fatal(err)
		}
		for i, tk := range []*Tokenizer{spm, bpe} {
			st := time.Now()
			done := make(chan bool)
			go func() { tk.Encode(text, false, false); done <- true }()
			select {
			case <-done:
				t.Log(i, "encode", time.Since(st))
			case <-time.After(3 * time.Second):
				t.Fatal(i, "encode hang")
			}
			ids := tk.Encode(text, false, false)
			go func() {
				tk.Decode(ids)
				d := tk.NewStreamDecoder()
				for _, id := range ids {
					d.Add(id)
				}
				done <- true
			}()
			select {
			case <-done:
				t.Log(i, "decode", time.Since(st))
			case <-time.After(3 * time.Second):
				t.Fatal(i, "decode hang")
			}
		}
	}
}
