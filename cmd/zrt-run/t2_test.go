package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/runtime/amd/t2"
)

// TestProbeSaysWhyT2: the probe's T2 line is the tier's own probe.
func TestProbeSaysWhyT2(t *testing.T) {
	root := &cobra.Command{Use: "zrt-run", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(probeCmd())
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"probe"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	want := "t2     available"
	if _, err := t2.Probe(); err != nil {
		want = "t2     missing    " + err.Error()
	}
	if !strings.Contains(out.String(), want) {
		t.Fatalf("probe output lacks %q:\n%s", want, out.String())
	}
}

// TestGenerateT2Reason: ZRT_TIER=t2 on a gfx1201 bundle fails with the
// probe's reason where T2 cannot run (runs where it can).
func TestGenerateT2Reason(t *testing.T) {
	if _, ok := kernels.LookupTarget("amd:gfx1201"); !ok {
		t.Skip("this zrtc has no target amd:gfx1201")
	}
	_, perr := t2.Probe()
	if perr == nil {
		t.Skip("T2 is usable here; the reason path cannot be seen")
	}
	m, err := synth.Write(synth.Tiny)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	model, b := filepath.Join(dir, "m.gguf"), filepath.Join(dir, "b")
	os.WriteFile(model, m, 0o644)
	if err := compiler.Compile(context.Background(), model, b, compiler.Options{Target: "amd:gfx1201"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ZRT_TIER", "t2")
	root := &cobra.Command{Use: "zrt-run", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(generateCmd())
	var stdout, stderr bytes.Buffer
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetArgs([]string{"generate", b, "-p", "Once", "-n", "2"})
	err = root.Execute()
	first := strings.SplitN(perr.Error(), ":", 2)[0] // "no render node" here
	if err == nil || !strings.Contains(err.Error(), "tier t2: ") || !strings.Contains(err.Error(), first) {
		t.Fatalf("ZRT_TIER=t2: %v (probe: %v)", err, perr)
	}
}
