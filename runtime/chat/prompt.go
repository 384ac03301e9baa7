package chat

import "github.com/zrtdev/zrt/runtime/tokenizer"

// Prompt renders msgs with the vocabulary's chat template (ChatML when
// the model has none, reported by fallback) and tokenizes the result the
// way llama.cpp does: special tokens parsed, BOS added by the vocabulary's
// rule rather than by the template.
func Prompt(tok *tokenizer.Tokenizer, msgs []Message) (ids []int32, fallback bool, err error) {
	_, ids, fallback, err = PromptWith(tok, msgs, Options{AddGenerationPrompt: true})
	return ids, fallback, err
}

// PromptWith is Prompt with the caller's options (tools, template
// variables such as enable_thinking, whether to open the assistant's
// turn); the BOS and EOS fields are the vocabulary's and are set here.
// It also returns the rendered text, from which reply.Format.AfterPrompt
// learns where the reply starts.
func PromptWith(tok *tokenizer.Tokenizer, msgs []Message, opt Options) (text string, ids []int32, fallback bool, err error) {
	v := tok.Vocab()
	// Like llama.cpp, strip the template's BOS or EOS only where Encode
	// adds that token itself.
	opt.KeepBOS, opt.KeepEOS = !v.AddBOS, !v.AddEOS
	opt.BOSToken, opt.EOSToken = "", ""
	if v.BOS >= 0 {
		opt.BOSToken = tok.TokenText(v.BOS)
	}
	if v.EOS >= 0 {
		opt.EOSToken = tok.TokenText(v.EOS)
	}
	text, fallback, err = Apply(v.ChatTemplate, msgs, opt)
	if err != nil {
		return "", nil, fallback, err
	}
	return text, tok.Encode(text, true, true), fallback, nil
}
