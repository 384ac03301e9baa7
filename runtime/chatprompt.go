package runtime

import (
	"github.com/zrtdev/zrt/runtime/chat"
	"github.com/zrtdev/zrt/runtime/tokenizer"
)

// ChatPrompt renders msgs with the vocabulary's chat template (ChatML when
// the model has none, reported by fallback) and tokenizes the result the
// way llama.cpp does: special tokens parsed, BOS added by the vocabulary's
// rule rather than by the template.
func ChatPrompt(tok *tokenizer.Tokenizer, msgs []chat.Message) (ids []int32, fallback bool, err error) {
	v := tok.Vocab()
	opt := chat.Options{AddGenerationPrompt: true}
	if v.BOS >= 0 {
		opt.BOSToken = tok.TokenText(v.BOS)
	}
	if v.EOS >= 0 {
		opt.EOSToken = tok.TokenText(v.EOS)
	}
	text, fallback, err := chat.Apply(v.ChatTemplate, msgs, opt)
	if err != nil {
		return nil, fallback, err
	}
	return tok.Encode(text, true, true), fallback, nil
}
