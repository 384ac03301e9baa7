package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/build"
	"github.com/zrtdev/zrt/format/bundleset"
	"github.com/zrtdev/zrt/internal/testmodel"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/server"
)

// TestRun drives server.Run as zrt-run serve does: it opens the bundle,
// listens, answers, reloads its config on a value of Reload (and keeps
// the running one when the file has become bad), writes the engine's
// trace, and on cancellation drains and returns nil.
func TestRun(t *testing.T) {
	bundle := compileStories(t, defaultModel)
	dir := t.TempDir()
	cfgPath, trace := filepath.Join(dir, "server.toml"), filepath.Join(dir, "trace.json")
	write := func(text string) {
		if err := os.WriteFile(cfgPath, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("[[tenant]]\nid = \"a\"\napi_keys = [\"ka\"]\n")
	cfg, err := server.LoadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	said := newRunLog()
	reload := make(chan os.Signal, 1)
	ctx, cancel := context.WithCancel(context.Background())
	base, done := startRun(t, ctx, server.Options{
		Bundles: []server.Bundle{{Dir: bundle, Path: bundle, Name: "m"}}, Runtime: runtime.Options{Tier: "cpu", Threads: 1},
		Config: cfg, ConfigPath: cfgPath, Reload: reload, Speculative: *speculativeFlag, Listen: "127.0.0.1:0", DrainTimeout: 5 * time.Second, Trace: trace,
		Log: said.log}, said)
	get := func(key string) int {
		req, _ := http.NewRequest("GET", base+"/v1/models", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := get("ka"); got != 200 {
		t.Fatalf("GET /v1/models with a's key: %d", got)
	}
	write("[[tenant]]\nid = \"b\"\napi_keys = [\"kb\"]\n")
	reload <- os.Interrupt // any value: read the config again
	waitFor(t, "the reload", func() bool { return get("kb") == 200 && get("ka") == 401 })
	write("bogus_key = 1\n")
	reload <- os.Interrupt
	waitFor(t, "the refused reload", func() bool {
		return strings.Contains(said.String(), "keeping the running config")
	})
	if got := get("kb"); got != 200 {
		t.Errorf("after a bad config, b's key: %d", got)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after cancellation: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancellation")
	}
	log := said.String()
	for _, want := range []string{"model m: ", "on tier cpu", "reloaded 1 tenants", "draining (up to 5s)"} {
		if !strings.Contains(log, want) {
			t.Errorf("Run said nothing with %q:\n%s", want, log)
		}
	}
	if b, err := os.ReadFile(trace); err != nil || !strings.HasSuffix(strings.TrimSpace(string(b)), "]}") {
		t.Errorf("trace: %v, %d bytes, not closed", err, len(b))
	}
}

// startRun runs server.Run(ctx, opt) until ctx is cancelled and returns
// its base URL, once said (opt.Log) has its address, and the channel its
// result comes on.
func startRun(t *testing.T, ctx context.Context, opt server.Options, said *runLog) (string, <-chan error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- server.Run(ctx, opt) }()
	select {
	case a := <-said.addr:
		return "http://" + a, done
	case err := <-done:
		t.Fatalf("Run returned before serving: %v", err)
	}
	return "", nil
}

// runLog collects the lines server.Run logs and sends the address of its
// "serving on" line to addr.
type runLog struct {
	mu   sync.Mutex
	said []string
	addr chan string
}

func newRunLog() *runLog { return &runLog{addr: make(chan string, 1)} }

// log is server.Options.Log.
func (l *runLog) log(f string, a ...any) {
	line := fmt.Sprintf(f, a...)
	l.mu.Lock()
	l.said = append(l.said, line)
	l.mu.Unlock()
	if rest, ok := strings.CutPrefix(line, "serving on http://"); ok {
		l.addr <- strings.Fields(rest)[0]
	}
}

// String is every line logged so far.
func (l *runLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.said, "\n")
}

// TestRunReplicas serves one bundle, then a tensor-parallel set of two
// ranks, as two replicas (zrt-run serve --replicas 2; on T-CPU a share of
// the threads each): concurrent requests spread over both (each replica's
// step loop advances, /health lists them), every one is answered, the
// same greedy prompt gets the same text from either, and /metrics sums
// the replicas. A negative count is refused before any bundle opens.
func TestRunReplicas(t *testing.T) {
	if err := server.Run(context.Background(), server.Options{Replicas: -1}); err == nil || !strings.Contains(err.Error(), "--replicas -1") {
		t.Errorf("Replicas -1: %v", err)
	}
	t.Run("bundle", func(t *testing.T) { serveReplicas(t, compileStories(t, defaultModel)) })
	t.Run("tp2-set", func(t *testing.T) {
		dir := t.TempDir()
		cfg, out := filepath.Join(dir, "m.toml"), filepath.Join(dir, "set")
		if err := os.WriteFile(cfg, []byte(defaultModel), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := build.Run(context.Background(), build.Options{Model: testmodel.Shared(t, "stories260K.gguf"), Targets: []string{"cpu"}, TP: 2, Out: out,
			Compiler: compiler.Options{ConfigPath: cfg}}); err != nil {
			t.Fatal(err)
		}
		x, err := bundleset.Read(out)
		if err != nil {
			t.Fatal(err)
		}
		rank0, _ := x.Rank("cpu", 0) // what zrt-run serve opens of a set
		serveReplicas(t, rank0.Path(out))
	})
}

// serveReplicas is TestRunReplicas on the bundle or set at bundle.
func serveReplicas(t *testing.T, bundle string) {
	cfg, err := server.LoadConfig("") // one local tenant
	if err != nil {
		t.Fatal(err)
	}
	said := newRunLog()
	ctx, cancel := context.WithCancel(context.Background())
	base, done := startRun(t, ctx, server.Options{
		Bundles: []server.Bundle{{Dir: bundle, Path: bundle, Name: "m"}}, Runtime: runtime.Options{Tier: "cpu", Threads: 2}, Replicas: 2,
		Config: cfg, Listen: "127.0.0.1:0", DrainTimeout: 5 * time.Second, Log: said.log}, said)
	type completion struct {
		Choices []struct{ Text string }
		Usage   struct {
			CompletionTokens    int `json:"completion_tokens"`
			PromptTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		}
	}
	post := func(prompt string, maxTokens int) (completion, error) {
		body, _ := json.Marshal(map[string]any{"model": "m", "prompt": prompt, "max_tokens": maxTokens, "temperature": 0, "ignore_eos": true})
		resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(string(body)))
		if err != nil {
			return completion{}, err
		}
		defer resp.Body.Close()
		var out completion
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 || len(out.Choices) != 1 || out.Usage.CompletionTokens != maxTokens {
			return out, fmt.Errorf("status %d, %+v, %v", resp.StatusCode, out, err)
		}
		return out, nil
	}
	const n, tokens = 8, 12
	texts := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			out, err := post("Once upon a time", tokens)
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			texts[i] = out.Choices[0].Text
		})
	}
	wg.Wait()
	for i, text := range texts {
		if text != texts[0] {
			t.Errorf("request %d's text %q, request 0's %q: the replicas differ", i, text, texts[0])
		}
	}
	// A conversation's next turn goes back to the replica whose prefix
	// cache holds its last turn, while that replica has a free slot, even
	// when another holds fewer requests: the first turn (both idle) and
	// then a long request go to replica 0, and the next turn, sent while
	// the long one runs, finds its pages there.
	turn := "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. One day, she saw a big red ball."
	if _, err := post(turn, 4); err != nil {
		t.Fatalf("first turn: %v", err)
	}
	long := make(chan error, 1)
	go func() { _, err := post("Tom", 200); long <- err }()
	waitFor(t, "the long request", func() bool {
		resp, err := http.Get(base + "/health")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var h struct{ Models []struct{ Running int } }
		return json.NewDecoder(resp.Body).Decode(&h) == nil && len(h.Models) == 1 && h.Models[0].Running > 0
	})
	next, err := post(turn+" She kicked it.", 4)
	if err != nil {
		t.Fatalf("next turn: %v", err)
	}
	if next.Usage.PromptTokensDetails.CachedTokens == 0 {
		t.Error("the next turn found none of its prompt cached: it went to the other replica")
	}
	if err := <-long; err != nil {
		t.Fatalf("long request: %v", err)
	}
	// The replicas count a step's tokens after they deliver them, so the
	// last request's may reach /metrics a moment after its response.
	want := fmt.Sprintf(`vllm:generation_tokens_total{model_name="m"} %d`, n*tokens+4+200+4)
	waitFor(t, want+" in /metrics", func() bool {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		metrics, err := io.ReadAll(resp.Body)
		return err == nil && strings.Contains(string(metrics), want)
	})
	var health struct {
		Models []struct {
			Steps    uint64
			Replicas []struct{ Steps uint64 }
		}
	}
	resp, err := http.Get(base + "/health")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&health)
	resp.Body.Close()
	if err != nil || len(health.Models) != 1 || len(health.Models[0].Replicas) != 2 {
		t.Fatalf("/health: %+v, %v", health, err)
	}
	m := health.Models[0]
	if a, b := m.Replicas[0].Steps, m.Replicas[1].Steps; a == 0 || b == 0 || a+b != m.Steps {
		t.Errorf("/health: replicas stepped %d and %d times, the model %d: want both, summed", a, b, m.Steps)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancellation: %v", err)
	}
	for _, want := range []string{"model m, replica 0: ", "model m, replica 1: "} {
		if !strings.Contains(said.String(), want) {
			t.Errorf("Run said nothing with %q:\n%s", want, said.String())
		}
	}
}
