package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/compiler"
)

// TestVersion: zrtc --version prints its version once, with the artifact
// versions its bundles carry, not cobra's "zrtc version zrtc 0.1.0".
func TestVersion(t *testing.T) {
	root := &cobra.Command{Use: "zrtc", SilenceUsage: true, SilenceErrors: true}
	setVersion(root)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"--version"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != compiler.Toolchain()+"\n" || strings.Count(got, "zrtc") != 1 {
		t.Errorf("--version printed %q", got)
	}
}
