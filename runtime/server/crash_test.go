package server_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// buildZrtRun builds the zrt-run command into a temporary directory, so a
// test runs the real server: its flags, config loading, ledger opening
// and signal handling, not a test's wiring of the packages.
func buildZrtRun(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to build zrt-run with: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "zrt-run")
	out, err := exec.Command(goTool, "build", "-o", bin, "github.com/zrtdev/zrt/cmd/zrt-run").CombinedOutput()
	if err != nil {
		t.Fatalf("go build zrt-run: %v\n%s", err, out)
	}
	return bin
}

// serverProcess is zrt-run serve running as a child process.
type serverProcess struct {
	cmd  *exec.Cmd
	URL  string
	mu   sync.Mutex
	said []string // its own messages on stderr (not the access log)
	done chan struct{}
}

var servingOn = regexp.MustCompile(`zrt-run: serving on (http://\S+)`)

// startServer runs bin serve args... and waits until it listens.
func startServer(t *testing.T, bin string, args ...string) *serverProcess {
	t.Helper()
	p := &serverProcess{cmd: exec.Command(bin, append([]string{"serve"}, args...)...), done: make(chan struct{})}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.cmd.Process.Kill() // a no-op when it has exited
		<-p.done
		p.cmd.Wait()
	})
	url := make(chan string, 1)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "zrt-run: ") {
				continue // the JSON access log
			}
			p.mu.Lock()
			p.said = append(p.said, line)
			p.mu.Unlock()
			if m := servingOn.FindStringSubmatch(line); m != nil {
				url <- m[1]
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	select {
	case p.URL = <-url:
	case <-p.done:
		t.Fatalf("zrt-run serve exited before listening: %s", p.messages())
	case <-time.After(2 * time.Minute): // a safety net for a hang
		t.Fatalf("zrt-run serve did not listen: %s", p.messages())
	}
	return p
}

// messages is what the server has said on stderr.
func (p *serverProcess) messages() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.said, "\n")
}

// stop sends sig and waits for the process to exit, returning its error.
func (p *serverProcess) stop(t *testing.T, sig syscall.Signal) error {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	<-p.done // stderr is closed when it exits
	return p.cmd.Wait()
}

// TestCrashLedger kills zrt-run serve with SIGKILL in the middle of a load
// of short requests, at a moment its ledger file ends inside a record
// when it can catch one (the ledger buffers records and its buffer may
// reach the file before a record's end), and restarts it on the same
// ledger. The restarted server says it dropped the torn tail, and its
// usage totals are exactly those of the complete records in the file —
// read here independently of package ledger — every one of them a request
// the test sent. Records appended after the restart follow the last good
// one, and a SIGTERM exits 0 with all of them on disk.
func TestCrashLedger(t *testing.T) {
	bundle := compileStories(t, "context_length = 256\ndecode_slots = [1, 2, 4, 8]\nprefill_rows = [16, 64]\n")
	bin := buildZrtRun(t)
	dir := t.TempDir()
	ledgerPath := filepath.Join(dir, "usage.log")
	cfgPath := filepath.Join(dir, "server.toml")
	cfg := fmt.Sprintf(`slots = 8
chunk_cap = 64
ledger = %q
[[tenant]]
id = "alpha"
api_keys = ["sk-alpha"]
admin = true
[[tenant]]
id = "beta"
api_keys = ["sk-beta"]
`, ledgerPath)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{bundle, "--listen", "127.0.0.1:0", "--config", cfgPath, "--tier", "cpu", "--threads", "2"}
	tenants := []string{"alpha", "beta"}

	// Load: clients send short requests, streamed and not, each with its
	// own X-Request-Id, until the server dies under them.
	srv := startServer(t, bin, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a safety net
	defer cancel()
	var sent sync.Map // request id → tenant
	var completed atomic.Int64
	var wg sync.WaitGroup
	for w := range 16 {
		tenant := tenants[w%2]
		c := client(srv.URL, "sk-"+tenant)
		wg.Go(func() {
			for i := 0; ; i++ {
				id := fmt.Sprintf("crash-%d-%d", w, i)
				sent.Store(id, tenant)
				p := openai.CompletionNewParams{Model: "stories260K", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
					MaxTokens: openai.Int(int64(2 + i%5)), Temperature: openai.Float(0)}
				var err error
				if i%2 == 0 {
					_, err = c.Completions.New(ctx, p, option.WithHeader("X-Request-Id", id))
				} else {
					s := c.Completions.NewStreaming(ctx, p, option.WithHeader("X-Request-Id", id))
					for s.Next() {
					}
					err = s.Err()
					s.Close()
				}
				if err != nil {
					return // the server is gone (or the safety net fired)
				}
				completed.Add(1)
			}
		})
	}

	// Kill it once enough requests have finished, at an instant the
	// file's last byte is not a record's newline if one comes soon.
	torn := func() bool {
		f, err := os.Open(ledgerPath)
		if err != nil {
			return false
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil || st.Size() == 0 {
			return false
		}
		last := make([]byte, 1)
		_, err = f.ReadAt(last, st.Size()-1)
		return err == nil && last[0] != '\n'
	}
	waitFor(t, "requests to finish before the kill", func() bool {
		select {
		case <-srv.done:
			t.Fatalf("zrt-run serve exited under load: %s", srv.messages())
		default:
		}
		n := completed.Load()
		return n >= 64 && torn() || n >= 1000
	})
	if err := srv.stop(t, syscall.SIGKILL); err == nil {
		t.Fatal("zrt-run serve exited cleanly from SIGKILL")
	}
	wg.Wait()

	// What the kill left: the complete records, and a tail. Should the
	// kill have found the file between records, tear it here as a crash
	// in the middle of a write would: half of a record, no newline.
	want, records, tail := readLedger(t, ledgerPath)
	if len(records) == 0 {
		t.Fatalf("no complete record in the ledger after %d finished requests", completed.Load())
	}
	if tail == 0 {
		b, err := os.ReadFile(ledgerPath)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitAfter(strings.TrimSuffix(string(b), "\n"), "\n")
		half := lines[len(lines)-1][:len(lines[len(lines)-1])/2]
		f, err := os.OpenFile(ledgerPath, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(half); err != nil {
			t.Fatal(err)
		}
		f.Close()
		tail = len(half)
		t.Logf("the kill left %d whole records and no torn tail; appended half a record (%d bytes)", len(records), tail)
	} else {
		t.Logf("the kill left %d whole records and a torn tail of %d bytes, after %d requests finished", len(records), tail, completed.Load())
	}
	ids := map[string]bool{}
	for _, r := range records {
		tenant, ok := sent.Load(r.RequestID)
		if !ok || tenant != r.Tenant || ids[r.RequestID] || r.Prompt == 0 {
			t.Errorf("record %+v: not one request the test sent, or twice", r)
		}
		ids[r.RequestID] = true
	}

	// Restart on the same ledger: the torn tail is dropped and cut off,
	// and the totals are the complete records'.
	srv = startServer(t, bin, args...)
	if msg := fmt.Sprintf("dropped a torn tail of %d bytes", tail); !strings.Contains(srv.messages(), msg) {
		t.Errorf("the restarted server did not say %q:\n%s", msg, srv.messages())
	}
	for _, tenant := range tenants {
		if got := usageOf(t, srv.URL, "sk-alpha", tenant); got != want[tenant] {
			t.Errorf("%s after the restart: usage %+v, the complete records hold %+v", tenant, got, want[tenant])
		}
	}
	if _, _, left := readLedger(t, ledgerPath); left != 0 {
		t.Errorf("%d bytes of torn tail left in the file after the restart", left)
	}

	// New records follow the last good one; a drained shutdown leaves
	// them all on disk.
	for i, tenant := range []string{"alpha", "beta", "beta"} {
		p := openai.CompletionNewParams{Model: "stories260K", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
			MaxTokens: openai.Int(3), Temperature: openai.Float(0)}
		c := client(srv.URL, "sk-"+tenant)
		r, err := c.Completions.New(ctx, p, option.WithHeader("X-Request-Id", fmt.Sprintf("after-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		w := want[tenant]
		w.Requests++
		w.Prompt += r.Usage.PromptTokens
		w.Completion += r.Usage.CompletionTokens
		w.Cached += r.Usage.PromptTokensDetails.CachedTokens
		want[tenant] = w
	}
	if err := srv.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("zrt-run serve after SIGTERM: %v\n%s", err, srv.messages())
	}
	got, after, left := readLedger(t, ledgerPath)
	if left != 0 || len(after) != len(records)+3 {
		t.Errorf("after the shutdown: %d records and %d bytes of torn tail, want %d records", len(after), left, len(records)+3)
	}
	for _, tenant := range tenants {
		if got[tenant] != want[tenant] {
			t.Errorf("%s after the shutdown: the file holds %+v, want %+v", tenant, got[tenant], want[tenant])
		}
	}
}
