package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/zrtdev/zrt/runtime/decode"
	"github.com/zrtdev/zrt/runtime/engine"
)

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	var req struct {
		genParams
		Prompt json.RawMessage `json:"prompt"`
		Echo   bool            `json:"echo"`
	}
	m, p, ok := s.parse(w, r, &req, &req.genParams, false)
	if !ok {
		return
	}
	if req.Echo && p.Logprobs {
		s.reject(w, r, badRequest("echo", "echo with logprobs is not supported: the prompt's tokens are not scored"))
		return
	}
	var prompt []int32
	var text string
	if json.Unmarshal(req.Prompt, &text) == nil {
		prompt = m.Tok.Encode(text, true, true)
	} else if err := json.Unmarshal(req.Prompt, &prompt); err != nil {
		s.reject(w, r, badRequest("prompt", "prompt must be a string or an array of token ids"))
		return
	} else {
		text = m.Tok.Decode(prompt)
	}
	events, observe, aerr := s.submit(r.Context(), m, prompt, p)
	if aerr != nil {
		s.reject(w, r, aerr)
		return
	}
	id, created := fmt.Sprintf("cmpl-%d", s.requests.Add(1)), time.Now().Unix()
	var legacy *legacyLogprobs
	if p.Logprobs {
		legacy = &legacyLogprobs{tok: m.Tok}
	}
	obj := func(text string, finish *string, u *usage, lps []decode.Logprobs) map[string]any {
		var lo any // null without logprobs
		if legacy != nil {
			lo = legacy.object(lps)
		}
		return envelope(id, "text_completion", created, m.Name, map[string]any{"index": 0, "text": text, "finish_reason": finish, "logprobs": lo}, u)
	}
	if req.Stream {
		if req.Echo {
			events = prepend(events, text)
		}
		stream(w, events, observe, func(t string, lps []decode.Logprobs) any { return obj(t, nil, nil, lps) },
			func(reason string, u *usage, lps []decode.Logprobs) any { return obj("", &reason, u, lps) },
			req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
		return
	}
	out, last, lps := collect(events, observe)
	if failed(last) {
		s.reject(w, r, &apiError{status: http.StatusInternalServerError, Message: "generation ended: " + string(last.Finish), Type: "server_error"})
		return
	}
	if req.Echo {
		out = text + out
	}
	reason, u := finishReason(last.Finish), usageOf(last)
	o := obj(out, &reason, nil, lps)
	o["usage"] = u
	writeJSON(w, o)
}

// prepend emits text as the first event, then the engine's.
func prepend(events <-chan engine.Event, text string) <-chan engine.Event {
	out := make(chan engine.Event, 1)
	go func() {
		defer close(out)
		out <- engine.Event{Token: -1, Text: text}
		for ev := range events {
			out <- ev
		}
	}()
	return out
}
