package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/zrtdev/zrt/runtime/chat"
	"github.com/zrtdev/zrt/runtime/decode"
)

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	var req struct {
		genParams
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	m, p, ok := s.parse(w, r, &req, &req.genParams, true)
	if !ok {
		return
	}
	if len(req.Messages) == 0 {
		s.reject(w, r, badRequest("messages", "messages must not be empty"))
		return
	}
	var msgs []chat.Message
	for i, msg := range req.Messages {
		text, err := contentText(msg.Content)
		if err != nil || msg.Role == "" {
			s.reject(w, r, badRequest(fmt.Sprintf("messages[%d]", i), "each message needs a role and text content"))
			return
		}
		msgs = append(msgs, chat.Message{Role: msg.Role, Content: text})
	}
	prompt, _, err := chat.Prompt(m.Tok, msgs)
	if err != nil {
		s.reject(w, r, &apiError{status: http.StatusBadRequest, Message: "chat template: " + err.Error(), Type: "invalid_request_error"})
		return
	}
	ps, aerr := req.choices(p)
	if aerr != nil {
		s.reject(w, r, aerr)
		return
	}
	g, aerr := s.submit(r.Context(), m, prompt, ps)
	if aerr != nil {
		s.reject(w, r, aerr)
		return
	}
	id, created := fmt.Sprintf("chatcmpl-%d", s.requests.Add(1)), time.Now().Unix()
	// logprobs is the choice's logprobs object: null without logprobs.
	logprobs := func(lps []decode.Logprobs) any {
		if !p.Logprobs {
			return nil
		}
		return chatLogprobs(m.Tok, lps)
	}
	replies := make([]*chatReply, len(ps))
	for i := range replies {
		replies[i] = newChatReply()
	}
	if req.Stream {
		started := make([]bool, len(ps))
		chunk := func(i int, delta map[string]any, finish *string, lps []decode.Logprobs) any {
			if !started[i] {
				delta["role"], started[i] = "assistant", true
			}
			return envelope(id, "chat.completion.chunk", created, m.Name, map[string]any{"index": i, "delta": delta, "finish_reason": finish, "logprobs": logprobs(lps)}, nil)
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
		stream(w, g, streamer{
			text: func(i int, t string, lps []decode.Logprobs) []any { return chunks(i, replies[i].add(t), lps) },
			end: func(i int, reason string, lps []decode.Logprobs) []any {
				deltas, calls := replies[i].end()
				out := chunks(i, deltas, nil)
				if calls && reason == "stop" {
					reason = "tool_calls"
				}
				return append(out, chunk(i, map[string]any{}, &reason, lps))
			},
			usage: func(u usage) any { return envelope(id, "chat.completion.chunk", created, m.Name, nil, &u) },
		}, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
		return
	}
	res, lasts, bad := collect(g)
	if bad {
		s.reject(w, r, &apiError{status: http.StatusInternalServerError, Message: "generation ended: " + failure(lasts), Type: "server_error"})
		return
	}
	var choices []map[string]any
	for i, c := range res {
		msg, calls := replies[i].message(c.text)
		reason := finishReason(c.last.Finish)
		if calls && reason == "stop" {
			reason = "tool_calls"
		}
		choices = append(choices, map[string]any{"index": i, "message": msg, "finish_reason": reason, "logprobs": logprobs(c.lps)})
	}
	writeJSON(w, map[string]any{"id": id, "object": "chat.completion", "created": created, "model": m.Name, "choices": choices, "usage": usageOf(lasts)})
}

// chatReply turns one choice's generated text into OpenAI's message
// fields: content, and (by the model's reply format) reasoning_content
// and tool_calls, both as stream deltas and as a whole message.
type chatReply struct{}

func newChatReply() *chatReply { return &chatReply{} }

// add returns the deltas the choice's next text t completes.
func (c *chatReply) add(t string) []map[string]any {
	return []map[string]any{{"content": t}}
}

// end returns the deltas held back until the choice ended, and whether
// its reply was tool calls.
func (c *chatReply) end() ([]map[string]any, bool) { return nil, false }

// message is the whole reply text as an assistant message, and whether
// it was tool calls.
func (c *chatReply) message(text string) (map[string]any, bool) {
	return map[string]any{"role": "assistant", "content": text}, false
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
