package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/decode"
	"github.com/zrtdev/zrt/runtime/engine"
)

// TestMaxQueued: a tenant's max_queued refuses its request with 429,
// Retry-After and a message naming the key while that many of its
// requests wait for the engine's one slot; the one running does not
// count, another tenant is not affected, and once the queue moves the
// tenant is served again.
func TestMaxQueued(t *testing.T) {
	held := &heldModel{left: -1, held: make(chan struct{}), release: make(chan struct{})}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(held.release) }) }
	defer release() // a failure must not leave the step loop held
	ts := serveStories(t, serveOptions{config: `
[[tenant]]
id = "alpha"
api_keys = ["sk-alpha"]
max_queued = 1
[[tenant]]
id = "beta"
api_keys = ["sk-beta"]
`, slots: 1, chunkCap: 64, wrap: func(p *runtime.Program) engine.Model { held.Program = p; return held }})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// alpha's first request takes the slot and the engine is held in its
	// step; its second waits.
	held.holdAfter(0)
	var alpha []<-chan engine.Event
	submit := func() {
		ch, err := ts.engine.Submit(ctx, engine.Request{Tenant: "alpha", QoS: engine.Standard, Prompt: []int32{1, 400, 30},
			Decode: decode.Params{MaxTokens: 3}})
		if err != nil {
			t.Fatal(err)
		}
		alpha = append(alpha, ch)
	}
	submit()
	select {
	case <-held.held:
	case <-ctx.Done():
		t.Fatal("the first request never reached the engine")
	}
	submit()

	// Refused at once: had it been queued instead, its answer would wait
	// for the held step, and the request's deadline says so.
	const body = `{"prompt": "Once", "max_tokens": 2}`
	qctx, qcancel := context.WithTimeout(ctx, 10*time.Second)
	req, _ := http.NewRequestWithContext(qctx, "POST", ts.URL+"/v1/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer sk-alpha")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		qcancel()
		t.Fatalf("alpha with one request waiting was not refused at once: %v", err)
	}
	var e struct {
		Error apiErr `json:"error"`
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	qcancel()
	json.Unmarshal(raw, &e)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" || e.Error.Type != "rate_limit_error" ||
		!strings.Contains(e.Error.Message, "max_queued") || !strings.Contains(e.Error.Message, "alpha") {
		t.Errorf("alpha with one request waiting: %d, Retry-After %q, %s; want 429, 1, a rate_limit_error naming alpha's max_queued",
			resp.StatusCode, resp.Header.Get("Retry-After"), raw)
	}
	// beta has no bound: its request queues, and is served once the
	// engine moves.
	betaDone := make(chan int, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk-beta")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			betaDone <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		betaDone <- resp.StatusCode
	}()

	release()
	for i, ch := range alpha {
		var last engine.Event
		for ev := range ch {
			last = ev
		}
		if last.Finish.Aborted() {
			t.Errorf("alpha's request %d ended %q", i, last.Finish)
		}
	}
	if code := <-betaDone; code != http.StatusOK {
		t.Errorf("beta, unbounded, while alpha was at its max_queued: status %d", code)
	}
	if code, raw, _, _ := post(t, ts.URL, "POST", "/v1/completions", body); code != http.StatusOK {
		t.Errorf("alpha once its queue moved: %d %s", code, raw)
	}
	resp, err = http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `zrt_tenant_rejected_total{status="429",tenant="alpha"} 1`; !strings.Contains(string(b), want) {
		t.Errorf("metrics lack %q", want)
	}
}

// TestDrainRefuses: once the server drains, its engines refuse new
// requests, which the server answers with 503 and Retry-After, and
// /health turns 503.
func TestDrainRefuses(t *testing.T) {
	ts := serveStories(t, serveOptions{config: "", slots: 2, chunkCap: 64})
	if code, raw, _, _ := post(t, ts.URL, "POST", "/v1/completions", `{"prompt": "Once", "max_tokens": 2}`); code != http.StatusOK {
		t.Fatalf("before draining: %d %s", code, raw)
	}
	ts.srv.Drain()
	code, raw, e, h := post(t, ts.URL, "POST", "/v1/completions", `{"prompt": "Once", "max_tokens": 2}`)
	if code != http.StatusServiceUnavailable || h.Get("Retry-After") != "5" || e.Type != "server_error" || !strings.Contains(e.Message, "draining") {
		t.Errorf("while draining: %d, Retry-After %q, %s", code, h.Get("Retry-After"), raw)
	}
	resp, err := http.Get(ts.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/health while draining: %d", resp.StatusCode)
	}
}
