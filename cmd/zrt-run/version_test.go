package main

import (
	"strings"
	"testing"

	"github.com/zrtdev/zrt/internal/clitest"
	"github.com/zrtdev/zrt/version"
)

// TestVersion: zrt-run --version prints its release and the artifact
// versions it reads, once each, the way zrtc --version does.
func TestVersion(t *testing.T) {
	got := clitest.Version(t, "zrt-run", setVersion)
	if !strings.HasPrefix(got, "zrt-run "+version.Release+";") || strings.Count(got, "zrt-run") != 1 || !strings.Contains(got, "graph format") {
		t.Errorf("--version printed %q", got)
	}
}

// TestProbe: probe names each tier once, says libcuda's failure once, and
// lists for each bundle target the tiers that run it (t1 and t2 for the
// AMD targets), not a tier kind no ZRT_TIER names.
func TestProbe(t *testing.T) {
	text, _, err := clitest.Run("zrt-run", []string{"probe"}, probeCmd())
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "cuda   missing") && strings.Count(l, "libcuda.so.1") > 1 {
			t.Errorf("the library named twice: %q", l)
		}
		if f := strings.Fields(l); len(f) >= 2 && strings.HasPrefix(f[0], "amd:") && f[1] != "t1,t2" {
			t.Errorf("AMD target line %q: want the tiers t1,t2", l)
		}
	}
	if !strings.Contains(text, "amd:gfx1201") {
		t.Errorf("probe lists no AMD target:\n%s", text)
	}
}
