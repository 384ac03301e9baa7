package main

import (
	"strings"
	"testing"

	"github.com/zrtdev/zrt/internal/clitest"
)

// TestFlagRanges: every numeric flag out of its range is refused, naming
// the flag and the range, before any bundle is opened.
func TestFlagRanges(t *testing.T) {
	for args, want := range map[string]string{
		"generate B -p hi -n -5":           "-n: max_tokens -5 out of range [0, 1048576]",
		"generate B -p hi --temp -1":       "--temp: temperature -1 out of range [0, 2]",
		"generate B -p hi --top-p 7":       "--top-p: top_p 7 out of range (0, 1]",
		"generate B -p hi --min-p 2":       "--min-p: min_p 2 out of range [0, 1]",
		"generate B -p hi --threads -3":    "--threads -3 out of range",
		"generate B -p hi --threads 70000": "--threads 70000 out of range",
		"bench B -p -5":                    "-p -5, -n 128: each must be in [0, 1048576]",
		"bench B -r 0":                     "-r 0 out of range [1, 1000]",
		"eval B --tokens 1,2 --top -1":     "--top -1 out of range",
		"eval B --tokens 1,2 --from 3":     "--from 3 must be in [1, 2]",
		"loadtest --url x --concurrency 0": "must be at least 1",
	} {
		if _, _, err := clitest.Run("zrt-run", strings.Fields(args), generateCmd(), benchCmd(), evalCmd(), loadtestCmd()); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", args, err, want)
		}
	}
}
