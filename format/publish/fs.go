package publish

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ErrLocked is returned by a non-waiting Lock of a path another open file
// description holds.
var ErrLocked = errors.New("locked by another writer")

// FS is every file-system step of the protocol. OS is the real one; tests
// wrap it to stop after any step, as a crash would.
type FS interface {
	Lstat(path string) (fs.FileInfo, error)
	ReadDir(dir string) ([]fs.DirEntry, error)
	// MkdirTemp and CreateTemp make a new, empty directory or file whose
	// name is pattern with its "*" replaced by a random string.
	MkdirTemp(dir, pattern string) (string, error)
	CreateTemp(dir, pattern string) (string, error)
	// WriteFile replaces the contents of the existing file path with data.
	WriteFile(path string, data []byte) error
	// Sync makes a file's or directory's contents durable; SyncTree does
	// it for every file and directory under dir, dir included.
	Sync(path string) error
	SyncTree(dir string) error
	// Rename moves from to to; Exchange swaps the two names atomically.
	Rename(from, to string) error
	Exchange(a, b string) error
	RemoveAll(path string) error
	// Lock takes an exclusive flock(2) on path, waiting for it or failing
	// with ErrLocked. The returned function releases it.
	Lock(path string, wait bool) (release func(), err error)
}

// OS is the operating system's file system.
type OS struct{}

var _ FS = OS{}

// Lstat implements FS.
func (OS) Lstat(path string) (fs.FileInfo, error) { return os.Lstat(path) }

// ReadDir implements FS.
func (OS) ReadDir(dir string) ([]fs.DirEntry, error) { return os.ReadDir(dir) }

// MkdirTemp implements FS; the directory is world-readable like any other
// build output (os.MkdirTemp makes it private).
func (OS) MkdirTemp(dir, pattern string) (string, error) {
	p, err := os.MkdirTemp(dir, pattern)
	if err != nil {
		return "", err
	}
	if err := os.Chmod(p, 0o755); err != nil {
		os.Remove(p)
		return "", err
	}
	return p, nil
}

// CreateTemp implements FS; the file is mode 0644 (os.CreateTemp makes it
// private).
func (OS) CreateTemp(dir, pattern string) (string, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return "", err
	}
	name := f.Name()
	if err := errors.Join(f.Chmod(0o644), f.Close()); err != nil {
		os.Remove(name)
		return "", err
	}
	return name, nil
}

// WriteFile implements FS.
func (OS) WriteFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	return errors.Join(err, f.Close())
}

// Sync implements FS.
func (OS) Sync(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}

// SyncTree implements FS: files first, then the directories holding them,
// deepest first, so each directory entry is durable after what it names.
func (o OS) SyncTree(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			dirs = append(dirs, p)
			return nil
		case d.Type().IsRegular():
			return o.Sync(p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := o.Sync(dirs[i]); err != nil {
			return err
		}
	}
	return nil
}

// Rename implements FS.
func (OS) Rename(from, to string) error { return os.Rename(from, to) }

// Exchange implements FS with renameat2(RENAME_EXCHANGE). Where the file
// system cannot exchange (it needs Linux 3.15 and ext4, xfs, btrfs, tmpfs
// or similar), it falls back to three renames, which leave a moment in
// which b is missing; the old version is then recovered by nothing but
// the new build that follows.
func (OS) Exchange(a, b string) error {
	err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EOPNOTSUPP) {
		return &os.LinkError{Op: "exchange", Old: a, New: b, Err: err}
	}
	aside := a + ".old"
	if err := os.Rename(b, aside); err != nil {
		return err
	}
	if err := os.Rename(a, b); err != nil {
		return errors.Join(err, os.Rename(aside, b))
	}
	return os.Rename(aside, a)
}

// RemoveAll implements FS.
func (OS) RemoveAll(path string) error { return os.RemoveAll(path) }

// Flock applies flock(2) operation how (unix.LOCK_SH, LOCK_EX, with
// LOCK_NB or not) to f, again when a signal interrupts it: the lock lasts
// until f is closed.
func Flock(f *os.File, how int) error {
	for {
		if err := unix.Flock(int(f.Fd()), how); err != unix.EINTR {
			return err
		}
	}
}

// Lock implements FS. The lock belongs to a new open file description of
// path, so it conflicts with every other Lock, in this process or another.
func (OS) Lock(path string, wait bool) (func(), error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	how := unix.LOCK_EX
	if !wait {
		how |= unix.LOCK_NB
	}
	if err := Flock(f, how); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, ErrLocked
		}
		return nil, fmt.Errorf("flock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
