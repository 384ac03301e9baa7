package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/runtime/amd/t1"
)

// TestProbeSaysWhyT1: the probe's T1 line is the tier's own probe.
func TestProbeSaysWhyT1(t *testing.T) {
	root := &cobra.Command{Use: "zrt-run", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(probeCmd())
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"probe"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	want := "t1     available"
	if _, err := t1.Probe(); err != nil {
		want = "t1     missing    " + err.Error()
	}
	if !strings.Contains(out.String(), want) {
		t.Fatalf("probe output lacks %q:\n%s", want, out.String())
	}
}

// TestGenerateT1Sim: ZRT_TIER=t1 ZRT_KFD=sim runs a bundle built for
// amd:gfx1201 through T1 on the simulated device.
func TestGenerateT1Sim(t *testing.T) {
	if _, ok := kernels.LookupTarget("amd:gfx1201"); !ok {
		t.Skip("this zrtc has no target amd:gfx1201")
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
	t.Setenv("ZRT_TIER", "t1")
	t.Setenv("ZRT_KFD", "sim")
	root := &cobra.Command{Use: "zrt-run", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(generateCmd())
	var stdout, stderr bytes.Buffer
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetArgs([]string{"generate", b, "-p", "Once upon a time", "-n", "8", "--json"})
	if err := root.Execute(); err != nil {
		t.Fatalf("generate: %v\n%s", err, stderr.String())
	}
	out := strings.TrimSpace(stdout.String() + "\n" + stderr.String())
	var r struct {
		Tier      string `json:"tier"`
		Generated int    `json:"generated_tokens"`
	}
	line := out[strings.LastIndex(out, "\n")+1:]
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	if r.Tier != "t1" || r.Generated != 8 {
		t.Fatalf("tier %q, %d tokens: %s", r.Tier, r.Generated, out)
	}
}
