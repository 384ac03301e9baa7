package publish

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSweep removes dead writers' temporaries of any name in a directory
// and keeps a live writer's and everything that is not a temporary.
func TestSweep(t *testing.T) {
	dir := t.TempDir()
	dead := filepath.Join(dir, TempPrefix(filepath.Join(dir, "gone"))+"123")
	live := filepath.Join(dir, TempPrefix(filepath.Join(dir, "busy"))+"456")
	keep := filepath.Join(dir, "entry")
	for _, d := range []string{dead, live, keep} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	release, err := OS{}.Lock(live, false)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if err := Sweep(OS{}, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dead); err == nil {
		t.Error("a dead temporary was kept")
	}
	for _, p := range []string{live, keep} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s was removed", filepath.Base(p))
		}
	}
}
