package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestGenerateContextNote: generate says on stderr when it stopped at the
// context rather than after -n tokens, naming the limit.
func TestGenerateContextNote(t *testing.T) {
	_, bundle := batchedBundle(t) // context 256
	run := func(n string) string {
		root := &cobra.Command{Use: "zrt-run", SilenceUsage: true, SilenceErrors: true}
		root.AddCommand(generateCmd())
		var errb bytes.Buffer
		root.SetOut(&bytes.Buffer{})
		root.SetErr(&errb)
		root.SetArgs([]string{"generate", bundle, "--tokens", "1,5,9", "-n", n, "--threads", "1", "--temp", "0"})
		if err := root.Execute(); err != nil {
			t.Fatal(err)
		}
		return errb.String()
	}
	if note := run("100000"); !strings.Contains(note, "context") || !strings.Contains(note, "256") || !strings.Contains(note, "100000") {
		t.Errorf("-n 100000 on a 256-token context: stderr %q", note)
	}
	if note := run("5"); note != "" {
		t.Errorf("-n 5: stderr %q", note)
	}
}
