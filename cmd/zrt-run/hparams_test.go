package main

import (
	"strings"
	"testing"

	"github.com/zrtdev/zrt/cmd/internal/exitcode"
	"github.com/zrtdev/zrt/internal/clitest"
	"github.com/zrtdev/zrt/internal/testmodel"
)

// TestRunEditedHparams: zrt-run refuses a bundle whose graph file says
// n_embd, n_head, n_layer, head_dim or n_ff other than its weights were
// built for (checksums valid, since Encode recomputes them), naming the
// hyperparameter, with the exit status of a malformed bundle.
func TestRunEditedHparams(t *testing.T) {
	_, good := batchedBundle(t)
	for _, c := range testmodel.HparamEdits() {
		t.Run(c.Field, func(t *testing.T) {
			dir := testmodel.Edited(t, good, c.Edit)
			root := clitest.Root("zrt-run", generateCmd())
			exitcode.Wire(root)
			out, _, err := clitest.Exec(root, "generate", dir, "--tier", "cpu", "--threads", "1", "--tokens", "1", "-n", "1")
			if err == nil || out != "" || !strings.Contains(err.Error(), c.Want) {
				t.Fatalf("generate on an edited %s: %q %v (want an error containing %q)", c.Field, out, err, c.Want)
			}
			if got := exitcode.Code(exitcode.Classify(err)); got != exitcode.Malformed {
				t.Errorf("generate on an edited %s: exit %d (%v), want %d", c.Field, got, err, exitcode.Malformed)
			}
		})
	}
}
