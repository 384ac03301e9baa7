package exitcode

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/format/support"
	"github.com/zrtdev/zrt/format/zrtp"
)

// run executes a small command tree wired as zrtc's and zrt-run's are
// and returns the exit status main would give.
func run(args ...string) int {
	root := &cobra.Command{Use: "tool", Long: "a tool", SilenceUsage: true, SilenceErrors: true}
	var n int
	leaf := &cobra.Command{Use: "leaf FILE", Args: cobra.ExactArgs(1), RunE: func(_ *cobra.Command, a []string) error {
		switch a[0] {
		case "unsupported":
			return fmt.Errorf("build m.gguf: %w", &support.Error{What: "architecture", Value: `"gemma3"`})
		case "fail":
			return errors.New("disk full")
		}
		return nil
	}}
	leaf.Flags().IntVar(&n, "n", 0, "a number")
	root.AddCommand(leaf)
	Wire(root)
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&bytes.Buffer{})
	root.SetArgs(args)
	return Code(Classify(root.Execute()))
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{{"nope"}, {"leaf", "x", "--bogus"}, {"leaf", "x", "--n", "many"}, {"leaf"}, {"leaf", "a", "b"}} {
		if got := run(args...); got != Usage {
			t.Errorf("%q: exit %d, want %d", args, got, Usage)
		}
	}
	if got := Code(fmt.Errorf("pack: %w", Usagef("-o is required"))); got != Usage {
		t.Errorf("Usagef: exit %d", got)
	}
}

func TestOKAndFailure(t *testing.T) {
	if got := run("leaf", "ok"); got != OK {
		t.Errorf("success: exit %d", got)
	}
	if got := run("leaf", "fail"); got != Failure {
		t.Errorf("failure: exit %d, want %d", got, Failure)
	}
	if got := Code(os.ErrNotExist); got != Failure {
		t.Errorf("missing file: exit %d, want %d", got, Failure)
	}
}

func TestUnsupported(t *testing.T) {
	if got := run("leaf", "unsupported"); got != Unsupported {
		t.Errorf("unsupported: exit %d, want %d", got, Unsupported)
	}
}

// TestMalformed: each format's real refusal of a damaged file is 4.
func TestMalformed(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk")
	os.WriteFile(junk, []byte("GGUF\x03\x00\x00\x00 not really"), 0o644)
	_, err := gguf.Open(junk)
	if got := Code(err); got != Malformed {
		t.Errorf("corrupt GGUF (%v): exit %d, want %d", err, got, Malformed)
	}
	os.WriteFile(junk, []byte("ZRTP\x01\x00\x00\x00 cut short"), 0o644)
	_, err = zrtp.Open(junk)
	if got := Code(err); got != Malformed {
		t.Errorf("truncated pack (%v): exit %d, want %d", err, got, Malformed)
	}
	_, err = bundle.DecodeGraph([]byte("ZTRG not a graph file at all, nothing here"))
	if got := Code(err); got != Malformed {
		t.Errorf("corrupt graph file (%v): exit %d, want %d", err, got, Malformed)
	}
}

func TestHelpDocumentsCodes(t *testing.T) {
	root := &cobra.Command{Use: "tool", Long: "a tool"}
	Wire(root)
	for _, want := range []string{"0  success", "1  any other", "2  usage", "3  unsupported", "4  malformed"} {
		if !strings.Contains(root.Long, want) {
			t.Errorf("help lacks %q:\n%s", want, root.Long)
		}
	}
}
