package pick

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/bundleset"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/runtime/tiers"
)

// cpuAndCUDA is the index of a set with a cpu and a cuda:sm_90 bundle.
func cpuAndCUDA() *bundleset.Index {
	return &bundleset.Index{Format: bundleset.FormatName, Version: bundleset.Version, Bundles: []bundleset.Member{
		{Target: "cpu", Dir: "cpu", Requires: bundleset.Requires{Tier: "cpu"}},
		{Target: "cuda:sm_90", Dir: "cuda_sm_90", Requires: bundleset.Requires{Tier: "cuda", CUDAComputeCapability: "9.0"}},
	}}
}

// cudaProbe is a CUDA probe that finds devs, or fails with err.
func cudaProbe(err error, devs ...tiers.Device) Probe {
	return Probe{Kind: kernels.TierCUDA, Devices: func() ([]tiers.Device, error) { return devs, err }}
}

var (
	noGPU = cudaProbe(errors.New("cuda: no driver library: libcuda.so.1: cannot open shared object file"))
	h100  = cudaProbe(nil, tiers.Device{Kind: kernels.TierCUDA, Name: "NVIDIA H100 80GB HBM3", Arch: "9.0", Count: 1})
	a100  = cudaProbe(nil, tiers.Device{Kind: kernels.TierCUDA, Name: "NVIDIA A100", Arch: "8.0", Count: 1})
)

func choose(t *testing.T, x *bundleset.Index, probe Probe, tier string) (Choice, error) {
	t.Helper()
	return Choose("SET", x, Detect([]Probe{probe}), tier)
}

// mustChoose is choose where the choice must succeed.
func mustChoose(t *testing.T, x *bundleset.Index, probe Probe, tier string) Choice {
	t.Helper()
	c, err := choose(t, x, probe, tier)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNoGPUPicksCPUAndSaysWhy(t *testing.T) {
	c := mustChoose(t, cpuAndCUDA(), noGPU, "")
	if c.Member.Target != "cpu" || c.Path != filepath.Join("SET", "cpu") {
		t.Fatalf("chose %s at %s, want cpu", c.Member.Target, c.Path)
	}
	why := c.Explain()
	for _, want := range []string{"cuda:sm_90", "needs a CUDA device of compute capability 9.0", "none here", "T-CPU runs on any machine", "chose cpu"} {
		if !strings.Contains(why, want) {
			t.Errorf("explanation lacks %q:\n%s", want, why)
		}
	}
	if !strings.Contains(c.Machine.String(), "libcuda.so.1") {
		t.Errorf("the machine's description drops the probe's reason: %s", c.Machine)
	}
}

func TestGPUThatFitsPicksCUDA(t *testing.T) {
	c := mustChoose(t, cpuAndCUDA(), h100, "auto")
	if c.Member.Target != "cuda:sm_90" || !strings.Contains(c.Explain(), "H100") {
		t.Fatalf("chose %s:\n%s", c.Member.Target, c.Explain())
	}
	// The user's tier choice wins over the preference.
	if c, err := choose(t, cpuAndCUDA(), h100, "cpu"); err != nil || c.Member.Target != "cpu" {
		t.Fatalf("--tier cpu on a GPU machine: %s %v", c.Member.Target, err)
	}
}

func TestOlderGPUFallsBackToCPU(t *testing.T) {
	c := mustChoose(t, cpuAndCUDA(), a100, "")
	if c.Member.Target != "cpu" || !strings.Contains(c.Explain(), "needs compute capability 9.0 or later; NVIDIA A100 has 8.0") {
		t.Fatalf("chose %s:\n%s", c.Member.Target, c.Explain())
	}
}

func TestNothingFitsNamesMachineAndOffers(t *testing.T) {
	x := cpuAndCUDA()
	x.Bundles = x.Bundles[1:] // cuda only
	_, err := choose(t, x, noGPU, "")
	if err == nil {
		t.Fatal("a cuda-only set was chosen on a machine without a GPU")
	}
	for _, want := range []string{"no bundle runs", "no CUDA device", "libcuda.so.1", "the set offers cuda:sm_90", "compute capability 9.0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if _, err := choose(t, cpuAndCUDA(), noGPU, "cuda"); err == nil || !strings.Contains(err.Error(), "on tier cuda") {
		t.Errorf("--tier cuda without a GPU: %v", err)
	}
	x = cpuAndCUDA()
	x.Bundles[0].Target = "intel:xe2hpg" // a target this zrt-run does not know
	x.Bundles[0].Requires.Tier = "intel"
	c, err := choose(t, x, noGPU, "")
	if err == nil || !strings.Contains(c.Explain(), "no tier for target intel:xe2hpg") {
		t.Errorf("unknown target: %v\n%s", err, c.Explain())
	}
}

// TestResolve runs the whole path zrt-run takes: a plain bundle is
// itself; a set is read, chosen from and checked against its index.
func TestResolve(t *testing.T) {
	dir := t.TempDir()
	set := filepath.Join(dir, "set")
	x := cpuAndCUDA()
	err := bundleset.Write(set, x, func(tmp string) error {
		for i, m := range x.Bundles {
			d := m.Path(tmp)
			os.Mkdir(d, 0o755)
			g := &bundle.Graph{Ident: bundle.Ident{Target: m.Target, SourceName: "m.gguf"}, ConfigTOML: string(rune('a' + i))}
			if err := os.WriteFile(filepath.Join(d, bundle.GraphFile), g.Encode(), 0o644); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got, c, err := Resolve(set, []Probe{noGPU}, "")
	if err != nil || got != filepath.Join(set, "cpu") || c == nil {
		t.Fatalf("Resolve(set) = %q, %v", got, err)
	}
	plain := filepath.Join(set, "cpu")
	if got, c, err := Resolve(plain, nil, ""); got != plain || c != nil || err != nil {
		t.Fatalf("Resolve(bundle) = %q, %v, %v", got, c, err)
	}
	// A member swapped for another build's is refused.
	cudaGraph := filepath.Join(set, "cuda_sm_90", bundle.GraphFile)
	b, _ := os.ReadFile(cudaGraph)
	os.WriteFile(filepath.Join(set, "cpu", bundle.GraphFile), b, 0o644)
	if _, _, err := Resolve(set, []Probe{noGPU}, ""); err == nil || !strings.Contains(err.Error(), "does not match the index") {
		t.Fatalf("mismatched member: %v", err)
	}
}

// A set with an AMD member: T1's probe decides, by gfx processor; the
// user's tier t1 (or t2) asks for it.
func TestAMDMember(t *testing.T) {
	x := cpuAndCUDA()
	x.Bundles = append(x.Bundles, bundleset.Member{Target: "amd:gfx1201", Dir: "amd_gfx1201",
		Requires: bundleset.Requires{Tier: "amd", AMDGfx: "gfx1201"}})
	noKFD := Probe{Kind: kernels.TierAMD, Devices: func() ([]tiers.Device, error) {
		return nil, errors.New("no /dev/kfd: the amdgpu driver with KFD (HSA) support is not loaded")
	}}
	gfx := func(name string) Probe {
		return Probe{Kind: kernels.TierAMD, Devices: func() ([]tiers.Device, error) {
			return []tiers.Device{{Kind: kernels.TierAMD, Name: name, Arch: name, Count: 1}}, nil
		}}
	}
	for _, c := range []struct {
		amd        Probe
		tier, want string
		why        []string
	}{
		{noKFD, "", "cpu", []string{"needs an AMD GPU gfx1201; there is none T1 can use here (no /dev/kfd", "chose cpu"}},
		{gfx("gfx1201"), "", "amd:gfx1201", []string{"the AMD GPU here is gfx1201", "chose amd:gfx1201"}},
		{gfx("gfx1100"), "", "cpu", []string{"its code objects are for gfx1201; the GPU here is gfx1100"}},
		{gfx("gfx1201"), "t1", "amd:gfx1201", nil},
	} {
		ch, err := Choose("SET", x, Detect([]Probe{noGPU, c.amd}), c.tier)
		if err != nil || ch.Member.Target != c.want {
			t.Errorf("tier %q: chose %s, %v; want %s\n%s", c.tier, ch.Member.Target, err, c.want, ch.Explain())
			continue
		}
		for _, w := range c.why {
			if !strings.Contains(ch.Explain(), w) {
				t.Errorf("explanation lacks %q:\n%s", w, ch.Explain())
			}
		}
	}
	if _, err := Choose("SET", x, Detect([]Probe{noGPU, noKFD}), "t1"); err == nil {
		t.Error("tier t1 without an AMD GPU chose a member")
	}
}

// TestMachineCountsDevices: a machine of several GPUs of one kind is one
// device with its count, said so in its description, and the choice
// holds the first device of a kind to a bundle's requirements.
func TestMachineCountsDevices(t *testing.T) {
	h := tiers.Device{Kind: kernels.TierCUDA, Name: "NVIDIA H100 80GB HBM3", Arch: "9.0", Count: 1}
	a := tiers.Device{Kind: kernels.TierCUDA, Name: "NVIDIA A100", Arch: "8.0", Count: 1}
	m := Detect([]Probe{cudaProbe(nil, h, a, h)})
	if len(m.Devices) != 2 || m.Devices[0].Count != 2 || m.Devices[1].Count != 1 {
		t.Fatalf("devices %+v, want 2 × H100 and 1 × A100", m.Devices)
	}
	if s := m.String(); !strings.Contains(s, "CUDA device 2 × NVIDIA H100 80GB HBM3 (compute capability 9.0)") || !strings.Contains(s, "CUDA device NVIDIA A100") {
		t.Errorf("machine %s", s)
	}
	c, err := Choose("SET", cpuAndCUDA(), m, "")
	if err != nil || c.Member.Target != "cuda:sm_90" {
		t.Fatalf("chose %s, %v", c.Member.Target, err)
	}
	// An empty answer is a reason too, not a device.
	m = Detect([]Probe{cudaProbe(nil)})
	if len(m.Devices) != 0 || !strings.Contains(m.String(), "no CUDA device (the probe found none)") {
		t.Errorf("machine %s", m)
	}
}

// TestTableProbes: the tier table's device probes are the rows' that
// describe GPUs to the choice, one per such row.
func TestTableProbes(t *testing.T) {
	var kinds []kernels.TierKind
	for _, p := range TableProbes(tiers.Table(), tiers.Options{KFD: "sim"}) {
		kinds = append(kinds, p.Kind)
		if p.Kind == kernels.TierAMD {
			devs, err := p.Devices()
			if err != nil || len(devs) != 1 || devs[0].Arch != "gfx1201" {
				t.Errorf("the simulated KFD's GPU: %+v, %v", devs, err)
			}
		}
	}
	if !slices.Equal(kinds, []kernels.TierKind{kernels.TierCUDA, kernels.TierAMD}) {
		t.Errorf("probes for %v, want cuda and amd", kinds)
	}
}

// TestAmpereAndHopper: a set of cuda:sm_80, cuda:sm_90 and cpu bundles
// resolves by the GPU's compute capability: Hopper takes sm_90, Ampere and
// Ada (8.0, 8.6, 8.9) the compute_80 PTX of sm_80, and a GPU before
// Ampere the CPU; the explanation says why for every member.
func TestAmpereAndHopper(t *testing.T) {
	x := &bundleset.Index{Format: bundleset.FormatName, Version: bundleset.Version, Bundles: []bundleset.Member{
		{Target: "cpu", Dir: "cpu", Requires: bundleset.Requires{Tier: "cpu"}},
		{Target: "cuda:sm_80", Dir: "cuda_sm_80", Requires: bundleset.Requires{Tier: "cuda", CUDAComputeCapability: "8.0"}},
		{Target: "cuda:sm_90", Dir: "cuda_sm_90", Requires: bundleset.Requires{Tier: "cuda", CUDAComputeCapability: "9.0"}},
	}}
	for _, c := range []struct{ name, cc, want string }{
		{"NVIDIA H100 80GB HBM3", "9.0", "cuda:sm_90"},
		{"NVIDIA A100-SXM4-80GB", "8.0", "cuda:sm_80"},
		{"NVIDIA A10", "8.6", "cuda:sm_80"},
		{"NVIDIA L40S", "8.9", "cuda:sm_80"},
		{"Tesla T4", "7.5", "cpu"},
	} {
		probe := cudaProbe(nil, tiers.Device{Kind: kernels.TierCUDA, Name: c.name, Arch: c.cc, Count: 1})
		got, err := choose(t, x, probe, "")
		if err != nil || got.Member.Target != c.want {
			t.Errorf("%s (%s): chose %s, %v; want %s", c.name, c.cc, got.Member.Target, err, c.want)
			continue
		}
		explain := got.Explain()
		if !strings.Contains(explain, "chose "+c.want) || !strings.Contains(explain, c.cc) {
			t.Errorf("%s: explanation\n%s", c.name, explain)
		}
		if c.cc == "8.6" && !strings.Contains(explain, "needs compute capability 9.0 or later; NVIDIA A10 has 8.6") {
			t.Errorf("the explanation does not say why sm_90 does not fit an A10:\n%s", explain)
		}
	}
}

// TestAmpereAndAda: a set of cuda:sm_80, cuda:sm_86, cuda:sm_89 and
// cuda:sm_90 bundles gives each GPU the bundle of its own capability, or
// the closest earlier one; the explanation of an sm_86 or sm_89 choice
// says that its PTX is compute_80's.
func TestAmpereAndAda(t *testing.T) {
	x := &bundleset.Index{Format: bundleset.FormatName, Version: bundleset.Version, Bundles: []bundleset.Member{
		{Target: "cuda:sm_80", Dir: "cuda_sm_80", Requires: bundleset.Requires{Tier: "cuda", CUDAComputeCapability: "8.0"}},
		{Target: "cuda:sm_86", Dir: "cuda_sm_86", Requires: bundleset.Requires{Tier: "cuda", CUDAComputeCapability: "8.6"}},
		{Target: "cuda:sm_89", Dir: "cuda_sm_89", Requires: bundleset.Requires{Tier: "cuda", CUDAComputeCapability: "8.9"}},
		{Target: "cuda:sm_90", Dir: "cuda_sm_90", Requires: bundleset.Requires{Tier: "cuda", CUDAComputeCapability: "9.0"}},
	}}
	for _, c := range []struct{ name, cc, want, why string }{
		{"NVIDIA H100 80GB HBM3", "9.0", "cuda:sm_90", "at least the 9.0 it needs\n"},
		{"NVIDIA A100-SXM4-80GB", "8.0", "cuda:sm_80", "needs compute capability 8.6 or later; NVIDIA A100-SXM4-80GB has 8.0"},
		{"NVIDIA A10", "8.6", "cuda:sm_86", "at least the 8.6 it needs (its PTX is sm_80's"},
		{"NVIDIA GeForce RTX 3090 Ti", "8.7", "cuda:sm_86", "needs compute capability 8.9 or later"},
		{"NVIDIA L40S", "8.9", "cuda:sm_89", "at least the 8.9 it needs (its PTX is sm_80's"},
	} {
		probe := cudaProbe(nil, tiers.Device{Kind: kernels.TierCUDA, Name: c.name, Arch: c.cc, Count: 1})
		got, err := choose(t, x, probe, "")
		if err != nil || got.Member.Target != c.want {
			t.Errorf("%s (%s): chose %s, %v; want %s", c.name, c.cc, got.Member.Target, err, c.want)
			continue
		}
		if explain := got.Explain(); !strings.Contains(explain, "chose "+c.want) || !strings.Contains(explain, c.why) {
			t.Errorf("%s: explanation\n%s\nwant it to say %q", c.name, explain, c.why)
		}
	}
}
