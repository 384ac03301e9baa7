package chat

import "github.com/zrtdev/zrt/runtime/tokenizer"

// Prompt renders msgs with the vocabulary's chat template (ChatML when
// the model has none, reported by fallback) and tokenizes the result the
// way llama.cpp does: special tokens parsed, BOS added by the vocabulary's
// rule rather than by the template.
func Prompt(tok *tokenizer.Tokenizer, msgs []Message) (ids []int32, fallback bool, err error) {
	v := tok.Vocab()
	// Like llama.cpp, strip the template's BOS or EOS only where Encode
	// adds that token itself.
	opt := Options{AddGenerationPrompt: true, KeepBOS: !v.AddBOS, KeepEOS: !v.AddEOS}
	if v.BOS >= 0 {
		opt.BOSToken = tok.TokenText(v.BOS)
	}
	if v.EOS >= 0 {
		opt.EOSToken = tok.TokenText(v.EOS)
	}
	text, fallback, err := Apply(v.ChatTemplate, msgs, opt)
	if err != nil {
		return nil, fallback, err
	}
	return tok.Encode(text, true, true), fallback, nil
}
