package gguf

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Open maps path read-only and parses it. Close the File to unmap it.
func Open(path string) (*File, error) {
	b, unmap, err := MapFile(path)
	if err != nil {
		return nil, err
	}
	f, err := Parse(b)
	if err != nil {
		unmap()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.closer = unmap
	return f, nil
}

// MapFile maps a whole file read-only. An empty file maps to an empty
// slice. Anything but a regular file (a FIFO, a device, a directory) is
// refused at once: the open does not wait for a FIFO's writer.
func MapFile(path string) ([]byte, func() error, error) {
	fd, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	defer fd.Close()
	return MapOpen(fd)
}

// MapOpen maps the whole of an open regular file read-only; the mapping
// outlives fd. The file must not be truncated or rewritten while mapped:
// reading a page past a new end faults (SIGBUS).
func MapOpen(fd *os.File) ([]byte, func() error, error) {
	path := fd.Name()
	st, err := fd.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%s: not a regular file (a %s)", path, fileKind(st.Mode()))
	}
	size := st.Size()
	if size == 0 {
		return []byte{}, func() error { return nil }, nil
	}
	if int64(int(size)) != size {
		return nil, nil, fmt.Errorf("%s: file too large to map", path)
	}
	b, err := unix.Mmap(int(fd.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: mmap: %w", path, err)
	}
	return b, func() error { return unix.Munmap(b) }, nil
}

// fileKind names a non-regular file mode for errors.
func fileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&os.ModeNamedPipe != 0:
		return "FIFO"
	case m&os.ModeCharDevice != 0:
		return "character device"
	case m&os.ModeDevice != 0:
		return "block device"
	case m&os.ModeSocket != 0:
		return "socket"
	}
	return "special file"
}
