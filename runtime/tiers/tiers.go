// Package tiers is the tier table: one row per execution tier this
// zrt-run has, naming it (as --tier and ZRT_TIER spell it), the kind of
// bundles it runs (kernels.TierKind, which the compile targets name), how
// it asks the machine whether it can run and which devices it sees, and
// how it loads a bundle. The program's loader (runtime.Open), zrt-run's
// probe, help texts and errors, and the choice of a bundle set's member
// (runtime/pick) all read this table, so a new tier is one row here and
// its package.
//
// It is the only package besides the tiers themselves that imports them:
// the runtime reaches a tier through a row, the commands through the
// runtime, pick and this table.
package tiers

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/bundleset"
	"github.com/zrtdev/zrt/kernels"
	kcpu "github.com/zrtdev/zrt/kernels/cpu"
	"github.com/zrtdev/zrt/runtime/amd/kfd"
	"github.com/zrtdev/zrt/runtime/amd/kfdsim"
	"github.com/zrtdev/zrt/runtime/amd/t1"
	"github.com/zrtdev/zrt/runtime/amd/t2"
	"github.com/zrtdev/zrt/runtime/cpu"
	"github.com/zrtdev/zrt/runtime/cuda"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
	"github.com/zrtdev/zrt/runtime/cuda/nccl"
	"github.com/zrtdev/zrt/runtime/sysmem"
	"github.com/zrtdev/zrt/runtime/tp"
)

// Tier is what a program needs of an execution tier (seed 000 §8.2,
// reduced to what replay uses): host views of the request table and the
// outputs, and replay of a variant to its fence. runtime.Tier is this
// type.
type Tier interface {
	Name() string
	// Region returns the host-visible bytes of a memory-plan region.
	Region(i int) []byte
	// Run replays variant i and waits for its fence.
	Run(ctx context.Context, i int) error
	Close() error
}

// CUDAOptions configure T-CUDA (runtime.Options.CUDA).
type CUDAOptions = cuda.Options

// Options are the settings a row's Load and device probe take: the
// tier-facing part of runtime.Options.
type Options struct {
	Threads    int                                    // T-CPU workers (and the simulated KFD's)
	Trace      func(i int, kernel string, out []byte) // T-CPU's dispatch trace
	MapWeights bool                                   // T-CPU keeps the weights in the mapped pack
	Log        func(format string, args ...any)
	CUDA       CUDAOptions
	// KFD picks T1's device: "" or "kfd" the real /dev/kfd, "sim" the
	// simulated device of runtime/amd/kfdsim.
	KFD string
	// Comm is set by LoadSet for each rank of a tensor-parallel set: the
	// group its collectives meet at. A row whose tier has no collectives
	// refuses a bundle loaded with one.
	Comm *tp.Member
	// CPUPool, when set, is T-CPU's worker pool, shared with the tier of
	// another program that runs beside this one (cpu.Options.Pool).
	CPUPool *kcpu.Pool
}

// Device is a kind of GPU a tier found, with how many of it: a machine
// with two H100s is one Device of Count 2.
type Device struct {
	Kind kernels.TierKind // the bundles it runs
	Name string           // "NVIDIA H100 80GB HBM3", "gfx1201"
	// Arch is what a bundle's requirements are held to: the compute
	// capability ("9.0") of a CUDA device, the gfx processor of an AMD one.
	Arch  string
	Count int
}

func (d Device) String() string {
	s := d.Name
	switch d.Kind {
	case kernels.TierCUDA:
		s = fmt.Sprintf("%s (compute capability %s)", d.Name, d.Arch)
	case kernels.TierAMD:
		if d.Name != d.Arch {
			s = fmt.Sprintf("%s (%s)", d.Name, d.Arch)
		}
	}
	if d.Count > 1 {
		return fmt.Sprintf("%d × %s", d.Count, s)
	}
	return s
}

// Report is one line of zrt-run probe: a tier (or a way to run one) and
// whether it can run here, with what it found or why not.
type Report struct {
	Name      string
	Available bool
	Detail    string
}

// Row is one tier.
type Row struct {
	// Name is the tier as --tier and ZRT_TIER spell it.
	Name string
	// Kind is the kind of bundles it runs; "" for a tier this build lacks.
	Kind kernels.TierKind
	// Probe says whether the tier can run here, and why not; a row may
	// report more than one way to run it (T1 on the simulated KFD).
	Probe func() []Report
	// Devices lists the GPUs the tier would run on, for the choice of a
	// bundle set's member, or says why there are none. Nil where the
	// tier does not describe the machine to that choice: the CPU, and T2,
	// whose GPUs are T1's.
	Devices func(opt Options) ([]Device, error)
	// Load loads a bundle of Kind; nil for a tier this build lacks.
	Load func(b *bundle.Bundle, opt Options) (Tier, error)

	// What the choice of a bundle set's member (runtime/pick) asks of a
	// kind is read from the kind's first row; a later row of the kind
	// (T2) leaves these nil.

	// Rank orders the kind's members: the highest rank that fits wins (a
	// GPU before the CPU, a later CUDA architecture first).
	Rank func(req bundleset.Requires) int
	// Fits says whether the machine runs a member of the kind, and why or
	// why not, given the machine's devices of the kind (the first is the
	// one the tier runs on) or, when it has none, why.
	Fits func(req bundleset.Requires, m Machine) (bool, string)
	// Needs says what a member of the kind needs of a machine, in words.
	Needs func(req bundleset.Requires) string
	// Noun names a device of the kind in a machine's description.
	Noun string
}

// Machine is what a row's Fits sees of the machine: its CPUs, and its
// devices of the row's kind with, when there are none, why.
type Machine struct {
	CPUs     int
	OS, Arch string
	Devices  []Device
	Absent   string
}

// table is the tier table, in the order probe lists the tiers; among the
// rows of one kind the first is the one "auto" loads.
var table = []Row{
	{Name: "cpu", Kind: kernels.TierCPU, Probe: probeCPU, Load: loadCPU,
		Rank: func(bundleset.Requires) int { return 1 }, Fits: fitsCPU, Needs: func(bundleset.Requires) string { return "tier cpu, any machine" }},
	{Name: "cuda", Kind: kernels.TierCUDA, Probe: probeCUDA, Devices: cudaDevices, Load: loadCUDA,
		Rank: rankCUDA, Fits: fitsCUDA, Needs: needsCUDA, Noun: "CUDA device"},
	{Name: "t1", Kind: kernels.TierAMD, Probe: probeT1, Devices: t1Devices, Load: loadT1,
		Rank: func(bundleset.Requires) int { return 500 }, Fits: fitsAMD, Needs: needsAMD, Noun: "AMD GPU"},
	{Name: "t2", Kind: kernels.TierAMD, Probe: probeT2, Load: loadT2},
	{Name: "metal", Probe: probeMetal},
}

// Table returns the tier table.
func Table() []Row { return slices.Clone(table) }

// Names lists the tiers' names after "auto", for help texts and errors:
// "auto, cpu, cuda, t1, t2, metal".
func Names(rows []Row) []string {
	names := []string{"auto"}
	for _, r := range rows {
		names = append(names, r.Name)
	}
	return names
}

// OfKind names the tiers that run bundles of kind k, the one auto picks
// first.
func OfKind(rows []Row, k kernels.TierKind) []string {
	var names []string
	for _, r := range rows {
		if r.Kind == k && r.Load != nil {
			names = append(names, r.Name)
		}
	}
	return names
}

// Lookup finds the row a tier choice names: a tier's name, or a tier
// kind's, which means the first row of that kind (ZRT_TIER=amd is T1).
func Lookup(rows []Row, name string) (Row, bool) {
	for _, r := range rows {
		if r.Name == name {
			return r, true
		}
	}
	for _, r := range rows {
		if r.Kind != "" && string(r.Kind) == name {
			return r, true
		}
	}
	return Row{}, false
}

// Select returns the row that loads a bundle of target on the tier
// choice ("" or "auto": the first row of the target's kind), or an error
// that says what went wrong in the user's terms: an unknown tier, a tier
// this build lacks, or a tier that does not run the target's bundles
// (naming the targets it runs).
func Select(rows []Row, choice string, target kernels.Target) (Row, error) {
	var row Row
	var ok bool
	if choice == "" || choice == "auto" {
		row, ok = Lookup(rows, string(target.Tier))
		if !ok {
			return Row{}, fmt.Errorf("bundle target %s runs on tier %s, which this zrt-run lacks", target.Name, target.Tier)
		}
	} else if row, ok = Lookup(rows, choice); !ok {
		return Row{}, fmt.Errorf("unknown tier %q (%s)", choice, strings.Join(Names(rows), ", "))
	}
	if row.Load == nil {
		return Row{}, fmt.Errorf("tier %s is not available in this build of zrt-run", row.Name)
	}
	if row.Kind != target.Tier {
		var fits []string
		for _, t := range kernels.Targets() {
			if t.Tier == row.Kind {
				fits = append(fits, t.Name)
			}
		}
		return Row{}, fmt.Errorf("tier %s: bundle was compiled for %s, which runs on tier %s; rebuild with zrtc build --target %s", choice, target.Name, target.Tier, strings.Join(fits, "|"))
	}
	return row, nil
}

// First returns the first row of kind k, which holds what pick asks of
// the kind.
func First(rows []Row, k kernels.TierKind) (Row, bool) {
	for _, r := range rows {
		if r.Kind == k {
			return r, true
		}
	}
	return Row{}, false
}

func fitsCPU(_ bundleset.Requires, m Machine) (bool, string) {
	return true, fmt.Sprintf("T-CPU runs on any machine (%d CPUs, %s/%s)", m.CPUs, m.OS, m.Arch)
}

// rankCUDA puts a later architecture first: its kernels were built for a
// closer match.
func rankCUDA(req bundleset.Requires) int {
	major, minor, _ := ParseCC(req.CUDAComputeCapability)
	return 1000 + 10*major + minor
}

func fitsCUDA(req bundleset.Requires, m Machine) (bool, string) {
	major, minor, err := ParseCC(req.CUDAComputeCapability)
	if err != nil {
		return false, fmt.Sprintf("the index's compute capability %q: %v", req.CUDAComputeCapability, err)
	}
	if len(m.Devices) == 0 {
		return false, fmt.Sprintf("needs a CUDA device of compute capability %d.%d or later; there is none here", major, minor)
	}
	g := m.Devices[0]
	gMajor, gMinor, err := ParseCC(g.Arch)
	if err != nil {
		return false, fmt.Sprintf("the probe's compute capability %q of %s: %v", g.Arch, g.Name, err)
	}
	if gMajor < major || gMajor == major && gMinor < minor {
		return false, fmt.Sprintf("needs compute capability %d.%d or later; %s has %d.%d", major, minor, g.Name, gMajor, gMinor)
	}
	// A tensor-parallel set's member takes a GPU a rank, all alike.
	if req.Devices > g.Count {
		return false, fmt.Sprintf("a tensor-parallel set of %d ranks needs %d GPUs of one kind; this machine has %d × %s", req.Devices, req.Devices, g.Count, g.Name)
	}
	return true, fmt.Sprintf("%s has compute capability %d.%d, at least the %d.%d it needs", g.Name, gMajor, gMinor, major, minor)
}

func needsCUDA(req bundleset.Requires) string {
	if req.Devices > 1 {
		return fmt.Sprintf("tier cuda, %d CUDA devices of compute capability %s or later", req.Devices, req.CUDAComputeCapability)
	}
	return fmt.Sprintf("tier cuda, a CUDA device of compute capability %s or later", req.CUDAComputeCapability)
}

func fitsAMD(req bundleset.Requires, m Machine) (bool, string) {
	switch {
	case req.AMDGfx == "":
		return false, "the index names no gfx processor for it"
	case len(m.Devices) == 0:
		return false, fmt.Sprintf("needs an AMD GPU %s; there is none T1 can use here (%s)", req.AMDGfx, m.Absent)
	case m.Devices[0].Arch != req.AMDGfx:
		return false, fmt.Sprintf("its code objects are for %s; the GPU here is %s", req.AMDGfx, m.Devices[0].Arch)
	}
	return true, fmt.Sprintf("the AMD GPU here is %s, the processor its code objects are for", m.Devices[0].Arch)
}

func needsAMD(req bundleset.Requires) string { return "tier amd (T1), an AMD GPU " + req.AMDGfx }

// ParseCC reads a compute capability written "9.0".
func ParseCC(s string) (major, minor int, err error) {
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

func probeCPU() []Report {
	return []Report{{"cpu", true, fmt.Sprintf("%d CPUs, %s/%s", goruntime.NumCPU(), goruntime.GOOS, goruntime.GOARCH)}}
}

// loadCPU refuses up front a memory plan that cannot be resident: T-CPU
// allocates every state region and maps the weights.
func loadCPU(b *bundle.Bundle, opt Options) (Tier, error) {
	var need, kv int64
	for _, r := range b.Graph.Regions {
		need += r.Bytes
		if r.Name == kernels.RegionKV {
			kv = r.Bytes
		}
	}
	if err := sysmem.Check("the bundle's memory plan", need); err != nil {
		return nil, fmt.Errorf("tier cpu: %w (KV cache %s: rebuild with fewer kv_pages or max_slots; given a GGUF, zrt-run takes --slots and --ctx-size)", err, sysmem.Bytes(kv))
	}
	co := cpu.Options{Threads: opt.Threads, Trace: opt.Trace, MapWeights: opt.MapWeights, Log: opt.Log, Pool: opt.CPUPool}
	if opt.Comm != nil {
		co.Comm = opt.Comm
	}
	return cpu.Load(b, co)
}

// LoadSet loads the ranks of a tensor-parallel set (rank r's bundle
// bs[r]) on row's tier as one Tier: the ranks run side by side and meet
// at their collectives (runtime/tp). On T-CPU the worker threads are
// shared out among the ranks, which meet at an in-process exchange; on
// T-CUDA rank r runs on CUDA device r (of those CUDA_VISIBLE_DEVICES
// shows; from opt.CUDA.Device on, for a second set beside the first) and
// the ranks meet through NCCL, inside their captured graphs.
func LoadSet(row Row, bs []*bundle.Bundle, opt Options) (Tier, error) {
	n := len(bs)
	g := tp.NewGroup(n)
	var ranks []tp.Rank
	var err error
	switch row.Kind {
	case kernels.TierCPU:
		ranks, err = cpuRanks(row, g, bs, opt)
	case kernels.TierCUDA:
		ranks, err = cudaRanks(row, bs, opt)
	default:
		return nil, fmt.Errorf("tier %s cannot run a tensor-parallel set (T-CPU and T-CUDA can: rebuild with --target cpu or cuda:sm_90)", row.Name)
	}
	if err != nil {
		return nil, err
	}
	// The request tables are the host's input: rank 0's are copied to
	// every rank before each step, by name (the ranks' plans list the
	// same regions).
	var inputs []int
	for i, reg := range bs[0].Graph.Regions {
		if reg.Name == kernels.RegionIO || reg.Name == kernels.RegionIOWindow {
			inputs = append(inputs, i)
		}
	}
	inputOf := func(r, i int) (int, error) {
		name := bs[0].Graph.Regions[i].Name
		for j, reg := range bs[r].Graph.Regions {
			if reg.Name == name {
				return j, nil
			}
		}
		return 0, fmt.Errorf("rank %d's memory plan lacks region %s", r, name)
	}
	t, err := tp.NewTier(g, ranks, inputs, inputOf)
	if err != nil {
		for _, r := range ranks {
			r.Close()
		}
		return nil, err
	}
	return t, nil
}

// cpuRanks loads a set's ranks on T-CPU, each with its member of g.
func cpuRanks(row Row, g *tp.Group, bs []*bundle.Bundle, opt Options) ([]tp.Rank, error) {
	threads := opt.Threads
	if threads <= 0 {
		threads = goruntime.NumCPU()
	}
	opt.Threads = max(1, threads/len(bs))
	var ranks []tp.Rank
	for r, b := range bs {
		o := opt
		o.Comm = g.Member(r)
		t, err := row.Load(b, o)
		if err != nil {
			for _, rk := range ranks {
				rk.Close()
			}
			return nil, fmt.Errorf("rank %d: %w", r, err)
		}
		ranks = append(ranks, t)
	}
	return ranks, nil
}

// cudaRank is a T-CUDA rank of a set with the communicator it owns.
type cudaRank struct {
	*cuda.Tier
	comm *nccl.Comm
}

// Close closes the rank's tier, then its communicator (the graphs that
// enqueue on it go first).
func (r *cudaRank) Close() error {
	err := r.Tier.Close()
	if e := r.comm.Destroy(); err == nil {
		err = e
	}
	return err
}

// cudaRanks loads a set's ranks on T-CUDA, rank r on device
// opt.CUDA.Device + r, all at once: each loads and captures its graphs
// on a goroutine of its own (its own OS thread, context and stream), so
// that NCCL calls a rank makes while capturing meet its peers'.
func cudaRanks(row Row, bs []*bundle.Bundle, opt Options) ([]tp.Rank, error) {
	n := len(bs)
	info, err := driver.Probe()
	if err != nil {
		return nil, fmt.Errorf("tier cuda: %w", err)
	}
	first := opt.CUDA.Device
	if info.Devices < first+n {
		if first > 0 {
			return nil, fmt.Errorf("tier cuda: a tensor-parallel set of %d ranks on GPUs %d to %d; %d visible", n, first, first+n-1, info.Devices)
		}
		return nil, fmt.Errorf("tier cuda: a tensor-parallel set of %d ranks needs %d GPUs; %d visible", n, n, info.Devices)
	}
	lib, err := nccl.Open(opt.CUDA.NCCL)
	if err != nil {
		return nil, fmt.Errorf("tier cuda: a tensor-parallel set's ranks meet through NCCL: %w", err)
	}
	devices := make([]int, n)
	for r := range devices {
		devices[r] = first + r
	}
	comms, err := initComms(lib, devices)
	if err != nil {
		return nil, fmt.Errorf("tier cuda: %w", err)
	}
	ranks := make([]tp.Rank, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, b := range bs {
		wg.Go(func() {
			o := opt
			o.CUDA.Device, o.CUDA.Comm = devices[r], comms[r]
			t, err := row.Load(b, o)
			if err != nil {
				errs[r] = fmt.Errorf("rank %d (device %d): %w", r, devices[r], err)
				return
			}
			ct, ok := t.(*cuda.Tier)
			if !ok {
				t.Close()
				errs[r] = fmt.Errorf("rank %d: tier %s is not T-CUDA", r, t.Name())
				return
			}
			ranks[r] = &cudaRank{Tier: ct, comm: comms[r]}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err == nil {
		err = connectPeers(ranks)
		errs = []error{err}
	}
	if err := errors.Join(errs...); err != nil {
		for r, rk := range ranks {
			if rk != nil {
				rk.Close()
			} else {
				comms[r].Destroy()
			}
		}
		return nil, err
	}
	if opt.Log != nil {
		opt.Log("tier cuda: a tensor-parallel set of %d ranks on devices %v, NCCL %s at %s; collectives: %s",
			n, devices, lib.VersionString(), lib.Path(), ranks[0].(*cudaRank).Collectives())
	}
	return ranks, nil
}

// connectPeers hands every rank the exchanges of its one-shot
// collectives' peers (cuda.Tier.ConnectPeers), where the ranks run any.
func connectPeers(ranks []tp.Rank) error {
	ex := make([]cuda.PeerExchange, len(ranks))
	with := 0
	for r, rk := range ranks {
		if e, ok := rk.(*cudaRank).PeerExchange(); ok {
			ex[r] = e
			with++
		}
	}
	if with == 0 {
		return nil
	}
	if with != len(ranks) {
		return fmt.Errorf("tier cuda: %d of %d ranks run one-shot collectives (the rank bundles differ?)", with, len(ranks))
	}
	for r, rk := range ranks {
		if err := rk.(*cudaRank).ConnectPeers(ex); err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return nil
}

// initComms makes the ranks' communicators on a thread of its own:
// ncclCommInitAll makes each device current on the calling thread in
// turn.
func initComms(lib *nccl.Library, devices []int) ([]*nccl.Comm, error) {
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	return lib.InitAll(devices)
}

// probeCUDA reports the driver and, on its own line, NCCL, which a
// tensor-parallel set's ranks meet through: where it was found, or where
// it was looked for.
func probeCUDA() []Report {
	var out []Report
	info, err := driver.Probe()
	if err != nil {
		out = append(out, Report{"cuda", false, err.Error()})
	} else {
		out = append(out, Report{"cuda", true, fmt.Sprintf("%s, %d device(s); %s", info, info.Devices, cudaRuns(info.Major, info.Minor))})
	}
	lib, err := nccl.Open(nccl.Options{})
	switch {
	case err != nil:
		out = append(out, Report{"nccl", false, err.Error() + "; tensor-parallel sets on T-CUDA need it"})
	case info.Devices < 2:
		out = append(out, Report{"nccl", true, fmt.Sprintf("NCCL %s at %s; a tensor-parallel set needs 2 or more GPUs, %d visible", lib.VersionString(), lib.Path(), info.Devices)})
	default:
		out = append(out, Report{"nccl", true, fmt.Sprintf("NCCL %s at %s: tensor-parallel sets of up to %d ranks", lib.VersionString(), lib.Path(), info.Devices)})
	}
	return out
}

// cudaRuns says which CUDA targets a GPU of compute capability
// major.minor runs: those built for its capability or an earlier one (the
// driver JIT-compiles their PTX for it), the closest first, as a bundle
// set picks them.
func cudaRuns(major, minor int) string {
	var runs []kernels.Target
	for _, t := range kernels.Targets() {
		if t.Tier != kernels.TierCUDA {
			continue
		}
		tMajor, tMinor, ok := t.ComputeCapability()
		if ok && (tMajor < major || tMajor == major && tMinor <= minor) {
			runs = append(runs, t)
		}
	}
	if len(runs) == 0 {
		return fmt.Sprintf("compute capability %d.%d runs none of this zrt-run's CUDA targets", major, minor)
	}
	cc := func(t kernels.Target) int { a, b, _ := t.ComputeCapability(); return 10*a + b }
	sort.SliceStable(runs, func(i, j int) bool { return cc(runs[i]) > cc(runs[j]) })
	names := make([]string, len(runs))
	for i, t := range runs {
		names[i] = t.Name
		if t.PTX != "" && t.PTX != strings.TrimPrefix(t.Name, "cuda:") {
			names[i] += " (" + t.PTX + " PTX)"
		}
	}
	return fmt.Sprintf("compute capability %d.%d runs %s", major, minor, strings.Join(names, ", "))
}

// cudaDevices lists the CUDA devices grouped by name and compute
// capability, so two H100s are one Device of Count 2.
func cudaDevices(Options) ([]Device, error) {
	info, err := driver.Probe()
	if err != nil {
		return nil, err
	}
	devs := []Device{{Kind: kernels.TierCUDA, Name: info.Name, Arch: fmt.Sprintf("%d.%d", info.Major, info.Minor), Count: 1}}
	for i := 1; i < info.Devices; i++ {
		d, err := driver.Describe(i)
		if err != nil {
			return nil, err
		}
		devs = Add(devs, Device{Kind: kernels.TierCUDA, Name: d.Name, Arch: fmt.Sprintf("%d.%d", d.Major, d.Minor), Count: 1})
	}
	return devs, nil
}

// Add counts d into devs: into an equal device's Count (changing that
// element of devs), else as a new entry.
func Add(devs []Device, d Device) []Device {
	for i, e := range devs {
		if e.Kind == d.Kind && e.Name == d.Name && e.Arch == d.Arch {
			devs[i].Count += d.Count
			return devs
		}
	}
	return append(devs, d)
}

func loadCUDA(b *bundle.Bundle, opt Options) (Tier, error) {
	// A GPU older than the bundle's PTX would fail in the driver's JIT
	// with a message that names neither; say which and what to build.
	target, _ := kernels.LookupTarget(b.Graph.Ident.Target)
	if major, minor, ok := target.ComputeCapability(); ok {
		if info, err := driver.Probe(); err == nil && (info.Major < major || info.Major == major && info.Minor < minor) {
			return nil, fmt.Errorf("tier cuda: the bundle is for %s (compute capability %d.%d or later); %s has %d.%d: %s",
				target.Name, major, minor, info.Name, info.Major, info.Minor, cudaRuns(info.Major, info.Minor))
		}
	}
	co := opt.CUDA
	if co.Log == nil {
		co.Log = opt.Log
	}
	t, err := cuda.Load(b, co)
	if err != nil {
		return nil, fmt.Errorf("tier cuda: %w", err) // where CUDA cannot run, the driver probe's reason
	}
	return t, nil
}

func probeT1() []Report {
	r := Report{Name: "t1"}
	if info, err := t1.Probe(); err != nil {
		r.Detail = err.Error()
	} else {
		r.Available, r.Detail = true, fmt.Sprintf("%s, KFD interface %d.%d (a bundle runs when built for its gfx target)", info.Name, info.Major, info.Minor)
	}
	return []Report{r, {"t1sim", true, "ZRT_TIER=t1 ZRT_KFD=sim: the T1 path on a simulated KFD that runs T-CPU kernels"}}
}

// t1Devices is the first AMD GPU with kernels here whose KFD gives a
// compute queue; with the simulated KFD (ZRT_KFD=sim), the simulator's.
func t1Devices(opt Options) ([]Device, error) {
	gfx := kfd.Gfx(kfdsim.GfxVersion)
	if opt.KFD != "sim" {
		info, err := t1.Probe()
		if err != nil {
			return nil, err
		}
		gfx = kfd.Gfx(info.GfxVersion)
	}
	return []Device{{Kind: kernels.TierAMD, Name: gfx, Arch: gfx, Count: 1}}, nil
}

func loadT1(b *bundle.Bundle, opt Options) (Tier, error) {
	var dev kfd.Device
	switch opt.KFD {
	case "", "kfd":
		target, _ := kernels.LookupTarget(b.Graph.Ident.Target)
		gfx := strings.TrimPrefix(target.Name, "amd:")
		d, err := kfd.Open(kfd.OpenOptions{Gfx: []string{gfx}})
		if err != nil {
			return nil, fmt.Errorf("tier t1: %w", err)
		}
		dev = d
	case "sim":
		// The simulated device keeps every allocation in this process,
		// the weights copied in.
		var need int64
		for _, r := range b.Graph.Regions {
			need += r.Bytes
		}
		if err := sysmem.Check("the bundle's memory plan on the simulated KFD", need); err != nil {
			return nil, fmt.Errorf("tier t1: %w", err)
		}
		dev = kfdsim.New(opt.Threads)
	default:
		return nil, fmt.Errorf("tier t1: KFD device %q: want kfd or sim", opt.KFD)
	}
	t, err := t1.Load(b, dev, t1.Options{CloseDevice: true})
	if err != nil {
		dev.Close()
		return nil, err
	}
	return t, nil
}

func probeT2() []Report {
	info, err := t2.Probe()
	if err != nil {
		return []Report{{"t2", false, err.Error()}}
	}
	return []Report{{"t2", true, fmt.Sprintf("%s, amdgpu DRM %d.%d (a bundle runs when built for its gfx target)", info.Name, info.Major, info.Minor)}}
}

func loadT2(b *bundle.Bundle, _ Options) (Tier, error) {
	target, _ := kernels.LookupTarget(b.Graph.Ident.Target)
	t, err := t2.Load(b, strings.TrimPrefix(target.Name, "amd:"))
	if err != nil {
		return nil, err // "tier t2: " and the probe's reason
	}
	return t, nil
}

func probeMetal() []Report {
	if goruntime.GOOS == "darwin" {
		return []Report{{"metal", false, "this build has no Metal tier"}}
	}
	return []Report{{"metal", false, fmt.Sprintf("not macOS (%s)", goruntime.GOOS)}}
}

// CPUWorkers is t's worker pool when t is T-CPU's (nil otherwise), for a
// program loaded beside it to share (Options.CPUPool).
func CPUWorkers(t Tier) *kcpu.Pool {
	if c, ok := t.(*cpu.Tier); ok {
		return c.Workers()
	}
	return nil
}
