// Package buildcache is zrtc's content-addressed build cache: a directory
// of bundles, each stored under the key of the build that made it (a
// SHA-256 over everything that decides a build's output; compiler/buildkey
// computes it). A hit puts the stored bundle at the output path without
// compiling, by hard links where the file system allows, reflinks where
// it offers them, copies otherwise.
//
// Layout under the cache directory:
//
//	CACHEDIR.TAG              marks the directory as a cache for backup tools
//	zrtc-cache-1/lock         flock: shared while entries are read or added, exclusive to prune
//	zrtc-cache-1/entries/KEY  one bundle directory per key (64 hex digits)
//	zrtc-cache-1/digests/     remembered file digests (format/filedigest)
//	zrtc-cache-1/building/    flock files: one build of a key at a time (Building)
//
// Entries are immutable once in place. They are added through
// format/publish, so a crash leaves a whole entry or none, and two builds
// racing to add the same key both succeed, leaving one whole entry (the
// later swaps an identical build in for the earlier; builds are
// byte-reproducible). Pruning renames an entry out of the way before
// deleting it, so a reader never finds a half-deleted one. An entry's
// modification time is its last use, for least-recently-used pruning.
package buildcache

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/filedigest"
	"github.com/zrtdev/zrt/format/publish"
)

// layout names the versioned root under the cache directory: a zrtc with
// a different layout uses a different root and never misreads this one.
const layout = "zrtc-cache-1"

// cachedirTag is the Cache Directory Tagging Specification's file, which
// backup tools (tar --exclude-caches, borg, restic) honour.
const cachedirTag = "Signature: 8a477f597d28d172789f06886806bc55\n# This file marks a zrtc build cache (zrtc build --cache).\n# Its contents can be rebuilt; see zrtc cache --help.\n"

// ErrMiss is returned for a key the cache does not hold.
var ErrMiss = errors.New("not in the cache")

// Key identifies a build: the SHA-256 of its canonically encoded inputs.
type Key [32]byte

// String is the key in lowercase hex, as zrtc key prints it and as the
// entry's directory is named.
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// ParseKey reads a key written by String.
func ParseKey(s string) (Key, error) {
	var k Key
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(k) {
		return k, fmt.Errorf("%q is not a build key (64 hex digits)", s)
	}
	copy(k[:], b)
	return k, nil
}

// Cache is an open cache directory.
type Cache struct {
	dir     string // the directory the user named
	root    string // dir/layout
	entries string
}

// Open opens the cache at dir, creating it when missing.
func Open(dir string) (*Cache, error) {
	if dir == "" {
		return nil, errors.New("cache: no directory given")
	}
	c := &Cache{dir: dir, root: filepath.Join(dir, layout)}
	c.entries = filepath.Join(c.root, "entries")
	for _, d := range []string{c.entries, c.Digests().Dir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("cache %s: %w", dir, err)
		}
	}
	tag := filepath.Join(dir, "CACHEDIR.TAG")
	if _, err := os.Lstat(tag); errors.Is(err, fs.ErrNotExist) {
		// Only a marker: losing a race to write it, or failing to, is
		// harmless.
		_ = publish.File(publish.OS{}, tag, func(string, fs.FileInfo) error { return nil }, []byte(cachedirTag))
	}
	f, err := os.OpenFile(c.lockPath(), os.O_CREATE|os.O_RDONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cache %s: %w", dir, err)
	}
	f.Close()
	return c, nil
}

// Dir is the cache directory as given to Open.
func (c *Cache) Dir() string { return c.dir }

// Digests is the memo of file digests kept in the cache, so a model named
// by many builds is hashed once (format/filedigest).
func (c *Cache) Digests() filedigest.Memo {
	return filedigest.Memo{Dir: filepath.Join(c.root, "digests")}
}

func (c *Cache) lockPath() string { return filepath.Join(c.root, "lock") }

// entryPath is where key's bundle lives.
func (c *Cache) entryPath(k Key) string { return filepath.Join(c.entries, k.String()) }

// lock takes the cache lock, shared (readers and writers of entries) or
// exclusive (prune, which removes them).
func (c *Cache) lock(exclusive bool) (release func(), err error) {
	f, err := os.Open(c.lockPath())
	if err != nil {
		return nil, fmt.Errorf("cache %s: lock: %w", c.dir, err)
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	if err := publish.Flock(f, how); err != nil {
		f.Close()
		return nil, fmt.Errorf("cache %s: lock: %w", c.dir, err)
	}
	return func() { f.Close() }, nil
}

// Hold keeps entries from being pruned until release is called, for a
// caller that adds an entry and then materialises it: without it, a prune
// between the two could remove the entry just added.
func (c *Cache) Hold() (release func(), err error) { return c.lock(false) }

// Lookup reports whether the cache holds key. An entry whose graph file
// does not decode (corrupted on disk) is removed and reported missing, so
// the build that follows replaces it rather than publishing a bad copy.
func (c *Cache) Lookup(k Key) (bool, error) {
	release, err := c.lock(false)
	if err != nil {
		return false, err
	}
	p := c.entryPath(k)
	_, err = os.Lstat(p)
	if err == nil {
		_, _, err = bundle.ReadGraph(filepath.Join(p, bundle.GraphFile))
		release()
		if err != nil {
			return false, c.discard(k)
		}
		return true, nil
	}
	release()
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return false, fmt.Errorf("cache %s: %w", c.dir, err)
}

// Insert adds key's bundle: fill writes it into an empty directory, as a
// build writes its output. It is published atomically, and never over a
// sound entry of the key already there: a key names its bytes, so a build
// that adds the same key at the same time as another keeps the first
// one's, which others may be materialising (replacing it would remove its
// files from under them). An entry whose graph file does not decode is
// replaced.
func (c *Cache) Insert(k Key, fill func(dir string) error) error {
	release, err := c.lock(false)
	if err != nil {
		return err
	}
	defer release()
	p := c.entryPath(k)
	if _, err := os.Lstat(p); err == nil {
		if _, _, err := bundle.ReadGraph(filepath.Join(p, bundle.GraphFile)); err == nil {
			return nil
		}
		err = publish.Dir(publish.OS{}, p, bundle.IsBundle, fill)
		if err != nil {
			return fmt.Errorf("cache %s: replace %s: %w", c.dir, k, err)
		}
		return nil
	}
	if _, err := publish.DirOnce(publish.OS{}, p, fill); err != nil {
		return fmt.Errorf("cache %s: add %s: %w", c.dir, k, err)
	}
	return nil
}

// discard removes an entry: first renamed to a temporary name, which a
// later Sweep removes if this process dies before it does, so no reader
// ever sees the entry half gone.
func (c *Cache) discard(k Key) error {
	release, err := c.lock(true)
	if err != nil {
		return err
	}
	defer release()
	return c.removeEntry(k)
}

// removeEntry does discard's work; the caller holds the exclusive lock.
func (c *Cache) removeEntry(k Key) error {
	p := c.entryPath(k)
	aside := filepath.Join(c.entries, publish.TempPrefix(p)+"-removed")
	if err := os.Rename(p, aside); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("cache %s: remove %s: %w", c.dir, k, err)
	}
	if err := os.RemoveAll(aside); err != nil {
		return fmt.Errorf("cache %s: remove %s: %w", c.dir, k, err)
	}
	return nil
}

// Entry describes one cached bundle.
type Entry struct {
	Key Key
	// Dir is the entry's bundle directory.
	Dir string
	// Bytes is the size of its files; space shared with bundles
	// materialised from it by hard links is counted here too.
	Bytes int64
	// LastUsed is when a build last added or materialised it.
	LastUsed time.Time
	// Target and Source are from its graph file ("" when unreadable).
	Target, Source string
}

// List returns the entries, least recently used first.
func (c *Cache) List() ([]Entry, error) {
	release, err := c.lock(false)
	if err != nil {
		return nil, err
	}
	defer release()
	return c.list()
}

func (c *Cache) list() ([]Entry, error) {
	des, err := os.ReadDir(c.entries)
	if err != nil {
		return nil, fmt.Errorf("cache %s: %w", c.dir, err)
	}
	var out []Entry
	for _, de := range des {
		k, err := ParseKey(de.Name())
		if err != nil || !de.IsDir() {
			continue // a temporary, or not ours
		}
		e := Entry{Key: k, Dir: filepath.Join(c.entries, de.Name())}
		fi, err := os.Stat(e.Dir)
		if err != nil {
			continue // pruned meanwhile
		}
		e.LastUsed = fi.ModTime()
		if e.Bytes, err = treeBytes(e.Dir); err != nil {
			return nil, fmt.Errorf("cache %s: %w", c.dir, err)
		}
		if g, _, err := bundle.ReadGraph(filepath.Join(e.Dir, bundle.GraphFile)); err == nil {
			e.Target, e.Source = g.Ident.Target, g.Ident.SourceName
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].LastUsed.Equal(out[j].LastUsed) {
			return out[i].LastUsed.Before(out[j].LastUsed)
		}
		return out[i].Key.String() < out[j].Key.String()
	})
	return out, nil
}

// Prune removes least recently used entries until the rest take at most
// maxBytes, and the temporaries of builds that died. It returns what it
// removed. It waits for builds reading or adding entries to finish with
// them, and they for it.
func (c *Cache) Prune(maxBytes int64) ([]Entry, error) {
	release, err := c.lock(true)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := publish.Sweep(publish.OS{}, c.entries); err != nil {
		return nil, fmt.Errorf("cache %s: %w", c.dir, err)
	}
	es, err := c.list()
	if err != nil {
		return nil, err
	}
	var total int64
	for _, e := range es {
		total += e.Bytes
	}
	var removed []Entry
	for _, e := range es {
		if total <= maxBytes {
			break
		}
		if err := c.removeEntry(e.Key); err != nil {
			return removed, err
		}
		total -= e.Bytes
		removed = append(removed, e)
	}
	return removed, nil
}

// treeBytes sums the sizes of the regular files under dir.
func treeBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	return n, err
}

// Use returns the directory of key's entry and marks the entry used now,
// for a reader that runs the bundle where it is instead of materialising
// a copy (zrt-run given a GGUF). Entries are immutable, so it can; a
// prune that removes the entry meanwhile removes only its names, and the
// reader's open files and mappings stay valid. It returns ErrMiss
// (wrapped) when the cache does not hold key.
func (c *Cache) Use(k Key) (string, error) {
	release, err := c.lock(false)
	if err != nil {
		return "", err
	}
	defer release()
	p := c.entryPath(k)
	if _, err := os.Lstat(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("cache %s: %s: %w", c.dir, k, ErrMiss)
		}
		return "", fmt.Errorf("cache %s: %w", c.dir, err)
	}
	now := time.Now()
	_ = os.Chtimes(p, now, now) // last use, for prune; failing only ages it
	return p, nil
}

// Building holds key's build lock until release is called, waiting while
// another process holds it: two processes that would build the same key
// take turns, and the second finds the first's entry (Lookup) instead of
// compiling again. The cache stays whole without it (Insert is atomic);
// it only saves the duplicate work. The wait ends with ctx.
func (c *Cache) Building(ctx context.Context, k Key) (release func(), err error) {
	dir := filepath.Join(c.root, "building")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cache %s: %w", c.dir, err)
	}
	// The lock files stay: removing one another process has open would
	// let a third lock a new file of the same name beside it.
	f, err := os.OpenFile(filepath.Join(dir, k.String()+".lock"), os.O_CREATE|os.O_RDONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cache %s: build lock: %w", c.dir, err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			f.Close()
			return nil, fmt.Errorf("cache %s: build lock: %w", c.dir, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("cache %s: waiting for another build of %s: %w", c.dir, k, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
