package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/cmd/internal/exitcode"
	"github.com/zrtdev/zrt/internal/clitest"
	"github.com/zrtdev/zrt/internal/testmodel"
)

// TestExitCodes: a mistake in the call exits 2, a target zrtc does not
// compile for 3, as the README's exit-status table says.
func TestExitCodes(t *testing.T) {
	model := testmodel.Tiny(t)
	dir := t.TempDir()
	out, ir := filepath.Join(dir, "b"), filepath.Join(dir, "x.zir")
	for _, c := range []struct {
		args string
		code int
	}{
		{"build M", exitcode.Usage},
		{"build M -q -o OUT --compile-from regalloc", exitcode.Usage},
		{"build M IR -q -o OUT", exitcode.Usage},
		{"build M -q -o OUT --dump-after bogus --dump-dir OUT.d", exitcode.Usage},
		{"build M -q -o OUT --dump-after memplan", exitcode.Usage},
		{"build M -q -o OUT --compile-to bogus", exitcode.Usage},
		{"build M -q --compile-to regalloc --target cpu,cuda:sm_90", exitcode.Usage},
		{"build M -q -o OUT --target cpu,cuda:sm_90 --dump-after memplan --dump-dir OUT.d", exitcode.Usage},
		{"build M -q -o OUT --draft-layers -1", exitcode.Usage},
		{"build M -q -o OUT --draft-layers two", exitcode.Usage},
		{"build M -q -o OUT --target cuda:sm_75", exitcode.Unsupported},
		{"build M -q -o OUT --target cuda:sm_75,cpu", exitcode.Unsupported},
		{"dump ir M --after bogus", exitcode.Usage},
		{"dump bogus M", exitcode.Usage},
		{"dump ir M --after fuse", exitcode.OK},
	} {
		args := strings.Fields(strings.NewReplacer("OUT", out, "IR", ir, "M", model).Replace(c.args))
		root := clitest.Root("zrtc", buildCmd(), dumpCmd())
		exitcode.Wire(root)
		_, _, err := clitest.Exec(root, args...)
		if got := exitcode.Code(exitcode.Classify(err)); got != c.code {
			t.Errorf("zrtc %s: exit %d (%v), want %d", c.args, got, err, c.code)
		}
	}
}
