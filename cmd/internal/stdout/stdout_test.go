package stdout

import (
	"errors"
	"fmt"
	"os"
	"testing"
)

type failAfter struct{ n int }

func (f *failAfter) Write(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errors.New("no space left on device")
	}
	f.n--
	return len(p), nil
}

func TestRemembersFirstError(t *testing.T) {
	f := &failAfter{n: 1}
	w := New(f)
	fmt.Fprint(w, "a")
	if w.Err() != nil {
		t.Fatal(w.Err())
	}
	fmt.Fprint(w, "b")
	fmt.Fprint(w, "c")
	if err := w.Err(); err == nil || err.Error() != "writing standard output: no space left on device" {
		t.Fatalf("got %v", err)
	}
}

func TestDevFull(t *testing.T) {
	f, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skip("no /dev/full here")
	}
	defer f.Close()
	w := New(f)
	fmt.Fprintln(w, "lost")
	if w.Err() == nil {
		t.Fatal("a write to /dev/full succeeded")
	}
}
