package server

import (
	"encoding/json"
	"net/http"

	"github.com/zrtdev/zrt/runtime/chat"
	"github.com/zrtdev/zrt/runtime/chat/reply"
	"github.com/zrtdev/zrt/runtime/decode"
)

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	var req struct {
		genParams
		Messages          json.RawMessage `json:"messages"`
		Tools             json.RawMessage `json:"tools"`
		ToolChoice        json.RawMessage `json:"tool_choice"`
		ParallelToolCalls *bool           `json:"parallel_tool_calls"`
		// ChatTemplateKwargs are extra template variables (llama-server's
		// and vLLM's field), enable_thinking among them.
		ChatTemplateKwargs map[string]any `json:"chat_template_kwargs"`
		ReasoningEffort    string         `json:"reasoning_effort"`
	}
	m, p, ok := s.parse(w, r, &req, &req.genParams, true)
	if !ok {
		return
	}
	msgs, aerr := chatMessages(req.Messages)
	if aerr != nil {
		s.reject(w, r, aerr)
		return
	}
	tools, err := chat.ParseTools(req.Tools)
	if err != nil {
		s.reject(w, r, badRequest("tools", "%v", err))
		return
	}
	choice, aerr := parseToolChoice(req.ToolChoice, tools)
	if aerr != nil {
		s.reject(w, r, aerr)
		return
	}
	spec, field, _, aerr := req.spec()
	if aerr != nil {
		s.reject(w, r, aerr)
		return
	}
	ps, aerr := req.choices(p)
	if aerr != nil {
		s.reject(w, r, aerr)
		return
	}
	t := turn{msgs: msgs, tools: tools, choice: choice, parallel: req.ParallelToolCalls == nil || *req.ParallelToolCalls,
		spec: spec, field: field, kwargs: req.ChatTemplateKwargs, effort: req.ReasoningEffort}
	prompt, format, aerr := s.prepare(r.Context(), m, t, ps)
	if aerr != nil {
		s.reject(w, r, aerr)
		return
	}
	if req.MaxTokens == nil && req.MaxCompletion == nil {
		// Chat's default is OpenAI's (and llama-server's): no bound but
		// the context. (Completions keep the legacy API's 16.)
		for i := range ps {
			ps[i].MaxTokens = contextRest(r, m, len(prompt))
		}
	}
	g, a, ok := s.start(w, r, m, prompt, ps, "chatcmpl", "chat.completion", "chat.completion.chunk")
	if !ok {
		return
	}
	// logprobs is the choice's logprobs object: null without logprobs.
	logprobs := func(lps []decode.Logprobs) any {
		if !p.Logprobs {
			return nil
		}
		return chatLogprobs(m.Tok, lps)
	}
	replies := newReplies(format, ps)
	if req.Stream {
		started := make([]bool, len(ps))
		chunk := func(i int, delta map[string]any, finish *string, lps []decode.Logprobs) any {
			if !started[i] {
				delta["role"], started[i] = "assistant", true
			}
			return a.envelope(map[string]any{"index": i, "delta": delta, "finish_reason": finish, "logprobs": logprobs(lps)}, nil)
		}
		// A choice's logprobs go with its first chunk of a step; the
		// deltas a step's text completes may be several (reasoning
		// closed, a call opened).
		chunks := func(i int, deltas []map[string]any, lps []decode.Logprobs) []any {
			var out []any
			for _, d := range deltas {
				out = append(out, chunk(i, d, nil, lps))
				lps = nil
			}
			if len(out) == 0 && len(lps) > 0 {
				out = append(out, chunk(i, map[string]any{}, nil, lps))
			}
			return out
		}
		a.stream(w, g, streamer{
			text: func(i int, t string, lps []decode.Logprobs) []any {
				return chunks(i, chatDeltas(replies[i].add(t)), lps)
			},
			end: func(i int, reason string, lps []decode.Logprobs) []any {
				d, calls := replies[i].end()
				out := chunks(i, chatDeltas(d), nil)
				if calls && reason == "stop" {
					reason = "tool_calls"
				}
				return append(out, chunk(i, map[string]any{}, &reason, lps))
			},
		}, req.includeUsage())
		return
	}
	s.whole(w, r, g, a, func(i int, c choiceResult) map[string]any {
		msg, calls := chatMessage(replies[i].parse(c.text))
		reason := c.last.Finish.OpenAI()
		if calls && reason == "stop" {
			reason = "tool_calls"
		}
		return map[string]any{"index": i, "message": msg, "finish_reason": reason, "logprobs": logprobs(c.lps)}
	})
}

// chatDeltas are d as OpenAI's chunk deltas: reasoning and content in
// one, then one per tool-call piece, the first of a call with its id, type
// and name.
func chatDeltas(d reply.Delta) []map[string]any {
	var out []map[string]any
	if d.Reasoning != "" || d.Content != "" {
		m := map[string]any{}
		if d.Reasoning != "" {
			m["reasoning_content"] = d.Reasoning
		}
		if d.Content != "" {
			m["content"] = d.Content
		}
		out = append(out, m)
	}
	for _, cd := range d.ToolCalls {
		fn := map[string]any{"arguments": cd.Arguments}
		call := map[string]any{"index": cd.Index, "function": fn}
		if cd.ID != "" {
			call["id"], call["type"] = cd.ID, "function"
		}
		if cd.Name != "" {
			fn["name"] = cd.Name
		}
		out = append(out, map[string]any{"tool_calls": []any{call}})
	}
	return out
}

// chatMessage is a parsed reply as an assistant message, and whether it
// was tool calls.
func chatMessage(p reply.Parsed) (map[string]any, bool) {
	msg := map[string]any{"role": "assistant", "content": p.Content}
	if p.Reasoning != "" {
		msg["reasoning_content"] = p.Reasoning
	}
	if len(p.ToolCalls) == 0 {
		return msg, false
	}
	if p.Content == "" {
		msg["content"] = nil
	}
	var calls []map[string]any
	for _, tc := range p.ToolCalls {
		calls = append(calls, map[string]any{"id": tc.ID, "type": "function", "function": map[string]any{"name": tc.Name, "arguments": tc.Arguments}})
	}
	msg["tool_calls"] = calls
	return msg, true
}

// templateVars are the chat template's variables for the request's
// chat_template_kwargs and reasoning_effort. A constrained reply (a schema,
// a grammar, forced tool calls) covers the whole reply, so its thinking is
// off: a request that turns it on as well is refused.
func templateVars(f reply.Format, kwargs map[string]any, effort string, constrained bool) (map[string]any, *apiError) {
	vars := map[string]any{}
	var enable *bool
	for k, v := range kwargs {
		if k == "enable_thinking" {
			b, ok := v.(bool)
			if !ok {
				return nil, badRequest("chat_template_kwargs", "chat_template_kwargs.enable_thinking must be true or false")
			}
			enable = &b
			continue
		}
		vars[k] = v
	}
	if constrained {
		if enable != nil && *enable {
			return nil, badRequest("chat_template_kwargs", "a constrained reply (response_format, json_schema, grammar, regex or a forced tool call) has no thinking: enable_thinking must not be true")
		}
		off := false
		enable = &off
		if effort != "" && effort != "none" && f.Kind != reply.Harmony {
			effort = ""
		}
	}
	rv, err := reply.ReasoningVars(f, enable, effort)
	if err != nil {
		return nil, badRequest("reasoning_effort", "%v", err)
	}
	for k, v := range rv {
		vars[k] = v
	}
	return vars, nil
}
