package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if tools.dir != "" {
		os.RemoveAll(tools.dir)
	}
	os.Exit(code)
}

// tools are zrtc and zrt-run built from this tree into one directory, as
// an install puts them: built once for the tests that run them.
var tools struct {
	once sync.Once
	dir  string
	err  error
}

// buildTools returns the directory of the tools, building them first.
func buildTools(t *testing.T) string {
	t.Helper()
	tools.once.Do(func() {
		if tools.dir, tools.err = os.MkdirTemp("", "zrt-run-tools"); tools.err != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", tools.dir+"/", "github.com/zrtdev/zrt/cmd/zrtc", "github.com/zrtdev/zrt/cmd/zrt-run")
		if out, err := cmd.CombinedOutput(); err != nil {
			tools.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if tools.err != nil {
		t.Fatal(tools.err)
	}
	return tools.dir
}

// serveProc is a zrt-run serve process.
type serveProc struct {
	cmd    *exec.Cmd
	url    string
	stderr *lockedBuffer
	ready  time.Duration // from start to listening
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(s)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var servingOn = regexp.MustCompile(`zrt-run: serving on (http://\S+)`)

// startServe runs zrt-run serve with args and waits until it listens.
func startServe(t *testing.T, bin string, args ...string) *serveProc {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "zrt-run"), append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	// No inherited ZRTC_CACHE: the test names its cache with --cache.
	cmd.Env = append(os.Environ(), "ZRTC_CACHE=")
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &serveProc{cmd: cmd, stderr: &lockedBuffer{}}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			line := sc.Text()
			s.stderr.add(line + "\n")
			if m := servingOn.FindStringSubmatch(line); m != nil {
				urls <- m[1]
			}
		}
		close(urls)
	}()
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	select {
	case u, ok := <-urls:
		if !ok {
			cmd.Wait()
			t.Fatalf("zrt-run serve exited before listening:\n%s", s.stderr)
		}
		s.url, s.ready = u, time.Since(start)
	case <-time.After(3 * time.Minute):
		t.Fatalf("zrt-run serve did not listen in 3 minutes:\n%s", s.stderr)
	}
	return s
}

// stop sends SIGTERM and waits for a clean exit.
func (s *serveProc) stop(t *testing.T) {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("zrt-run serve: %v\n%s", err, s.stderr)
		}
	case <-time.After(time.Minute):
		t.Errorf("zrt-run serve did not stop in a minute")
	}
}

// complete sends one completion request and returns its text.
func complete(url, model, prompt string) (string, error) {
	body := fmt.Sprintf(`{"model": %q, "prompt": %q, "max_tokens": 12, "temperature": 0}`, model, prompt)
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	var r struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(b, &r); err != nil || len(r.Choices) != 1 {
		return "", fmt.Errorf("response %s: %v", b, err)
	}
	return r.Choices[0].Text, nil
}

// TestServeGGUF is the one-command path: zrt-run serve MODEL.gguf with no
// config builds the model with zrtc into the cache, serves 16 requests
// at once, and the next start reuses the build instead of compiling.
func TestServeGGUF(t *testing.T) {
	model := sharedModel(t, "TinyStories-656K.Q8_0.gguf")
	bin := buildTools(t)
	cache := filepath.Join(t.TempDir(), "cache")

	s := startServe(t, bin, model, "--cache", cache, "--threads", "2")
	log := s.stderr.String()
	for _, want := range []string{
		"zrt-run: building " + model,
		"zrtc: default max_slots = 16, decode_slots = [1 2 4 8 16]",
		"zrtc: default context_length = 512 (the GGUF's llama.context_length)",
		"zrt-run: built TinyStories-656K.Q8_0.gguf",
		"zrt-run: model TinyStories-656K.Q8_0: " + model + " on tier cpu, 16 slots",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("first start does not say %q:\n%s", want, log)
		}
	}
	const n = 16
	texts := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			texts[i], errs[i] = complete(s.url, "TinyStories-656K.Q8_0", "Once upon a time")
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("request %d: %v\n%s", i, errs[i], s.stderr)
		}
		// Greedy: every request of the same prompt says the same.
		if texts[i] == "" || texts[i] != texts[0] {
			t.Errorf("request %d: %q, request 0: %q", i, texts[i], texts[0])
		}
	}
	s.stop(t)

	again := startServe(t, bin, model, "--cache", cache, "--threads", "2")
	log = again.stderr.String()
	if !strings.Contains(log, "zrt-run: using cached build at "+cache) || strings.Contains(log, "zrt-run: building") || strings.Contains(log, "zrtc:") {
		t.Errorf("second start does not reuse the build:\n%s", log)
	}
	t.Logf("second start listened after %s", again.ready)
	if text, err := complete(again.url, "TinyStories-656K.Q8_0", "Once upon a time"); err != nil || text != texts[0] {
		t.Errorf("after the restart: %q, %v; want %q", text, err, texts[0])
	}
	again.stop(t)
}

// TestGGUFErrors checks what zrt-run says and which status it exits with
// for a GGUF it cannot build.
func TestGGUFErrors(t *testing.T) {
	bin := buildTools(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.gguf")
	if err := os.WriteFile(bad, []byte("not a model"), 0o644); err != nil {
		t.Fatal(err)
	}
	lone := t.TempDir() // zrt-run without zrtc beside it or on PATH
	if err := os.Link(filepath.Join(bin, "zrt-run"), filepath.Join(lone, "zrt-run")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		exe    string
		args   []string
		status int
		want   string
	}{
		{bin, []string{"generate", filepath.Join(dir, "missing.gguf"), "-p", "x"}, 1, "missing.gguf: no such file"},
		{bin, []string{"generate", bad, "-p", "x"}, 4, "zrtc key exited with status 4"},
		{bin, []string{"generate", bad, "-p", "x", "--slots", "-2"}, 2, "--slots -2"},
		{lone, []string{"generate", bad, "-p", "x"}, 1, "there is none at " + filepath.Join(lone, "zrtc") + " or on $PATH"},
	}
	for _, c := range cases {
		cmd := exec.Command(filepath.Join(c.exe, "zrt-run"), append(c.args, "--cache", filepath.Join(dir, "cache"))...)
		cmd.Env = append(os.Environ(), "PATH=/nonexistent")
		out, err := cmd.CombinedOutput()
		status := 0
		if ee, ok := err.(*exec.ExitError); ok {
			status = ee.ExitCode()
		}
		if status != c.status || !strings.Contains(string(out), c.want) {
			t.Errorf("zrt-run %s: status %d, said %q; want %d and %q", strings.Join(c.args, " "), status, out, c.status, c.want)
		}
	}
}
