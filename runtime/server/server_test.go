package server_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/internal/testmodel"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/engine"
	"github.com/zrtdev/zrt/runtime/server"
	"github.com/zrtdev/zrt/runtime/server/ledger"
)

// start serves stories260K (from ../shared) with two tenants on a
// loopback port and returns its base URL and a function that reloads the
// tenants from a config text, as SIGHUP does.
func start(t *testing.T) (string, func(config string)) {
	t.Helper()
	ts := serveStories(t, serveOptions{config: `
[[tenant]]
id = "alpha"
api_keys = ["sk-alpha"]
qos = "interactive"
[[tenant]]
id = "beta"
api_key_hashes = ["sha256:` + fmt.Sprintf("%x", sha256.Sum256([]byte("sk-beta"))) + `"]
max_context_tokens = 64
requests_per_minute = 2
`, slots: 4, chunkCap: 64})
	reload := func(text string) {
		next, err := loadConfig(t, text)
		if err != nil {
			t.Fatal(err)
		}
		ts.srv.Reload(next)
	}
	return ts.URL, reload
}

// testServer is a server over stories260K on T-CPU, on a loopback port.
type testServer struct {
	URL        string
	srv        *server.Server
	engine     *engine.Engine
	ledger     *ledger.Ledger
	ledgerPath string
}

// serveOptions shape a test server.
type serveOptions struct {
	// file is the model under ../shared/models ("": stories260K.gguf),
	// served under its name without the extension.
	file            string
	model           string // the zrtc model config ("": defaultModel)
	config          string // the server config
	slots, chunkCap int    // the engine's
	// wrap stands between the engine and the program (nil: none), for a
	// test that needs to hold the step loop.
	wrap func(*runtime.Program) engine.Model
}

// defaultModel is the model config of most tests: a small context, and
// decode variants for up to four requests at once.
const defaultModel = "context_length = 256\ndecode_slots = [1, 2, 4]\nprefill_rows = [16, 64]\n"

// compileStories compiles stories260K (from ../shared, skipping without
// it) with the model config text and returns the bundle's path.
func compileStories(t testing.TB, modelConfig string) string {
	t.Helper()
	return compileShared(t, "stories260K.gguf", modelConfig)
}

// compileShared compiles the model file of ../shared/models (skipping
// without it) with the model config text and returns the bundle's path.
func compileShared(t testing.TB, file, modelConfig string) string {
	t.Helper()
	return testmodel.CompileShared(t, file, modelConfig, compiler.Options{})
}

// serveStories serves stories260K on T-CPU with two threads, with a usage
// ledger, until the test ends.
func serveStories(t testing.TB, o serveOptions) *testServer {
	t.Helper()
	if o.model == "" {
		o.model = defaultModel
		if testSpeculation.On() {
			// Slots beyond the engine's for the draft rows.
			o.model = strings.Replace(o.model, "decode_slots = [1, 2, 4]", "decode_slots = [1, 2, 4, 8]", 1)
		}
	}
	if o.file == "" {
		o.file = "stories260K.gguf"
	}
	p, err := runtime.Open(compileShared(t, o.file, o.model), runtime.Options{Tier: "cpu", Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	cfg, err := loadConfig(t, o.config)
	if err != nil {
		t.Fatal(err)
	}
	policy := server.NewPolicy(cfg)
	ec := policy.EngineConfig(cfg)
	ec.Slots, ec.ChunkCap, ec.ContextLength = o.slots, o.chunkCap, p.Hparams.ContextLength
	if testSpeculation.On() && !ec.Speculative.On() && !p.SlotState() {
		ec.Speculative = testSpeculation
	}
	var m engine.Model = p
	if o.wrap != nil {
		m = o.wrap(p)
	}
	e, err := engine.New(m, p.Tok, ec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go e.Run(ctx)
	ts := &testServer{engine: e, ledgerPath: filepath.Join(t.TempDir(), "usage.log")}
	if ts.ledger, err = ledger.Open(ts.ledgerPath); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ts.ledger.Close() })
	name := strings.TrimSuffix(filepath.Base(o.file), ".gguf")
	ts.srv = server.New(cfg, policy, []*server.Model{{Name: name, Engines: []*engine.Engine{e}, Tok: p.Tok, ContextLength: p.Hparams.ContextLength}}, ts.ledger, nil)
	hs := httptest.NewServer(ts.srv.Handler())
	t.Cleanup(hs.Close)
	ts.URL = hs.URL
	return ts
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
	bad.FrequencyPenalty = openai.Float(2.5)
	if _, err := c.Completions.New(ctx, bad); status(err) != http.StatusBadRequest || param(err) != "frequency_penalty" {
		t.Errorf("frequency_penalty out of range: %v", err)
	}
	for body, want := range map[string]string{
		`{"prompt": "x", "max_tokens": "many"}`:                "max_tokens",
		`{"prompt": `:                                          "malformed JSON",
		`{"prompt": "x", "n": 17}`:                             "n = 17",
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
	if code, body := getUsage(t, url, "sk-alpha", "alpha"); code != 200 || !strings.Contains(string(body), fmt.Sprintf(`"completion_tokens":%d`, generated)) {
		t.Errorf("alpha's usage: %d %s (want %d completion tokens)", code, body, generated)
	}
	if code, _ := getUsage(t, url, "sk-beta", "alpha"); code != http.StatusForbidden {
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
		`vllm:num_preemptions_total{model_name="stories260K"} `,
		`zrt_kv_released_total{model_name="stories260K"} `,
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

// TestLogprobs: logprobs for completions and chat, streamed and not,
// through the official client: one entry per generated token, whose
// texts make up the text, with offsets and alternatives that agree; the
// streamed chunks carry the same entries between them; and asking for
// them does not change the tokens.
func TestLogprobs(t *testing.T) {
	url, _ := start(t)
	c := client(url, "sk-alpha")
	ctx := context.Background()
	const n = 16
	params := openai.CompletionNewParams{Model: "stories260K", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens: openai.Int(n), Temperature: openai.Float(0)}
	plain, err := c.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if string(plain.Choices[0].JSON.Logprobs.Raw()) != "null" {
		t.Errorf("logprobs nobody asked for: %s", plain.Choices[0].JSON.Logprobs.Raw())
	}
	params.Logprobs = openai.Int(3)
	comp, err := c.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	choice, lp := comp.Choices[0], comp.Choices[0].Logprobs
	if choice.Text != plain.Choices[0].Text {
		t.Errorf("logprobs changed the text: %q, without them %q", choice.Text, plain.Choices[0].Text)
	}
	if len(lp.Tokens) != n || len(lp.TokenLogprobs) != n || len(lp.TopLogprobs) != n || len(lp.TextOffset) != n {
		t.Fatalf("want %d entries in each list: %+v", n, lp)
	}
	joined := ""
	for i, tok := range lp.Tokens {
		if lp.TextOffset[i] != int64(utf8.RuneCountInString(joined)) {
			t.Errorf("token %d %q: text_offset %d, want %d", i, tok, lp.TextOffset[i], utf8.RuneCountInString(joined))
		}
		joined += tok
		top, best := lp.TopLogprobs[i], math.Inf(-1)
		for _, v := range top {
			best = max(best, v)
		}
		// Greedy: the token taken is the likeliest, and among the top.
		if len(top) == 0 || len(top) > 3 || top[tok] != lp.TokenLogprobs[i] || lp.TokenLogprobs[i] != best || best > 0 {
			t.Errorf("token %d %q (logprob %v): top %v", i, tok, lp.TokenLogprobs[i], top)
		}
	}
	if joined != choice.Text {
		t.Errorf("tokens make %q, the text is %q", joined, choice.Text)
	}

	// Streamed, every chunk that shows text carries logprobs, and between
	// them the chunks carry the same entries.
	s := c.Completions.NewStreaming(ctx, params)
	var streamed openai.CompletionChoiceLogprobs
	for s.Next() {
		for _, ch := range s.Current().Choices {
			if ch.Text != "" && len(ch.Logprobs.Tokens) == 0 {
				t.Errorf("chunk %q without its tokens' logprobs", ch.Text)
			}
			streamed.Tokens = append(streamed.Tokens, ch.Logprobs.Tokens...)
			streamed.TokenLogprobs = append(streamed.TokenLogprobs, ch.Logprobs.TokenLogprobs...)
			streamed.TextOffset = append(streamed.TextOffset, ch.Logprobs.TextOffset...)
			streamed.TopLogprobs = append(streamed.TopLogprobs, ch.Logprobs.TopLogprobs...)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(streamed.Tokens, lp.Tokens) || !slices.Equal(streamed.TextOffset, lp.TextOffset) || len(streamed.TopLogprobs) != n ||
		!slices.EqualFunc(streamed.TokenLogprobs, lp.TokenLogprobs, func(a, b float64) bool { return math.Abs(a-b) < 1e-4 }) {
		t.Errorf("streamed logprobs %+v, want %+v", streamed, lp)
	}

	// logprobs 0: the tokens' own, and no alternatives.
	params.Logprobs = openai.Int(0)
	zero, err := c.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if z := zero.Choices[0].Logprobs; !slices.Equal(z.Tokens, lp.Tokens) || len(z.TopLogprobs) != n || len(z.TopLogprobs[0]) != 0 {
		t.Errorf("logprobs 0: %+v", z)
	}

	// Chat: content entries with bytes and top_logprobs.
	chatParams := openai.ChatCompletionNewParams{Model: "stories260K", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")},
		MaxTokens: openai.Int(12), Temperature: openai.Float(0), Logprobs: openai.Bool(true), TopLogprobs: openai.Int(2)}
	cc, err := c.Chat.Completions.New(ctx, chatParams)
	if err != nil {
		t.Fatal(err)
	}
	content := cc.Choices[0].Logprobs.Content
	if len(content) == 0 || int64(len(content)) != cc.Usage.CompletionTokens {
		t.Fatalf("%d content entries for %d tokens", len(content), cc.Usage.CompletionTokens)
	}
	joined = ""
	for i, e := range content {
		joined += e.Token
		b := make([]byte, len(e.Bytes))
		for j, x := range e.Bytes {
			b[j] = byte(x)
		}
		if string(b) != e.Token || len(e.TopLogprobs) != 2 || e.TopLogprobs[0].Logprob < e.TopLogprobs[1].Logprob ||
			e.Logprob != e.TopLogprobs[0].Logprob || e.Logprob > 0 {
			t.Errorf("entry %d: %+v", i, e)
		}
	}
	if joined != cc.Choices[0].Message.Content {
		t.Errorf("chat tokens make %q, the content is %q", joined, cc.Choices[0].Message.Content)
	}
	cs := c.Chat.Completions.NewStreaming(ctx, chatParams)
	var chatStreamed []openai.ChatCompletionTokenLogprob
	for cs.Next() {
		for _, ch := range cs.Current().Choices {
			chatStreamed = append(chatStreamed, ch.Logprobs.Content...)
		}
	}
	if err := cs.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(chatStreamed, content, func(a, b openai.ChatCompletionTokenLogprob) bool {
		return a.Token == b.Token && math.Abs(a.Logprob-b.Logprob) < 1e-4 && len(a.TopLogprobs) == len(b.TopLogprobs)
	}) {
		t.Errorf("streamed chat logprobs differ: %d entries, want %d", len(chatStreamed), len(content))
	}
}

// TestBiasAndPenalties: a logit bias and the penalties reach the tokens,
// through the official client.
func TestBiasAndPenalties(t *testing.T) {
	url, _ := start(t)
	c := client(url, "sk-alpha")
	ctx := context.Background()

	// A greedy request whose logit bias forces a token gets that token at
	// every step. Without logprobs nothing else needs the logits, so this
	// is what proves the bias turns off the model's own argmax.
	forced := openai.CompletionNewParams{Model: "stories260K", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens: openai.Int(6), Temperature: openai.Float(0), LogitBias: map[string]int64{"300": 100}}
	comp, err := c.Completions.New(ctx, forced)
	if err != nil {
		t.Fatal(err)
	}
	forced.Logprobs = openai.Int(0)
	seen, err := c.Completions.New(ctx, forced)
	if err != nil {
		t.Fatal(err)
	}
	toks := seen.Choices[0].Logprobs.Tokens
	if len(toks) != 6 || toks[0] == "" || strings.HasPrefix(toks[0], ",") || comp.Choices[0].Text != strings.Repeat(toks[0], 6) {
		t.Fatalf("forced token 300: %q, with logprobs %q", comp.Choices[0].Text, toks)
	}
	chatForced := openai.ChatCompletionNewParams{Model: "stories260K", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")},
		MaxTokens: openai.Int(5), Temperature: openai.Float(0), LogitBias: map[string]int64{"300": 100}}
	if cc, err := c.Chat.Completions.New(ctx, chatForced); err != nil || cc.Choices[0].Message.Content != strings.Repeat(toks[0], 5) {
		t.Errorf("chat with token 300 forced: %v %v", cc, err)
	}

	// The penalties, seen in the first token's logprobs with and without
	// them: every token in both top lists moves by one constant (the
	// distribution's new normalization) except that a token the window
	// holds k times moves k·frequency + presence further down. The prompt
	// counts (llama.cpp's choice), so the first token shows it.
	prompt := openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time, there was a little girl named Lily. Lily")}
	first := openai.CompletionNewParams{Model: "stories260K", Prompt: prompt, MaxTokens: openai.Int(1), Temperature: openai.Float(0), Logprobs: openai.Int(20)}
	before, err := c.Completions.New(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	const presence, frequency = 1, 0.5
	first.PresencePenalty, first.FrequencyPenalty = openai.Float(presence), openai.Float(frequency)
	after, err := c.Completions.New(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	shift := map[string]float64{}
	norm := math.Inf(-1)
	for tok, b := range before.Choices[0].Logprobs.TopLogprobs[0] {
		if a, ok := after.Choices[0].Logprobs.TopLogprobs[0][tok]; ok {
			shift[tok] = a - b
			norm = max(norm, a-b)
		}
	}
	penalized := 0
	for tok, d := range shift {
		drop := norm - d
		if drop < 1e-4 {
			continue
		}
		k := (drop - presence) / frequency
		if math.Abs(k-math.Round(k)) > 1e-3 || math.Round(k) < 1 {
			t.Errorf("token %q dropped by %v: not k·%v + %v", tok, drop, frequency, presence)
		}
		penalized++
	}
	if penalized == 0 {
		t.Errorf("no token of the prompt among the shared alternatives %v", shift)
	}

	// Chat and streaming take them too.
	chatForced.LogitBias, chatForced.PresencePenalty, chatForced.FrequencyPenalty = nil, openai.Float(-1.5), openai.Float(1.5)
	if cc, err := c.Chat.Completions.New(ctx, chatForced); err != nil || cc.Choices[0].Message.Content == "" {
		t.Errorf("chat with penalties: %v %v", cc, err)
	}
	forced.PresencePenalty = openai.Float(2)
	s := c.Completions.NewStreaming(ctx, forced)
	var text strings.Builder
	for s.Next() {
		for _, ch := range s.Current().Choices {
			text.WriteString(ch.Text)
		}
	}
	if err := s.Err(); err != nil || text.String() != strings.Repeat(toks[0], 6) {
		t.Errorf("streamed with bias and penalty: %q %v", text.String(), err)
	}
}

// TestSamplingFieldErrors: out-of-range penalties, logit biases and
// logprobs are a 400 that names the field.
func TestSamplingFieldErrors(t *testing.T) {
	url, _ := start(t)
	const msgs = `"messages": [{"role": "user", "content": "x"}]`
	for _, c := range []struct{ path, body, param string }{
		{"completions", `{"prompt": "x", "presence_penalty": 2.5}`, "presence_penalty"},
		{"completions", `{"prompt": "x", "frequency_penalty": -2.01}`, "frequency_penalty"},
		{"completions", `{"prompt": "x", "logit_bias": {"100000": 1}}`, "logit_bias"},
		{"completions", `{"prompt": "x", "logit_bias": {"-1": 1}}`, "logit_bias"},
		{"completions", `{"prompt": "x", "logit_bias": {"07": 1}}`, "logit_bias"},
		{"completions", `{"prompt": "x", "logit_bias": {"cat": 1}}`, "logit_bias"},
		{"completions", `{"prompt": "x", "logit_bias": {"5": 100.5}}`, "logit_bias"},
		{"completions", `{"prompt": "x", "logit_bias": {"5": "up"}}`, "logit_bias"},
		{"completions", `{"prompt": "x", "logprobs": 21}`, "logprobs"},
		{"completions", `{"prompt": "x", "logprobs": -1}`, "logprobs"},
		{"completions", `{"prompt": "x", "logprobs": true}`, "logprobs"},
		{"completions", `{"prompt": "x", "logprobs": 2, "echo": true}`, "echo"},
		{"chat/completions", `{` + msgs + `, "presence_penalty": -3}`, "presence_penalty"},
		{"chat/completions", `{` + msgs + `, "logit_bias": {"7": -101}}`, "logit_bias"},
		{"chat/completions", `{` + msgs + `, "logprobs": true, "top_logprobs": 21}`, "top_logprobs"},
		{"chat/completions", `{` + msgs + `, "top_logprobs": 2}`, "top_logprobs"},
		{"chat/completions", `{` + msgs + `, "logprobs": 3}`, "logprobs"},
	} {
		req, _ := http.NewRequest("POST", url+"/v1/"+c.path, strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer sk-alpha")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Error struct {
				Message string `json:"message"`
				Param   string `json:"param"`
			} `json:"error"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusBadRequest || body.Error.Param != c.param || !strings.Contains(body.Error.Message, c.param) {
			t.Errorf("%s %s: %d %+v %v", c.path, c.body, resp.StatusCode, body.Error, err)
		}
	}
}
