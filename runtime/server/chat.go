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
	events, observe, aerr := s.submit(r.Context(), m, prompt, p)
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
	if req.Stream {
		first := true
		chunk := func(delta map[string]any, finish *string, u *usage, lps []decode.Logprobs) map[string]any {
			return envelope(id, "chat.completion.chunk", created, m.Name, map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": logprobs(lps)}, u)
		}
		stream(w, events, observe, func(t string, lps []decode.Logprobs) any {
			d := map[string]any{"content": t}
			if first {
				d["role"], first = "assistant", false
			}
			return chunk(d, nil, nil, lps)
		}, func(reason string, u *usage, lps []decode.Logprobs) any {
			return chunk(map[string]any{}, &reason, u, lps)
		},
			req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
		return
	}
	out, last, lps := collect(events, observe)
	if failed(last) {
		s.reject(w, r, &apiError{status: http.StatusInternalServerError, Message: "generation ended: " + string(last.Finish), Type: "server_error"})
		return
	}
	writeJSON(w, map[string]any{"id": id, "object": "chat.completion", "created": created, "model": m.Name,
		"choices": []map[string]any{{"index": 0, "message": map[string]any{"role": "assistant", "content": out}, "finish_reason": finishReason(last.Finish), "logprobs": logprobs(lps)}},
		"usage":   usageOf(last)})
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
