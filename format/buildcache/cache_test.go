package buildcache

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/publish"
	"github.com/zrtdev/zrt/internal/testmodel"
)

// fill returns a fill function writing a small bundle-shaped directory: a
// real graph file naming source, a weights file of n bytes and a kernel
// file. The cache stores bundles without running them, so this is all it
// needs.
func fill(source string, n int) func(dir string) error {
	return func(dir string) error {
		g := &bundle.Graph{Ident: bundle.Ident{Producer: "test", Target: "cpu", SourceName: source}, ConfigTOML: "x = 1\n"}
		if err := os.WriteFile(filepath.Join(dir, bundle.GraphFile), g.Encode(), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, bundle.WeightsFile), bytes.Repeat([]byte{7}, n), 0o644); err != nil {
			return err
		}
		if err := os.Mkdir(filepath.Join(dir, bundle.KernelDir), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, bundle.KernelDir, "000_k.zrt"), []byte("kernel"), 0o644)
	}
}

func key(b byte) Key {
	var k Key
	k[0] = b
	return k
}

func TestInsertMaterialise(t *testing.T) {
	dir := t.TempDir()
	c, err := Open(filepath.Join(dir, "cache"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cache", "CACHEDIR.TAG")); err != nil {
		t.Error("no CACHEDIR.TAG")
	}
	k := key(1)
	if hit, err := c.Lookup(k); hit || err != nil {
		t.Fatalf("empty cache: hit=%v err=%v", hit, err)
	}
	if _, err := c.Materialise(k, filepath.Join(dir, "out"), MaterialiseOptions{}); !errors.Is(err, ErrMiss) {
		t.Fatalf("materialising a missing key: %v, want ErrMiss", err)
	}
	if err := c.Insert(k, fill("m.gguf", 100)); err != nil {
		t.Fatal(err)
	}
	if hit, err := c.Lookup(k); !hit || err != nil {
		t.Fatalf("after insert: hit=%v err=%v", hit, err)
	}
	fresh := filepath.Join(dir, "fresh")
	if err := bundle.WriteDir(fresh, fill("m.gguf", 100)); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	placed, err := c.Materialise(k, out, MaterialiseOptions{SourceName: "m.gguf"})
	if err != nil {
		t.Fatal(err)
	}
	if placed.Linked+placed.Cloned+placed.Copied != 3 || placed.Written != 0 {
		t.Errorf("placed %+v, want 3 files placed and none rewritten", placed)
	}
	testmodel.SameTree(t, fresh, out, 0)

	// Asked for under another file name, the graph file records that
	// name, as a fresh build of the renamed file would.
	renamed := filepath.Join(dir, "renamed")
	if err := bundle.WriteDir(renamed, fill("other.gguf", 100)); err != nil {
		t.Fatal(err)
	}
	if placed, err = c.Materialise(k, out, MaterialiseOptions{SourceName: "other.gguf"}); err != nil || placed.Written != 1 {
		t.Fatalf("restamped materialise: %+v %v", placed, err)
	}
	testmodel.SameTree(t, renamed, out, 0)

	// The destination's rules are publish's: a directory that is not a
	// bundle is refused and kept.
	notes := filepath.Join(dir, "notes")
	os.Mkdir(notes, 0o755)
	if _, err := c.Materialise(k, notes, MaterialiseOptions{}); !errors.Is(err, publish.ErrNotOurs) {
		t.Fatalf("materialise over a user's directory: %v", err)
	}
}

// TestConcurrentInsertOfOneKey: builds racing to add the same key leave
// one whole entry and no temporaries, and every racer can materialise it.
func TestConcurrentInsertOfOneKey(t *testing.T) {
	dir := t.TempDir()
	c, err := Open(filepath.Join(dir, "cache"))
	if err != nil {
		t.Fatal(err)
	}
	k := key(2)
	os.Mkdir(filepath.Join(dir, "out"), 0o755)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = c.Insert(k, fill("m.gguf", 1<<16)); errs[i] == nil {
				_, errs[i] = c.Materialise(k, filepath.Join(dir, "out", string(rune('a'+i))), MaterialiseOptions{})
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("racer %d: %v", i, err)
		}
	}
	des, _ := os.ReadDir(c.entries)
	if len(des) != 1 || des[0].Name() != k.String() {
		var names []string
		for _, d := range des {
			names = append(names, d.Name())
		}
		t.Fatalf("entries dir holds %v, want the one entry", names)
	}
	want := filepath.Join(dir, "want")
	bundle.WriteDir(want, fill("m.gguf", 1<<16))
	testmodel.SameTree(t, want, filepath.Join(c.entries, k.String()), 0)
	testmodel.SameTree(t, want, filepath.Join(dir, "out", "h"), 0)
}

func TestListAndPruneLRU(t *testing.T) {
	c, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(-time.Hour)
	for i := byte(1); i <= 3; i++ {
		if err := c.Insert(key(i), fill("m.gguf", 1000)); err != nil {
			t.Fatal(err)
		}
		// Entry 1 used first, 3 last.
		when := base.Add(time.Duration(i) * time.Minute)
		os.Chtimes(c.entryPath(key(i)), when, when)
	}
	// Using entry 1 makes it the most recent.
	if _, err := c.MaterialiseInto(key(1), t.TempDir(), MaterialiseOptions{}); err != nil {
		t.Fatal(err)
	}
	// A dead build's temporary, which prune sweeps.
	dead := filepath.Join(c.entries, publish.TempPrefix(c.entryPath(key(9)))+"123")
	os.Mkdir(dead, 0o755)
	es, err := c.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 3 || es[0].Key != key(2) || es[2].Key != key(1) || es[0].Target != "cpu" || es[0].Source != "m.gguf" {
		t.Fatalf("list: %+v", es)
	}
	per := es[0].Bytes
	removed, err := c.Prune(2*per + per/2)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0].Key != key(2) {
		t.Fatalf("prune removed %+v, want the least recently used (2)", removed)
	}
	if _, err := os.Stat(dead); err == nil {
		t.Error("prune left a dead temporary")
	}
	if removed, _ := c.Prune(0); len(removed) != 2 {
		t.Fatalf("prune to 0 removed %d", len(removed))
	}
	if es, _ := c.List(); len(es) != 0 {
		t.Fatalf("%d entries after pruning to 0", len(es))
	}
}

// TestCorruptEntryIsDropped: an entry whose graph file no longer decodes
// is a miss, removed so that the rebuild can replace it.
func TestCorruptEntryIsDropped(t *testing.T) {
	c, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	k := key(4)
	if err := c.Insert(k, fill("m.gguf", 10)); err != nil {
		t.Fatal(err)
	}
	g := filepath.Join(c.entryPath(k), bundle.GraphFile)
	b, _ := os.ReadFile(g)
	b[len(b)-1] ^= 0xff
	os.Remove(g) // never write through a possible hard link
	os.WriteFile(g, b, 0o644)
	if hit, err := c.Lookup(k); hit || err != nil {
		t.Fatalf("corrupt entry: hit=%v err=%v", hit, err)
	}
	if _, err := os.Stat(c.entryPath(k)); err == nil {
		t.Fatal("corrupt entry kept")
	}
}

func TestParseKey(t *testing.T) {
	k := key(0xab)
	if got, err := ParseKey(k.String()); err != nil || got != k {
		t.Fatalf("round trip: %v %v", got, err)
	}
	for _, bad := range []string{"", "ab", strings.Repeat("g", 64)} {
		if _, err := ParseKey(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
