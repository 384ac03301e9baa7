package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/zrtdev/zrt/runtime/decode"
	"github.com/zrtdev/zrt/runtime/engine"
	"github.com/zrtdev/zrt/runtime/server/ledger"
)

func failed(ev engine.Event) bool {
	return ev.Err != nil || ev.Finish == engine.ClientTooSlow || ev.Finish == engine.Cancelled
}

// envelope is one response or stream chunk: choice is its only choice, or
// none in the usage chunk that u marks.
func envelope(id, object string, created int64, model string, choice map[string]any, u *usage) map[string]any {
	o := map[string]any{"id": id, "object": object, "created": created, "model": model, "choices": []map[string]any{choice}}
	if u != nil {
		o["choices"], o["usage"] = []map[string]any{}, u
	}
	return o
}

// finishReason maps the engine's reasons onto OpenAI's.
func finishReason(f engine.Finish) string {
	switch decode.Finish(f) {
	case decode.EOG, decode.StopString:
		return "stop"
	case decode.Length, decode.Context:
		return "length"
	}
	return string(f)
}

// reject answers a generation request with an error, counting it against
// its tenant.
func (s *Server) reject(w http.ResponseWriter, r *http.Request, err *apiError) {
	t := r.Context().Value(tenantKey).(*Tenant)
	s.metrics.rejected.WithLabelValues(t.ID, fmt.Sprint(err.status)).Inc()
	writeError(w, err)
}

// submit hands a request to the model's engine, mapping refusals to HTTP;
// its events reach the caller through the request's metrics.
func (s *Server) submit(ctx context.Context, m *Model, prompt []int32, p decode.Params) (<-chan engine.Event, func(engine.Event), *apiError) {
	t := ctx.Value(tenantKey).(*Tenant)
	ev, aerr := s.admit(ctx, t, m, prompt, p)
	if aerr != nil {
		return nil, nil, aerr
	}
	tr := s.metrics.track(m.Name, t.ID)
	id := requestID(ctx)
	return ev, func(e engine.Event) {
		tr.event(e)
		if e.Finish != "" && s.ledger != nil {
			s.ledger.Append(ledger.Record{Time: time.Now().UTC(), Tenant: t.ID, RequestID: id, Model: m.Name,
				Prompt: e.PromptTokens, Cached: e.CachedTokens, Completion: e.CompletionTokens,
				TTFTms: tr.ttftMs(), DurationMs: float64(time.Since(tr.start).Microseconds()) / 1000, Finish: string(e.Finish)})
		}
	}, nil
}

func (s *Server) admit(ctx context.Context, t *Tenant, m *Model, prompt []int32, p decode.Params) (<-chan engine.Event, *apiError) {
	if s.draining.Load() {
		return nil, &apiError{status: http.StatusServiceUnavailable, Message: "the server is draining", Type: "server_error", retryAfter: 5}
	}
	if len(prompt) == 0 {
		return nil, badRequest("prompt", "the prompt is empty")
	}
	if t.MaxContextTokens > 0 && len(prompt)+p.MaxTokens > t.MaxContextTokens {
		return nil, badRequest("prompt", "prompt of %d tokens plus max_tokens %d exceeds this tenant's %d-token context", len(prompt), p.MaxTokens, t.MaxContextTokens)
	}
	for _, id := range prompt {
		if id < 0 || int(id) >= m.Tok.NVocab() {
			return nil, badRequest("prompt", "token id %d outside the vocabulary of %d", id, m.Tok.NVocab())
		}
	}
	if st := m.Engine.Stats(); st.Waiting >= s.cfg.Load().QueueDepth {
		return nil, &apiError{status: http.StatusServiceUnavailable, Message: "the queue is full", Type: "server_error", retryAfter: 1}
	}
	ev, err := m.Engine.Submit(ctx, engine.Request{Tenant: t.ID, QoS: t.qos, Prompt: prompt, Decode: p})
	var rate *engine.RateLimitError
	switch {
	case errors.As(err, &rate) && rate.RetryAfter < 0:
		return nil, badRequest("max_tokens", "%v", err)
	case errors.As(err, &rate):
		code := "rate_limit_exceeded"
		return nil, &apiError{status: http.StatusTooManyRequests, Message: err.Error(), Type: "rate_limit_error", Code: &code,
			retryAfter: int(math.Ceil(rate.RetryAfter.Seconds()))}
	case errors.Is(err, engine.ErrTooLong):
		return nil, badRequest("prompt", "%v", err)
	case errors.Is(err, engine.ErrDraining):
		return nil, &apiError{status: http.StatusServiceUnavailable, Message: err.Error(), Type: "server_error"}
	case err != nil:
		return nil, badRequest("prompt", "%v", err)
	}
	return ev, nil
}

// usage is OpenAI's usage object.
type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
	Details          struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func usageOf(ev engine.Event) usage {
	u := usage{PromptTokens: ev.PromptTokens, CompletionTokens: ev.CompletionTokens, TotalTokens: ev.PromptTokens + ev.CompletionTokens}
	u.Details.CachedTokens = ev.CachedTokens
	return u
}

// stream writes the engine's events as server-sent events: chunk(text,
// lps) builds each delta's object, final(reason, nil, lps) the last one;
// with includeUsage a usage chunk follows, then [DONE]. lps are the
// logprobs (nil unless asked for) of the tokens since the last chunk: a
// token whose text is held back (part of a character, or of what may be a
// stop string) has its logprobs sent with the chunk that shows it, or the
// last. A client that goes away cancels the request through its context.
func stream(w http.ResponseWriter, events <-chan engine.Event, observe func(engine.Event),
	chunk func(string, []decode.Logprobs) any, final func(string, *usage, []decode.Logprobs) any, includeUsage bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	flusher, _ := w.(http.Flusher)
	send := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	keepAlive := time.NewTicker(15 * time.Second)
	defer keepAlive.Stop()
	var pending []decode.Logprobs
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return
			}
			observe(ev)
			if ev.Logprobs != nil {
				pending = append(pending, *ev.Logprobs)
			}
			if ev.Preempted {
				// A comment line, which OpenAI clients skip; a named event
				// would break them.
				fmt.Fprint(w, ": preempted by a more urgent request; resuming when a slot frees\n\n")
				if flusher != nil {
					flusher.Flush()
				}
				continue
			}
			if ev.Text != "" {
				send(chunk(ev.Text, pending))
				pending = nil
			}
			if ev.Finish == "" {
				continue
			}
			if failed(ev) {
				send(map[string]any{"error": map[string]string{"message": "generation ended: " + string(ev.Finish), "type": "server_error"}})
			} else {
				u := usageOf(ev)
				send(final(finishReason(ev.Finish), nil, pending))
				if includeUsage {
					send(final("", &u, nil))
				}
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
			if flusher != nil {
				flusher.Flush()
			}
			return
		case <-keepAlive.C:
			fmt.Fprint(w, ": keep-alive\n\n")
			if flusher != nil {
				flusher.Flush()
			}
		}
	}
}

// collect waits for a non-streamed request's events, returning its text,
// its last event and its tokens' logprobs (nil unless asked for).
func collect(events <-chan engine.Event, observe func(engine.Event)) (string, engine.Event, []decode.Logprobs) {
	var text strings.Builder
	var last engine.Event
	var lps []decode.Logprobs
	for ev := range events {
		observe(ev)
		if ev.Logprobs != nil {
			lps = append(lps, *ev.Logprobs)
		}
		text.WriteString(ev.Text)
		last = ev
	}
	return text.String(), last, lps
}

// parse decodes a generation request's body (which embeds g) and resolves
// its model and decoding parameters (chat: of the chat endpoint); on a bad
// request it answers and reports false.
func (s *Server) parse(w http.ResponseWriter, r *http.Request, body any, g *genParams, chat bool) (*Model, decode.Params, bool) {
	if err := decodeBody(w, r, body); err != nil {
		s.reject(w, r, err)
		return nil, decode.Params{}, false
	}
	m, err := s.model(g.Model)
	if err != nil {
		s.reject(w, r, err)
		return nil, decode.Params{}, false
	}
	p, err := g.decodeParams(m, chat)
	if err != nil {
		s.reject(w, r, err)
		return nil, decode.Params{}, false
	}
	return m, p, true
}
