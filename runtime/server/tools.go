package server

import (
	"encoding/json"
	"strings"

	"github.com/zrtdev/zrt/runtime/chat"
	"github.com/zrtdev/zrt/runtime/chat/reply"
	"github.com/zrtdev/zrt/runtime/grammar"
)

// toolChoice is a request's tool_choice: "none", "auto", "required", or
// the name of the one function the reply must call.
type toolChoice struct {
	mode string // none, auto, required or function
	name string // the function, for mode function
}

// parseToolChoice reads tool_choice against the request's tools: the
// default is auto with tools and none without; a named function must be
// one of the tools.
func parseToolChoice(raw json.RawMessage, tools []chat.Tool) (toolChoice, *apiError) {
	if !set(raw) {
		if len(tools) == 0 {
			return toolChoice{mode: "none"}, nil
		}
		return toolChoice{mode: "auto"}, nil
	}
	var mode string
	if json.Unmarshal(raw, &mode) == nil {
		switch mode {
		case "none", "auto":
			return toolChoice{mode: mode}, nil
		case "required":
			if len(tools) == 0 {
				return toolChoice{}, badRequest("tool_choice", "tool_choice required needs tools")
			}
			return toolChoice{mode: mode}, nil
		}
		return toolChoice{}, badRequest("tool_choice", "tool_choice %q: want none, auto, required or a function", mode)
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &named); err != nil || named.Type != "function" || named.Function.Name == "" {
		return toolChoice{}, badRequest("tool_choice", "tool_choice must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}")
	}
	for _, t := range tools {
		if t.Name == named.Function.Name {
			return toolChoice{mode: "function", name: t.Name}, nil
		}
	}
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.Name
	}
	return toolChoice{}, badRequest("tool_choice", "tool_choice names function %q, which is not in tools (%s)", named.Function.Name, strings.Join(names, ", "))
}

// forced reports whether the reply must be tool calls.
func (c toolChoice) forced() bool { return c.mode == "required" || c.mode == "function" }

// callGrammar is the GBNF of a reply that calls tools (the one named by
// choice, or any of them) in format f's syntax, each call's arguments
// valid against its tool's parameters schema; one call, or one or more
// when parallel. The reply has no reasoning block: a forced call is the
// whole reply, as every constraint is (see templateVars). A tool whose
// parameters the grammar cannot take is a 400 on tools, a format without
// a call grammar one on tool_choice.
func callGrammar(f reply.Format, tools []chat.Tool, choice toolChoice, parallel bool) (string, *apiError) {
	args := make([]reply.ArgGrammar, 0, len(tools))
	for i, t := range tools {
		params := t.Parameters
		if len(params) == 0 {
			params = json.RawMessage(`{"type": "object"}`)
		}
		rule := reply.ArgRule(i)
		g, err := grammar.SchemaGBNF(params, rule)
		if err != nil {
			return "", badRequest("tools", "tools[%d] (%s) parameters: %v", i, t.Name, err)
		}
		args = append(args, reply.ArgGrammar{Tool: t.Name, Rule: rule, GBNF: g})
	}
	name := choice.mode
	if choice.mode == "function" {
		name = choice.name
	}
	f.ThinkStart, f.ThinkEnd = "", ""
	g, err := f.CallGrammar(args, name, parallel)
	if err != nil {
		return "", badRequest("tool_choice", "tool_choice %s: %v", choice.mode, err)
	}
	return g, nil
}
