package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/zrtdev/zrt/runtime/chat"
	"github.com/zrtdev/zrt/runtime/grammar"
)

// This file reads the Responses API's request fields (input items, flat
// function tools, tool_choice, text.format) into the chat machinery's
// terms; responses.go serves the endpoint.

// inputItem is one item of a Responses request's input: a message, a
// function call the model made, a function call's output, or a reasoning
// item, told apart by type (a message may leave type out).
type inputItem struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	// function_call and function_call_output
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments *string         `json:"arguments"`
	Output    json.RawMessage `json:"output"`
	// reasoning
	Summary []struct {
		Text string `json:"text"`
	} `json:"summary"`
}

// inputRoles are the roles of a Responses input message.
var inputRoles = []string{"user", "assistant", "system", "developer"}

// responsesInput converts instructions and input (a string, the user's
// message, or a list of items) into chat messages: instructions become a
// leading system message; consecutive function_call items (and the
// assistant message before them) make one assistant message with
// tool_calls; each function_call_output becomes a tool message answering
// its call; a reasoning item's text becomes the next assistant message's
// reasoning_content. Nothing refers to stored state: an item_reference is
// a 400, since this server stores no responses.
func responsesInput(raw json.RawMessage, instructions *string) ([]chat.Message, *apiError) {
	var out []chat.Message
	if instructions != nil && *instructions != "" {
		out = append(out, chat.Message{Role: "system", Content: *instructions})
	}
	if !set(raw) {
		return nil, badRequest("input", "input is required: a string, or a list of input items")
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return append(out, chat.Message{Role: "user", Content: text}), nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, badRequest("input", "input must be a string or a list of input items")
	}
	if len(items) == 0 {
		return nil, badRequest("input", "input must not be empty")
	}
	calls := map[string]string{} // call_id → function name, of the calls seen
	reasoning := ""              // a reasoning item's text, for the next assistant turn
	// assistant returns the assistant message that new output joins: the
	// last message when it is the assistant's and has no calls yet (or
	// calls is set: a call joins other calls), else a new one.
	assistant := func(call bool) *chat.Message {
		if n := len(out); n > 0 && out[n-1].Role == "assistant" && (call || len(out[n-1].ToolCalls) == 0) {
			return &out[n-1]
		}
		out = append(out, chat.Message{Role: "assistant"})
		return &out[len(out)-1]
	}
	for i, rawItem := range items {
		param := fmt.Sprintf("input[%d]", i)
		var it inputItem
		if err := json.Unmarshal(rawItem, &it); err != nil {
			return nil, badRequest(param, "%s is not an input item: %v", param, err)
		}
		switch it.Type {
		case "", "message":
			if !slices.Contains(inputRoles, it.Role) {
				return nil, badRequest(param+".role", "%s: role %q is not an input message role (roles: %s)", param, it.Role, strings.Join(inputRoles, ", "))
			}
			text, aerr := inputText(it.Content, param+".content", true)
			if aerr != nil {
				return nil, aerr
			}
			if it.Role != "assistant" {
				out = append(out, chat.Message{Role: it.Role, Content: text})
				continue
			}
			m := assistant(false)
			if m.Content != "" && text != "" {
				m.Content += "\n"
			}
			m.Content += text
			if reasoning != "" {
				m.ReasoningContent, reasoning = reasoning, ""
			}
		case "function_call":
			switch {
			case it.CallID == "":
				return nil, badRequest(param+".call_id", "%s: a function_call needs its call_id", param)
			case it.Name == "":
				return nil, badRequest(param+".name", "%s: a function_call needs the name of its function", param)
			case it.Arguments == nil:
				return nil, badRequest(param+".arguments", "%s: a function_call needs its arguments (JSON text)", param)
			}
			m := assistant(true)
			m.ToolCalls = append(m.ToolCalls, chat.ToolCall{ID: it.CallID, Name: it.Name, Arguments: *it.Arguments})
			if reasoning != "" && m.ReasoningContent == "" {
				m.ReasoningContent, reasoning = reasoning, ""
			}
			calls[it.CallID] = it.Name
		case "function_call_output":
			name, ok := calls[it.CallID]
			if !ok {
				return nil, badRequest(param+".call_id", "%s: no function_call before it has call_id %q (this server stores no responses: send the calls in input too)", param, it.CallID)
			}
			if !set(it.Output) {
				return nil, badRequest(param+".output", "%s: a function_call_output needs its output", param)
			}
			text, aerr := inputText(it.Output, param+".output", false)
			if aerr != nil {
				return nil, aerr
			}
			out = append(out, chat.Message{Role: "tool", Content: text, ToolCallID: it.CallID, Name: name})
		case "reasoning":
			var parts []string
			var content []struct {
				Text string `json:"text"`
			}
			if set(it.Content) && json.Unmarshal(it.Content, &content) == nil {
				for _, c := range content {
					parts = append(parts, c.Text)
				}
			}
			if len(parts) == 0 { // a summary stands in for text not returned
				for _, s := range it.Summary {
					parts = append(parts, s.Text)
				}
			}
			reasoning = strings.Join(parts, "\n")
		case "item_reference":
			return nil, badRequest(param, "%s: an item_reference names a stored item, and this server stores no responses (store is always false): send the item itself", param)
		default:
			return nil, badRequest(param+".type", "%s: input items of type %q are not supported (message, function_call, function_call_output, reasoning)", param, it.Type)
		}
	}
	return out, nil
}

// inputText reads a message's content or a function call's output (param
// names it): a string, or a list of text parts (input_text; in an
// assistant message's replay, output_text and refusal) joined with "\n",
// as chat.ParseMessages joins a chat message's parts.
func inputText(raw json.RawMessage, param string, message bool) (string, *apiError) {
	if !set(raw) {
		if message {
			return "", badRequest(param, "%s is missing: a message needs content", param)
		}
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type    string  `json:"type"`
		Text    *string `json:"text"`
		Refusal *string `json:"refusal"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest(param, "%s must be a string or a list of content parts", param)
	}
	var b strings.Builder
	for k, p := range parts {
		var t *string
		switch p.Type {
		case "input_text", "output_text", "text":
			t = p.Text
		case "refusal":
			t = p.Refusal
		default:
			return "", badRequest(fmt.Sprintf("%s[%d].type", param, k), "%s[%d]: content parts of type %q are not supported: this server takes text (input_text)", param, k, p.Type)
		}
		if t == nil {
			return "", badRequest(fmt.Sprintf("%s[%d]", param, k), "%s[%d]: a %s part needs its text", param, k, p.Type)
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(*t)
	}
	return b.String(), nil
}

// responsesTools reads the Responses API's tools: function tools in the
// flat shape ({"type": "function", "name", "description", "parameters",
// "strict"}). The hosted tools (web search, file search, …) run on
// OpenAI's side and have no meaning here.
func responsesTools(raw json.RawMessage) ([]chat.Tool, *apiError) {
	if !set(raw) {
		return nil, nil
	}
	var entries []struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	}
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, badRequest("tools", "tools must be a list of function tools: %v", err)
	}
	out := make([]chat.Tool, 0, len(entries))
	for i, e := range entries {
		switch {
		case e.Type != "function":
			return nil, badRequest(fmt.Sprintf("tools[%d].type", i), "tools[%d]: tools of type %q are not supported: this server runs function tools (type function)", i, e.Type)
		case e.Name == "":
			return nil, badRequest(fmt.Sprintf("tools[%d].name", i), "tools[%d]: a function tool needs a name", i)
		}
		p := bytes.TrimSpace(e.Parameters)
		if !set(p) {
			p = nil
		}
		out = append(out, chat.Tool{Name: e.Name, Description: e.Description, Parameters: p})
	}
	return out, nil
}

// responsesToolChoice reads tool_choice in the Responses shape ("none",
// "auto", "required", or {"type": "function", "name": …}) as chat's.
func responsesToolChoice(raw json.RawMessage, tools []chat.Tool) (toolChoice, *apiError) {
	var named struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if set(raw) && bytes.TrimSpace(raw)[0] == '{' {
		if err := json.Unmarshal(raw, &named); err != nil || named.Type != "function" || named.Name == "" {
			return toolChoice{}, badRequest("tool_choice", `tool_choice must be none, auto, required or {"type": "function", "name": ...}`)
		}
		raw, _ = json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": named.Name}})
	}
	return parseToolChoice(raw, tools)
}

// textFormat reads text.format into a grammar spec: text (nothing to
// constrain: ok false), json_object, or json_schema with its schema
// inline ({"type": "json_schema", "name", "schema", "strict"}).
func textFormat(raw json.RawMessage) (spec grammar.Spec, ok bool, aerr *apiError) {
	if !set(raw) {
		return spec, false, nil
	}
	var f struct {
		Type   string          `json:"type"`
		Schema json.RawMessage `json:"schema"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return spec, false, badRequest("text.format", "text.format: %v", err)
	}
	switch f.Type {
	case "text":
		return spec, false, nil
	case "json_object":
		spec.JSONObject = true
	case "json_schema":
		if !set(f.Schema) {
			return spec, false, badRequest("text.format.schema", "text.format of type json_schema needs its schema")
		}
		spec.JSONSchema = f.Schema
	default:
		return spec, false, badRequest("text.format.type", "text.format type %q: want text, json_object or json_schema", f.Type)
	}
	return spec, true, nil
}
