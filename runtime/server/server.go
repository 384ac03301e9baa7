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
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/zrtdev/zrt/runtime/engine"
	"github.com/zrtdev/zrt/runtime/grammar"
	"github.com/zrtdev/zrt/runtime/server/ledger"
	"github.com/zrtdev/zrt/runtime/tokenizer"
)

// Model is one served model: its engines — one, or replicas of the same
// bundle (zrt-run serve --replicas, a GPU each; route.go says which a
// request goes to) — its tokenizer and its context length.
type Model struct {
	Name          string
	Engines       []*engine.Engine
	Tok           *tokenizer.Tokenizer
	ContextLength int

	routes router
}

// stats is the model's engines' stats, summed over its replicas.
func (m *Model) stats() engine.Stats {
	st := m.Engines[0].Stats()
	for _, e := range m.Engines[1:] {
		st = st.Add(e.Stats())
	}
	return st
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

	// agents are the models' grammar compilers (which cache compiled
	// constraints by content) and reply markers, made on first use.
	agentsMu      sync.Mutex
	agents        map[string]*agent
	grammarLimits grammar.Limits
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
	s := &Server{policy: policy, models: map[string]*Model{}, log: log, started: time.Now(), ledger: led, agents: map[string]*agent{}}
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

// Drain makes the server refuse new generation requests with 503: its
// engines stop admitting, and /health turns 503.
func (s *Server) Drain() {
	s.draining.Store(true)
	for _, m := range s.models {
		for _, e := range m.Engines {
			e.StopAdmitting()
		}
	}
}

// Handler routes the endpoints.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", s.auth(s.completions))
	mux.HandleFunc("POST /v1/chat/completions", s.auth(s.chatCompletions))
	mux.HandleFunc("POST /v1/responses", s.auth(s.responses))
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
// 503 while draining or when work waits and no step has run lately (in
// any replica of a model).
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	type replicaHealth struct {
		Steps       uint64  `json:"steps"`
		LastStepAge float64 `json:"last_step_age_s"`
		Running     int     `json:"running"`
		Waiting     int     `json:"waiting"`
	}
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
		// Replicas has each replica's step loop where the model has
		// several (the rest of the row is their sum).
		Replicas []replicaHealth `json:"replicas,omitempty"`
	}
	status, reason := http.StatusOK, "ok"
	if s.draining.Load() {
		status, reason = http.StatusServiceUnavailable, "draining"
	}
	age := func(st engine.Stats) float64 {
		if st.LastStep.IsZero() {
			return 0
		}
		return time.Since(st.LastStep).Seconds()
	}
	var ms []modelHealth
	for _, n := range s.order {
		m := s.models[n]
		var rs []replicaHealth
		for i, e := range m.Engines {
			st := e.Stats()
			if st.Running+st.Waiting > 0 && (st.LastStep.IsZero() && time.Since(s.started) > 30*time.Second || age(st) > 30) {
				who := n
				if len(m.Engines) > 1 {
					who = fmt.Sprintf("%s (replica %d)", n, i)
				}
				status, reason = http.StatusServiceUnavailable, "the step loop of "+who+" has not advanced in 30 s with work waiting"
			}
			rs = append(rs, replicaHealth{st.Steps, age(st), st.Running, st.Waiting})
		}
		if len(rs) == 1 {
			rs = nil
		}
		st := m.stats()
		ms = append(ms, modelHealth{n, st.Steps, age(st), st.Running, st.Waiting, st.Slots, st.PagesFree, st.PagesTotal, st.PrefixPages, rs})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"status": reason, "models": ms})
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

// decodeFor decodes the request body into req and returns the model that
// its field *model names; when either fails it answers the request with
// the error and returns false.
func (s *Server) decodeFor(w http.ResponseWriter, r *http.Request, req any, model *string) (*Model, bool) {
	if err := decodeBody(w, r, req); err != nil {
		writeError(w, err)
		return nil, false
	}
	m, err := s.model(*model)
	if err != nil {
		writeError(w, err)
		return nil, false
	}
	return m, true
}

// tokenize takes llama-server's body (content, with add_special off
// unless asked) and vLLM's (prompt, with add_special_tokens on unless
// turned off; or messages, rendered by the chat template with the
// generation prompt), and answers with both servers' fields: tokens, and
// vLLM's count and max_model_len.
func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model            string          `json:"model"`
		Content          *string         `json:"content"`
		AddSpecial       bool            `json:"add_special"`
		Prompt           *string         `json:"prompt"`
		AddSpecialTokens *bool           `json:"add_special_tokens"`
		Messages         json.RawMessage `json:"messages"`
	}
	m, ok := s.decodeFor(w, r, &req, &req.Model)
	if !ok {
		return
	}
	var toks []int32
	switch n := btoi(req.Content != nil) + btoi(req.Prompt != nil) + btoi(set(req.Messages)); {
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
		if _, toks, err = renderChat(m.Tok, msgs, nil, nil); err != nil {
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
	m, ok := s.decodeFor(w, r, &req, &req.Model)
	if !ok {
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
