package server

import (
	"encoding/json"
	"errors"

	"github.com/zrtdev/zrt/runtime/chat"
	"github.com/zrtdev/zrt/runtime/tokenizer"
)

// chatMessages reads the request's messages with chat.ParseMessages,
// answering what is wrong with a 400 that names the parameter.
func chatMessages(raw json.RawMessage) ([]chat.Message, *apiError) {
	if !set(raw) {
		return nil, badRequest("messages", "messages is required: the conversation, as an array of messages")
	}
	msgs, err := chat.ParseMessages(raw)
	var me *chat.MessageError
	switch {
	case errors.As(err, &me):
		return nil, badRequest(me.Param, "%v", err)
	case err != nil:
		return nil, badRequest("messages", "%v", err)
	case len(msgs) == 0:
		return nil, badRequest("messages", "messages must not be empty")
	}
	return msgs, nil
}

// renderChat renders msgs with the vocabulary's chat template, as
// chat.Prompt does, with the request's tools and template variables, and
// returns the prompt's text (which a reply's format reads, to know
// whether generation starts inside reasoning) and its tokens.
func renderChat(tok *tokenizer.Tokenizer, msgs []chat.Message, tools []chat.Tool, vars map[string]any) (string, []int32, error) {
	text, ids, _, err := chat.PromptWith(tok, msgs, chat.Options{AddGenerationPrompt: true, Tools: tools, Vars: vars})
	return text, ids, err
}
