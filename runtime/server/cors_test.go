package server_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/runtime/server"
)

// loadConfig writes text as a server config and loads it.
func loadConfig(t testing.TB, text string) (*server.Config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "server.toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return server.LoadConfig(path)
}

// TestCORS: no CORS headers unless cors_origins is configured; then a
// preflight from a listed origin is answered with the allowed methods and
// headers, requests from it carry Access-Control-Allow-Origin, and an
// unlisted origin gets neither. "*" allows any origin; SIGHUP's reload
// turns it on and off. No model is needed: CORS sits in front of routing.
func TestCORS(t *testing.T) {
	cfg, err := loadConfig(t, "")
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(cfg, server.NewPolicy(cfg), nil, nil, nil)
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()

	// do sends a request from origin ("": none); a preflight asks for POST
	// with the headers an OpenAI client sends.
	do := func(method, path, origin string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, nil)
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if method == http.MethodOptions {
			req.Header.Set("Access-Control-Request-Method", "POST")
			req.Header.Set("Access-Control-Request-Headers", "authorization, content-type, x-request-id")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	reload := func(text string) {
		t.Helper()
		next, err := loadConfig(t, text)
		if err != nil {
			t.Fatal(err)
		}
		srv.Reload(next)
	}
	noCORS := func(what string, resp *http.Response) {
		t.Helper()
		for k := range resp.Header {
			if strings.HasPrefix(k, "Access-Control-") {
				t.Errorf("%s: %s: %q", what, k, resp.Header.Get(k))
			}
		}
	}

	// Off by default: a preflight is not answered (the routes take GET or
	// POST only) and nothing allows another origin.
	if resp := do(http.MethodOptions, "/v1/chat/completions", "https://a.example"); resp.StatusCode/100 == 2 {
		t.Errorf("preflight without cors_origins: %d", resp.StatusCode)
	} else {
		noCORS("preflight without cors_origins", resp)
	}
	noCORS("GET without cors_origins", do(http.MethodGet, "/v1/models", "https://a.example"))

	reload("cors_origins = [\"https://a.example\", \"http://localhost:3000\"]\n")
	pre := do(http.MethodOptions, "/v1/chat/completions", "https://a.example")
	if pre.StatusCode != http.StatusNoContent || pre.Header.Get("Access-Control-Allow-Origin") != "https://a.example" {
		t.Errorf("preflight from a listed origin: %d %v", pre.StatusCode, pre.Header)
	}
	for _, m := range []string{"GET", "POST"} {
		if !strings.Contains(pre.Header.Get("Access-Control-Allow-Methods"), m) {
			t.Errorf("Access-Control-Allow-Methods %q lacks %s", pre.Header.Get("Access-Control-Allow-Methods"), m)
		}
	}
	for _, h := range []string{"Authorization", "Content-Type", "X-Request-Id"} {
		if !strings.Contains(pre.Header.Get("Access-Control-Allow-Headers"), h) {
			t.Errorf("Access-Control-Allow-Headers %q lacks %s", pre.Header.Get("Access-Control-Allow-Headers"), h)
		}
	}
	get := do(http.MethodGet, "/v1/models", "http://localhost:3000")
	if get.StatusCode != http.StatusOK || get.Header.Get("Access-Control-Allow-Origin") != "http://localhost:3000" ||
		!strings.Contains(get.Header.Get("Access-Control-Expose-Headers"), "X-Request-Id") || !strings.Contains(get.Header.Get("Vary"), "Origin") {
		t.Errorf("GET from a listed origin: %d %v", get.StatusCode, get.Header)
	}
	// An unlisted origin (a listed host under another scheme is another
	// origin): its preflight fails, and its requests carry no allowance.
	for _, o := range []string{"https://b.example", "http://a.example"} {
		resp := do(http.MethodOptions, "/v1/chat/completions", o)
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("preflight from %s: %d", o, resp.StatusCode)
		}
		noCORS("preflight from "+o, resp)
		noCORS("GET from "+o, do(http.MethodGet, "/v1/models", o))
	}
	// A same-origin request sends no Origin: it needs no allowance.
	noCORS("GET without Origin", do(http.MethodGet, "/health", ""))

	reload("cors_origins = [\"*\"]\n")
	if resp := do(http.MethodOptions, "/v1/completions", "https://anything.example"); resp.StatusCode != http.StatusNoContent ||
		resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("preflight with \"*\": %d %v", resp.StatusCode, resp.Header)
	}

	reload("")
	noCORS("GET after CORS was reloaded off", do(http.MethodGet, "/v1/models", "https://a.example"))

	// An entry that no Origin header could equal is an error, not CORS
	// silently off.
	for _, bad := range []string{"https://a.example/", "a.example", "ftp://a.example", "https://a.example/app", "https://"} {
		if _, err := loadConfig(t, "cors_origins = [\""+bad+"\"]\n"); err == nil || !strings.Contains(err.Error(), "cors_origins") {
			t.Errorf("cors_origins = [%q]: %v", bad, err)
		}
	}
}
