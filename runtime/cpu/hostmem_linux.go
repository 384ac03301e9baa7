package cpu

import (
	"bytes"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePage is the size of a transparent huge page on the machines T-CPU
// runs on (x86-64 and arm64 with 4 KiB base pages).
const hugePage = 2 << 20

// hugePagesOn reports whether the kernel backs an anonymous mapping that
// asks for it (MADV_HUGEPAGE) with transparent huge pages: THP "always"
// or "madvise", not "never" nor absent.
func hugePagesOn() bool {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	return err == nil && !bytes.Contains(b, []byte("[never]"))
}

// allocHuge returns n zeroed bytes of anonymous memory that starts on a
// huge-page boundary and is advised for huge pages, and its release.
// The advice is only that: where the kernel has no huge page to give, the
// memory is ordinary pages and works the same.
func allocHuge(n int) ([]byte, func() error, error) {
	size := uintptr(n+hugePage-1) &^ (hugePage - 1)
	// Map a huge page more than asked, then unmap what lies before the
	// first boundary and after the aligned range.
	p, err := unix.MmapPtr(-1, 0, nil, size+hugePage, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, nil, fmt.Errorf("cpu: allocating %d bytes: %w", n, err)
	}
	head := (hugePage - uintptr(p)&(hugePage-1)) & (hugePage - 1)
	if head > 0 {
		_ = unix.MunmapPtr(p, head)
	}
	aligned := unsafe.Add(p, head)
	if tail := hugePage - head; tail > 0 {
		_ = unix.MunmapPtr(unsafe.Add(aligned, size), tail)
	}
	b := unsafe.Slice((*byte)(aligned), size)
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE)
	return b[:n:n], func() error { return unix.MunmapPtr(aligned, size) }, nil
}
