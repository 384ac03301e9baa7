// Package publish puts a file or a directory at its path so that a crash
// at any instant leaves the old or the new version whole there, never
// neither and never a mix, and so that nothing zrt did not write is ever
// replaced.
//
// The protocol follows the file-system crash-consistency rules (SQLite's
// atomic commit; Pillai et al., OSDI 2014): write everything into a
// temporary sibling, fsync every file and directory in it, swap it into
// place in one atomic step, then fsync the parent. A file is swapped with
// rename(2); a directory with renameat2(RENAME_EXCHANGE), which swaps two
// names atomically, after which the old version sits at the temporary name
// and is removed.
//
// Every temporary is named ".NAME.tmp…" and is flock(2)ed by its writer
// for as long as the writer lives; the kernel drops the lock when the
// process dies, however it dies. A later write of NAME removes each such
// temporary whose lock it can take, so a killed build leaks nothing past
// the next build of the same path, and concurrent builds never remove each
// other's work. The parent directory's lock covers the moment between
// creating a temporary and locking it.
//
// The steps go through FS so tests can stop the protocol after any one of
// them (crash_test.go).
package publish

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
)

// ErrNotOurs is wrapped by the error for a path that holds something this
// writer did not make (a user's directory, a file of another kind).
var ErrNotOurs = errors.New("not written by zrt")

// Owned reports nil when the existing entry at path (never called for a
// missing one) is of the kind being written, so replacing it loses
// nothing the user did not ask to replace; otherwise an error saying what
// is there.
type Owned func(path string, fi fs.FileInfo) error

// Dir builds a directory at dst: fill populates a fresh temporary
// directory, which then replaces dst atomically. dst must be missing or
// accepted by owned. On any error dst is unchanged and the temporary is
// removed (or, after a crash, by the next Dir for dst).
func Dir(fsys FS, dst string, owned Owned, fill func(tmp string) error) error {
	return publish(fsys, dst, owned, true, func(tmp string) error { return fill(tmp) })
}

// DirOnce builds a directory at dst as Dir does, unless something is at
// dst already, or gets there first while fill runs: that is kept, and
// DirOnce reports false. It is for a store whose entries are named by
// their content (a build cache), where every writer of a name writes the
// same bytes and readers may be walking the first one's files: replacing
// it would take them away from under those readers.
func DirOnce(fsys FS, dst string, fill func(tmp string) error) (published bool, err error) {
	err = publish(fsys, dst, nil, true, fill)
	if errors.Is(err, errKept) {
		return false, nil
	}
	return err == nil, err
}

// errKept is publish's error for a path that holds something already
// when owned is nil (DirOnce): that is kept.
var errKept = errors.New("kept what is there")

// File writes data to path atomically. path must be missing or accepted by
// owned.
func File(fsys FS, path string, owned Owned, data []byte) error {
	return publish(fsys, path, owned, false, func(tmp string) error { return fsys.WriteFile(tmp, data) })
}

// FileFunc writes a file at path atomically as File does, with fill
// writing the temporary file (already created, empty) at tmp: for output
// too large to hold in memory.
func FileFunc(fsys FS, path string, owned Owned, fill func(tmp string) error) error {
	return publish(fsys, path, owned, false, fill)
}

// TempPrefix returns the name prefix of dst's temporaries, which only
// this package creates and removes.
func TempPrefix(dst string) string { return "." + filepath.Base(dst) + ".tmp" }

// publish puts what fill writes at dst; owned nil keeps anything already
// at dst (errKept), for a directory only (DirOnce).
func publish(fsys FS, dst string, owned Owned, isDir bool, fill func(tmp string) error) (err error) {
	dst = filepath.Clean(dst)
	parent := filepath.Dir(dst)
	if err := checkOwned(fsys, dst, owned); err != nil {
		return err
	}
	tmp, unlock, err := claimTemp(fsys, dst, isDir)
	if err != nil {
		return fmt.Errorf("publish %s: %w", dst, err)
	}
	defer unlock()
	committed := false
	defer func() {
		if !committed {
			fsys.RemoveAll(tmp)
		}
	}()
	if err := fill(tmp); err != nil {
		return err
	}
	if err := fsys.SyncTree(tmp); err != nil {
		return fmt.Errorf("publish %s: sync: %w", dst, err)
	}
	// Another writer may have put something at dst meanwhile; check again
	// right before the swap.
	if err := checkOwned(fsys, dst, owned); err != nil {
		return err
	}
	swapped, err := swapIn(fsys, tmp, dst, isDir, owned != nil)
	if err != nil {
		if owned == nil && errors.Is(err, fs.ErrExist) {
			return errKept // a writer got there first
		}
		return fmt.Errorf("publish %s: %w", dst, err)
	}
	committed = true
	if err := fsys.Sync(parent); err != nil {
		return fmt.Errorf("publish %s: sync %s: %w", dst, parent, err)
	}
	if swapped {
		// tmp now holds the old version.
		if err := fsys.RemoveAll(tmp); err != nil {
			return fmt.Errorf("publish %s: remove the replaced version: %w", dst, err)
		}
	}
	return nil
}

func checkOwned(fsys FS, dst string, owned Owned) error {
	fi, err := fsys.Lstat(dst)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if owned == nil {
		return errKept
	}
	if err := owned(dst, fi); err != nil {
		return fmt.Errorf("%s: %w: %v; refusing to replace it (remove it or choose another path)", dst, ErrNotOurs, err)
	}
	return nil
}

// claimTemp removes dead writers' temporaries of dst and creates and locks
// a new one, all under the parent directory's lock.
func claimTemp(fsys FS, dst string, isDir bool) (tmp string, unlock func(), err error) {
	parent := filepath.Dir(dst)
	releaseParent, err := fsys.Lock(parent, true)
	if err != nil {
		return "", nil, fmt.Errorf("lock %s: %w", parent, err)
	}
	defer releaseParent()
	if err := removeStale(fsys, dst); err != nil {
		return "", nil, err
	}
	if isDir {
		tmp, err = fsys.MkdirTemp(parent, TempPrefix(dst)+"*")
	} else {
		tmp, err = fsys.CreateTemp(parent, TempPrefix(dst)+"*")
	}
	if err != nil {
		return "", nil, err
	}
	unlock, err = fsys.Lock(tmp, false)
	if err != nil {
		fsys.RemoveAll(tmp)
		return "", nil, fmt.Errorf("lock %s: %w", tmp, err)
	}
	return tmp, unlock, nil
}

// removeStale removes the temporaries of dst whose writers are gone.
func removeStale(fsys FS, dst string) error {
	prefix := TempPrefix(dst)
	return removeDead(fsys, filepath.Dir(dst), func(name string) bool { return strings.HasPrefix(name, prefix) })
}

// Sweep removes every temporary in dir whose writer is gone, whatever
// path it was for. The next write of a path cleans up after its own dead
// writers; Sweep is for directories whose names are not written again
// (a cache whose entries are pruned), where nothing else would.
func Sweep(fsys FS, dir string) error {
	release, err := fsys.Lock(dir, true)
	if err != nil {
		return fmt.Errorf("lock %s: %w", dir, err)
	}
	defer release()
	return removeDead(fsys, dir, IsTemp)
}

// IsTemp reports whether a directory entry's name is one of this
// package's temporaries (".NAME.tmp…").
func IsTemp(name string) bool {
	return strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp")
}

// removeDead removes the entries of dir that match and that no live
// writer holds locked.
func removeDead(fsys FS, dir string, match func(name string) bool) error {
	parent := dir
	entries, err := fsys.ReadDir(parent)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !match(e.Name()) {
			continue
		}
		p := filepath.Join(parent, e.Name())
		release, err := fsys.Lock(p, false)
		if errors.Is(err, ErrLocked) {
			continue // a live writer's
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("leftover %s: %w", p, err)
		}
		if err == nil {
			err = fsys.RemoveAll(p)
			release()
			if err != nil {
				return fmt.Errorf("remove leftover %s: %w", p, err)
			}
		}
	}
	return nil
}

// swapIn puts tmp at dst. It reports whether dst existed, in which case
// the old version is now at tmp; without replace, a directory already at
// dst stays and swapIn fails with fs.ErrExist.
func swapIn(fsys FS, tmp, dst string, isDir, replace bool) (swapped bool, err error) {
	_, err = fsys.Lstat(dst)
	exists := err == nil
	if !isDir || !exists || !replace {
		// Without replace, rename(2) refuses to put a directory over a
		// non-empty one: what is there is kept.
		err := fsys.Rename(tmp, dst)
		if err == nil || !isDir || !replace || !errors.Is(err, fs.ErrExist) {
			return false, err
		}
		// A concurrent writer created dst after the Lstat: swap instead.
	}
	return true, fsys.Exchange(tmp, dst)
}
