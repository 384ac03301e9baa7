//go:build !linux

package cpu

// hugePagesOn reports false: huge pages are asked for on Linux only.
func hugePagesOn() bool { return false }

// allocHuge returns n zeroed bytes of ordinary memory, released by the
// garbage collector.
func allocHuge(n int) ([]byte, func() error, error) {
	return make([]byte, n), func() error { return nil }, nil
}
