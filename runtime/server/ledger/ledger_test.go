package ledger

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestTornTail: records survive a reopen; a crash that left half a record,
// or a record whose bytes were damaged, loses only that tail, which is cut
// off so new records follow the last good one.
func TestTornTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "usage.log")
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := l.Append(Record{Time: time.Unix(int64(i), 0).UTC(), Tenant: "a", Prompt: 10, Completion: 5, Cached: 2}); err != nil {
			t.Fatal(err)
		}
	}
	l.Append(Record{Tenant: "b", Prompt: 7, Completion: 1})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	whole, _ := os.ReadFile(path)

	for name, damage := range map[string]func([]byte) []byte{
		"half a record": func(b []byte) []byte { return b[:len(b)-9] },
		"flipped byte":  func(b []byte) []byte { c := append([]byte(nil), b...); c[len(c)-20] ^= 1; return c },
	} {
		if err := os.WriteFile(path, damage(whole), 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.Totals("a"); got != (Totals{Requests: 3, Prompt: 30, Cached: 6, Completion: 15}) {
			t.Errorf("%s: tenant a %+v", name, got)
		}
		if got := l.Totals("b"); got.Requests != 0 || l.Dropped == 0 {
			t.Errorf("%s: the damaged record counted (%+v), dropped %d bytes", name, got, l.Dropped)
		}
		l.Append(Record{Tenant: "b", Prompt: 1, Completion: 1})
		l.Close()
		l, _ = Open(path)
		if got := l.Totals("b"); got.Requests != 1 || l.Dropped != 0 || l.Totals("a").Requests != 3 {
			t.Errorf("%s: after appending past the cut: b %+v, dropped %d", name, got, l.Dropped)
		}
		l.Close()
	}
}
