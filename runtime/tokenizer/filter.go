package tokenizer

import (
	"fmt"
	"io"

	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/format/vocab"
)

// FromGGUF returns the tokenizer of the GGUF model at path.
func FromGGUF(path string) (*Tokenizer, error) {
	f, err := gguf.OpenModel(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	v, err := vocab.FromGGUF(f)
	if err != nil {
		return nil, err
	}
	return New(v)
}

// Filter is the tokenize commands: it reads all of in and writes its
// token ids separated by spaces and a newline (with bos, BOS and EOS
// added as the vocabulary says; with special, special-token text such as
// <|im_start|> read as its id), or with reverse reads token ids and
// writes their text.
func (t *Tokenizer) Filter(in io.Reader, out io.Writer, reverse, bos, special bool) error {
	b, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	if reverse {
		ids, err := t.ParseIDs(string(b))
		if err != nil {
			return err
		}
		_, err = io.WriteString(out, t.Decode(ids))
		return err
	}
	_, err = fmt.Fprintln(out, FormatIDs(t.Encode(string(b), bos, special)))
	return err
}
