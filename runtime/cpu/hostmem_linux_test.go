package cpu

import (
	"testing"
	"unsafe"
)

// TestAllocHuge checks that huge-page memory starts on a huge-page
// boundary, has the length asked for, is zeroed and writable, and is
// released.
func TestAllocHuge(t *testing.T) {
	for _, n := range []int{1, hugePage - 1, hugePage, 3*hugePage + 5} {
		b, free, err := allocHuge(n)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != n || uintptr(unsafe.Pointer(&b[0]))%hugePage != 0 {
			t.Fatalf("n %d: len %d at %p", n, len(b), &b[0])
		}
		for i := 0; i < n; i += 4096 {
			if b[i] != 0 {
				t.Fatalf("n %d: byte %d not zero", n, i)
			}
			b[i] = 1
		}
		b[n-1] = 1
		if err := free(); err != nil {
			t.Fatal(err)
		}
	}
}
