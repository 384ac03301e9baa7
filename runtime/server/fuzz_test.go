package server_test

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/runtime/server"
)

// FuzzRequest sends arbitrary bodies to both completion endpoints through
// the server's handler itself, so that a panic fails the run instead of
// being recovered by net/http: every answer is a status whose error body,
// for a 4xx or 5xx, is an OpenAI error object with a message.
func FuzzRequest(f *testing.F) {
	for _, s := range []string{
		`{"prompt":"Once upon a time","max_tokens":4}`,
		`{"prompt":[1,300,301],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`,
		`{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"Hi"}]}],"max_completion_tokens":2,"logprobs":true,"top_logprobs":2}`,
		`{"prompt":"x","logit_bias":{"5":100},"logprobs":3,"max_tokens":2,"echo":true}`,
		`{"prompt":"x","temperature":0.8,"top_p":0.9,"top_k":5,"seed":3,"presence_penalty":1,"frequency_penalty":-1,"stop":["a","b"]}`,
		`{"prompt":"x","temperature":-1}`, `{"prompt":"x","n":2}`, `{"prompt":{}}`, `{`, `null`, `[]`, ``,
		`{"prompt":"x","max_tokens":1e300}`, `{"prompt":[-1,99999999]}`, `{"model":"nope","prompt":"x"}`,
		`{"prompt":"x","n":3,"seed":1,"max_tokens":2,"stream":true}`,
		`{"prompt":"x","max_tokens":3,"response_format":{"type":"json_schema","json_schema":{"name":"a","strict":true,"schema":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}}}}`,
		`{"prompt":"x","max_tokens":3,"json_schema":{"type":"string","maxLength":2}}`,
		`{"prompt":"x","max_tokens":3,"grammar":"root ::= [a-z]+"}`, `{"prompt":"x","max_tokens":3,"regex":"(ab|c)*d"}`,
		`{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"response_format":{"type":"json_object"}}`,
		`{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"required"}`,
		`{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`,
		`{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"ok"}],"max_tokens":2}`,
		`{"messages":[{"role":"user","content":"Hi"}],"max_tokens":2,"chat_template_kwargs":{"enable_thinking":false},"reasoning_effort":"low","n":2}`,
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	ts := serveStories(f, serveOptions{slots: 2, chunkCap: 64})
	h := ts.srv.Handler()
	f.Fuzz(func(t *testing.T, body string, chat bool) {
		path := "/v1/completions"
		if chat {
			path = "/v1/chat/completions"
		}
		if rec := serveJSON(h, path, body); rec.Code >= 400 {
			wantAPIError(t, rec)
		}
	})
}

// FuzzTokenize: any body sent to /tokenize (llama-server's or vLLM's
// fields, or neither) is answered with tokens or an OpenAI error object,
// never a panic or a 5xx.
func FuzzTokenize(f *testing.F) {
	for _, s := range []string{
		`{"content":"Once upon a time"}`, `{"content":"x","add_special":true}`,
		`{"prompt":"Once upon a time"}`, `{"prompt":"x","add_special_tokens":false}`,
		`{"messages":[{"role":"user","content":"Hi"}]}`, `{"messages":[{"role":"wizard","content":"Hi"}]}`,
		`{"messages":[]}`, `{"prompt":"a","content":"b"}`, `{}`, `{"prompt":7}`, `{`, `null`, ``,
	} {
		f.Add(s)
	}
	ts := serveStories(f, serveOptions{slots: 1, chunkCap: 64})
	h := ts.srv.Handler()
	f.Fuzz(func(t *testing.T, body string) {
		req := httptest.NewRequest("POST", "/tokenize", strings.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var out struct {
			Tokens *[]int32 `json:"tokens"`
			Error  struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		err := json.Unmarshal(rec.Body.Bytes(), &out)
		switch {
		case rec.Code >= 500:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body.String())
		case rec.Code == 200 && (err != nil || out.Tokens == nil):
			t.Fatalf("200 without a tokens list for %q: %s", body, rec.Body.String())
		case rec.Code != 200 && (err != nil || out.Error.Message == ""):
			t.Fatalf("status %d for %q: not an OpenAI error object: %s", rec.Code, body, rec.Body.String())
		}
	})
}

// FuzzLoadConfig: any file given as the server config is loaded or
// refused with an error, and a loaded one yields a policy and an engine
// configuration without panicking.
func FuzzLoadConfig(f *testing.F) {
	for _, s := range []string{
		"slots = 8\nchunk_cap = 64\nqueue_depth = 16\nledger = \"usage.log\"\ncors_origins = [\"https://a.example\"]\n",
		"[[tenant]]\nid = \"alpha\"\napi_keys = [\"sk-a\"]\nqos = \"interactive\"\nmax_concurrent = 2\nmax_kv_pages = 10\nreserved_kv_pages = 2\ndecode_tokens_per_second = 50\nprefill_tokens_per_second = 500\nmax_context_tokens = 64\nmax_queued = 3\ntokens_per_minute = 100\nrequests_per_minute = 5\nisolation_group = \"g\"\nadmin = true\n",
		"[[tenant]]\nid = \"b\"\napi_key_hashes = [\"sha256:00\"]\nqos = \"batch\"\n",
		"slots = -1\n", "[[tenant]]\n", "cors_origins = [\"ftp://x/y\"]\n", "= =", "",
		"speculative = \"ngram:4\"\n[[model]]\nname = \"m\"\nspeculative = \"self:2:fixed\"\n", "[[model]]\nname = \"\"\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		path := filepath.Join(t.TempDir(), "server.toml")
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := server.LoadConfig(path)
		if err != nil {
			return
		}
		server.NewPolicy(cfg).EngineConfig(cfg)
		cfg.SpeculationFor("m")
	})
}
