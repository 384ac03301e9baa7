package main

import (
	"fmt"
	"os"
	"path/filepath"
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
