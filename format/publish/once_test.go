package publish

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestDirOnce: DirOnce publishes a missing directory, keeps one already
// there without calling fill, and of writers racing for the same path
// exactly one publishes; every other leaves the winner's files and no
// temporary behind.
func TestDirOnce(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "entry")
	write := func(body string) func(tmp string) error {
		return func(tmp string) error { return os.WriteFile(filepath.Join(tmp, "f"), []byte(body), 0o644) }
	}
	if ok, err := DirOnce(OS{}, dst, write("first")); err != nil || !ok {
		t.Fatalf("a missing path: published %v, %v", ok, err)
	}
	called := false
	if ok, err := DirOnce(OS{}, dst, func(string) error { called = true; return nil }); err != nil || ok || called {
		t.Fatalf("a present path: published %v, %v, fill called %v", ok, err, called)
	}
	race := filepath.Join(dir, "race")
	var wg sync.WaitGroup
	won := make([]bool, 8)
	for i := range won {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := DirOnce(OS{}, race, write(string(rune('a'+i))))
			if err != nil {
				t.Error(err)
			}
			won[i] = ok
		}()
	}
	wg.Wait()
	winners := 0
	body, _ := os.ReadFile(filepath.Join(race, "f"))
	for i, ok := range won {
		if ok {
			winners++
			if string(body) != string(rune('a'+i)) {
				t.Errorf("writer %d published, the path holds %q", i, body)
			}
		}
	}
	if winners != 1 {
		t.Errorf("%d writers published, want 1", winners)
	}
	des, _ := os.ReadDir(dir)
	for _, d := range des {
		if strings.HasPrefix(d.Name(), ".") {
			t.Errorf("temporary %s left behind", d.Name())
		}
	}
}
