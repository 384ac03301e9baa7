package server_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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
	done := make(chan error, 1)
	go func() {
		done <- server.Run(ctx, server.Options{
			Bundles: []server.Bundle{{Dir: bundle, Path: bundle, Name: "m"}}, Runtime: runtime.Options{Tier: "cpu", Threads: 1},
			Config: cfg, ConfigPath: cfgPath, Reload: reload, Speculative: *speculativeFlag, Listen: "127.0.0.1:0", DrainTimeout: 5 * time.Second, Trace: trace,
			Log: said.log})
	}()
	var base string
	select {
	case a := <-said.addr:
		base = "http://" + a
	case err := <-done:
		t.Fatalf("Run returned before serving: %v", err)
	}
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
