// Package pick chooses, from a bundle set (format/bundleset), the bundle
// this machine runs best, and says why: a GPU bundle whose requirements
// the machine meets before the CPU bundle, which runs anywhere. The
// machine is described by a value that Detect fills from a probe the
// caller passes, so tests can stand in for hardware they do not have.
package pick

import (
	"fmt"
	goruntime "runtime"
	"sort"
	"strconv"
	"strings"

	"github.com/zrtdev/zrt/format/bundleset"
	"github.com/zrtdev/zrt/kernels"
)

// GPU is a CUDA device as the probe found it.
type GPU struct {
	Name         string
	Major, Minor int // compute capability
}

func (g GPU) String() string {
	return fmt.Sprintf("%s (compute capability %d.%d)", g.Name, g.Major, g.Minor)
}

// Machine is what the choice depends on.
type Machine struct {
	CPUs     int
	OS, Arch string
	// CUDA is the first CUDA device, nil when there is none usable;
	// NoCUDA then says why (no driver library, no device, ...).
	CUDA   *GPU
	NoCUDA string
	// AMD is the gfx target of the first AMD GPU T1 can use ("gfx1201"),
	// "" when there is none; NoAMD then says why.
	AMD   string
	NoAMD string
}

// String says what the machine has, for the explanation and errors.
func (m Machine) String() string {
	s := fmt.Sprintf("%d CPUs (%s/%s)", m.CPUs, m.OS, m.Arch)
	if m.CUDA != nil {
		s += ", CUDA device " + m.CUDA.String()
	} else {
		s += ", no CUDA device (" + m.NoCUDA + ")"
	}
	if m.AMD != "" {
		return s + ", AMD GPU " + m.AMD
	}
	return s + ", no AMD GPU (" + m.NoAMD + ")"
}

// CUDAProbe reports the first CUDA device, or why CUDA cannot run here.
// zrt-run passes one over the CUDA driver; tests pass a fake.
type CUDAProbe func() (GPU, error)

// AMDProbe reports the gfx target of the first AMD GPU the AMD tier can
// use, or why there is none. zrt-run passes T1's probe.
type AMDProbe func() (string, error)

// Probes ask about the machine's GPUs; a nil probe counts as "not
// probed".
type Probes struct {
	CUDA CUDAProbe
	AMD  AMDProbe
}

// Detect describes this machine, asking the probes about its GPUs.
func Detect(p Probes) Machine {
	m := Machine{CPUs: goruntime.NumCPU(), OS: goruntime.GOOS, Arch: goruntime.GOARCH, NoCUDA: "not probed", NoAMD: "not probed"}
	if p.CUDA != nil {
		if g, err := p.CUDA(); err != nil {
			m.NoCUDA = err.Error()
		} else {
			m.CUDA, m.NoCUDA = &g, ""
		}
	}
	if p.AMD != nil {
		if gfx, err := p.AMD(); err != nil {
			m.NoAMD = err.Error()
		} else {
			m.AMD, m.NoAMD = gfx, ""
		}
	}
	return m
}

// Candidate is one member of the set and whether it fits the machine.
type Candidate struct {
	Member bundleset.Member
	Fits   bool
	Why    string // why it fits, or why not
}

// Choice is the member picked and the reasoning over every member, in
// the order of preference they were considered in.
type Choice struct {
	Machine    Machine
	Member     bundleset.Member
	Path       string // the member's bundle directory
	Candidates []Candidate
}

// Explain renders the reasoning, one line per member and a last line
// naming the choice.
func (c Choice) Explain() string {
	var b strings.Builder
	for _, k := range c.Candidates {
		mark := "no "
		if k.Fits {
			mark = "yes"
		}
		fmt.Fprintf(&b, "  %-12s %s  %s\n", k.Member.Target, mark, k.Why)
	}
	fmt.Fprintf(&b, "chose %s (%s)\n", c.Member.Target, c.Path)
	return b.String()
}

// Choose picks the member of the set at dir (index x) to run on m. tier
// is the user's tier choice ("" or "auto" for any; cpu, cuda, ...): a
// member of another tier is passed over. Among the members that fit, a
// GPU tier wins over the CPU, and a later CUDA architecture over an
// earlier one (its kernels were built for a closer match). When none
// fits, the error names what the machine has and what the set offers.
func Choose(dir string, x *bundleset.Index, m Machine, tier string) (Choice, error) {
	if tier == "auto" {
		tier = ""
	}
	order := append([]bundleset.Member(nil), x.Bundles...)
	sort.SliceStable(order, func(i, j int) bool { return rank(order[i]) > rank(order[j]) })
	c := Choice{Machine: m}
	found := false
	for _, mem := range order {
		fits, why := fit(mem, m, tier)
		c.Candidates = append(c.Candidates, Candidate{Member: mem, Fits: fits, Why: why})
		if fits && !found {
			c.Member, c.Path, found = mem, mem.Path(dir), true
		}
	}
	if !found {
		var offers []string
		for _, k := range c.Candidates {
			offers = append(offers, fmt.Sprintf("%s (%s)", k.Member.Target, needs(k.Member)))
		}
		want := ""
		if tier != "" {
			want = " on tier " + tier
		}
		return c, fmt.Errorf("bundle set %s: no bundle runs%s on this machine: it has %s; the set offers %s",
			dir, want, m, strings.Join(offers, ", "))
	}
	return c, nil
}

// rank orders members by preference: a GPU tier before the CPU, and among
// CUDA bundles the later architecture first.
func rank(mem bundleset.Member) int {
	switch mem.Requires.Tier {
	case string(kernels.TierCUDA):
		major, minor, _ := parseCC(mem.Requires.CUDAComputeCapability)
		return 1000 + 10*major + minor
	case string(kernels.TierAMD):
		return 500
	case string(kernels.TierCPU):
		return 1
	}
	return 0
}

// fit says whether the machine runs mem, and why or why not.
func fit(mem bundleset.Member, m Machine, tier string) (bool, string) {
	target, known := kernels.LookupTarget(mem.Target)
	req := mem.Requires
	if tier == "t1" || tier == "t2" { // the AMD tiers run the amd tier kind's bundles
		tier = string(kernels.TierAMD)
	}
	switch {
	case !known:
		return false, fmt.Sprintf("this zrt-run has no tier for target %s (it knows %s)", mem.Target, strings.Join(kernels.TargetNames(), ", "))
	case string(target.Tier) != req.Tier:
		return false, fmt.Sprintf("the index says tier %q, but target %s runs on tier %s (a set from another zrtc?)", req.Tier, mem.Target, target.Tier)
	case tier != "" && tier != req.Tier:
		return false, fmt.Sprintf("runs on tier %s, and tier %s was asked for", req.Tier, tier)
	}
	switch target.Tier {
	case kernels.TierCPU:
		return true, fmt.Sprintf("T-CPU runs on any machine (%d CPUs, %s/%s)", m.CPUs, m.OS, m.Arch)
	case kernels.TierCUDA:
		major, minor, err := parseCC(req.CUDAComputeCapability)
		if err != nil {
			return false, fmt.Sprintf("the index's compute capability %q: %v", req.CUDAComputeCapability, err)
		}
		if m.CUDA == nil {
			return false, fmt.Sprintf("needs a CUDA device of compute capability %d.%d or later; there is none here", major, minor)
		}
		g := m.CUDA
		if g.Major < major || g.Major == major && g.Minor < minor {
			return false, fmt.Sprintf("needs compute capability %d.%d or later; %s has %d.%d", major, minor, g.Name, g.Major, g.Minor)
		}
		return true, fmt.Sprintf("%s has compute capability %d.%d, at least the %d.%d it needs", g.Name, g.Major, g.Minor, major, minor)
	case kernels.TierAMD:
		switch {
		case req.AMDGfx == "":
			return false, "the index names no gfx processor for it"
		case m.AMD == "":
			return false, fmt.Sprintf("needs an AMD GPU %s; there is none T1 can use here (%s)", req.AMDGfx, m.NoAMD)
		case m.AMD != req.AMDGfx:
			return false, fmt.Sprintf("its code objects are for %s; the GPU here is %s", req.AMDGfx, m.AMD)
		}
		return true, fmt.Sprintf("the AMD GPU here is %s, the processor its code objects are for", m.AMD)
	}
	return false, fmt.Sprintf("this zrt-run cannot run tier %s", target.Tier)
}

// needs says what a member needs of a machine, in words.
func needs(mem bundleset.Member) string {
	r := mem.Requires
	switch {
	case r.Tier == string(kernels.TierCUDA):
		return fmt.Sprintf("tier cuda, a CUDA device of compute capability %s or later", r.CUDAComputeCapability)
	case r.Tier == string(kernels.TierCPU):
		return "tier cpu, any machine"
	case r.Tier == string(kernels.TierAMD):
		return "tier amd (T1), an AMD GPU " + r.AMDGfx
	}
	return "tier " + r.Tier
}

// parseCC reads a compute capability written "9.0".
func parseCC(s string) (major, minor int, err error) {
	a, b, ok := strings.Cut(s, ".")
	if ok {
		major, err = strconv.Atoi(a)
		if err == nil {
			minor, err = strconv.Atoi(b)
		}
	}
	if !ok || err != nil || major < 0 || minor < 0 || minor > 9 {
		return 0, 0, fmt.Errorf("not a compute capability such as 9.0")
	}
	return major, minor, nil
}

// Resolve returns the bundle directory to open for path: path itself when
// it is a bundle; for a bundle set, the member Choose picks for the
// machine the probes describe, checked against the index, and the choice (nil
// for a plain bundle). The probes run only for a set.
func Resolve(path string, probes Probes, tier string) (string, *Choice, error) {
	if !bundleset.IsSet(path) {
		return path, nil, nil
	}
	x, err := bundleset.Read(path)
	if err != nil {
		return "", nil, err
	}
	c, err := Choose(path, x, Detect(probes), tier)
	if err != nil {
		return "", &c, err
	}
	if err := bundleset.VerifyMember(path, c.Member); err != nil {
		return "", &c, err
	}
	return c.Path, &c, nil
}
