// Package sysmem tells how much memory this process may still allocate,
// so that loaders and writers refuse a plan that cannot fit with both
// figures in the message, instead of dying by the OOM killer halfway.
package sysmem

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/zrtdev/zrt/format/bytesize"
)

// Available returns the bytes this process can allocate without swapping
// or meeting its cgroup's limit: the kernel's MemAvailable estimate, or
// the cgroup v2 limit minus current usage where that is smaller. ok is
// false where neither can be read (not Linux); callers then skip checks.
func Available() (n int64, ok bool) {
	n, err := memAvailable("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	if c, err := cgroupRoom("/sys/fs/cgroup"); err == nil && c < n {
		n = c
	}
	return n, true
}

// memAvailable reads MemAvailable from a meminfo file.
func memAvailable(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		rest, ok := strings.CutPrefix(s.Text(), "MemAvailable:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: MemAvailable: %w", path, err)
		}
		return kb << 10, nil
	}
	return 0, errors.New(path + ": no MemAvailable line")
}

// cgroupRoom returns memory.max − memory.current of the cgroup v2
// hierarchy mounted at dir, or an error where there is no limit.
func cgroupRoom(dir string) (int64, error) {
	read := func(name string) (int64, error) {
		b, err := os.ReadFile(dir + "/" + name)
		if err != nil {
			return 0, err
		}
		return strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64) // "max" fails: no limit
	}
	limit, err := read("memory.max")
	if err != nil {
		return 0, err
	}
	used, err := read("memory.current")
	if err != nil {
		return 0, err
	}
	return max(limit-used, 0), nil
}

// Check returns an error when need bytes exceed what Available reports,
// naming what and both figures; nil where memory cannot be read.
func Check(what string, need int64) error {
	avail, ok := Available()
	if !ok || need <= avail {
		return nil
	}
	return fmt.Errorf("%s needs %s of memory, %s is available", what, Bytes(need), Bytes(avail))
}

// Bytes formats n in binary units: "3.2 GiB" (format/bytesize).
func Bytes(n int64) string { return bytesize.Format(n) }
