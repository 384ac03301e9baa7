package autobuild_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/zrtdev/zrt/format/autobuild"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/gguf"
)

// zrtcPath is a zrtc built from this tree for the tests, once.
var zrtcPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "autobuild-zrtc")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	zrtcPath = filepath.Join(dir, "zrtc")
	cmd := exec.Command("go", "build", "-o", zrtcPath, "github.com/zrtdev/zrt/cmd/zrtc")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building zrtc:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// counted runs the test zrtc and counts its builds.
type counted struct {
	builds atomic.Int32
	run    autobuild.Runner
}

func newCounted() *counted { return &counted{run: autobuild.Exec(zrtcPath)} }

func (c *counted) Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if args[0] == "build" {
		c.builds.Add(1)
	}
	return c.run(ctx, args, stdout, stderr)
}

// synthModel writes a synthetic GGUF with zrtc synth and the flags.
func synthModel(t *testing.T, name string, flags ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	out, err := exec.Command(zrtcPath, append([]string{"synth", "-o", p}, flags...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("zrtc synth: %v\n%s", err, out)
	}
	return p
}

// syncBuffer is a log several goroutines write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestBuildThenReuse(t *testing.T) {
	model := synthModel(t, "tiny.gguf")
	cache := t.TempDir()
	z := newCounted()
	var log syncBuffer
	req := autobuild.Request{GGUF: model, CacheDir: cache, Slots: 4, Run: z.Run, Log: &log}
	first, err := autobuild.Build(context.Background(), req)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if !first.Built || z.builds.Load() != 1 {
		t.Fatalf("first build: Built %v after %d zrtc builds", first.Built, z.builds.Load())
	}
	if !strings.HasPrefix(first.Dir, cache) || !strings.Contains(first.Dir, first.Key.String()) {
		t.Errorf("bundle %s is not the cache's entry for %s", first.Dir, first.Key)
	}
	g, _, err := bundle.ReadGraph(filepath.Join(first.Dir, bundle.GraphFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "zrt-run: building "+model) || !strings.Contains(log.String(), "zrtc: cache miss") {
		t.Errorf("the build's progress does not say what it built:\n%s", log.String())
	}
	var slots int
	for _, v := range g.Variants {
		slots = max(slots, int(v.Slots))
	}
	if slots != 4 {
		t.Errorf("--slots 4 built a bundle of %d slots", slots)
	}

	log = syncBuffer{}
	again, err := autobuild.Build(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if again.Built || again.Dir != first.Dir || z.builds.Load() != 1 {
		t.Errorf("second call: Built %v, dir %s (first %s), %d zrtc builds in all; want the first's entry and no build", again.Built, again.Dir, first.Dir, z.builds.Load())
	}
	if want := "zrt-run: using cached build at " + first.Dir; !strings.Contains(log.String(), want) {
		t.Errorf("reuse says %q, want %q", log.String(), want)
	}

	// Another setting is another build, beside the first.
	req.Slots = 2
	other, err := autobuild.Build(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !other.Built || other.Dir == first.Dir || z.builds.Load() != 2 {
		t.Errorf("--slots 2 after 4: Built %v, same dir %v, %d builds", other.Built, other.Dir == first.Dir, z.builds.Load())
	}
}

// TestConcurrentBuilders starts several builds of one key at once: each
// gets the same whole entry, and zrtc compiles it once.
func TestConcurrentBuilders(t *testing.T) {
	model := synthModel(t, "tiny.gguf")
	cache := t.TempDir()
	z := newCounted()
	const n = 4
	var wg sync.WaitGroup
	res := make([]autobuild.Result, n)
	errs := make([]error, n)
	var log syncBuffer
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = autobuild.Build(context.Background(), autobuild.Request{GGUF: model, CacheDir: cache, Slots: 2, Run: z.Run, Log: &log})
		}()
	}
	wg.Wait()
	built := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("builder %d: %v\n%s", i, errs[i], log.String())
		}
		if res[i].Dir != res[0].Dir {
			t.Errorf("builder %d got %s, builder 0 %s", i, res[i].Dir, res[0].Dir)
		}
		if res[i].Built {
			built++
		}
	}
	if built != 1 || z.builds.Load() != 1 {
		t.Errorf("%d builders say they built, zrtc built %d times; want 1 and 1\n%s", built, z.builds.Load(), log.String())
	}
	if _, _, err := bundle.ReadGraph(filepath.Join(res[0].Dir, bundle.GraphFile)); err != nil {
		t.Errorf("the entry after concurrent builds: %v", err)
	}
	entries, _ := os.ReadDir(filepath.Join(filepath.Dir(res[0].Dir)))
	if len(entries) != 1 {
		t.Errorf("the cache holds %d entries (and temporaries), want 1", len(entries))
	}
}

// TestLongContext builds a GGUF trained for 131072 tokens: the bundle
// keeps that context, and the build says so.
func TestLongContext(t *testing.T) {
	model := synthModel(t, "long.gguf", "--ctx", "131072")
	var log syncBuffer
	r, err := autobuild.Build(context.Background(), autobuild.Request{GGUF: model, CacheDir: t.TempDir(), Run: autobuild.Exec(zrtcPath), Log: &log})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	g, _, err := bundle.ReadGraph(filepath.Join(r.Dir, bundle.GraphFile))
	if err != nil {
		t.Fatal(err)
	}
	if g.Hparams.ContextLength != 131072 {
		t.Errorf("context %d, want the GGUF's 131072", g.Hparams.ContextLength)
	}
	for _, want := range []string{"default context_length = 131072 (the GGUF's llama.context_length)", "default max_slots = 16", "default kv_pages = 8192"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the build does not say %q:\n%s", want, log.String())
		}
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	run := autobuild.Exec(zrtcPath)
	notGGUF := filepath.Join(dir, "notes.gguf")
	if err := os.WriteFile(notGGUF, []byte("this is not a model\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	split := filepath.Join(dir, "big-00001-of-00003.gguf") // its other parts missing
	if err := os.WriteFile(split, []byte("GGUF"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path   string
		want   string
		status int // zrtc's exit status; 0: not zrtc's error
	}{
		{filepath.Join(dir, "missing.gguf"), "missing.gguf: no such file", 0},
		{dir, "is a directory, not a GGUF file", 0},
		{notGGUF, "exited with status 4", 4},
		{split, "split GGUF " + split + ": part 2 of 3", 1},
	}
	for _, c := range cases {
		_, err := autobuild.Build(context.Background(), autobuild.Request{GGUF: c.path, CacheDir: filepath.Join(dir, "cache"), Run: run})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", filepath.Base(c.path), err, c.want)
			continue
		}
		var te *autobuild.ToolError
		if status := 0; errors.As(err, &te) {
			status = te.ExitStatus()
			if status != c.status {
				t.Errorf("%s: zrtc's status %d, want %d", filepath.Base(c.path), status, c.status)
			}
		} else if c.status != 0 {
			t.Errorf("%s: %v is not zrtc's error", filepath.Base(c.path), err)
		}
	}
	// A usage error of zrtc (here: too many slots) keeps its status.
	model := synthModel(t, "tiny.gguf")
	_, err := autobuild.Build(context.Background(), autobuild.Request{GGUF: model, CacheDir: filepath.Join(dir, "cache"), Slots: 5000, Run: run})
	var te *autobuild.ToolError
	if !errors.As(err, &te) || te.ExitStatus() != 2 || !strings.Contains(err.Error(), "--slots 5000 out of range") {
		t.Errorf("--slots 5000: %v", err)
	}
}

func TestFindZrtc(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "zrt-run")
	onPath := func(string) (string, error) { return "/opt/zrt/bin/zrtc", nil }
	nowhere := func(string) (string, error) { return "", exec.ErrNotFound }
	if got, err := autobuild.FindZrtc(self, onPath); err != nil || got != "/opt/zrt/bin/zrtc" {
		t.Errorf("none beside: got %q, %v; want PATH's", got, err)
	}
	_, err := autobuild.FindZrtc(self, nowhere)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "zrtc")) || !strings.Contains(err.Error(), "$PATH") {
		t.Errorf("neither: %v; want an error naming both places", err)
	}
	beside := filepath.Join(dir, "zrtc")
	if err := os.WriteFile(beside, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := autobuild.FindZrtc(self, onPath); err != nil || got != beside {
		t.Errorf("one beside: got %q, %v; want %s", got, err, beside)
	}
}

// TestCancel stops a build through its context: the error says so.
func TestCancel(t *testing.T) {
	model := synthModel(t, "tiny.gguf")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := autobuild.Build(ctx, autobuild.Request{GGUF: model, CacheDir: t.TempDir(), Run: autobuild.Exec(zrtcPath)})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled build: %v, want context.Canceled", err)
	}
}

// TestSplitGGUF: the first part of a split GGUF builds like the whole
// file: another key (the source digest covers every part), the same
// weights.
func TestSplitGGUF(t *testing.T) {
	model := synthModel(t, "whole.gguf")
	b, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := gguf.Split(f, 2)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for i, p := range parts {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("m-%05d-of-00002.gguf", i+1)), p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cache := filepath.Join(dir, "cache")
	run := autobuild.Exec(zrtcPath)
	a, err := autobuild.Build(context.Background(), autobuild.Request{GGUF: model, CacheDir: cache, Run: run})
	if err != nil {
		t.Fatal(err)
	}
	s, err := autobuild.Build(context.Background(), autobuild.Request{GGUF: filepath.Join(dir, "m-00001-of-00002.gguf"), CacheDir: cache, Run: run})
	if err != nil {
		t.Fatal(err)
	}
	if a.Key == s.Key {
		t.Error("the split model has the whole file's key")
	}
	ga, _, err := bundle.ReadGraph(a.Dir)
	if err != nil {
		t.Fatal(err)
	}
	gs, _, err := bundle.ReadGraph(s.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if ga.Ident.WeightsHash != gs.Ident.WeightsHash {
		t.Error("the split model's weights differ from the whole file's")
	}
	again, err := autobuild.Build(context.Background(), autobuild.Request{GGUF: filepath.Join(dir, "m-00001-of-00002.gguf"), CacheDir: cache, Run: run})
	if err != nil || again.Built || again.Key != s.Key {
		t.Errorf("the split model is not reused: %+v %v", again, err)
	}
}
