package main

import (
	"encoding/json"
	"github.com/zrtdev/zrt/compiler/build"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/bundleset"
	"github.com/zrtdev/zrt/internal/clitest"
	"github.com/zrtdev/zrt/internal/testmodel"
)

// run runs zrtc in-process with every command and returns stdout and
// stderr.
func run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	return clitest.Run("zrtc", args, buildCmd(), keyCmd(), cacheCmd(), withArtifactDumps(dumpCmd()), verifyCmd())
}

// buildJSON runs zrtc build --json and decodes its summary.
func buildJSON(t *testing.T, args ...string) build.Summary {
	t.Helper()
	out, stderr, err := run(t, append([]string{"build", "--json"}, args...)...)
	if err != nil {
		t.Fatalf("build %v: %v\n%s", args, err, stderr)
	}
	var s build.Summary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("--json printed %q: %v", out, err)
	}
	return s
}

// oldModel is the tiny synthetic model with an mtime an hour ago, as a
// downloaded model has (a file modified just now is never memoised).
func oldModel(t *testing.T) string {
	t.Helper()
	m := testmodel.Tiny(t)
	past := time.Now().Add(-time.Hour)
	if err := os.Chtimes(m, past, past); err != nil {
		t.Fatal(err)
	}
	return m
}

// cacheTest starts a test of the build cache: $ZRTC_CACHE unset, an old
// model, a directory and a cache in it.
func cacheTest(t *testing.T) (model, dir, cache string) {
	t.Helper()
	t.Setenv(cacheEnv, "")
	dir = t.TempDir()
	return oldModel(t), dir, filepath.Join(dir, "cache")
}

func TestCacheHitEqualsFreshBuild(t *testing.T) {
	model, dir, cache := cacheTest(t)
	at := func(n string) string { return filepath.Join(dir, n) }

	first := buildJSON(t, model, "--cache", cache, "-o", at("first"))
	o := first.Outputs[0]
	if o.Cache != "miss" || len(o.Key) != 64 || o.Target != "cpu" || o.Plan.WeightsBytes == 0 || o.Bytes == 0 {
		t.Fatalf("first build: %+v", o)
	}
	hit := buildJSON(t, model, "--cache", cache, "-o", at("hit"))
	if h := hit.Outputs[0]; h.Cache != "hit" || h.Key != o.Key || h.Placed == nil || h.Plan != o.Plan {
		t.Fatalf("second build: %+v", h)
	}
	for _, p := range hit.Outputs[0].Phases {
		if p.Name == "load" || p.Name == "write" {
			t.Fatalf("a hit ran phase %s", p.Name)
		}
	}
	if _, stderr, err := run(t, "build", model, "-q", "--no-cache", "-o", at("fresh")); err != nil {
		t.Fatal(err, stderr)
	}
	testmodel.SameTree(t, at("fresh"), at("hit"), 1)
	testmodel.SameTree(t, at("fresh"), at("first"), 1)

	// The same content under another name, touched: a hit, equal to a
	// fresh build of the renamed file (which records its new name).
	renamed := filepath.Join(filepath.Dir(model), "renamed.gguf")
	if err := os.Rename(model, renamed); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	os.Chtimes(renamed, now, now)
	if h := buildJSON(t, renamed, "--cache", cache, "-o", at("renamed-hit")).Outputs[0]; h.Cache != "hit" || h.Key != o.Key {
		t.Fatalf("renamed and touched GGUF: %+v", h)
	}
	if _, stderr, err := run(t, "build", renamed, "-q", "-o", at("renamed-fresh")); err != nil {
		t.Fatal(err, stderr)
	}
	testmodel.SameTree(t, at("renamed-fresh"), at("renamed-hit"), 1)
	if g, _, _ := bundle.ReadGraph(at("renamed-hit")); g == nil || g.Ident.SourceName != "renamed.gguf" {
		t.Fatal("the hit does not record the renamed GGUF's name")
	}

	// zrtc key prints the key a build uses, whatever the file's name.
	key, _, err := run(t, "key", renamed)
	if err != nil || strings.TrimSpace(key) != o.Key {
		t.Fatalf("zrtc key printed %q (%v), the build used %s", key, err, o.Key)
	}

	// An option that changes the output misses, and makes its own entry.
	if h := buildJSON(t, renamed, "--cache", cache, "--no-fuse", "-o", at("nofuse")).Outputs[0]; h.Cache != "miss" || h.Key == o.Key {
		t.Fatalf("--no-fuse: %+v", h)
	}
	ls, _, err := run(t, "cache", "ls", cache)
	if err != nil || !strings.Contains(ls, "2 entries") || !strings.Contains(ls, o.Key) {
		t.Fatalf("cache ls: %v\n%s", err, ls)
	}
	pruned, _, err := run(t, "cache", "prune", cache, "--max-size", "0")
	if err != nil || !strings.Contains(pruned, "removed 2 entries; 0 left") {
		t.Fatalf("cache prune: %v\n%s", err, pruned)
	}
	// Outputs put in place by hard links outlive their entries.
	if _, err := bundle.Open(at("hit"), true); err != nil {
		t.Fatalf("a materialised bundle after its entry was pruned: %v", err)
	}
	if _, _, err := run(t, "cache", "prune", cache); err == nil || !strings.Contains(err.Error(), "--max-size is required") {
		t.Fatalf("prune without --max-size: %v", err)
	}
}

// TestCacheFromEnvironment: ZRTC_CACHE names the cache when --cache does
// not, and --no-cache turns it off.
func TestCacheFromEnvironment(t *testing.T) {
	model := oldModel(t)
	dir := t.TempDir()
	t.Setenv(cacheEnv, filepath.Join(dir, "cache"))
	if o := buildJSON(t, model, "-o", filepath.Join(dir, "a")).Outputs[0]; o.Cache != "miss" {
		t.Fatalf("with $%s: %+v", cacheEnv, o)
	}
	if o := buildJSON(t, model, "-o", filepath.Join(dir, "b")).Outputs[0]; o.Cache != "hit" {
		t.Fatalf("with $%s again: %+v", cacheEnv, o)
	}
	if o := buildJSON(t, model, "--no-cache", "-o", filepath.Join(dir, "c")).Outputs[0]; o.Cache != "off" || o.Key != "" && len(o.Key) != 64 {
		t.Fatalf("--no-cache: %+v", o)
	}
}

// TestConcurrentBuildsOfOneKey: builds of one key racing on one cache all
// succeed and leave one valid entry.
func TestConcurrentBuildsOfOneKey(t *testing.T) {
	model, dir, cache := cacheTest(t)
	const n = 4
	os.MkdirAll(filepath.Join(dir, "out"), 0o755)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, errs[i] = run(t, "build", model, "-q", "--cache", cache, "-o", filepath.Join(dir, "out", string(rune('a'+i))))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("build %d: %v", i, err)
		}
	}
	entries, err := filepath.Glob(filepath.Join(cache, "*", "entries", "*"))
	if err != nil || len(entries) != 1 {
		t.Fatalf("cache holds %v, want one entry", entries)
	}
	b, err := bundle.Open(entries[0], true)
	if err != nil {
		t.Fatalf("the entry: %v", err)
	}
	b.Close()
	for i := 1; i < n; i++ {
		testmodel.SameTree(t, filepath.Join(dir, "out", "a"), filepath.Join(dir, "out", string(rune('a'+i))), 1)
	}
}

func TestBuildSet(t *testing.T) {
	t.Setenv(cacheEnv, "")
	model := oldModel(t)
	dir := t.TempDir()
	at := func(n string) string { return filepath.Join(dir, n) }
	cache := at("cache")
	// Given in any order, the targets come out in the registry's.
	s := buildJSON(t, model, "--target", "cuda:sm_90,cpu", "--cache", cache, "-o", at("set"))
	if !s.Set || len(s.Outputs) != 2 || s.Outputs[0].Target != "cpu" || s.Outputs[1].Target != "cuda:sm_90" {
		t.Fatalf("set summary: %+v", s)
	}
	x, err := bundleset.Read(at("set"))
	if err != nil {
		t.Fatal(err)
	}
	if x.Model.Source != filepath.Base(model) || x.Model.Architecture == "" || len(x.Model.SHA256) != 64 || len(x.Model.ConfigSHA256) != 64 {
		t.Fatalf("set model: %+v", x.Model)
	}
	cuda, ok := x.Member("cuda:sm_90")
	if !ok || cuda.Dir != "cuda_sm_90" || cuda.Requires != (bundleset.Requires{Tier: "cuda", CUDAComputeCapability: "9.0"}) || cuda.Key != s.Outputs[1].Key {
		t.Fatalf("cuda member: %+v", cuda)
	}
	if s.Outputs[1].Path != filepath.Join(at("set"), "cuda_sm_90") {
		t.Fatalf("member path %s", s.Outputs[1].Path)
	}

	// Each member equals a single-target build, and the key zrtc key
	// prints.
	if _, stderr, err := run(t, "build", model, "-q", "--target", "cuda:sm_90", "-o", at("cuda")); err != nil {
		t.Fatal(err, stderr)
	}
	testmodel.SameTree(t, at("cuda"), cuda.Path(at("set")), 1)
	keys, _, err := run(t, "key", model, "--target", "cpu,cuda:sm_90")
	if err != nil || !strings.Contains(keys, s.Outputs[0].Key+" cpu\n") || !strings.Contains(keys, cuda.Key+" cuda:sm_90\n") {
		t.Fatalf("zrtc key for two targets: %v\n%s", err, keys)
	}

	// Built again (from the cache) and without it: byte-identical sets.
	again := buildJSON(t, model, "--target", "cpu,cuda:sm_90", "--cache", cache, "-o", at("again"))
	if again.Outputs[0].Cache != "hit" || again.Outputs[1].Cache != "hit" {
		t.Fatalf("second set build: %+v", again.Outputs)
	}
	if _, stderr, err := run(t, "build", model, "-q", "--target", "cpu,cuda:sm_90", "-o", at("nocache")); err != nil {
		t.Fatal(err, stderr)
	}
	testmodel.SameTree(t, at("set"), at("again"), 1)
	testmodel.SameTree(t, at("set"), at("nocache"), 1)

	dump, _, err := run(t, "dump", "set", at("set"))
	if err != nil || !strings.Contains(dump, "cuda_sm_90") || !strings.Contains(dump, "CUDA compute capability >= 9.0") || strings.Count(dump, "  ok") != 2 {
		t.Fatalf("dump set: %v\n%s", err, dump)
	}
	if ok, _, err := run(t, "verify", "-q", at("set")); err != nil || ok != "ok\n" {
		t.Fatalf("verify set: %q %v", ok, err)
	}
	// (Replaced, not written in place: the file is a hard link into the
	// cache.)
	replaced := filepath.Join(at("again"), "cpu", bundle.GraphFile)
	os.Remove(replaced)
	os.WriteFile(replaced, []byte("ZTRG?"), 0o644)
	if _, _, err := run(t, "verify", "-q", at("again")); err == nil || !strings.Contains(err.Error(), "does not match the index") {
		t.Fatalf("verify of a set with a replaced member: %v", err)
	}
	// A set replaces a bundle and a bundle a set (both are zrtc's), and
	// a single build writes over the set it replaced.
	if _, stderr, err := run(t, "build", model, "-q", "-o", at("set")); err != nil || bundleset.IsSet(at("set")) {
		t.Fatalf("bundle over a set: %v %s", err, stderr)
	}
	if _, _, err := run(t, "build", model, "--target", "cpu,nope", "-o", at("x")); err == nil || !strings.Contains(err.Error(), `unsupported target "nope"`) {
		t.Fatalf("unknown target in a set: %v", err)
	}
	// --tp without --target builds the config's target's ranks.
	if _, stderr, err := run(t, "build", model, "-q", "--tp", "2", "-o", at("tp")); err != nil {
		t.Fatal(err, stderr)
	}
	if x, err := bundleset.Read(at("tp")); err != nil || x.TPRanks != 2 || len(x.Bundles) != 2 || x.Bundles[0].Target != "cpu" || x.Bundles[1].Dir != "cpu.tp1" {
		t.Fatalf("--tp 2 without --target: %+v, %v", x, err)
	}
}

// TestMissVerifiesTheRememberedDigest: a GGUF rewritten in place with its
// size and mtime kept fools the digest memo; the build that misses reads
// every byte anyway, notices, keys the entry by what it read and forgets
// the memo.
func TestMissVerifiesTheRememberedDigest(t *testing.T) {
	model, dir, cache := cacheTest(t)
	before := buildJSON(t, model, "--cache", cache, "-o", filepath.Join(dir, "a")).Outputs[0]
	if _, _, err := run(t, "cache", "prune", cache, "--max-size", "0"); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(model)
	f, err := os.OpenFile(model, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	last := make([]byte, 1)
	f.ReadAt(last, fi.Size()-1) // tensor data: the file stays a valid GGUF
	last[0] ^= 0x55
	f.WriteAt(last, fi.Size()-1)
	f.Close()
	os.Chtimes(model, fi.ModTime(), fi.ModTime())

	out, stderr, err := run(t, "build", model, "--json", "--cache", cache, "-o", filepath.Join(dir, "b"))
	if err != nil {
		t.Fatal(err, stderr)
	}
	if !strings.Contains(stderr, "remembered digest is stale") {
		t.Errorf("no warning about the stale digest:\n%s", stderr)
	}
	var s build.Summary
	json.Unmarshal([]byte(out), &s)
	truth, _, err := run(t, "key", model) // no cache: hashes the bytes
	if err != nil {
		t.Fatal(err)
	}
	if k := s.Outputs[0].Key; k == before.Key || k != strings.TrimSpace(truth) {
		t.Fatalf("key after the in-place change %s; before %s, of the bytes %s", k, before.Key, truth)
	}
	// The memo was forgotten: the next build reads the file and hits.
	if o := buildJSON(t, model, "--cache", cache, "-o", filepath.Join(dir, "c")).Outputs[0]; o.Cache != "hit" || o.Key != s.Outputs[0].Key {
		t.Fatalf("after the fix: %+v", o)
	}
}

// TestBuildIntoCacheAlone builds with --cache and no -o: the bundle goes
// into the cache only, the summary names the entry, and a second build
// hits it there. Both keep the key zrtc key prints for the same flags.
func TestBuildIntoCacheAlone(t *testing.T) {
	model := testmodel.Tiny(t)
	cache := t.TempDir()
	first := buildJSON(t, model, "--cache", cache, "--slots", "2")
	if len(first.Outputs) != 1 || first.Outputs[0].Cache != "miss" {
		t.Fatalf("first build: %+v", first.Outputs)
	}
	o := first.Outputs[0]
	if want := filepath.Join(cache, "zrtc-cache-1", "entries", o.Key); o.Path != want {
		t.Errorf("the output is %s, want the entry %s", o.Path, want)
	}
	if _, _, err := bundle.ReadGraph(filepath.Join(o.Path, bundle.GraphFile)); err != nil {
		t.Errorf("the entry: %v", err)
	}
	again := buildJSON(t, model, "--cache", cache, "--slots", "2")
	if again.Outputs[0].Cache != "hit" || again.Outputs[0].Path != o.Path {
		t.Errorf("second build: %+v, want a hit on %s", again.Outputs[0], o.Path)
	}
	key, _, err := run(t, "key", model, "--cache", cache, "--slots", "2")
	if err != nil || strings.TrimSpace(key) != o.Key {
		t.Errorf("zrtc key --slots 2 says %q (%v), the build %s", key, err, o.Key)
	}
	if other, _, _ := run(t, "key", model, "--cache", cache); strings.TrimSpace(other) == o.Key {
		t.Errorf("zrtc key without --slots gives the --slots 2 build's key")
	}
	// Without a cache, -o stays required.
	if _, _, err := run(t, "build", model, "--no-cache"); err == nil || !strings.Contains(err.Error(), "-o OUT is required") {
		t.Errorf("no -o, no cache: %v", err)
	}
	if _, _, err := run(t, "build", model, "--cache", cache, "--target", "cpu,cuda:sm_90"); err == nil || !strings.Contains(err.Error(), "only one target") {
		t.Errorf("a set into the cache alone: %v", err)
	}
}

// TestBuildSaysDefaults checks that a build without a config prints the
// defaults it chose, one line each, and -q keeps them quiet.
func TestBuildSaysDefaults(t *testing.T) {
	model := testmodel.Tiny(t)
	_, stderr, err := run(t, "build", model, "-o", filepath.Join(t.TempDir(), "b"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"zrtc: default context_length = 256 (the GGUF's llama.context_length)\n",
		"zrtc: default max_slots = 16, decode_slots = [1 2 4 8 16] (16 requests at once, cpu's default)\n",
		"zrtc: default prefill_rows = [128] (cpu's default)\n",
		"zrtc: default kv_pages = 256 (4096 tokens: 16 slots × min(context 256, 2048), at least one whole context)\n",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("build does not say %q:\n%s", want, stderr)
		}
	}
	_, stderr, err = run(t, "build", model, "--ctx-size", "128", "--slots", "3", "-o", filepath.Join(t.TempDir(), "b"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stderr, "default context_length") || strings.Contains(stderr, "default max_slots") || !strings.Contains(stderr, "default kv_pages = 24 ") {
		t.Errorf("--ctx-size 128 --slots 3: the build says\n%s", stderr)
	}
	_, stderr, err = run(t, "build", "-q", model, "-o", filepath.Join(t.TempDir(), "b"))
	if err != nil || stderr != "" {
		t.Errorf("-q: %v, stderr %q", err, stderr)
	}
	if _, _, err := run(t, "build", model, "--slots", "-1", "-o", filepath.Join(t.TempDir(), "b")); err == nil || !strings.Contains(err.Error(), "--slots -1 out of range") {
		t.Errorf("--slots -1: %v", err)
	}
}
