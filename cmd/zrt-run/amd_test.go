package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/internal/clitest"
	"github.com/zrtdev/zrt/internal/testmodel"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/runtime/tiers"
)

// TestProbeSaysWhyAMD: the probe's T1 and T2 lines are the tier table
// rows' own probes.
func TestProbeSaysWhyAMD(t *testing.T) {
	out, _, err := clitest.Run("zrt-run", []string{"probe"}, probeCmd())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"t1", "t2"} {
		r := probeOf(t, name)
		want := name + "     available"
		if !r.Available {
			want = name + "     missing    " + r.Detail
		}
		if !strings.Contains(out, want) {
			t.Errorf("probe output lacks %q:\n%s", want, out)
		}
	}
}

// probeOf is the first report of the tier table's row name.
func probeOf(t *testing.T, name string) tiers.Report {
	t.Helper()
	row, ok := tiers.Lookup(tiers.Table(), name)
	if !ok {
		t.Fatalf("no tier %s", name)
	}
	return row.Probe()[0]
}

// gfx1201Bundle compiles the tiny synthetic model for amd:gfx1201 and
// returns the bundle directory; it skips where this zrtc lacks the target.
func gfx1201Bundle(t *testing.T) string {
	t.Helper()
	if _, ok := kernels.LookupTarget("amd:gfx1201"); !ok {
		t.Skip("this zrtc has no target amd:gfx1201")
	}
	_, b := testmodel.Bundle(t, "", compiler.Options{Target: "amd:gfx1201"})
	return b
}

// TestGenerateT1Sim: ZRT_TIER=t1 ZRT_KFD=sim runs a bundle built for
// amd:gfx1201 through T1 on the simulated device.
func TestGenerateT1Sim(t *testing.T) {
	b := gfx1201Bundle(t)
	t.Setenv("ZRT_TIER", "t1")
	t.Setenv("ZRT_KFD", "sim")
	stdout, stderr, err := execGenerate(b, "-p", "Once upon a time", "-n", "8", "--json")
	if err != nil {
		t.Fatalf("generate: %v\n%s", err, stderr)
	}
	out := strings.TrimSpace(stdout + "\n" + stderr)
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

// TestGenerateT2Reason: ZRT_TIER=t2 on a gfx1201 bundle fails with the
// probe's reason where T2 cannot run.
func TestGenerateT2Reason(t *testing.T) {
	probe := probeOf(t, "t2")
	if probe.Available {
		t.Skip("T2 is usable here; the reason path cannot be seen")
	}
	b := gfx1201Bundle(t)
	t.Setenv("ZRT_TIER", "t2")
	_, _, err := execGenerate(b, "-p", "Once", "-n", "2")
	first := strings.SplitN(probe.Detail, ":", 2)[0] // "no render node" here
	if err == nil || !strings.Contains(err.Error(), "tier t2: ") || !strings.Contains(err.Error(), first) {
		t.Fatalf("ZRT_TIER=t2: %v (probe: %s)", err, probe.Detail)
	}
}
