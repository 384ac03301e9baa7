package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
)

// apiErr is OpenAI's error object as a response carries it.
type apiErr struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
}

// post sends body to path as tenant alpha and returns the status, the raw
// body and the error object (zero when the body has none).
func post(t *testing.T, url, method, path, body string) (int, string, apiErr, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer sk-alpha")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e struct {
		Error apiErr `json:"error"`
	}
	json.Unmarshal(b, &e)
	return resp.StatusCode, string(b), e.Error, resp.Header
}

// serveJSON sends body as JSON to path through h, bounded against a request
// that never ends (the tiny model's context bounds every generation long
// before), and returns the answer.
func serveJSON(h http.Handler, path, body string) *httptest.ResponseRecorder {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, "POST", path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// wantAPIError fails the test unless rec's body is an OpenAI error object
// with a message.
func wantAPIError(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	var e struct {
		Error apiErr `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Message == "" {
		t.Fatalf("status %d with body %q: not an OpenAI error object", rec.Code, rec.Body.String())
	}
}

// TestTypeErrorsNameTheField: a field of the wrong JSON type is named as
// the request names it, whichever embedded group of fields holds it.
func TestTypeErrorsNameTheField(t *testing.T) {
	url, _ := start(t)
	for _, c := range []struct{ path, body, param string }{
		{"/v1/completions", `{"prompt":"x","temperature":"hot"}`, "temperature"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"seed":"s"}`, "seed"},
		{"/v1/completions", `{"prompt":"x","grammar":7}`, "grammar"},
		{"/v1/completions", `{"prompt":"x","n":"two"}`, "n"},
		{"/v1/responses", `{"input":"x","top_k":"k"}`, "top_k"},
	} {
		code, raw, e, _ := post(t, url, "POST", c.path, c.body)
		if code != http.StatusBadRequest || e.Param == nil || *e.Param != c.param || !strings.HasPrefix(e.Message, c.param+" must be") {
			t.Errorf("%s %s: %d %s, want a 400 naming %s", c.path, c.body, code, raw, c.param)
		}
	}
}

// TestTokenizeVLLM: /tokenize takes vLLM's body (prompt, add_special_tokens
// defaulting to true, or messages) as well as llama-server's (content,
// add_special defaulting to false), answers with vLLM's count and
// max_model_len beside the tokens, and refuses a body with no text rather
// than answering with no tokens.
func TestTokenizeVLLM(t *testing.T) {
	url, _ := start(t)
	tokens := func(body string) ([]int32, map[string]any) {
		t.Helper()
		code, raw, e, _ := post(t, url, "POST", "/tokenize", body)
		if code != 200 {
			t.Fatalf("%s: %d %s (%+v)", body, code, raw, e)
		}
		var out struct {
			Tokens []int32 `json:"tokens"`
		}
		var all map[string]any
		json.Unmarshal([]byte(raw), &out)
		json.Unmarshal([]byte(raw), &all)
		if out.Tokens == nil {
			t.Fatalf("%s: no tokens list in %s", body, raw)
		}
		return out.Tokens, all
	}
	// stories260K's "Once upon a time" is [1 403 407 261 378] with BOS.
	want := []int32{1, 403, 407, 261, 378}
	got, all := tokens(`{"prompt": "Once upon a time"}`)
	if !slices.Equal(got, want) || all["count"] != float64(5) || all["max_model_len"] != float64(256) {
		t.Errorf("vLLM body: %v %v, want %v with count 5 and max_model_len 256", got, all, want)
	}
	if got, _ := tokens(`{"prompt": "Once upon a time", "add_special_tokens": false}`); !slices.Equal(got, want[1:]) {
		t.Errorf("vLLM body without special tokens: %v, want %v", got, want[1:])
	}
	if got, _ := tokens(`{"content": "Once upon a time"}`); !slices.Equal(got, want[1:]) {
		t.Errorf("llama-server body: %v, want %v", got, want[1:])
	}
	if got, _ := tokens(`{"content": "Once upon a time", "add_special": true}`); !slices.Equal(got, want) {
		t.Errorf("llama-server body with add_special: %v, want %v", got, want)
	}
	if got, _ := tokens(`{"content": ""}`); len(got) != 0 {
		t.Errorf("empty text: %v", got)
	}
	if got, _ := tokens(`{"messages": [{"role": "user", "content": "Hello"}]}`); len(got) < 2 {
		t.Errorf("vLLM chat body: %v", got)
	}
	// Content parts are joined with "\n", as llama.cpp joins them, by the
	// one messages parser (chat.ParseMessages).
	parts, _ := tokens(`{"messages": [{"role": "user", "content": [{"type": "text", "text": "Once upon"}, {"type": "text", "text": "a time"}]}]}`)
	if joined, _ := tokens(`{"messages": [{"role": "user", "content": "Once upon\na time"}]}`); !slices.Equal(parts, joined) {
		t.Errorf("text parts render as %v, their text joined with a newline as %v", parts, joined)
	}
	for _, body := range []string{`{}`, `{"text": "Once"}`, `{"prompt": "a", "content": "b"}`, `{"messages": [{"role": "wizard", "content": "x"}]}`, `{"messages": []}`} {
		if code, raw, e, _ := post(t, url, "POST", "/tokenize", body); code != 400 || e.Message == "" {
			t.Errorf("%s: %d %s, want a 400 error", body, code, raw)
		}
	}
	// detokenize answers in both servers' fields.
	code, raw, _, _ := post(t, url, "POST", "/detokenize", `{"tokens": [403, 407, 261, 378]}`)
	var d struct{ Content, Prompt string }
	json.Unmarshal([]byte(raw), &d)
	if code != 200 || d.Content != "Once upon a time" || d.Prompt != d.Content {
		t.Errorf("detokenize: %d %s", code, raw)
	}
}

// plainWords fails unless msg is free of Go's and the engine's wording.
func plainWords(t *testing.T, what, msg string) {
	t.Helper()
	for _, bad := range []string{"Go ", "genParams", "unmarshal", "json:", "engine:", "1048576", "struct"} {
		if strings.Contains(msg, bad) {
			t.Errorf("%s: the message %q says %q", what, msg, bad)
		}
	}
}

// TestMaxTokensErrors: every bad max_tokens (a string, a fraction, 0, a
// negative or too large number) is a 400 naming the field and its valid
// range [1, context]; a prompt plus max_tokens beyond the context is a 400
// naming both numbers and the context. None speaks Go or engine.
func TestMaxTokensErrors(t *testing.T) {
	url, _ := start(t)
	const msgs = `"messages": [{"role": "user", "content": "x"}]`
	for _, c := range []struct{ path, body, param string }{
		{"completions", `{"prompt": "x", "max_tokens": 100000000}`, "max_tokens"},
		{"completions", `{"prompt": "x", "max_tokens": 0}`, "max_tokens"},
		{"completions", `{"prompt": "x", "max_tokens": 5000}`, "max_tokens"},
		{"completions", `{"prompt": "x", "max_tokens": -3}`, "max_tokens"},
		{"completions", `{"prompt": "x", "max_tokens": "4"}`, "max_tokens"},
		{"completions", `{"prompt": "x", "max_tokens": 4.5}`, "max_tokens"},
		{"completions", `{"prompt": "x", "max_tokens": 1e30}`, "max_tokens"},
		{"completions", `{"prompt": "x", "max_completion_tokens": 0}`, "max_completion_tokens"},
		{"chat/completions", `{` + msgs + `, "max_tokens": "many"}`, "max_tokens"},
		{"chat/completions", `{` + msgs + `, "max_completion_tokens": 257}`, "max_completion_tokens"},
		{"chat/completions", `{` + msgs + `, "max_completion_tokens": [1]}`, "max_completion_tokens"},
	} {
		code, raw, e, _ := post(t, url, "POST", "/v1/"+c.path, c.body)
		if code != 400 || e.Param == nil || *e.Param != c.param || !strings.Contains(e.Message, c.param) || !strings.Contains(e.Message, "[1, 256]") {
			t.Errorf("%s %s: %d %s, want a 400 naming %s and [1, 256]", c.path, c.body, code, raw, c.param)
		}
		if e.Type != "invalid_request_error" {
			t.Errorf("%s %s: type %q", c.path, c.body, e.Type)
		}
		plainWords(t, c.body, e.Message)
	}
	// "Once upon a time" is 5 tokens: 251 fit, 252 do not.
	code, raw, e, _ := post(t, url, "POST", "/v1/completions", `{"prompt": "Once upon a time", "max_tokens": 252}`)
	if code != 400 || e.Param == nil || *e.Param != "max_tokens" {
		t.Errorf("prompt + max_tokens past the context: %d %s", code, raw)
	}
	for _, n := range []string{"5", "252", "256", "251"} {
		if !strings.Contains(e.Message, n) {
			t.Errorf("prompt + max_tokens past the context: %q does not name %s", e.Message, n)
		}
	}
	plainWords(t, "prompt + max_tokens past the context", e.Message)
	if code, raw, _, _ := post(t, url, "POST", "/v1/completions", `{"prompt": "Once upon a time", "max_tokens": 251}`); code != 200 {
		t.Errorf("a prompt and max_tokens that fill the context exactly: %d %s", code, raw)
	}
}

// TestDefaultMaxTokens: without max_tokens a chat completion may run to
// the end of the context (OpenAI's default), a legacy completion to 16
// tokens (its API's).
func TestDefaultMaxTokens(t *testing.T) {
	url, _ := start(t)
	for _, c := range []struct{ path, body string }{
		{"chat/completions", `{"messages": [{"role": "user", "content": "x"}], "ignore_eos": true, "temperature": 0}`},
		{"completions", `{"prompt": "Once upon a time", "ignore_eos": true, "temperature": 0}`},
	} {
		code, raw, _, _ := post(t, url, "POST", "/v1/"+c.path, c.body)
		var resp struct {
			Usage struct {
				Prompt     int `json:"prompt_tokens"`
				Completion int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if code != 200 || json.Unmarshal([]byte(raw), &resp) != nil {
			t.Fatalf("%s: %d %s", c.path, code, raw)
		}
		want := 16
		if c.path == "chat/completions" {
			want = 256 - resp.Usage.Prompt
		}
		if resp.Usage.Completion != want {
			t.Errorf("%s without max_tokens: %d tokens (prompt %d), want %d", c.path, resp.Usage.Completion, resp.Usage.Prompt, want)
		}
	}
}

// TestErrorsAreJSON: an unknown path (404) and a wrong method (405) answer
// with OpenAI's error object like every other error, the 405 keeping its
// Allow header.
func TestErrorsAreJSON(t *testing.T) {
	url, _ := start(t)
	for _, c := range []struct {
		method, path string
		code         int
		says         string
	}{
		{"GET", "/v1/nope", 404, "/v1/nope"},
		{"POST", "/v2/chat/completions", 404, "/v2/chat/completions"},
		{"GET", "/v1/completions", 405, "POST"},
		{"DELETE", "/v1/models", 405, "GET"},
	} {
		code, raw, e, h := post(t, url, c.method, c.path, "")
		if code != c.code || !strings.HasPrefix(h.Get("Content-Type"), "application/json") || e.Type != "invalid_request_error" || !strings.Contains(e.Message, c.says) {
			t.Errorf("%s %s: %d %s %s, want %d as OpenAI's error JSON saying %q", c.method, c.path, code, h.Get("Content-Type"), raw, c.code, c.says)
		}
		if c.code == 405 && h.Get("Allow") == "" {
			t.Errorf("%s %s: 405 without Allow", c.method, c.path)
		}
	}
}

// TestMessageRoles: a chat message's role must be one OpenAI defines; the
// 400 names the bad role and the valid ones. developer is taken as system.
func TestMessageRoles(t *testing.T) {
	url, _ := start(t)
	code, raw, e, _ := post(t, url, "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}, {"role": "wizard", "content": "y"}], "max_tokens": 2}`)
	if code != 400 || e.Param == nil || *e.Param != "messages[1].role" {
		t.Errorf("role wizard: %d %s", code, raw)
	}
	for _, w := range []string{`"wizard"`, "system", "developer", "user", "assistant", "tool"} {
		if !strings.Contains(e.Message, w) {
			t.Errorf("role wizard: %q does not name %s", e.Message, w)
		}
	}
	c := client(url, "sk-alpha")
	dev, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "stories260K", MaxTokens: openai.Int(4), Temperature: openai.Float(0),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.DeveloperMessage("Be brief."), openai.UserMessage("Hello")}})
	if err != nil {
		t.Fatalf("a developer message: %v", err)
	}
	sys, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "stories260K", MaxTokens: openai.Int(4), Temperature: openai.Float(0),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("Hello")}})
	if err != nil {
		t.Fatal(err)
	}
	if dev.Choices[0].Message.Content != sys.Choices[0].Message.Content || dev.Usage.PromptTokens != sys.Usage.PromptTokens {
		t.Errorf("developer %q (%d prompt tokens) differs from system %q (%d)", dev.Choices[0].Message.Content, dev.Usage.PromptTokens,
			sys.Choices[0].Message.Content, sys.Usage.PromptTokens)
	}
}

// TestKVUsageIgnoresPrefixCache: vllm:kv_cache_usage_perc counts only the
// pages requests hold, as vLLM's does: a prefix-cache page nobody maps is
// free to evict, so an idle server with a warm cache reads 0 (the Gateway
// API's endpoint picker routes on it).
func TestKVUsageIgnoresPrefixCache(t *testing.T) {
	url, _ := start(t)
	// Over 16 tokens, so at least one full chunk stays in the cache.
	long := strings.Repeat("Once upon a time there was a little girl. ", 4)
	body, _ := json.Marshal(map[string]any{"prompt": long, "max_tokens": 2})
	if code, raw, _, _ := post(t, url, "POST", "/v1/completions", string(body)); code != 200 {
		t.Fatalf("%d %s", code, raw)
	}
	// The response can come before the step that finished it publishes
	// its stats: wait for that step.
	m := scrape(t, url)
	for i := 0; i < 100 && m.sum("zrt_kv_pages", "state", "prefix") == 0; i++ {
		time.Sleep(10 * time.Millisecond)
		m = scrape(t, url)
	}
	if prefix := m.sum("zrt_kv_pages", "state", "prefix"); prefix == 0 {
		t.Fatal("the prefix cache kept no page: the test proves nothing")
	}
	if u := m.sum("vllm:kv_cache_usage_perc"); u != 0 {
		t.Errorf("idle server with a warm prefix cache: kv_cache_usage_perc %v, want 0", u)
	}
}
