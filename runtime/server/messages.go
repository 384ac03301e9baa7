package server

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/zrtdev/zrt/runtime/chat"
	"github.com/zrtdev/zrt/runtime/tokenizer"
)

// wireMessage is a chat message as OpenAI's clients send it.
type wireMessage struct {
	Role string `json:"role"`
	// Content is a string, a list of text parts, or null (an assistant
	// turn that only called tools).
	Content          json.RawMessage `json:"content"`
	Name             string          `json:"name"`
	ReasoningContent string          `json:"reasoning_content"`
	ToolCalls        []wireToolCall  `json:"tool_calls"`
	ToolCallID       string          `json:"tool_call_id"`
}

// wireToolCall is one call of an assistant message's tool_calls.
type wireToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// roles are the message roles OpenAI defines.
var roles = []string{"system", "developer", "user", "assistant", "tool"}

// chatMessages converts the request's messages into the chat template's,
// naming the first that is malformed.
func chatMessages(in []wireMessage) ([]chat.Message, *apiError) {
	if len(in) == 0 {
		return nil, badRequest("messages", "messages must not be empty")
	}
	out := make([]chat.Message, 0, len(in))
	for i, m := range in {
		param := fmt.Sprintf("messages[%d]", i)
		msg := chat.Message{Role: m.Role, Name: m.Name, ReasoningContent: m.ReasoningContent, ToolCallID: m.ToolCallID}
		if !slices.Contains(roles, m.Role) {
			what := fmt.Sprintf("role %q is not a message role", m.Role)
			if m.Role == "" {
				what = "a message needs a role"
			}
			return nil, badRequest(param+".role", "%s: %s (roles: %s)", param, what, strings.Join(roles, ", "))
		}
		if set(m.Content) {
			text, err := contentText(m.Content)
			if err != nil {
				return nil, badRequest(param+".content", "%s: content must be a string or a list of text parts (%v)", param, err)
			}
			msg.Content = text
		} else if m.Role != "assistant" || len(m.ToolCalls) == 0 {
			return nil, badRequest(param+".content", "%s has no content (only an assistant message with tool_calls may have null content)", param)
		}
		if len(m.ToolCalls) > 0 && m.Role != "assistant" {
			return nil, badRequest(param, "%s: only assistant messages carry tool_calls", param)
		}
		if m.Role == "tool" && m.ToolCallID == "" {
			return nil, badRequest(param, "%s: a tool message needs the tool_call_id of the call it answers", param)
		}
		for j, c := range m.ToolCalls {
			if c.Function.Name == "" || (c.Type != "" && c.Type != "function") {
				return nil, badRequest(param, "%s.tool_calls[%d] must be a function call with a name", param, j)
			}
			// Clients send arguments as JSON text; some send the object.
			args := string(c.Function.Arguments)
			var text string
			if json.Unmarshal(c.Function.Arguments, &text) == nil {
				args = text
			}
			if !set(c.Function.Arguments) {
				args = "{}"
			}
			msg.ToolCalls = append(msg.ToolCalls, chat.ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: args})
		}
		out = append(out, msg)
	}
	return out, nil
}

// renderChat renders msgs with the vocabulary's chat template, as
// chat.Prompt does, with the request's tools and template variables, and
// returns the prompt's text (which a reply's format reads, to know
// whether generation starts inside reasoning) and its tokens.
func renderChat(tok *tokenizer.Tokenizer, msgs []chat.Message, tools []chat.Tool, vars map[string]any) (string, []int32, error) {
	text, ids, _, err := chat.PromptWith(tok, msgs, chat.Options{AddGenerationPrompt: true, Tools: tools, Vars: vars})
	return text, ids, err
}

// contentText accepts a message's content as a string or as a list of
// text parts.
func contentText(raw json.RawMessage) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", err
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return "", fmt.Errorf("content part of type %q", p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}
