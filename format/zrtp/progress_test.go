package zrtp

import (
	"path/filepath"
	"testing"
)

// TestProgress: an unpack reports after every file, its count growing to
// the bytes it writes in all, whole pack or one member.
func TestProgress(t *testing.T) {
	dir := t.TempDir()
	src, p := filepath.Join(dir, "src"), filepath.Join(dir, "m.zrtp")
	writeSet(t, src)
	if err := Write(p, src); err != nil {
		t.Fatal(err)
	}
	r, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var calls, last, total int64
	r.Progress = func(file string, done, all int64) {
		if done < last || file == "" {
			t.Errorf("progress %q %d after %d", file, done, last)
		}
		calls, last, total = calls+1, done, all
	}
	if err := r.Unpack(filepath.Join(dir, "all")); err != nil {
		t.Fatal(err)
	}
	_, raw := r.Index().Sizes()
	files := int64(len(r.Index().Files))
	for _, m := range r.Index().Members {
		files += int64(len(m.Files))
	}
	if last != raw || total != raw || calls < files {
		t.Errorf("whole pack: %d calls, last %d of %d; want at least %d calls ending at %d", calls, last, total, files, raw)
	}
	m := r.Index().Members[1]
	var want int64
	for _, f := range m.Files {
		want += f.RawSize
	}
	calls, last = 0, 0
	if err := r.UnpackMember(m, filepath.Join(dir, "one")); err != nil {
		t.Fatal(err)
	}
	if last != want || total != want || calls < int64(len(m.Files)) {
		t.Errorf("member: %d calls, last %d of %d; want %d", calls, last, total, want)
	}
}
