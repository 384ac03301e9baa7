package server_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/engine"
	"github.com/zrtdev/zrt/runtime/internal/reference"
	"github.com/zrtdev/zrt/runtime/server"
	"github.com/zrtdev/zrt/runtime/server/ledger"
)

// start serves stories260K (from ../shared) with two tenants on a
// loopback port and returns its base URL and a function that reloads the
// tenants from a config text, as SIGHUP does.
func start(t *testing.T) (string, func(config string)) {
	t.Helper()
	model := filepath.Join(reference.SharedDir(), "models", "stories260K.gguf")
	if _, err := os.Stat(model); err != nil {
		t.Skipf("%s not present", model)
	}
	dir := t.TempDir()
	cfgPath, out := filepath.Join(dir, "m.toml"), filepath.Join(dir, "b")
	os.WriteFile(cfgPath, []byte("context_length = 256\ndecode_slots = [1, 2, 4]\nprefill_rows = [16, 64]\n"), 0o644)
	if err := compiler.Compile(context.Background(), model, out, compiler.Options{ConfigPath: cfgPath}); err != nil {
		t.Fatal(err)
	}
	p, err := runtime.Open(out, runtime.Options{Tier: "cpu", Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	srvCfg := filepath.Join(dir, "server.toml")
	os.WriteFile(srvCfg, []byte(`
[[tenant]]
id = "alpha"
api_keys = ["sk-alpha"]
qos = "interactive"
[[tenant]]
id = "beta"
api_key_hashes = ["sha256:`+fmt.Sprintf("%x", sha256.Sum256([]byte("sk-beta")))+`"]
max_context_tokens = 64
requests_per_minute = 2
`), 0o644)
	cfg, err := server.LoadConfig(srvCfg)
	if err != nil {
		t.Fatal(err)
	}
	policy := server.NewPolicy(cfg)
	ec := policy.EngineConfig(cfg)
	ec.Slots, ec.ChunkCap = 4, 64
	e, err := engine.New(p, p.Tok, ec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go e.Run(ctx)
	led, err := ledger.Open(filepath.Join(dir, "usage.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	srv := server.New(cfg, policy, []*server.Model{{Name: "stories260K", Engine: e, Tok: p.Tok, ContextLength: 256}}, led, nil)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	reload := func(text string) {
		path := filepath.Join(t.TempDir(), "reload.toml")
		os.WriteFile(path, []byte(text), 0o644)
		next, err := server.LoadConfig(path)
		if err != nil {
			t.Fatal(err)
		}
		srv.Reload(next)
	}
	return ts.URL, reload
}

func client(url, key string) openai.Client {
	return openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
}

// TestOpenAIClient drives the server with the official Go client.
func TestOpenAIClient(t *testing.T) {
	url, reload := start(t)
	c := client(url, "sk-alpha")
	ctx := context.Background()
	params := openai.CompletionNewParams{Model: "stories260K", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens: openai.Int(24), Temperature: openai.Float(0)}

	// Completions, then the same streamed: identical text.
	comp, err := c.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	text := comp.Choices[0].Text
	if !strings.HasPrefix(text, ", there was a little girl named Lily") || comp.Choices[0].FinishReason != "length" {
		t.Errorf("completion %q (%s)", text, comp.Choices[0].FinishReason)
	}
	if comp.Usage.PromptTokens != 5 || comp.Usage.CompletionTokens != 24 || comp.Usage.TotalTokens != 29 {
		t.Errorf("usage %+v", comp.Usage)
	}
	s := c.Completions.NewStreaming(ctx, params)
	var streamed strings.Builder
	var finish string
	for s.Next() {
		for _, ch := range s.Current().Choices {
			streamed.WriteString(ch.Text)
			if ch.FinishReason != "" {
				finish = string(ch.FinishReason)
			}
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if streamed.String() != text || finish != "length" {
		t.Errorf("streamed %q (%s), want %q (length)", streamed.String(), finish, text)
	}

	// A stop string ends the text before it, with finish_reason stop.
	params.Stop = openai.CompletionNewParamsStopUnion{OfString: openai.String("Lily")}
	stopped, err := c.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if got := stopped.Choices[0].Text; got != text[:strings.Index(text, "Lily")] || stopped.Choices[0].FinishReason != "stop" {
		t.Errorf("with stop: %q (%s)", got, stopped.Choices[0].FinishReason)
	}

	// Prompt as token ids.
	params.Stop = openai.CompletionNewParamsStopUnion{}
	params.Prompt = openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: []int64{1, 403, 407, 261, 378}}
	ids, err := c.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if ids.Choices[0].Text != text {
		t.Errorf("token prompt: %q, want %q", ids.Choices[0].Text, text)
	}

	// Chat, streamed and not, with usage in the stream.
	chatParams := openai.ChatCompletionNewParams{Model: "stories260K", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")},
		MaxTokens: openai.Int(16), Temperature: openai.Float(0), StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}}
	ch, err := c.Chat.Completions.New(ctx, chatParams)
	if err != nil {
		t.Fatal(err)
	}
	cs := c.Chat.Completions.NewStreaming(ctx, chatParams)
	var chatStreamed strings.Builder
	var usage int64
	for cs.Next() {
		chunk := cs.Current()
		for _, choice := range chunk.Choices {
			chatStreamed.WriteString(choice.Delta.Content)
		}
		usage += chunk.Usage.CompletionTokens
	}
	if err := cs.Err(); err != nil {
		t.Fatal(err)
	}
	if got := ch.Choices[0].Message.Content; got == "" || got != chatStreamed.String() || usage != 16 {
		t.Errorf("chat %q, streamed %q, streamed usage %d", got, chatStreamed.String(), usage)
	}

	// Errors, in OpenAI's shape with the right status.
	status := func(err error) int {
		var apiErr *openai.Error
		if errors.As(err, &apiErr) {
			return apiErr.StatusCode
		}
		return 0
	}
	param := func(err error) string {
		var apiErr *openai.Error
		if errors.As(err, &apiErr) {
			return apiErr.Param
		}
		return ""
	}
	wrong := client(url, "sk-wrong")
	if _, err := wrong.Completions.New(ctx, params); status(err) != http.StatusUnauthorized {
		t.Errorf("bad key: %v", err)
	}
	bad := params
	bad.Model = "nope"
	if _, err := c.Completions.New(ctx, bad); status(err) != http.StatusNotFound {
		t.Errorf("unknown model: %v", err)
	}
	bad = params
	bad.MaxTokens = openai.Int(1000)
	if _, err := c.Completions.New(ctx, bad); status(err) != http.StatusBadRequest || param(err) != "max_tokens" {
		t.Errorf("max_tokens beyond the context: %v", err)
	}
	bad = params
	bad.FrequencyPenalty = openai.Float(0.5)
	if _, err := c.Completions.New(ctx, bad); status(err) != http.StatusBadRequest || param(err) != "frequency_penalty" {
		t.Errorf("unsupported field: %v", err)
	}
	for body, want := range map[string]string{
		`{"prompt": "x", "max_tokens": "many"}`:                "max_tokens",
		`{"prompt": `:                                          "malformed JSON",
		`{"prompt": "x", "n": 2}`:                              "n = 2",
		`{"prompt": "x", "unknown_field": 1, "max_tokens": 1}`: "",
	} {
		req, _ := http.NewRequest("POST", url+"/v1/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk-alpha")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want == "" {
			if resp.StatusCode != 200 {
				t.Errorf("%s: a field zrt does not know was not ignored: %d %s", body, resp.StatusCode, b)
			}
			continue
		}
		if resp.StatusCode != 400 || !strings.Contains(string(b), want) || !strings.Contains(string(b), `"error"`) {
			t.Errorf("%s: %d %s", body, resp.StatusCode, b)
		}
	}

	// 24 tokens from each of the plain, streamed and token-prompt
	// completions, the stopped one's count, 16 from each chat, and 1 from
	// the request with an unknown field.
	generated := 3*24 + stopped.Usage.CompletionTokens + 2*16 + 1 // alpha's

	// Usage: the ledger agrees with the requests; a tenant reads only its own.
	getUsage := func(key, tenant string) (int, string) {
		req, _ := http.NewRequest("GET", url+"/v1/tenants/"+tenant+"/usage", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := getUsage("sk-alpha", "alpha"); code != 200 || !strings.Contains(body, fmt.Sprintf(`"completion_tokens":%d`, generated)) {
		t.Errorf("alpha's usage: %d %s (want %d completion tokens)", code, body, generated)
	}
	if code, _ := getUsage("sk-beta", "alpha"); code != http.StatusForbidden {
		t.Errorf("beta read alpha's usage: %d", code)
	}

	// The page: the playground, self-contained.
	resp, err := http.Get(url + "/")
	if err != nil {
		t.Fatal(err)
	}
	pageHTML, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(pageHTML), "/v1/chat/completions") || strings.Contains(string(pageHTML), "http://") {
		t.Errorf("page: %d, %d bytes (no external assets allowed)", resp.StatusCode, len(pageHTML))
	}

	// Health, models, tokenize.
	models, err := c.Models.List(ctx)
	if err != nil || len(models.Data) != 1 || models.Data[0].ID != "stories260K" {
		t.Errorf("models: %+v %v", models, err)
	}
	resp, err = http.Get(url + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("health: %v %v", resp, err)
	}

	// Tenant beta, by its hashed key: its context limit, then its two
	// requests a minute, the third refused with 429 and Retry-After.
	beta := client(url, "sk-beta")
	short := openai.CompletionNewParams{Model: "stories260K", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once")}, MaxTokens: openai.Int(2)}
	long := short
	long.MaxTokens = openai.Int(100)
	if _, err := beta.Completions.New(ctx, long); status(err) != http.StatusBadRequest {
		t.Errorf("beyond beta's context: %v", err)
	}
	for i := range 2 {
		if _, err := beta.Completions.New(ctx, short); err != nil {
			t.Fatalf("beta request %d: %v", i, err)
		}
	}
	req, _ := http.NewRequest("POST", url+"/v1/completions", strings.NewReader(`{"prompt": "Once", "max_tokens": 2}`))
	req.Header.Set("Authorization", "Bearer sk-beta")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("beta over its rate: %v %v", resp, err)
	}

	// Metrics: the vLLM names with their model_name label, and per-tenant
	// tokens adding up to what the requests above reported.
	resp, err = http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`vllm:num_requests_running{model_name="stories260K"} 0`,
		`vllm:num_requests_waiting{model_name="stories260K"} 0`,
		`vllm:kv_cache_usage_perc{model_name="stories260K"} 0`,
		fmt.Sprintf(`vllm:generation_tokens_total{model_name="stories260K"} %d`, generated+2*2),
		`vllm:time_to_first_token_seconds_count{model_name="stories260K"} 9`,
		`zrt_tenant_rejected_total{status="429",tenant="beta"} 1`,
		fmt.Sprintf(`zrt_tenant_tokens_total{kind="generated",tenant="alpha"} %d`, generated),
		`zrt_tenant_rejected_total{status="400",tenant="alpha"}`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %q:\n%s", want, grepLines(string(b), "generation_tokens|tenant_|first_token_seconds_count"))
		}
	}

	// SIGHUP's reload: alpha's new key works at once and its old one does
	// not; beta, no longer listed, is refused.
	reload("[[tenant]]\nid = \"alpha\"\napi_keys = [\"sk-alpha-2\"]\nqos = \"interactive\"\n")
	renewed := client(url, "sk-alpha-2")
	if _, err := renewed.Completions.New(ctx, short); err != nil {
		t.Errorf("new key after reload: %v", err)
	}
	if _, err := c.Completions.New(ctx, short); status(err) != http.StatusUnauthorized {
		t.Errorf("old key after reload: %v", err)
	}
	if _, err := beta.Completions.New(ctx, short); status(err) != http.StatusUnauthorized {
		t.Errorf("removed tenant after reload: %v", err)
	}
}

// grepLines returns the lines of text containing any of the |-separated words.
func grepLines(text, words string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		for _, w := range strings.Split(words, "|") {
			if strings.Contains(l, w) && !strings.HasPrefix(l, "#") {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
