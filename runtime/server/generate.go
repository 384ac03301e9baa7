package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/zrtdev/zrt/runtime/decode"
	"github.com/zrtdev/zrt/runtime/engine"
	"github.com/zrtdev/zrt/runtime/server/ledger"
)

// answer names one reply of the completion endpoints: its id, its object
// type (a whole reply's; a stream's chunks are chunk's), its model and
// when it was created.
type answer struct {
	id, object, chunk, model string
	created                  int64
}

// start submits the choices ps of prompt and names the reply (prefix: its
// id's; object and chunk: its types); false when the engine refused the
// request, which the client has then been told.
func (s *Server) start(w http.ResponseWriter, r *http.Request, m *Model, prompt []int32, ps []decode.Params, prefix, object, chunk string) (*generation, answer, bool) {
	g, aerr := s.submit(r.Context(), m, prompt, ps)
	if aerr != nil {
		s.reject(w, r, aerr)
		return nil, answer{}, false
	}
	return g, answer{id: fmt.Sprintf("%s-%d", prefix, s.requests.Add(1)), object: object, chunk: chunk, model: m.Name, created: time.Now().Unix()}, true
}

// envelope is one stream chunk of the reply: choice is its only choice,
// or none in the usage chunk that u marks.
func (a answer) envelope(choice map[string]any, u *usage) map[string]any {
	o := map[string]any{"id": a.id, "object": a.chunk, "created": a.created, "model": a.model, "choices": []map[string]any{choice}}
	if u != nil {
		o["choices"], o["usage"] = []map[string]any{}, u
	}
	return o
}

// stream streams the reply (stream's events from out), its usage chunk
// the reply's envelope when includeUsage.
func (a answer) stream(w http.ResponseWriter, g *generation, out streamer, includeUsage bool) {
	out.usage = func(u usage) any { return a.envelope(nil, &u) }
	stream(w, g, out, includeUsage)
}

// whole waits for the reply's choices and writes it as one object, choice
// i being choice(i, its result), or a server error if one failed.
func (s *Server) whole(w http.ResponseWriter, r *http.Request, g *generation, a answer, choice func(i int, c choiceResult) map[string]any) {
	res, lasts, bad := collect(g)
	if bad {
		s.reject(w, r, &apiError{status: http.StatusInternalServerError, Message: "generation ended: " + failure(lasts), Type: "server_error"})
		return
	}
	var choices []map[string]any
	for i, c := range res {
		choices = append(choices, choice(i, c))
	}
	writeJSON(w, map[string]any{"id": a.id, "object": a.object, "created": a.created, "model": a.model, "choices": choices, "usage": usageOf(lasts)})
}

// reject answers a generation request with an error, counting it against
// its tenant.
func (s *Server) reject(w http.ResponseWriter, r *http.Request, err *apiError) {
	t := r.Context().Value(tenantKey).(*Tenant)
	s.metrics.rejected.WithLabelValues(t.ID, fmt.Sprint(err.status)).Inc()
	writeError(w, err)
}

// generation is a submitted request's choices: their engine events, one
// channel each, and observe, which every event read must pass through
// (metrics, and the ledger's one record when the last choice ends).
type generation struct {
	chans   []<-chan engine.Event
	observe func(i int, ev engine.Event)
}

// choiceEvent is an event of choice i.
type choiceEvent struct {
	i  int
	ev engine.Event
}

// merged interleaves the choices' events in the order they arrive; it is
// closed after every choice's last event.
func (g *generation) merged() <-chan choiceEvent {
	out := make(chan choiceEvent, 16*len(g.chans))
	var wg sync.WaitGroup
	for i, ch := range g.chans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev := range ch {
				out <- choiceEvent{i, ev}
			}
		}()
	}
	go func() { wg.Wait(); close(out) }()
	return out
}

// submit hands a request of len(ps) choices to the model's engine,
// mapping refusals to HTTP. Metrics count the prompt once; the ledger gets
// one record when every choice has ended, with the prompt once and the
// choices' completions summed.
func (s *Server) submit(ctx context.Context, m *Model, prompt []int32, ps []decode.Params) (*generation, *apiError) {
	t := ctx.Value(tenantKey).(*Tenant)
	chans, aerr := s.admit(ctx, t, m, prompt, ps)
	if aerr != nil {
		return nil, aerr
	}
	trs := make([]*track, len(ps))
	for i := range trs {
		trs[i] = s.metrics.track(m.Name, t.ID)
	}
	id := requestID(ctx)
	var mu sync.Mutex
	ended, completion := 0, 0
	var first engine.Event // choice 0's last event
	return &generation{chans: chans, observe: func(i int, e engine.Event) {
		if i > 0 {
			e.PromptTokens = 0 // counted with choice 0
		}
		trs[i].event(e)
		if e.Finish == "" || s.ledger == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		ended++
		completion += e.CompletionTokens
		if i == 0 {
			first = e
		}
		if ended == len(trs) {
			s.ledger.Append(ledger.Record{Time: time.Now().UTC(), Tenant: t.ID, RequestID: id, Model: m.Name,
				Prompt: first.PromptTokens, Cached: first.CachedTokens, Completion: completion,
				TTFTms: trs[0].ttftMs(), DurationMs: float64(time.Since(trs[0].start).Microseconds()) / 1000, Finish: string(first.Finish)})
		}
	}}, nil
}

// admit submits a request to the model's engine (the replica its router
// picks: Model.submit); every refusal is the
// engine's (draining too: Drain stops the engines admitting), mapped to
// HTTP by admitError.
func (s *Server) admit(ctx context.Context, t *Tenant, m *Model, prompt []int32, ps []decode.Params) ([]<-chan engine.Event, *apiError) {
	tp := s.policy.tenant(t.ID)
	chans, err := m.submit(tp.PrefixScope(t.ID), prompt, func(e *engine.Engine) ([]<-chan engine.Event, error) {
		return e.SubmitN(ctx, engine.Request{Tenant: t.ID, QoS: tp.Class, Prompt: prompt}, ps)
	})
	if err != nil {
		return nil, admitError(err)
	}
	return chans, nil
}

// admitErrors map the engine's admission errors to HTTP, one row a kind:
// the status, OpenAI's error type and code, the Retry-After seconds, and
// the message in the API's words, naming the request field (param) or
// config key to change.
var admitErrors = []struct {
	kind   error
	status int
	typ    string
	code   string
	retry  func(e *engine.AdmitError) int
	say    func(e *engine.AdmitError) (param, msg string)
}{
	{kind: engine.ErrEmpty, status: http.StatusBadRequest, typ: "invalid_request_error",
		say: func(e *engine.AdmitError) (string, string) { return "prompt", "the prompt is empty" }},
	{kind: engine.ErrBadToken, status: http.StatusBadRequest, typ: "invalid_request_error",
		say: func(e *engine.AdmitError) (string, string) {
			return "prompt", fmt.Sprintf("token id %d outside the vocabulary of %d", e.Token, e.Limit)
		}},
	{kind: engine.ErrTooLong, status: http.StatusBadRequest, typ: "invalid_request_error", say: tooLong},
	{kind: engine.ErrExceedsRate, status: http.StatusBadRequest, typ: "invalid_request_error",
		say: func(e *engine.AdmitError) (string, string) {
			return "max_tokens", fmt.Sprintf("the prompt's %d tokens plus max_tokens %d (of each of %d choices) exceed this tenant's tokens_per_minute (%d)",
				e.Prompt, e.MaxTokens, e.Choices, e.Limit)
		}},
	{kind: engine.ErrRateLimited, status: http.StatusTooManyRequests, typ: "rate_limit_error", code: "rate_limit_exceeded",
		retry: func(e *engine.AdmitError) int { return int(math.Ceil(e.RetryAfter.Seconds())) },
		say: func(e *engine.AdmitError) (string, string) {
			return "", fmt.Sprintf("tenant %s is over its rate limit; retry after %.1f s", e.Tenant, e.RetryAfter.Seconds())
		}},
	{kind: engine.ErrQueued, status: http.StatusTooManyRequests, typ: "rate_limit_error", code: "rate_limit_exceeded",
		retry: func(*engine.AdmitError) int { return 1 },
		say: func(e *engine.AdmitError) (string, string) {
			return "", fmt.Sprintf("tenant %s already has %d requests waiting for a slot, its max_queued; retry when one has started", e.Tenant, e.Limit)
		}},
	{kind: engine.ErrQueueFull, status: http.StatusServiceUnavailable, typ: "server_error",
		retry: func(*engine.AdmitError) int { return 1 },
		say:   func(e *engine.AdmitError) (string, string) { return "", "the queue is full" }},
	{kind: engine.ErrDraining, status: http.StatusServiceUnavailable, typ: "server_error",
		retry: func(*engine.AdmitError) int { return 5 },
		say:   func(e *engine.AdmitError) (string, string) { return "", "the server is draining" }},
}

// admitError is the API's answer to an engine's refusal.
func admitError(err error) *apiError {
	var ae *engine.AdmitError
	if errors.As(err, &ae) {
		for _, row := range admitErrors {
			if !errors.Is(err, row.kind) {
				continue
			}
			param, msg := row.say(ae)
			out := &apiError{status: row.status, Message: msg, Type: row.typ}
			if param != "" {
				out.Param = &param
			}
			if row.code != "" {
				code := row.code
				out.Code = &code
			}
			if row.retry != nil {
				out.retryAfter = row.retry(ae)
			}
			return out
		}
	}
	return badRequest("prompt", "%v", err)
}

// tooLong says in plain words why a request cannot fit, naming the field
// to change: max_tokens while the prompt alone would fit, else the prompt.
func tooLong(e *engine.AdmitError) (param, msg string) {
	if e.Pages == 0 && e.Tenant != "" {
		return "prompt", fmt.Sprintf("prompt of %d tokens plus max_tokens %d exceeds this tenant's %d-token context", e.Prompt, e.MaxTokens, e.Limit)
	}
	param = "max_tokens"
	if e.Prompt >= e.Context {
		param = "prompt"
	}
	if e.Pages == 0 {
		msg := fmt.Sprintf("the prompt's %d tokens plus max_tokens %d make %d, beyond the model's context of %d tokens",
			e.Prompt, e.MaxTokens, e.Prompt+e.MaxTokens, e.Context)
		if param == "max_tokens" {
			msg += fmt.Sprintf(": max_tokens may be at most %d for this prompt", e.Context-e.Prompt)
		} else {
			msg += ": shorten the prompt"
		}
		return param, msg
	}
	who := fmt.Sprintf("the server's KV cache holds %d pages", e.Limit)
	if e.Tenant != "" {
		who = fmt.Sprintf("tenant %s may hold %d pages (max_kv_pages)", e.Tenant, e.Limit)
	}
	return param, fmt.Sprintf("the prompt's %d tokens plus max_tokens %d need %d KV-cache pages; %s: lower max_tokens or shorten the prompt",
		e.Prompt, e.MaxTokens, e.Pages, who)
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

// usageOf is the usage of a request whose choices ended with lasts: the
// prompt (and its cached part) once, as choice 0 counts it, and every
// choice's completion.
func usageOf(lasts []engine.Event) usage {
	u := usage{PromptTokens: lasts[0].PromptTokens}
	u.Details.CachedTokens = lasts[0].CachedTokens
	for _, ev := range lasts {
		u.CompletionTokens += ev.CompletionTokens
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// streamer builds a stream's chunks for one endpoint: text(i, t, lps) the
// chunks of choice i's new text t, end(i, reason, lps) those of its end
// with OpenAI's finish reason, usage the usage chunk. lps are the
// logprobs (nil unless asked for) of the tokens since the choice's last
// chunk: a token whose text is held back (part of a character, or of what
// may be a stop string) has its logprobs sent with the chunk that shows
// it, or the last.
type streamer struct {
	text  func(i int, t string, lps []decode.Logprobs) []any
	end   func(i int, reason string, lps []decode.Logprobs) []any
	usage func(u usage) any
}

// stream writes the choices' events as server-sent events, interleaved as
// they come (each chunk names its choice's index); once every choice has
// ended, with includeUsage a usage chunk follows, then [DONE]. A choice
// that fails ends the stream with an error object. A client that goes
// away cancels the request through its context.
func stream(w http.ResponseWriter, g *generation, out streamer, includeUsage bool) {
	s := newSSE(w)
	send := func(vs []any) {
		for _, v := range vs {
			b, _ := json.Marshal(v)
			fmt.Fprintf(w, "data: %s\n\n", b)
		}
		if len(vs) > 0 {
			s.flush()
		}
	}
	pending := make([][]decode.Logprobs, len(g.chans))
	lasts := make([]engine.Event, len(g.chans))
	s.relay(g, func(i int, ev engine.Event) bool {
		if ev.Logprobs != nil {
			pending[i] = append(pending[i], *ev.Logprobs)
		}
		if ev.Text != "" {
			send(out.text(i, ev.Text, pending[i]))
			pending[i] = nil
		}
		if ev.Finish == "" {
			return true
		}
		if ev.Finish.Aborted() {
			send([]any{map[string]any{"error": map[string]string{"message": "generation ended: " + string(ev.Finish), "type": "server_error"}}})
			fmt.Fprint(w, "data: [DONE]\n\n")
			s.flush()
			return false // the handler's return cancels the other choices
		}
		lasts[i] = ev
		send(out.end(i, ev.Finish.OpenAI(), pending[i]))
		pending[i] = nil
		return true
	}, func() {
		if includeUsage {
			send([]any{out.usage(usageOf(lasts))})
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
		s.flush()
	})
}

// sse writes server-sent events.
type sse struct {
	w       http.ResponseWriter
	flusher http.Flusher
}

// newSSE starts an event stream on w.
func newSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	f, _ := w.(http.Flusher)
	return &sse{w: w, flusher: f}
}

func (s *sse) flush() {
	if s.flusher != nil {
		s.flusher.Flush()
	}
}

// relay passes g's events, each once g has observed it, to on until they
// end (then end runs) or on returns false. A preemption becomes a comment
// line, which OpenAI clients skip where a named event would break them;
// while no event comes, a keep-alive comment goes every 15 s.
func (s *sse) relay(g *generation, on func(i int, ev engine.Event) bool, end func()) {
	keepAlive := time.NewTicker(15 * time.Second)
	defer keepAlive.Stop()
	events := g.merged()
	for {
		select {
		case ce, ok := <-events:
			if !ok {
				end()
				return
			}
			g.observe(ce.i, ce.ev)
			if ce.ev.Preempted {
				fmt.Fprint(s.w, ": preempted by a more urgent request; resuming when a slot frees\n\n")
				s.flush()
				continue
			}
			if !on(ce.i, ce.ev) {
				return
			}
		case <-keepAlive.C:
			fmt.Fprint(s.w, ": keep-alive\n\n")
			s.flush()
		}
	}
}

// failure names why the first failed of lasts ended.
func failure(lasts []engine.Event) string {
	for _, ev := range lasts {
		if ev.Finish.Aborted() {
			return string(ev.Finish)
		}
	}
	return ""
}

// choiceResult is a non-streamed choice: its text, its last event and its
// tokens' logprobs (nil unless asked for).
type choiceResult struct {
	text string
	last engine.Event
	lps  []decode.Logprobs
}

// collect waits for a non-streamed request's choices; failed is set when
// one of them ended without a completion OpenAI can express.
func collect(g *generation) (res []choiceResult, lasts []engine.Event, anyFailed bool) {
	texts := make([]strings.Builder, len(g.chans))
	res = make([]choiceResult, len(g.chans))
	for ce := range g.merged() {
		g.observe(ce.i, ce.ev)
		c := &res[ce.i]
		if ce.ev.Logprobs != nil {
			c.lps = append(c.lps, *ce.ev.Logprobs)
		}
		texts[ce.i].WriteString(ce.ev.Text)
		c.last = ce.ev
	}
	for i := range res {
		res[i].text = texts[i].String()
		lasts = append(lasts, res[i].last)
		anyFailed = anyFailed || res[i].last.Finish.Aborted()
	}
	return res, lasts, anyFailed
}

// parse decodes a generation request's body (which embeds g) and resolves
// its model and decoding parameters (chat: of the chat endpoint); on a bad
// request it answers and reports false.
func (s *Server) parse(w http.ResponseWriter, r *http.Request, body any, g *genParams, chat bool) (*Model, decode.Params, bool) {
	if err := decodeBody(w, r, body); err != nil {
		// A max_tokens that is no integer gets the same answer as one out
		// of range: the JSON decoder read the rest, the model included.
		if m, merr := s.model(g.Model); merr == nil && err.Param != nil && (*err.Param == "max_tokens" || *err.Param == "max_completion_tokens") {
			err = maxTokensError(*err.Param, m)
		}
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
