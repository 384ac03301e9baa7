package server

import (
	"encoding/json"
	"net/http"

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
	ps, aerr := req.choices(p)
	if aerr != nil {
		s.reject(w, r, aerr)
		return
	}
	spec, field, constrained, aerr := req.spec()
	if aerr != nil {
		s.reject(w, r, aerr)
		return
	}
	if constrained {
		if aerr := s.constrain(r.Context(), m, spec, field, ps); aerr != nil {
			s.reject(w, r, aerr)
			return
		}
	}
	g, a, ok := s.start(w, r, m, prompt, ps, "cmpl", "text_completion", "text_completion")
	if !ok {
		return
	}
	// Each choice's logprobs count their text offsets on from its own
	// text.
	legacy := make([]*legacyLogprobs, len(ps))
	choice := func(i int, text string, finish *string, lps []decode.Logprobs) map[string]any {
		var lo any // null without logprobs
		if p.Logprobs {
			if legacy[i] == nil {
				legacy[i] = &legacyLogprobs{tok: m.Tok}
			}
			lo = legacy[i].object(lps)
		}
		return map[string]any{"index": i, "text": text, "finish_reason": finish, "logprobs": lo}
	}
	if req.Stream {
		if req.Echo {
			for i := range g.chans {
				g.chans[i] = prepend(g.chans[i], text)
			}
		}
		a.stream(w, g, streamer{
			text: func(i int, t string, lps []decode.Logprobs) []any {
				return []any{a.envelope(choice(i, t, nil, lps), nil)}
			},
			end: func(i int, reason string, lps []decode.Logprobs) []any {
				return []any{a.envelope(choice(i, "", &reason, lps), nil)}
			},
		}, req.includeUsage())
		return
	}
	s.whole(w, r, g, a, func(i int, c choiceResult) map[string]any {
		out := c.text
		if req.Echo {
			out = text + out
		}
		reason := c.last.Finish.OpenAI()
		return choice(i, out, &reason, c.lps)
	})
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
