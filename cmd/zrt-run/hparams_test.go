package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/cmd/internal/exitcode"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/internal/clitest"
)

// TestRunEditedHparams: zrt-run refuses a bundle whose graph file says
// n_embd, n_head, n_layer, head_dim or n_ff other than its weights were
// built for (checksums valid, since Encode recomputes them), naming the
// hyperparameter, with the exit status of a malformed bundle.
func TestRunEditedHparams(t *testing.T) {
	_, good := batchedBundle(t)
	for _, c := range []struct {
		field string
		edit  func(h *bundle.Hparams)
		want  string
	}{
		{"n_embd", func(h *bundle.Hparams) { h.NEmbd *= 2 }, "n_embd = "},
		{"n_head", func(h *bundle.Hparams) { h.NHead *= 2 }, "n_head = "},
		{"n_layer", func(h *bundle.Hparams) { h.NLayer *= 2 }, "has no weights"},
		{"head_dim", func(h *bundle.Hparams) { h.HeadDim *= 2; h.NRot = h.HeadDim }, "head_dim = "},
		{"n_ff", func(h *bundle.Hparams) { h.NFF *= 2 }, "n_ff = "},
	} {
		t.Run(c.field, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "b")
			if err := os.CopyFS(dir, os.DirFS(good)); err != nil {
				t.Fatal(err)
			}
			g, _, err := bundle.ReadGraph(dir)
			if err != nil {
				t.Fatal(err)
			}
			c.edit(&g.Hparams)
			if err := os.WriteFile(filepath.Join(dir, bundle.GraphFile), g.Encode(), 0o644); err != nil {
				t.Fatal(err)
			}
			root := clitest.Root("zrt-run", generateCmd())
			exitcode.Wire(root)
			out, _, err := clitest.Exec(root, "generate", dir, "--tier", "cpu", "--threads", "1", "--tokens", "1", "-n", "1")
			if err == nil || out != "" || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("generate on an edited %s: %q %v (want an error containing %q)", c.field, out, err, c.want)
			}
			if got := exitcode.Code(exitcode.Classify(err)); got != exitcode.Malformed {
				t.Errorf("generate on an edited %s: exit %d (%v), want %d", c.field, got, err, exitcode.Malformed)
			}
		})
	}
}
