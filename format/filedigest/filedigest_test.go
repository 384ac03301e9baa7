package filedigest

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// old sets a file's mtime well outside the racy window, as a model
// downloaded some time ago has.
func old(t *testing.T, path string) {
	t.Helper()
	past := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path, past, past); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// memoAnd returns a memo in a fresh directory and the path of the file
// name beside it, written with text.
func memoAnd(t *testing.T, name, text string) (Memo, string) {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, name)
	write(t, p, text)
	return Memo{Dir: filepath.Join(dir, "memo")}, p
}

func sum(t *testing.T, m Memo, path string) ([32]byte, bool) {
	t.Helper()
	s, memoised, err := m.Sum(path)
	if err != nil {
		t.Fatal(err)
	}
	return s, memoised
}

func TestMemoFollowsTheFileNotItsName(t *testing.T) {
	m, a := memoAnd(t, "a.gguf", "weights")
	dir := filepath.Dir(a)
	old(t, a)
	want := sha256.Sum256([]byte("weights"))
	if s, memoised := sum(t, m, a); s != want || memoised {
		t.Fatalf("first sum %x memoised=%v, want %x read", s, memoised, want)
	}
	if s, memoised := sum(t, m, a); s != want || !memoised {
		t.Fatalf("second sum %x memoised=%v, want it remembered", s, memoised)
	}
	// A rename keeps device and inode: still remembered.
	b := filepath.Join(dir, "b.gguf")
	if err := os.Rename(a, b); err != nil {
		t.Fatal(err)
	}
	if s, memoised := sum(t, m, b); s != want || !memoised {
		t.Fatalf("after rename: %x memoised=%v", s, memoised)
	}
	// A touch changes the mtime: read again, same digest.
	now := time.Now().Add(-time.Minute)
	os.Chtimes(b, now, now)
	if s, memoised := sum(t, m, b); s != want || memoised {
		t.Fatalf("after touch: %x memoised=%v, want it read again", s, memoised)
	}
	// New content of another size: read again, new digest.
	write(t, b, "other weights")
	old(t, b)
	if s, _ := sum(t, m, b); s != sha256.Sum256([]byte("other weights")) {
		t.Fatal("changed content gave the old digest")
	}
}

func TestRacyFileIsNotRemembered(t *testing.T) {
	m, p := memoAnd(t, "m.gguf", "fresh") // mtime now: a rewrite could land in the same tick
	sum(t, m, p)
	if _, memoised := sum(t, m, p); memoised {
		t.Fatal("a file modified just now was remembered")
	}
	// Once it is old enough, it is.
	m.Now = func() time.Time { return time.Now().Add(2 * RacyWindow) }
	sum(t, m, p)
	if _, memoised := sum(t, m, p); !memoised {
		t.Fatal("an old enough file was not remembered")
	}
}

// TestForget: a file rewritten in place with its size and mtime kept
// fools the memo (the documented limit); Forget, which a build calls when
// the bytes it read disagree, makes the next Sum read the file.
func TestForget(t *testing.T) {
	m, p := memoAnd(t, "m.gguf", "aaaa")
	old(t, p)
	sum(t, m, p)
	fi, _ := os.Stat(p)
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("bbbb"), 0)
	f.Close()
	os.Chtimes(p, fi.ModTime(), fi.ModTime())
	if s, memoised := sum(t, m, p); !memoised || s != sha256.Sum256([]byte("aaaa")) {
		t.Fatalf("expected the stale remembered digest, got %x memoised=%v", s, memoised)
	}
	if err := m.Forget(p); err != nil {
		t.Fatal(err)
	}
	if s, memoised := sum(t, m, p); memoised || s != sha256.Sum256([]byte("bbbb")) {
		t.Fatalf("after Forget: %x memoised=%v, want the new bytes read", s, memoised)
	}
}

func TestZeroMemoHashesEveryTime(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m")
	write(t, p, "x")
	old(t, p)
	var m Memo
	for range 2 {
		if s, memoised := sum(t, m, p); memoised || s != sha256.Sum256([]byte("x")) {
			t.Fatal("the zero Memo remembered, or hashed wrong")
		}
	}
	if _, _, err := m.Sum(filepath.Dir(p)); err == nil {
		t.Fatal("a directory was hashed")
	}
}

// TestSumAll: one file's digest is its SHA-256, several files' the
// SHA-256 of their digests in order, memoised only when each part was.
func TestSumAll(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.WriteFile(a, []byte("first part"), 0o644)
	os.WriteFile(b, []byte("second part"), 0o644)
	m := Memo{}
	sa, _, err := m.SumAll([]string{a})
	if err != nil || sa != sha256.Sum256([]byte("first part")) {
		t.Fatalf("one file: %x %v", sa, err)
	}
	sb, _, _ := m.Sum(b)
	ab, _, err := m.SumAll([]string{a, b})
	if err != nil || ab != sha256.Sum256(append(sa[:], sb[:]...)) {
		t.Fatalf("two files: %x %v", ab, err)
	}
	if ba, _, _ := m.SumAll([]string{b, a}); ba == ab {
		t.Error("the order of the parts does not count")
	}
}
