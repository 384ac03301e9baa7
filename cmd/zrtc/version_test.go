package main

import (
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/internal/clitest"
)

// TestVersion: zrtc --version prints its version once, with the artifact
// versions its bundles carry, not cobra's "zrtc version zrtc 0.1.0".
func TestVersion(t *testing.T) {
	got := clitest.Version(t, "zrtc", setVersion)
	if got != compiler.Toolchain()+"\n" || strings.Count(got, "zrtc") != 1 {
		t.Errorf("--version printed %q", got)
	}
}
