package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/bundleset"
	"github.com/zrtdev/zrt/format/zrtp"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/pick"
)

// defaultUnpackDir is where packs are unpacked without --unpack-dir:
// the user's cache directory, since an unpacked member can always be
// unpacked again.
func defaultUnpackDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory for unpacked packs (%v): pass --unpack-dir", err)
	}
	return filepath.Join(d, "zrt", "unpacked"), nil
}

// packBundle returns the bundle directory for the pack at path: the
// member this machine runs (runtime/pick, as for a set), unpacked once
// under base/<SHA-256 of the pack's index>/ and reused from there on
// later runs. Only that member is read and decompressed.
func (f *engineFlags) packBundle(path string, opt runtime.Options) (string, error) {
	tier := opt.Tier
	base := f.unpackDir
	if base == "" {
		var err error
		if base, err = defaultUnpackDir(); err != nil {
			return "", err
		}
	}
	r, err := zrtp.Open(path)
	if err != nil {
		return "", err
	}
	defer r.Close()
	x := r.Index()
	m := x.Members[0]
	var want string // the graph digest the set's index records
	if x.Kind == zrtp.KindSet {
		c, err := pick.Choose(path, x.Set, pick.Detect(machineProbes(opt)), tier)
		if err != nil {
			return "", err
		}
		var ok bool
		if m, ok = x.Member(c.Member.Target); !ok {
			return "", fmt.Errorf("pack %s: %w: the set's index lists %s, the pack holds no such member", path, zrtp.ErrFormat, c.Member.Target)
		}
		want = c.Member.GraphSHA256
		if f.explain {
			c.Path = unpackedDir(base, r, m)
			lines := strings.Split(strings.TrimSuffix(c.Explain(), "\n"), "\n")
			fmt.Fprintf(os.Stderr, "zrt-run: pack %s on this machine: %s\nzrt-run: %s\n", path, c.Machine, strings.Join(lines, "\nzrt-run: "))
		}
	}
	dir := unpackedDir(base, r, m)
	if fi, err := os.Stat(dir); err == nil && bundle.IsBundle(dir, fi) == nil {
		return dir, checkMember(path, dir, m, want)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", fmt.Errorf("pack %s: unpack directory: %w", path, err)
	}
	if err := r.UnpackMember(m, dir); err != nil {
		return "", err
	}
	return dir, checkMember(path, dir, m, want)
}

// checkMember ties an unpacked set member to the set's index, as a set
// directory's member is tied (bundleset.VerifyMember).
func checkMember(path, dir string, m zrtp.Member, want string) error {
	if want == "" {
		return nil
	}
	return bundleset.VerifyMember(filepath.Dir(dir), bundleset.Member{Target: m.Target, Dir: filepath.Base(dir), GraphSHA256: want})
}

// unpackedDir is where member m of pack r is unpacked under base: the
// index's digest names the pack's content, so a changed pack never
// reuses an older one's member.
func unpackedDir(base string, r *zrtp.Reader, m zrtp.Member) string {
	name := m.Dir
	if name == "" {
		name = "bundle"
	}
	return filepath.Join(base, r.Digest(), name)
}
