package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/cmd/internal/exitcode"
	"github.com/zrtdev/zrt/internal/clitest"
)

// TestExitCodes: a mistake in the call, a flag value the bundle cannot
// take included, exits 2, as the README's exit-status table says.
func TestExitCodes(t *testing.T) {
	_, bundle := batchedBundle(t) // decode variants for 1 and 2 slots
	dir := t.TempDir()
	badKey, badValue := filepath.Join(dir, "key.toml"), filepath.Join(dir, "value.toml")
	os.WriteFile(badKey, []byte("slots = 2\nbogus_key = 1\n"), 0o644)
	os.WriteFile(badValue, []byte("slots = -2\n"), 0o644)
	for _, c := range []struct {
		args string
		code int
	}{
		{"bench B --slots 1,4 -p 4 -n 2 -r 1 --threads 1", exitcode.Usage},
		{"bench B --slots 1,x -p 4 -n 2 -r 1", exitcode.Usage},
		{"bench B --slots 1 --output-format csv -p 4 -n 2 -r 1", exitcode.Usage},
		{"bench B --llama-bench /bin/true -p 4 -n 2 -r 1", exitcode.Usage},
		{"serve B --config " + badKey, exitcode.Usage},
		{"serve B --config " + badValue, exitcode.Usage},
		{"serve B --config " + filepath.Join(dir, "absent.toml"), exitcode.Failure},
		{"serve B B --model-alias a", exitcode.Usage},
		{"serve B --speculative ngram:0", exitcode.Usage},
		{"serve B --speculative eagle", exitcode.Usage},
		{"generate B --tokens 1,x", exitcode.Usage},
		{"bench B --slots 1,2 -p 4 -n 2 -r 1 --threads 1", exitcode.OK},
	} {
		root := clitest.Root("zrt-run", benchCmd(), serveCmd(), generateCmd())
		exitcode.Wire(root)
		_, _, err := clitest.Exec(root, strings.Fields(strings.ReplaceAll(c.args, "B", bundle))...)
		if got := exitcode.Code(exitcode.Classify(err)); got != c.code {
			t.Errorf("zrt-run %s: exit %d (%v), want %d", c.args, got, err, c.code)
		}
	}
}
