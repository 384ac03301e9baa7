package tiers_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
	"github.com/zrtdev/zrt/runtime/tiers"
)

func target(t *testing.T, name string) kernels.Target {
	t.Helper()
	tg, ok := kernels.LookupTarget(name)
	if !ok {
		t.Fatalf("no target %s", name)
	}
	return tg
}

// TestSelect: a tier choice resolves to the row that loads the bundle, or
// fails saying why in the user's terms, as ZRT_TIER always has.
func TestSelect(t *testing.T) {
	rows := tiers.Table()
	cpu, amd := target(t, "cpu"), target(t, "amd:gfx1201")
	for _, c := range []struct {
		choice string
		target kernels.Target
		row    string // the row chosen, or "" for an error
		err    []string
	}{
		{"", cpu, "cpu", nil},
		{"auto", amd, "t1", nil}, // the first row of the kind
		{"t2", amd, "t2", nil},
		{"amd", amd, "t1", nil}, // a kind's name is its first row
		{"cuda", target(t, "cuda:sm_90"), "cuda", nil},
		{"t1", cpu, "", []string{"tier t1: bundle was compiled for cpu, which runs on tier cpu", "--target amd:gfx1201|amd:gfx1100"}},
		{"t2", cpu, "", []string{"tier t2: bundle was compiled for cpu"}},
		{"cpu", amd, "", []string{"tier cpu: bundle was compiled for amd:gfx1201, which runs on tier amd", "--target cpu"}},
		{"metal", cpu, "", []string{"tier metal is not available in this build of zrt-run"}},
		{"vulkan", cpu, "", []string{`unknown tier "vulkan" (auto, cpu, cuda, t1, t2, metal)`}},
	} {
		row, err := tiers.Select(rows, c.choice, c.target)
		if c.row != "" {
			if err != nil || row.Name != c.row || row.Load == nil {
				t.Errorf("Select(%q, %s) = %s, %v; want %s", c.choice, c.target.Name, row.Name, err, c.row)
			}
			continue
		}
		if err == nil {
			t.Errorf("Select(%q, %s) chose %s", c.choice, c.target.Name, row.Name)
			continue
		}
		for _, w := range c.err {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Select(%q, %s): %v; want %q", c.choice, c.target.Name, err, w)
			}
		}
	}
	// A table without a kind's tier says so instead of loading another.
	if _, err := tiers.Select(rows[:1], "", amd); err == nil || !strings.Contains(err.Error(), "runs on tier amd, which this zrt-run lacks") {
		t.Errorf("cpu-only table, amd bundle: %v", err)
	}
}

// TestTable: every compile target's kind has a tier that loads it, every
// row probes, names are unique, and the names and kinds read as the help
// texts and probe print them.
func TestTable(t *testing.T) {
	rows := tiers.Table()
	seen := map[string]bool{}
	for _, r := range rows {
		if seen[r.Name] || r.Name == "" || r.Name == "auto" {
			t.Errorf("row name %q repeated or reserved", r.Name)
		}
		seen[r.Name] = true
		if r.Probe == nil || len(r.Probe()) == 0 {
			t.Errorf("row %s reports nothing to probe", r.Name)
		}
		if (r.Kind == "") != (r.Load == nil) {
			t.Errorf("row %s: a kind without a loader or a loader without a kind", r.Name)
		}
	}
	for _, tg := range kernels.Targets() {
		if len(tiers.OfKind(rows, tg.Tier)) == 0 {
			t.Errorf("target %s: no tier loads kind %s", tg.Name, tg.Tier)
		}
		// What pick asks of a kind is on its first row.
		first, _ := tiers.First(rows, tg.Tier)
		if first.Rank == nil || first.Fits == nil || first.Needs == nil || (first.Devices != nil && first.Noun == "") {
			t.Errorf("kind %s: its first row %s lacks what the choice of a set's member asks", tg.Tier, first.Name)
		}
	}
	if got := strings.Join(tiers.Names(rows), ","); got != "auto,cpu,cuda,t1,t2,metal" {
		t.Errorf("names %s", got)
	}
	if got := tiers.OfKind(rows, kernels.TierAMD); !slices.Equal(got, []string{"t1", "t2"}) {
		t.Errorf("AMD tiers %v", got)
	}
	// The table is a copy: a caller's edit does not reach the next one.
	rows[0].Name = "x"
	if tiers.Table()[0].Name != "cpu" {
		t.Error("Table returned its own rows")
	}
}

// TestDevices: equal devices count together and read "N × name".
func TestDevices(t *testing.T) {
	h := tiers.Device{Kind: kernels.TierCUDA, Name: "NVIDIA H100", Arch: "9.0", Count: 1}
	devs := tiers.Add(tiers.Add(nil, h), h)
	devs = tiers.Add(devs, tiers.Device{Kind: kernels.TierAMD, Name: "gfx1201", Arch: "gfx1201", Count: 1})
	if len(devs) != 2 || devs[0].Count != 2 {
		t.Fatalf("%+v", devs)
	}
	if s := devs[0].String(); s != "2 × NVIDIA H100 (compute capability 9.0)" {
		t.Errorf("%q", s)
	}
	if s := devs[1].String(); s != "gfx1201" {
		t.Errorf("%q", s)
	}
}

// TestSimDevice: with the simulated KFD, T1 sees the simulator's GPU
// whatever the machine has; the t1sim probe line is always there.
func TestSimDevice(t *testing.T) {
	row, _ := tiers.Lookup(tiers.Table(), "t1")
	devs, err := row.Devices(tiers.Options{KFD: "sim"})
	if err != nil || len(devs) != 1 || devs[0].Arch != "gfx1201" || devs[0].Kind != kernels.TierAMD {
		t.Fatalf("%+v, %v", devs, err)
	}
	var names []string
	for _, r := range row.Probe() {
		names = append(names, r.Name)
	}
	if !slices.Equal(names, []string{"t1", "t1sim"}) {
		t.Errorf("t1's probe lines %v", names)
	}
}

// TestCUDADevices: on a machine with CUDA, the devices the cuda row
// reports count every device the driver sees, grouped by name and compute
// capability (two H100s are one device of count 2).
func TestCUDADevices(t *testing.T) {
	row, _ := tiers.Lookup(tiers.Table(), "cuda")
	info, err := driver.Probe()
	if err != nil {
		t.Skipf("no CUDA here: %v", err)
	}
	devs, err := row.Devices(tiers.Options{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range devs {
		n += d.Count
		if _, _, err := tiers.ParseCC(d.Arch); err != nil || d.Kind != kernels.TierCUDA || d.Name == "" {
			t.Errorf("device %+v: %v", d, err)
		}
	}
	if n != info.Devices {
		t.Errorf("devices %v count %d, the driver sees %d", devs, n, info.Devices)
	}
	t.Logf("%v", devs)
}

// TestCUDARuns: probe's line for a CUDA GPU names the targets it runs:
// those for its compute capability or an earlier one, the closest first,
// with the PTX that Ada's and Ampere's later targets share.
func TestCUDARuns(t *testing.T) {
	for _, c := range []struct {
		major, minor int
		want         string
	}{
		{9, 0, "compute capability 9.0 runs cuda:sm_90, cuda:sm_89 (sm_80 PTX), cuda:sm_86 (sm_80 PTX), cuda:sm_80"},
		{8, 0, "compute capability 8.0 runs cuda:sm_80"},
		{8, 6, "compute capability 8.6 runs cuda:sm_86 (sm_80 PTX), cuda:sm_80"},
		{8, 9, "compute capability 8.9 runs cuda:sm_89 (sm_80 PTX), cuda:sm_86 (sm_80 PTX), cuda:sm_80"},
		{7, 5, "compute capability 7.5 runs none of this zrt-run's CUDA targets"},
	} {
		if got := tiers.CUDARunsForTest(c.major, c.minor); got != c.want {
			t.Errorf("%d.%d: %q, want %q", c.major, c.minor, got, c.want)
		}
	}
}

// TestLoadSetRows: a set loads on T-CPU and T-CUDA only; without a GPU
// (or with fewer than its ranks) T-CUDA's loader says why before it
// touches a bundle; and the probe reports NCCL on a line of its own.
func TestLoadSetRows(t *testing.T) {
	rows := tiers.Table()
	t1, _ := tiers.Lookup(rows, "t1")
	if _, err := tiers.LoadSet(t1, nil, tiers.Options{}); err == nil || !strings.Contains(err.Error(), "cannot run a tensor-parallel set") {
		t.Errorf("a set on t1: %v", err)
	}
	cuda, _ := tiers.Lookup(rows, "cuda")
	info, probeErr := driver.Probe()
	if probeErr == nil && info.Devices >= 64 {
		t.Skip("64 GPUs here")
	}
	_, err := tiers.LoadSet(cuda, make([]*bundle.Bundle, 64), tiers.Options{})
	switch {
	case err == nil:
		t.Error("a set of 64 ranks loaded")
	case probeErr != nil && !strings.Contains(err.Error(), probeErr.Error()):
		t.Errorf("without CUDA: %v, want the probe's reason %q", err, probeErr)
	case probeErr == nil && !strings.Contains(err.Error(), "needs 64 GPUs"):
		t.Errorf("64 ranks on %d GPUs: %v", info.Devices, err)
	}
	var nccl *tiers.Report
	for _, row := range rows {
		for _, r := range row.Probe() {
			if r.Name == "nccl" {
				nccl = &r
			}
		}
	}
	if nccl == nil || !strings.Contains(nccl.Detail, "libnccl.so.2") {
		t.Errorf("probe's NCCL line: %+v", nccl)
	}
}
