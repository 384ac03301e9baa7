package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/internal/testmodel"
)

// TestDumpGraphSchedules: a cuda:sm_90 bundle's dump graph prints each
// decode variant's megakernel schedule (its summary, its multiprocessors,
// counters and tasks); a cpu bundle's says it has none.
func TestDumpGraphSchedules(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cuda")
	if _, _, err := zrtcArtifacts(t, "build", testmodel.Tiny(t), "-q", "--target", "cuda:sm_90", "--slots", "2", "-o", dir); err != nil {
		t.Fatal(err)
	}
	out, _, err := zrtcArtifacts(t, "dump", "graph", dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"megakernel schedules (2):", "; megakernel schedule of decode.s2.r1", "; megakernel schedule of decode.s2.r2",
		"; estimate at 3.0 TB/s", "; multiprocessors: tasks, bytes", "; counters:", "task  op  kernel", "tile", "c0>=1"} {
		if !strings.Contains(out, want) {
			t.Errorf("dump graph lacks %q", want)
		}
	}
	out, _, err = zrtcArtifacts(t, "dump", "graph", builtBundle(t))
	if err != nil || !strings.Contains(out, "megakernel schedules (0): the variants replay their streams") {
		t.Errorf("a cpu bundle's dump graph: %v", err)
	}
}
