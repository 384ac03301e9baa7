package buildcache

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/publish"
)

// MaterialiseOptions adjust how a cached bundle is put in place.
type MaterialiseOptions struct {
	// SourceName is the base name of the GGUF the build was asked for.
	// The key leaves the file's name out, so a renamed model hits, but
	// the graph file records it (zrt-run serve names the model after
	// it): where the entry's differs, the output gets a graph file with
	// this name instead of a link, exactly what a fresh build writes.
	SourceName string
	// Owned says what an existing destination Materialise may replace
	// (format/publish); nil means a bundle only.
	Owned publish.Owned
}

// Placed says how a materialisation put the files in place.
type Placed struct {
	Linked  int   `json:"linked"`  // hard links to the entry's files
	Cloned  int   `json:"cloned"`  // reflinks
	Copied  int   `json:"copied"`  // byte copies
	Written int   `json:"written"` // graph files rewritten with another source name
	Bytes   int64 `json:"bytes"`
}

func (p Placed) String() string {
	return fmt.Sprintf("%d hard-linked, %d reflinked, %d copied, %d rewritten; %d bytes", p.Linked, p.Cloned, p.Copied, p.Written, p.Bytes)
}

// Materialise puts key's bundle at dst through format/publish, as a build
// writes it: atomically, replacing only a missing path or what
// opt.Owned accepts (by default a bundle). It
// returns ErrMiss (wrapped) when the cache does not hold key.
func (c *Cache) Materialise(k Key, dst string, opt MaterialiseOptions) (Placed, error) {
	var placed Placed
	owned := opt.Owned
	if owned == nil {
		owned = bundle.IsBundle
	}
	err := publish.Dir(publish.OS{}, dst, owned, func(tmp string) error {
		var err error
		placed, err = c.MaterialiseInto(k, tmp, opt)
		return err
	})
	return placed, err
}

// MaterialiseInto fills the existing empty directory dir with key's
// bundle, for a caller that publishes dir itself (a bundle set). The
// entry's last use is set to now.
func (c *Cache) MaterialiseInto(k Key, dir string, opt MaterialiseOptions) (Placed, error) {
	var placed Placed
	release, err := c.lock(false)
	if err != nil {
		return placed, err
	}
	defer release()
	src := c.entryPath(k)
	if _, err := os.Lstat(src); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return placed, fmt.Errorf("cache %s: %s: %w", c.dir, k, ErrMiss)
		}
		return placed, fmt.Errorf("cache %s: %w", c.dir, err)
	}
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil || rel == "." {
			return err
		}
		out := filepath.Join(dir, rel)
		switch {
		case d.IsDir():
			return os.Mkdir(out, 0o755)
		case !d.Type().IsRegular():
			return fmt.Errorf("%s is not a regular file (the entry was altered)", p)
		case rel == bundle.GraphFile && opt.SourceName != "":
			n, err := restamp(p, out, opt.SourceName)
			if err != nil {
				return err
			}
			if n > 0 {
				placed.Written++
				placed.Bytes += n
				return nil
			}
		}
		how, n, err := placeFile(p, out)
		if err != nil {
			return err
		}
		placed.count(how, n)
		return nil
	})
	if err != nil {
		return placed, fmt.Errorf("cache %s: materialise %s: %w", c.dir, k, err)
	}
	now := time.Now()
	// The entry's mtime is its last use (LRU); a failure only makes it
	// look older to prune.
	_ = os.Chtimes(src, now, now)
	return placed, nil
}

// restamp writes to out the graph file at p with its source name set to
// name and returns its size, or 0 (nothing written) when it already says
// name.
func restamp(p, out, name string) (int64, error) {
	g, _, err := bundle.ReadGraph(p)
	if err != nil {
		return 0, err
	}
	if g.Ident.SourceName == name {
		return 0, nil
	}
	g.Ident.SourceName = name
	b := g.Encode()
	return int64(len(b)), os.WriteFile(out, b, 0o644)
}

// placement is how placeFile put a file in place.
type placement int

const (
	linked placement = iota
	cloned
	copied
)

func (p *Placed) count(how placement, bytes int64) {
	switch how {
	case linked:
		p.Linked++
	case cloned:
		p.Cloned++
	default:
		p.Copied++
	}
	p.Bytes += bytes
}

// placeFile makes dst a file with src's bytes as cheaply as the file
// system allows: a hard link (no copy; entries are never modified in
// place, and neither are bundles, which zrtc replaces by rename), else a
// reflink (copy-on-write, btrfs and XFS), else a copy. It returns which
// it took and the file's size.
func placeFile(src, dst string) (placement, int64, error) {
	fi, err := os.Stat(src)
	if err != nil {
		return 0, 0, err
	}
	if err := os.Link(src, dst); err == nil {
		return linked, fi.Size(), nil
	}
	// EXDEV (another file system), EPERM (protected_hardlinks on a
	// cache shared between users), EMLINK: fall back to bytes.
	in, err := os.Open(src)
	if err != nil {
		return 0, 0, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, 0, err
	}
	if unix.IoctlFileClone(int(out.Fd()), int(in.Fd())) == nil {
		return cloned, fi.Size(), out.Close()
	}
	// io.Copy between files uses copy_file_range, which copies in the
	// kernel (and reflinks where a file system does it implicitly).
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return 0, 0, err
	}
	return copied, fi.Size(), out.Close()
}
