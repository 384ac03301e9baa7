package publish

import (
	"bytes"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
)

// TestWriteback writes a file through Writeback in uneven pieces, with a
// chunk small enough that writeback starts many times, patches its head
// through WriteAt (as the weights pack's header is), and reads back
// exactly what was written.
func TestWriteback(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := &Writeback{File: f, Chunk: 4096}
	rng := rand.New(rand.NewSource(1))
	want := make([]byte, 1<<20)
	rng.Read(want)
	for rest := want; len(rest) > 0; {
		n := min(len(rest), 1+rng.Intn(10000))
		if m, err := w.Write(rest[:n]); err != nil || m != n {
			t.Fatalf("wrote %d of %d: %v", m, n, err)
		}
		rest = rest[n:]
	}
	copy(want, "head")
	if _, err := w.WriteAt([]byte("head"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the file differs from what was written")
	}
}
