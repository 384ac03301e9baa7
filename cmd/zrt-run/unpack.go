package main

import (
	"fmt"
	"os"
	"path/filepath"

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
// member this machine runs, unpacked once under the unpack directory
// (runtime/pick.Unpack).
func (f *engineFlags) packBundle(path string, probes []pick.Probe, tier string) (string, *pick.Choice, error) {
	base := f.unpackDir
	if base == "" {
		var err error
		if base, err = defaultUnpackDir(); err != nil {
			return "", nil, err
		}
	}
	return pick.Unpack(path, probes, tier, base)
}
