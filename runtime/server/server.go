// Package server is zrt-run serve: an OpenAI-compatible HTTP front end for
// serving engines (package engine), one per model. It authenticates a
// request to a tenant, turns it into an engine request and streams the
// engine's events back as JSON or server-sent events. It reaches no tier:
// everything below the engine's API is the engine's.
package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/zrtdev/zrt/runtime/chat"
	"github.com/zrtdev/zrt/runtime/decode"
	"github.com/zrtdev/zrt/runtime/engine"
	"github.com/zrtdev/zrt/runtime/sample"
	"github.com/zrtdev/zrt/runtime/server/ledger"
	"github.com/zrtdev/zrt/runtime/tokenizer"
)

// Model is one served model.
type Model struct {
	Name          string
	Engine        *engine.Engine
	Tok           *tokenizer.Tokenizer
	ContextLength int
}

// Server serves the models.
type Server struct {
	cfg      atomic.Pointer[Config]
	policy   *Policy
	models   map[string]*Model
	order    []string
	log      *slog.Logger
	started  time.Time
	draining atomic.Bool
	requests atomic.Uint64
	metrics  *metrics
	ledger   *ledger.Ledger // nil: no usage ledger
}

// page is GET /: a chat playground that streams, and a live view of the
// engines' slots, queue and KV pages. Embedded: no external assets.
//
//go:embed page.html
var page []byte

// maxBody bounds a request body.
const maxBody = 8 << 20

// New returns a server for models (the first is the default when a
// request names none) whose engines follow policy; finished requests are
// recorded in led when it is not nil.
func New(cfg *Config, policy *Policy, models []*Model, led *ledger.Ledger, log *slog.Logger) *Server {
	s := &Server{policy: policy, models: map[string]*Model{}, log: log, started: time.Now(), ledger: led}
	s.cfg.Store(cfg)
	for _, m := range models {
		s.models[m.Name] = m
		s.order = append(s.order, m.Name)
	}
	s.metrics = newMetrics(s)
	return s
}

// Reload replaces the tenants, their keys and their limits with cfg's (on
// SIGHUP): requests already running keep going; slots, chunk_cap and
// reserved pages stay as the engines were started with.
func (s *Server) Reload(cfg *Config) {
	s.cfg.Store(cfg)
	s.policy.Update(cfg)
}

// Drain makes the server refuse new generation requests with 503.
func (s *Server) Drain() { s.draining.Store(true) }

// Handler routes the endpoints.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", s.auth(s.completions))
	mux.HandleFunc("POST /v1/chat/completions", s.auth(s.chatCompletions))
	mux.HandleFunc("GET /v1/models", s.auth(s.listModels))
	mux.HandleFunc("POST /tokenize", s.auth(s.tokenize))
	mux.HandleFunc("POST /detokenize", s.auth(s.detokenize))
	mux.HandleFunc("GET /v1/tenants/{id}/usage", s.auth(s.usage))
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(page)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	return s.accessLog(s.cors(routeErrors(mux)))
}

// routeErrors answers the requests mux has no route for (404: no such
// path; 405: the path takes other methods, which mux lists in Allow) with
// OpenAI's error object, as every other error is answered, instead of
// mux's plain text.
func routeErrors(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(&routeErrorWriter{ResponseWriter: w, r: r}, r)
	})
}

// routeErrorWriter replaces a 404 or 405 answer's plain-text body with
// the error object; anything else (a redirect to a path's canonical form)
// passes through.
type routeErrorWriter struct {
	http.ResponseWriter
	r        *http.Request
	replaced bool
}

func (w *routeErrorWriter) WriteHeader(code int) {
	var msg string
	switch code {
	case http.StatusNotFound:
		msg = fmt.Sprintf("invalid URL (%s %s): this server has no such endpoint (OpenAI's API is under /v1/, e.g. POST /v1/chat/completions)",
			w.r.Method, w.r.URL.Path)
	case http.StatusMethodNotAllowed:
		msg = fmt.Sprintf("method %s is not allowed on %s (allowed: %s)", w.r.Method, w.r.URL.Path, w.Header().Get("Allow"))
	default:
		w.ResponseWriter.WriteHeader(code)
		return
	}
	w.replaced = true
	writeError(w.ResponseWriter, &apiError{status: code, Message: msg, Type: "invalid_request_error"})
}

func (w *routeErrorWriter) Write(b []byte) (int, error) {
	if w.replaced {
		return len(b), nil // mux's plain text, already replaced
	}
	return w.ResponseWriter.Write(b)
}

// What a CORS preflight allows: the API's methods, and the request
// headers its clients send (the key, the JSON body's type, a request id);
// what a cross-origin page may read of a response beyond the basic
// headers: the request id, and when to retry after a 429 or 503.
const (
	corsMethods = "GET, POST, OPTIONS"
	corsHeaders = "Authorization, Content-Type, X-Request-Id"
	corsExpose  = "X-Request-Id, Retry-After"
)

// cors answers cross-origin requests from the config's cors_origins (read
// per request, so SIGHUP's reload applies at once). With none configured it
// adds nothing: a browser then lets no other origin's page read a response.
// A preflight (OPTIONS with Access-Control-Request-Method) is answered here,
// before authentication, since browsers send it without the key.
func (s *Server) cors(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origins := s.cfg.Load().CORSOrigins
		if len(origins) == 0 {
			h.ServeHTTP(w, r)
			return
		}
		// Caches must not hand one origin's answer to another.
		w.Header().Add("Vary", "Origin")
		// allow is the Access-Control-Allow-Origin to send: "*" when any
		// origin may call (safe: no cookies are involved, keys travel in
		// Authorization), the request's origin when it is listed, or none
		// (also for a request without Origin, which is not cross-origin).
		origin, allow := r.Header.Get("Origin"), ""
		for _, o := range origins {
			if origin != "" && (o == "*" || strings.EqualFold(o, origin)) && allow != "*" {
				allow = origin
				if o == "*" {
					allow = "*"
				}
			}
		}
		if allow != "" {
			w.Header().Set("Access-Control-Allow-Origin", allow)
			w.Header().Set("Access-Control-Expose-Headers", corsExpose)
		}
		if r.Method != http.MethodOptions || r.Header.Get("Access-Control-Request-Method") == "" {
			h.ServeHTTP(w, r)
			return
		}
		if allow == "" {
			writeError(w, &apiError{status: http.StatusForbidden, Message: fmt.Sprintf("origin %q is not in cors_origins", origin), Type: "permission_error"})
			return
		}
		w.Header().Set("Access-Control-Allow-Methods", corsMethods)
		w.Header().Set("Access-Control-Allow-Headers", corsHeaders)
		w.Header().Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
	})
}

// apiError is the OpenAI error object.
type apiError struct {
	status     int
	retryAfter int     // seconds, for 429 and 503
	Message    string  `json:"message"`
	Type       string  `json:"type"`
	Param      *string `json:"param"`
	Code       *string `json:"code"`
}

func (e *apiError) Error() string { return e.Message }

func badRequest(param, format string, args ...any) *apiError {
	e := &apiError{status: http.StatusBadRequest, Message: fmt.Sprintf(format, args...), Type: "invalid_request_error"}
	if param != "" {
		e.Param = &param
	}
	return e
}

func writeError(w http.ResponseWriter, err *apiError) {
	if err.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(err.retryAfter))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(err.status)
	json.NewEncoder(w).Encode(map[string]any{"error": err})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

type ctxKey int

const (
	tenantKey ctxKey = iota
	requestIDKey
)

// requestID is the X-Request-Id of the request ctx belongs to.
func requestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

// auth resolves the request's tenant from its bearer key, compared in
// constant time against every configured key's hash.
func (s *Server) auth(h func(http.ResponseWriter, *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		sum := sha256.Sum256([]byte(key))
		var who *Tenant
		cfg := s.cfg.Load()
		for i := range cfg.Tenants {
			t := &cfg.Tenants[i]
			if len(t.hashes) == 0 && who == nil {
				who = t // the keyless local tenant
			}
			for _, h := range t.hashes {
				if subtle.ConstantTimeCompare(h[:], sum[:]) == 1 {
					who = t
				}
			}
		}
		if who == nil {
			writeError(w, &apiError{status: http.StatusUnauthorized, Message: "invalid or missing API key", Type: "authentication_error"})
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), tenantKey, who)))
	}
}

// accessLog logs one structured line per request: never keys or prompts.
func (s *Server) accessLog(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if id == "" {
			id = fmt.Sprintf("req-%d-%d", s.started.UnixNano()%1e6, s.requests.Add(1))
		}
		w.Header().Set("X-Request-Id", id)
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		t0 := time.Now()
		h.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), requestIDKey, id)))
		if s.log != nil {
			s.log.Info("request", "id", id, "method", r.Method, "path", r.URL.Path, "status", rec.status, "ms", time.Since(t0).Milliseconds())
		}
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) { r.status = code; r.ResponseWriter.WriteHeader(code) }
func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// model picks the named model, or the first when the request names none.
func (s *Server) model(name string) (*Model, *apiError) {
	if name == "" {
		return s.models[s.order[0]], nil
	}
	if m, ok := s.models[name]; ok {
		return m, nil
	}
	code := "model_not_found"
	return nil, &apiError{status: http.StatusNotFound, Message: fmt.Sprintf("model %q does not exist (serving %s)", name, strings.Join(s.order, ", ")), Type: "invalid_request_error", Code: &code}
}

// listModels is GET /v1/models. Beyond OpenAI's fields, meta says
// whether the model has a chat template of its own: without one, chat
// requests are rendered with the ChatML fallback, which a model that was
// never trained on it answers with noise (the page then uses completions).
func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	var data []map[string]any
	for _, n := range s.order {
		meta := map[string]any{"has_chat_template": s.models[n].Tok.Vocab().ChatTemplate != ""}
		data = append(data, map[string]any{"id": n, "object": "model", "created": s.started.Unix(), "owned_by": "zrt", "meta": meta})
	}
	writeJSON(w, map[string]any{"object": "list", "data": data})
}

// health is 200 while the engines make progress or have nothing to do,
// 503 while draining or when work waits and no step has run lately.
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	type modelHealth struct {
		Model       string  `json:"model"`
		Steps       uint64  `json:"steps"`
		LastStepAge float64 `json:"last_step_age_s"`
		Running     int     `json:"running"`
		Waiting     int     `json:"waiting"`
		Slots       int     `json:"slots"`
		PagesFree   int     `json:"pages_free"`
		PagesTotal  int     `json:"pages_total"`
		PrefixPages int     `json:"prefix_pages"`
	}
	status, reason := http.StatusOK, "ok"
	if s.draining.Load() {
		status, reason = http.StatusServiceUnavailable, "draining"
	}
	var ms []modelHealth
	for _, n := range s.order {
		st := s.models[n].Engine.Stats()
		age := 0.0
		if !st.LastStep.IsZero() {
			age = time.Since(st.LastStep).Seconds()
		}
		if st.Running+st.Waiting > 0 && (st.LastStep.IsZero() && time.Since(s.started) > 30*time.Second || age > 30) {
			status, reason = http.StatusServiceUnavailable, "the step loop of "+n+" has not advanced in 30 s with work waiting"
		}
		ms = append(ms, modelHealth{n, st.Steps, age, st.Running, st.Waiting, st.Slots, st.PagesFree, st.PagesTotal, st.PrefixPages})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"status": reason, "models": ms})
}

// genParams are the sampling fields both completion endpoints share.
type genParams struct {
	Model         string          `json:"model"`
	MaxTokens     *int            `json:"max_tokens"`
	MaxCompletion *int            `json:"max_completion_tokens"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int            `json:"top_k"`
	MinP          *float64        `json:"min_p"`
	Seed          *int64          `json:"seed"`
	Stop          json.RawMessage `json:"stop"`
	Stream        bool            `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	IgnoreEOS        bool     `json:"ignore_eos"`
	N                *int     `json:"n"`
	PresencePenalty  *float64 `json:"presence_penalty"`
	FrequencyPenalty *float64 `json:"frequency_penalty"`
	RepeatPenalty    *float64 `json:"repeat_penalty"`
	// LogitBias is keyed by token id as a string, as JSON objects are.
	LogitBias map[string]float64 `json:"logit_bias"`
	// Logprobs is an integer for completions (the alternatives per token)
	// and a boolean for chat, whose alternatives are TopLogprobs.
	Logprobs       json.RawMessage `json:"logprobs"`
	TopLogprobs    *int            `json:"top_logprobs"`
	Tools          json.RawMessage `json:"tools"`
	ResponseFormat json.RawMessage `json:"response_format"`
}

// decodeParams validates the shared fields into the engine's terms; chat
// says which endpoint's logprobs fields to read.
func (g *genParams) decodeParams(m *Model, chat bool) (decode.Params, *apiError) {
	// Every penalty counts the sequence's last 64 tokens: llama-server's
	// default repeat_last_n.
	p := decode.Params{MaxTokens: 16, IgnoreEOS: g.IgnoreEOS, Sampling: sample.Params{Temperature: 1, TopP: 1, RepeatLastN: 64}}
	switch {
	case g.MaxCompletion != nil:
		p.MaxTokens = *g.MaxCompletion
		if p.MaxTokens < 1 || p.MaxTokens > m.ContextLength {
			return p, maxTokensError("max_completion_tokens", m)
		}
	case g.MaxTokens != nil:
		p.MaxTokens = *g.MaxTokens
		if p.MaxTokens < 1 || p.MaxTokens > m.ContextLength {
			return p, maxTokensError("max_tokens", m)
		}
	}
	if g.Temperature != nil {
		p.Sampling.Temperature = *g.Temperature
	}
	if g.TopP != nil {
		p.Sampling.TopP = *g.TopP
	}
	if g.TopK != nil {
		p.Sampling.TopK = *g.TopK
	}
	if g.MinP != nil {
		p.Sampling.MinP = *g.MinP
	}
	if g.RepeatPenalty != nil {
		p.Sampling.RepeatPenalty = *g.RepeatPenalty
	}
	if g.PresencePenalty != nil {
		p.Sampling.PresencePenalty = *g.PresencePenalty
	}
	if g.FrequencyPenalty != nil {
		p.Sampling.FrequencyPenalty = *g.FrequencyPenalty
	}
	bias, aerr := logitBias(g.LogitBias, m.Tok.NVocab())
	if aerr != nil {
		return p, aerr
	}
	p.Sampling.LogitBias = bias
	if aerr := g.logprobs(&p, chat); aerr != nil {
		return p, aerr
	}
	var re *decode.RangeError
	if err := p.Validate(); errors.As(err, &re) {
		return p, badRequest(re.Field, "%v", err)
	}
	if g.Seed != nil {
		p.Sampling.Seed = uint64(*g.Seed)
	} else {
		p.Sampling.Seed = uint64(time.Now().UnixNano())
	}
	stops, err := stringOrList(g.Stop)
	if err != nil || len(stops) > 4 {
		return p, badRequest("stop", "stop must be a string or a list of at most 4 strings")
	}
	p.Stops = stops
	switch {
	case g.N != nil && *g.N != 1:
		return p, badRequest("n", "n = %d is not supported: zrt returns one choice", *g.N)
	case len(g.Tools) > 0 && string(g.Tools) != "null":
		return p, badRequest("tools", "tools are not supported")
	case len(g.ResponseFormat) > 0 && string(g.ResponseFormat) != "null" && !strings.Contains(string(g.ResponseFormat), `"text"`):
		return p, badRequest("response_format", "response_format other than text is not supported")
	}
	return p, nil
}

// maxTokensError answers a max_tokens or max_completion_tokens (field)
// that is not an integer in [1, m's context], whatever its JSON type.
func maxTokensError(field string, m *Model) *apiError {
	return badRequest(field, "%s must be an integer in [1, %d]: at least one token, and at most the model's context of %d tokens, which the prompt shares",
		field, m.ContextLength, m.ContextLength)
}

// logitBias reads OpenAI's logit_bias: token ids, as decimal strings,
// mapped to a bias in the range the decode limits give.
func logitBias(in map[string]float64, nVocab int) (map[int32]float64, *apiError) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make(map[int32]float64, len(in))
	// In key order, so a request with several bad entries always names
	// the same one.
	for _, k := range slices.Sorted(maps.Keys(in)) {
		id, err := strconv.Atoi(k)
		// Only the canonical spelling: "05" and "5" would be one token
		// biased twice.
		if err != nil || id < 0 || id >= nVocab || strconv.Itoa(id) != k {
			return nil, badRequest("logit_bias", "logit_bias key %q is not a token id of this model (0 to %d)", k, nVocab-1)
		}
		if err := decode.Check("logit_bias", in[k]); err != nil {
			return nil, badRequest("logit_bias", "logit_bias of token %d: %v", id, err)
		}
		out[int32(id)] = in[k]
	}
	return out, nil
}

// logprobs reads the endpoint's logprobs fields into p: for completions
// the legacy integer logprobs, the alternatives to report per token; for
// chat the boolean logprobs and top_logprobs.
func (g *genParams) logprobs(p *decode.Params, chat bool) *apiError {
	set := len(g.Logprobs) > 0 && string(g.Logprobs) != "null"
	if !chat {
		if !set || string(g.Logprobs) == "false" { // false: as before logprobs were supported
			return nil
		}
		var n int
		if err := json.Unmarshal(g.Logprobs, &n); err != nil {
			return badRequest("logprobs", "logprobs must be an integer, the alternatives to report per token: %v", err)
		}
		var re *decode.RangeError
		if err := decode.Check("top_logprobs", float64(n)); errors.As(err, &re) {
			re.Field = "logprobs" // the same setting, under this endpoint's name
			return badRequest("logprobs", "%v", re)
		}
		p.Logprobs, p.TopLogprobs = true, n
		return nil
	}
	on := false
	if set {
		if err := json.Unmarshal(g.Logprobs, &on); err != nil {
			return badRequest("logprobs", "logprobs must be true or false (the alternatives are top_logprobs): %v", err)
		}
	}
	if g.TopLogprobs != nil {
		if err := decode.Check("top_logprobs", float64(*g.TopLogprobs)); err != nil {
			return badRequest("top_logprobs", "%v", err)
		}
		if *g.TopLogprobs > 0 && !on {
			return badRequest("top_logprobs", "top_logprobs needs logprobs: true")
		}
		p.TopLogprobs = *g.TopLogprobs
	}
	p.Logprobs = on
	return nil
}

// reportable is a log-probability as JSON can carry it: -Inf (a token the
// request banned) and NaN become -9999, the floor OpenAI reports for a
// token it considers impossible.
func reportable(lp float64) float64 {
	if math.IsNaN(lp) || lp < -9999 {
		return -9999
	}
	return lp
}

// tokenText is a token's piece as text: itself when it is valid UTF-8, or
// OpenAI's "bytes:\xNN…" for a piece that is part of a character.
func tokenText(piece []byte) string {
	if utf8.Valid(piece) {
		return string(piece)
	}
	var b strings.Builder
	b.WriteString("bytes:")
	for _, c := range piece {
		fmt.Fprintf(&b, "\\x%02x", c)
	}
	return b.String()
}

// completionLogprobs is the legacy completions' logprobs object.
type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// legacyLogprobs builds a completion's logprobs objects, one for the
// response or for each chunk of a stream, whose text offsets count on
// from the chunks before.
type legacyLogprobs struct {
	tok *tokenizer.Tokenizer
	// The generated pieces so far, and how many characters their first
	// cut bytes hold: a character split across byte tokens is counted once
	// all of it has arrived.
	text  []byte
	cut   int
	chars int
}

// object returns the logprobs object of the tokens lps. A token's
// text_offset is in characters (Unicode code points), as OpenAI's Python
// clients index text, from the start of the generated text: the tokens'
// pieces are exactly what the text is made of, up to a stop string.
func (b *legacyLogprobs) object(lps []decode.Logprobs) *completionLogprobs {
	o := &completionLogprobs{Tokens: []string{}, TokenLogprobs: []float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
	for _, l := range lps {
		piece := b.tok.Piece(l.Token)
		o.Tokens = append(o.Tokens, tokenText(piece))
		o.TokenLogprobs = append(o.TokenLogprobs, reportable(l.Logprob))
		top := make(map[string]float64, len(l.Top))
		for _, t := range l.Top {
			// Two tokens can share a text; the map keeps the likelier.
			k := tokenText(b.tok.Piece(t.Token))
			if _, dup := top[k]; !dup {
				top[k] = reportable(t.Logprob)
			}
		}
		o.TopLogprobs = append(o.TopLogprobs, top)
		o.TextOffset = append(o.TextOffset, b.chars+utf8.RuneCount(b.text[b.cut:]))
		b.text = append(b.text, piece...)
		for b.cut < len(b.text) && utf8.FullRune(b.text[b.cut:]) {
			_, n := utf8.DecodeRune(b.text[b.cut:])
			b.cut += n
			b.chars++
		}
	}
	return o
}

// chatLogprob is one entry of a chat choice's logprobs content.
type chatLogprob struct {
	Token       string         `json:"token"`
	Logprob     float64        `json:"logprob"`
	Bytes       []int          `json:"bytes"`
	TopLogprobs []chatTopEntry `json:"top_logprobs"`
}

// chatTopEntry is one of a chat token's most likely alternatives.
type chatTopEntry struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// chatLogprobs is a chat choice's logprobs object for the tokens lps.
func chatLogprobs(tok *tokenizer.Tokenizer, lps []decode.Logprobs) map[string]any {
	// bytes is a list of integers: []byte would marshal as base64.
	byteList := func(piece []byte) []int {
		out := make([]int, len(piece))
		for i, c := range piece {
			out[i] = int(c)
		}
		return out
	}
	content := make([]chatLogprob, 0, len(lps))
	for _, l := range lps {
		piece := tok.Piece(l.Token)
		e := chatLogprob{Token: tokenText(piece), Logprob: reportable(l.Logprob), Bytes: byteList(piece), TopLogprobs: make([]chatTopEntry, 0, len(l.Top))}
		for _, t := range l.Top {
			tp := tok.Piece(t.Token)
			e.TopLogprobs = append(e.TopLogprobs, chatTopEntry{Token: tokenText(tp), Logprob: reportable(t.Logprob), Bytes: byteList(tp)})
		}
		content = append(content, e)
	}
	return map[string]any{"content": content, "refusal": nil}
}

func stringOrList(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, nil
	}
	var many []string
	err := json.Unmarshal(raw, &many)
	return many, err
}

// decodeBody reads a JSON body into v, naming what is wrong.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) *apiError {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &apiError{status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("request body exceeds %d bytes", maxBody), Type: "invalid_request_error"}
		}
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			// The shared fields are those of the embedded genParams: name
			// them as the request does.
			field := strings.TrimPrefix(typeErr.Field, "genParams.")
			return badRequest(field, "%s must be %s, not %s", field, jsonKind(typeErr.Type), typeErr.Value)
		}
		return badRequest("", "malformed JSON body: %v", err)
	}
	return nil
}

// jsonKind names the JSON value a Go type reads, for errors that speak
// the request's language rather than Go's.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "an object"
}

// failed reports whether a request's last event ends it without a
// completion OpenAI can express (an error, a cancellation, a consumer cut
// off).
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

// usage is GET /v1/tenants/{id}/usage: the ledger's totals for a tenant,
// readable by that tenant or an admin.
func (s *Server) usage(w http.ResponseWriter, r *http.Request) {
	t := r.Context().Value(tenantKey).(*Tenant)
	id := r.PathValue("id")
	if id != t.ID && !t.Admin {
		writeError(w, &apiError{status: http.StatusForbidden, Message: "a tenant may read only its own usage", Type: "permission_error"})
		return
	}
	if s.ledger == nil {
		writeError(w, &apiError{status: http.StatusNotFound, Message: "no usage ledger: set ledger in the server config", Type: "invalid_request_error"})
		return
	}
	writeJSON(w, map[string]any{"tenant": id, "usage": s.ledger.Totals(id)})
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
	var long *engine.TooLongError
	switch {
	case errors.As(err, &rate) && rate.RetryAfter < 0:
		return nil, badRequest("max_tokens", "the prompt's %d tokens plus max_tokens %d exceed this tenant's tokens_per_minute (%d)",
			len(prompt), p.MaxTokens, t.TokensPerMinute)
	case errors.As(err, &rate):
		code := "rate_limit_exceeded"
		return nil, &apiError{status: http.StatusTooManyRequests, Message: fmt.Sprintf("tenant %s is over its rate limit; retry after %.1f s", t.ID, rate.RetryAfter.Seconds()),
			Type: "rate_limit_error", Code: &code, retryAfter: int(math.Ceil(rate.RetryAfter.Seconds()))}
	case errors.As(err, &long):
		return nil, tooLong(long)
	case errors.Is(err, engine.ErrDraining):
		return nil, &apiError{status: http.StatusServiceUnavailable, Message: err.Error(), Type: "server_error"}
	case err != nil:
		return nil, badRequest("prompt", "%v", err)
	}
	return ev, nil
}

// tooLong says in plain words why a request cannot fit, naming the field
// to change: max_tokens while the prompt alone would fit, else the prompt.
func tooLong(e *engine.TooLongError) *apiError {
	param := "max_tokens"
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
		return badRequest(param, "%s", msg)
	}
	who := fmt.Sprintf("the server's KV cache holds %d pages", e.Limit)
	if e.Tenant != "" {
		who = fmt.Sprintf("tenant %s may hold %d pages (max_kv_pages)", e.Tenant, e.Limit)
	}
	return badRequest(param, "the prompt's %d tokens plus max_tokens %d need %d KV-cache pages; %s: lower max_tokens or shorten the prompt",
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

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	var req struct {
		genParams
		Messages []chatMessage `json:"messages"`
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

// chatMessage is one message of a chat request.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// roles are the message roles OpenAI defines.
var roles = []string{"system", "developer", "user", "assistant", "tool"}

// chatMessages checks a request's messages and turns them into the chat
// template's: developer is OpenAI's newer name for system, which is what
// chat templates know.
func chatMessages(in []chatMessage) ([]chat.Message, *apiError) {
	if len(in) == 0 {
		return nil, badRequest("messages", "messages must not be empty")
	}
	var msgs []chat.Message
	for i, msg := range in {
		if !slices.Contains(roles, msg.Role) {
			what := fmt.Sprintf("role %q is not a message role", msg.Role)
			if msg.Role == "" {
				what = "a message needs a role"
			}
			return nil, badRequest(fmt.Sprintf("messages[%d].role", i), "messages[%d]: %s (roles: %s)", i, what, strings.Join(roles, ", "))
		}
		text, err := contentText(msg.Content)
		if err != nil {
			return nil, badRequest(fmt.Sprintf("messages[%d].content", i), "messages[%d]: content must be a string or a list of text parts", i)
		}
		role := msg.Role
		if role == "developer" {
			role = "system"
		}
		msgs = append(msgs, chat.Message{Role: role, Content: text})
	}
	return msgs, nil
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

// tokenize takes llama-server's body (content, with add_special off
// unless asked) and vLLM's (prompt, with add_special_tokens on unless
// turned off; or messages, rendered by the chat template with the
// generation prompt), and answers with both servers' fields: tokens, and
// vLLM's count and max_model_len.
func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model            string        `json:"model"`
		Content          *string       `json:"content"`
		AddSpecial       bool          `json:"add_special"`
		Prompt           *string       `json:"prompt"`
		AddSpecialTokens *bool         `json:"add_special_tokens"`
		Messages         []chatMessage `json:"messages"`
	}
	if err := decodeBody(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	m, aerr := s.model(req.Model)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	var toks []int32
	switch n := btoi(req.Content != nil) + btoi(req.Prompt != nil) + btoi(req.Messages != nil); {
	case n != 1:
		writeError(w, badRequest("", "give exactly one of content (llama-server's field), prompt or messages (vLLM's) to tokenize"))
		return
	case req.Content != nil:
		toks = m.Tok.Encode(*req.Content, req.AddSpecial, true)
	case req.Prompt != nil:
		toks = m.Tok.Encode(*req.Prompt, req.AddSpecialTokens == nil || *req.AddSpecialTokens, true)
	default:
		msgs, aerr := chatMessages(req.Messages)
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		var err error
		if toks, _, err = chat.Prompt(m.Tok, msgs); err != nil {
			writeError(w, &apiError{status: http.StatusBadRequest, Message: "chat template: " + err.Error(), Type: "invalid_request_error"})
			return
		}
	}
	if toks == nil {
		toks = []int32{} // [], not null, for empty text
	}
	writeJSON(w, map[string]any{"tokens": toks, "count": len(toks), "max_model_len": m.ContextLength})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (s *Server) detokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model  string  `json:"model"`
		Tokens []int32 `json:"tokens"`
	}
	if err := decodeBody(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	m, aerr := s.model(req.Model)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	for _, id := range req.Tokens {
		if id < 0 || int(id) >= m.Tok.NVocab() {
			writeError(w, badRequest("tokens", "token id %d outside the vocabulary of %d", id, m.Tok.NVocab()))
			return
		}
	}
	// content is llama-server's field, prompt vLLM's.
	text := m.Tok.Decode(req.Tokens)
	writeJSON(w, map[string]any{"content": text, "prompt": text})
}
