package main

import (
	"strings"
	"testing"
)

// TestGenerateContextNote: generate says on stderr when it stopped at the
// context rather than after -n tokens, naming the limit.
func TestGenerateContextNote(t *testing.T) {
	_, bundle := batchedBundle(t) // context 256
	run := func(n string) string {
		_, stderr, err := execGenerate(bundle, "--tokens", "1,5,9", "-n", n, "--threads", "1", "--temp", "0")
		if err != nil {
			t.Fatal(err)
		}
		return stderr
	}
	if note := run("100000"); !strings.Contains(note, "context") || !strings.Contains(note, "256") || !strings.Contains(note, "100000") {
		t.Errorf("-n 100000 on a 256-token context: stderr %q", note)
	}
	if note := run("5"); note != "" {
		t.Errorf("-n 5: stderr %q", note)
	}
}
