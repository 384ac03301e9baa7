// Package filedigest computes files' SHA-256 digests and remembers them by
// the file's identity — device, inode, size and modification time in
// nanoseconds — as make, git's index and ccache do, so a multi-GB model is
// read once, not on every build that names it.
//
// A remembered digest is a claim that the file has not changed since it
// was hashed. The claim fails only for a file rewritten in place within
// the same timestamp tick at the same size, or one whose mtime was set
// back on purpose; two guards narrow it further. A file modified within
// RacyWindow of being hashed is not remembered (git's "racily clean"
// rule: its next change could land in the same tick), and callers that
// read the whole file anyway (a build on a cache miss) compare and call
// Forget on a mismatch.
package filedigest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/zrtdev/zrt/format/publish"
)

// RacyWindow is how old a file's modification time must be before its
// digest is remembered: longer than the coarsest timestamp granularity of
// the file systems zrt meets (FAT's two seconds), so a later rewrite can
// never carry the same mtime as the version that was hashed.
const RacyWindow = 3 * time.Second

// recordMagic starts every record, so a file of another kind (or a future
// layout) in the directory is never read as a digest.
const recordMagic = "zrt-filedigest 1"

// ID is a file's identity at one instant: where a file with the same ID
// was hashed, the digest still holds.
type ID struct {
	Dev, Ino uint64
	Size     int64
	MtimeNs  int64
}

// idOf reads the identity out of a stat result.
func idOf(fi fs.FileInfo) (ID, error) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ID{}, fmt.Errorf("no device and inode numbers for %s on this system", fi.Name())
	}
	return ID{Dev: uint64(st.Dev), Ino: uint64(st.Ino), Size: fi.Size(), MtimeNs: fi.ModTime().UnixNano()}, nil
}

// Memo remembers digests in Dir, one small record per (device, inode).
// The zero Memo (Dir "") remembers nothing and hashes every time.
type Memo struct {
	Dir string
	// Now is the clock for the racy-window rule; nil means time.Now.
	// Tests set it.
	Now func() time.Time
}

// Sum returns the SHA-256 of the file at path and whether it came from
// the memo (true) or from reading the file (false). A file read here is
// remembered when it did not change while it was read and is older than
// RacyWindow.
func (m Memo) Sum(path string) (sum [32]byte, memoised bool, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return sum, false, fmt.Errorf("digest: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return sum, false, fmt.Errorf("digest: %s is not a regular file", path)
	}
	id, err := idOf(fi)
	if err != nil {
		return sum, false, fmt.Errorf("digest: %w", err)
	}
	if m.Dir != "" {
		if s, ok := m.lookup(id); ok {
			return s, true, nil
		}
	}
	sum, id, stable, err := hashFile(path)
	if err != nil {
		return sum, false, err
	}
	if m.Dir != "" && stable && m.now().Sub(time.Unix(0, id.MtimeNs)) > RacyWindow {
		// A failure to remember costs the next build a rehash, no more.
		_ = m.record(id, sum)
	}
	return sum, false, nil
}

// Combine is the digest of a model read from several files (the parts of
// a split GGUF), given each file's SHA-256 in order: the SHA-256 of their
// concatenation, so each part's digest can be remembered on its own. Of
// one file it is that file's digest.
func Combine(sums [][32]byte) [32]byte {
	if len(sums) == 1 {
		return sums[0]
	}
	h := sha256.New()
	for _, s := range sums {
		h.Write(s[:])
	}
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// SumAll is Sum of a model read from the files at paths, in order: the
// Combine of their digests, memoised when every one of them was.
func (m Memo) SumAll(paths []string) (sum [32]byte, memoised bool, err error) {
	sums := make([][32]byte, len(paths))
	memoised = true
	for i, p := range paths {
		s, mem, err := m.Sum(p)
		if err != nil {
			return sum, false, err
		}
		sums[i], memoised = s, memoised && mem
	}
	return Combine(sums), memoised, nil
}

// ForgetAll is Forget of every file at paths.
func (m Memo) ForgetAll(paths []string) error {
	var err error
	for _, p := range paths {
		err = errors.Join(err, m.Forget(p))
	}
	return err
}

// Forget drops what the memo holds for the file at path, so the next Sum
// reads it. A build calls it when the digest it computed from the bytes
// differs from the memo's: the file was changed without a visible trace.
func (m Memo) Forget(path string) error {
	if m.Dir == "" {
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("digest: %w", err)
	}
	id, err := idOf(fi)
	if err != nil {
		return fmt.Errorf("digest: %w", err)
	}
	if err := os.Remove(m.recordPath(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("digest: forget %s: %w", path, err)
	}
	return nil
}

func (m Memo) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// recordPath names the record of a file by its device and inode, so a
// renamed or re-linked file keeps its record; size and mtime are inside,
// so a changed file misses.
func (m Memo) recordPath(id ID) string {
	return filepath.Join(m.Dir, fmt.Sprintf("%x-%x", id.Dev, id.Ino))
}

// lookup returns the remembered digest of a file with exactly this
// identity.
func (m Memo) lookup(id ID) ([32]byte, bool) {
	var sum [32]byte
	b, err := os.ReadFile(m.recordPath(id))
	if err != nil {
		return sum, false
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 3 || lines[0] != recordMagic {
		return sum, false
	}
	f := strings.Fields(lines[1])
	if len(f) != 2 || f[0] != strconv.FormatInt(id.Size, 10) || f[1] != strconv.FormatInt(id.MtimeNs, 10) {
		return sum, false
	}
	h, err := hex.DecodeString(lines[2])
	if err != nil || len(h) != len(sum) {
		return sum, false
	}
	copy(sum[:], h)
	return sum, true
}

// record writes a record atomically (format/publish): concurrent builds
// hashing the same file write the same bytes, and a reader sees a whole
// record or none.
func (m Memo) record(id ID, sum [32]byte) error {
	if err := os.MkdirAll(m.Dir, 0o755); err != nil {
		return err
	}
	data := fmt.Sprintf("%s\n%d %d\n%x\n", recordMagic, id.Size, id.MtimeNs, sum)
	return publish.File(publish.OS{}, m.recordPath(id), isRecord, []byte(data))
}

// isRecord lets a record replace only a regular file (an older record).
func isRecord(_ string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("it is not a digest record")
	}
	return nil
}

// hashFile reads path through one descriptor and reports its identity
// before the read and whether it was the same after it, so a file
// rewritten while it was read is not remembered under a digest of a mix.
func hashFile(path string) (sum [32]byte, id ID, stable bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return sum, id, false, fmt.Errorf("digest: %w", err)
	}
	defer f.Close()
	before, err := f.Stat()
	if err != nil {
		return sum, id, false, fmt.Errorf("digest: %w", err)
	}
	if id, err = idOf(before); err != nil {
		return sum, id, false, fmt.Errorf("digest: %w", err)
	}
	h := sha256.New()
	buf := make([]byte, 4<<20) // large reads: the hash, not the syscalls, should bound the speed
	for {
		n, err := f.Read(buf)
		h.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			return sum, id, false, fmt.Errorf("digest: reading %s: %w", path, err)
		}
	}
	copy(sum[:], h.Sum(nil))
	after, err := f.Stat()
	if err != nil {
		return sum, id, false, fmt.Errorf("digest: %w", err)
	}
	idAfter, err := idOf(after)
	return sum, id, err == nil && idAfter == id, nil
}
