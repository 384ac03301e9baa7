// Package pick chooses, from a bundle set (format/bundleset), the bundle
// this machine runs best, and says why: a GPU bundle whose requirements
// the machine meets before the CPU bundle, which runs anywhere. The
// machine is a list of devices, each kind with its count, that Detect
// fills from probes the caller passes (the tier table's, TableProbes), so
// tests can stand in for hardware they do not have.
package pick

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strings"

	"github.com/zrtdev/zrt/format/autobuild"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/bundleset"
	"github.com/zrtdev/zrt/format/zrtp"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/runtime/tiers"
)

// Machine is what the choice depends on: the CPUs and the GPUs the tier
// table's probes found, each kind of GPU with its count (two H100s are
// one device of count 2).
type Machine struct {
	CPUs     int
	OS, Arch string
	// Devices are the GPUs found, in the probes' order; a tier runs on the
	// first device of its kind.
	Devices []tiers.Device
	// Absent says, for each kind of GPU a probe found none of, why (no
	// driver library, no device, ...).
	Absent []Absent
}

// Absent is a kind of GPU the machine has none of, and why.
type Absent struct {
	Kind kernels.TierKind
	Why  string
}

// why says why the machine has no device of kind k.
func (m Machine) why(k kernels.TierKind) string {
	for _, a := range m.Absent {
		if a.Kind == k {
			return a.Why
		}
	}
	return "not probed"
}

// noun is how the machine's description names a device of kind k: the
// tier table's word for it.
func noun(k kernels.TierKind) string {
	if r, ok := tiers.First(tiers.Table(), k); ok && r.Noun != "" {
		return r.Noun
	}
	return string(k) + " device"
}

// String says what the machine has, for the explanation and errors.
func (m Machine) String() string {
	s := fmt.Sprintf("%d CPUs (%s/%s)", m.CPUs, m.OS, m.Arch)
	for _, d := range m.Devices {
		s += ", " + noun(d.Kind) + " " + d.String()
	}
	for _, a := range m.Absent {
		s += ", no " + noun(a.Kind) + " (" + a.Why + ")"
	}
	return s
}

// Probe asks the machine for its GPUs of one kind, or why there are
// none. zrt-run passes the tier table's (TableProbes); tests pass fakes.
type Probe struct {
	Kind    kernels.TierKind
	Devices func() ([]tiers.Device, error)
}

// TableProbes are the device probes of the tier table's rows, with the
// tier options (ZRT_KFD=sim makes the AMD GPU the simulator's).
func TableProbes(rows []tiers.Row, opt tiers.Options) []Probe {
	var ps []Probe
	for _, r := range rows {
		if r.Devices != nil {
			devices := r.Devices
			ps = append(ps, Probe{Kind: r.Kind, Devices: func() ([]tiers.Device, error) { return devices(opt) }})
		}
	}
	return ps
}

// Detect describes this machine, asking the probes about its GPUs.
func Detect(probes []Probe) Machine {
	m := Machine{CPUs: goruntime.NumCPU(), OS: goruntime.GOOS, Arch: goruntime.GOARCH}
	for _, p := range probes {
		devs, err := p.Devices()
		switch {
		case err != nil:
			m.Absent = append(m.Absent, Absent{p.Kind, err.Error()})
		case len(devs) == 0:
			m.Absent = append(m.Absent, Absent{p.Kind, "the probe found none"})
		}
		for _, d := range devs {
			m.Devices = tiers.Add(m.Devices, d)
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
	// A tensor-parallel set's target is chosen by its rank 0, which the
	// runtime opens with the other ranks beside it.
	var order []bundleset.Member
	for _, m := range x.Bundles {
		if m.Rank == 0 {
			order = append(order, m)
		}
	}
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

// rank orders members by preference, as the tier table ranks their
// kinds: a GPU tier before the CPU, and among CUDA bundles the later
// architecture first.
func rank(mem bundleset.Member) int {
	if r, ok := tiers.First(tiers.Table(), kernels.TierKind(mem.Requires.Tier)); ok && r.Rank != nil {
		return r.Rank(mem.Requires)
	}
	return 0
}

// fit says whether the machine runs mem, and why or why not: the
// target's tier kind decides, through its row of the tier table.
func fit(mem bundleset.Member, m Machine, tier string) (bool, string) {
	rows := tiers.Table()
	target, known := kernels.LookupTarget(mem.Target)
	req := mem.Requires
	if row, ok := tiers.Lookup(rows, tier); ok && row.Kind != "" { // t1 and t2 run the amd kind's bundles
		tier = string(row.Kind)
	}
	switch {
	case !known:
		return false, fmt.Sprintf("this zrt-run has no tier for target %s (it knows %s)", mem.Target, strings.Join(kernels.TargetNames(), ", "))
	case string(target.Tier) != req.Tier:
		return false, fmt.Sprintf("the index says tier %q, but target %s runs on tier %s (a set from another zrtc?)", req.Tier, mem.Target, target.Tier)
	case tier != "" && tier != req.Tier:
		return false, fmt.Sprintf("runs on tier %s, and tier %s was asked for", req.Tier, tier)
	}
	row, ok := tiers.First(rows, target.Tier)
	if !ok || row.Fits == nil {
		return false, fmt.Sprintf("this zrt-run cannot run tier %s", target.Tier)
	}
	tm := tiers.Machine{CPUs: m.CPUs, OS: m.OS, Arch: m.Arch, Absent: m.why(target.Tier)}
	for _, d := range m.Devices {
		if d.Kind == target.Tier {
			tm.Devices = append(tm.Devices, d)
		}
	}
	fits, why := row.Fits(req, tm)
	// Ada's and Ampere's later targets carry compute_80 PTX: say so, so
	// the choice of cuda:sm_89 over cuda:sm_80 is not read as different
	// kernels.
	if major, minor, ok := target.ComputeCapability(); ok && target.PTX != "" && target.PTX != fmt.Sprintf("sm_%d%d", major, minor) {
		why += fmt.Sprintf(" (its PTX is %s's, which the driver compiles for the card)", target.PTX)
	}
	return fits, why
}

// needs says what a member needs of a machine, in words.
func needs(mem bundleset.Member) string {
	if r, ok := tiers.First(tiers.Table(), kernels.TierKind(mem.Requires.Tier)); ok && r.Needs != nil {
		return r.Needs(mem.Requires)
	}
	return "tier " + mem.Requires.Tier
}

// Resolve returns the bundle directory to open for path: path itself when
// it is a bundle; for a bundle set, the member Choose picks for the
// machine the probes describe, checked against the index, and the choice (nil
// for a plain bundle). The probes run only for a set.
func Resolve(path string, probes []Probe, tier string) (string, *Choice, error) {
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

// Unpack returns the bundle directory for the pack (format/zrtp) at
// path: the member this machine runs (chosen as Resolve chooses a set's,
// with the choice returned for a set), unpacked once under
// base/<SHA-256 of the pack's index>/ and reused from there on later
// calls. Only that member is read and decompressed.
func Unpack(path string, probes []Probe, tier, base string) (string, *Choice, error) {
	r, err := zrtp.Open(path)
	if err != nil {
		return "", nil, err
	}
	defer r.Close()
	x := r.Index()
	m := x.Members[0]
	var want string // the graph digest the set's index records
	var c *Choice
	if x.Kind == zrtp.KindSet {
		ch, err := Choose(path, x.Set, Detect(probes), tier)
		if err != nil {
			return "", nil, err
		}
		var ok bool
		if m, ok = x.Member(ch.Member.Target); !ok {
			return "", nil, fmt.Errorf("pack %s: %w: the set's index lists %s, the pack holds no such member", path, zrtp.ErrFormat, ch.Member.Target)
		}
		want = ch.Member.GraphSHA256
		ch.Path = unpackedDir(base, r, m)
		c = &ch
	}
	dir := unpackedDir(base, r, m)
	if fi, err := os.Stat(dir); err == nil && bundle.IsBundle(dir, fi) == nil {
		return dir, c, checkMember(dir, m, want)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", c, fmt.Errorf("pack %s: unpack directory: %w", path, err)
	}
	if err := r.UnpackMember(m, dir); err != nil {
		return "", c, err
	}
	return dir, c, checkMember(dir, m, want)
}

// checkMember ties an unpacked set member to the set's index, as a set
// directory's member is tied (bundleset.VerifyMember).
func checkMember(dir string, m zrtp.Member, want string) error {
	if want == "" {
		return nil
	}
	return bundleset.VerifyMember(filepath.Dir(dir), bundleset.Member{Target: m.Target, Dir: filepath.Base(dir), GraphSHA256: want})
}

// unpackedDir is where member m of pack r is unpacked under base: the
// index's digest names the pack's content, so a changed pack never
// reuses an older one's member.
func unpackedDir(base string, r *zrtp.Reader, m zrtp.Member) string {
	name := m.Dir
	if name == "" {
		name = "bundle"
	}
	return filepath.Join(base, r.Digest(), name)
}

// Source says how Locate finds the bundle to open for a path.
type Source struct {
	// Probes and Tier choose a set's or a pack's member (Choose).
	Probes []Probe
	Tier   string
	// UnpackDir is where packs are unpacked (Unpack).
	UnpackDir string
	// Build is how a GGUF is built into the build cache (its GGUF is the
	// path; a Target of "" is cpu, or the registry's first CUDA target
	// when Tier is cuda).
	Build autobuild.Request
}

// Locate returns the bundle directory to open for path: path itself for
// a bundle; for a bundle set, the member this machine runs (Resolve);
// for a pack, that member unpacked (Unpack); for a GGUF, its build in the
// build cache, made the first time (format/autobuild). The choice, for a
// set or a pack of one, says why that member.
func Locate(ctx context.Context, path string, s Source) (string, *Choice, error) {
	switch {
	case autobuild.IsGGUF(path):
		req := s.Build
		req.GGUF = path
		if req.Target == "" {
			req.Target = string(kernels.TierCPU) // zrtc's default, said in the progress line
			for _, t := range kernels.Targets() {
				if s.Tier == string(kernels.TierCUDA) && t.Tier == kernels.TierCUDA {
					req.Target = t.Name
					break
				}
			}
		}
		r, err := autobuild.Build(ctx, req)
		if err != nil {
			return "", nil, fmt.Errorf("%s: %w", path, err)
		}
		return r.Dir, nil, nil
	case zrtp.Is(path):
		return Unpack(path, s.Probes, s.Tier, s.UnpackDir)
	}
	return Resolve(path, s.Probes, s.Tier)
}
