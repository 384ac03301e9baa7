// Package cuda is T-CUDA: it runs a bundle compiled for a cuda target on
// an NVIDIA GPU through the CUDA Driver API (package driver, loaded at run
// time). Load uploads the weights once, allocates the memory plan's other
// regions on the device, loads each kernel blob's PTX, and walks every
// variant's PM4 stream into launches (Walk). Following seed 002 (capture
// once, replay forever), a variant is captured as a CUDA graph the first
// time it runs — request-table upload, launches, and output download
// together — and later runs replay that graph. Graphs live in a table
// keyed exactly by variant index with LRU eviction; a variant the bundle
// lacks is an error, never a silent no-op.
package cuda

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/kernels"
	kcuda "github.com/zrtdev/zrt/kernels/cuda"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
	"github.com/zrtdev/zrt/runtime/cuda/nccl"
	"github.com/zrtdev/zrt/runtime/sysmem"
)

// Options configure the tier.
type Options struct {
	// MaxGraphs bounds the captured variants kept (default 16).
	MaxGraphs int
	// Timeout bounds one replay (default 60s): past it Run fails instead
	// of waiting on a hung GPU.
	Timeout time.Duration
	// Profile times every kernel of the graph path (see profiler), and
	// the persistent kernel's tasks where a variant runs on it (its
	// trace, megakernel.go's reportMk); both are printed at Close.
	Profile bool
	// NoPDL turns programmatic dependent launch off: each kernel then
	// starts only after the previous one ends.
	NoPDL bool
	// NoMegakernel keeps every variant on the graph path, also those whose
	// bundle schedules them for the persistent kernel (megakernel.go):
	// for A/B runs and as the second oracle.
	NoMegakernel bool
	// Omit leaves launches out of the captured graphs, each item naming a
	// kernel family (flash_attn), an instance (matmul.q4_k) or an entry
	// point (stage, tile16, …); an item that names no launch of the bundle
	// fails Load. The outputs are then wrong: it is for measuring what the
	// omitted kernels cost inside the graph, where programmatic dependent
	// launch overlaps them with their neighbours, which the profiler's
	// launch-by-launch replay cannot show.
	Omit []string
	// Device is the CUDA device ordinal to run on (default 0).
	Device int
	// Log, when set, hears a slow kernel load: on a machine's first
	// start the driver compiles every kernel's PTX for the GPU (its
	// cache serves later starts), which can take a minute.
	Log func(format string, args ...any)
	// Comm is the communicator of the tensor-parallel set the bundle is
	// a rank of (its rank's): its collectives run through it, recorded in
	// the captured graphs like the kernels. A rank bundle loaded without
	// one is refused; Close leaves it to its owner.
	Comm *nccl.Comm
	// NCCL configures the library a set's ranks meet through (where to
	// find it, NVLS): read by the loader of a set (runtime/tiers), which
	// makes the communicators.
	NCCL nccl.Options
	// Collectives picks how a rank runs its collectives: CollectivesAuto
	// (""), CollectivesNCCL or CollectivesPeer (peer.go).
	Collectives string
	// FuseReduces lets a one-row step's row-parallel matmul take in the
	// one-shot all-reduce after it (peer.go's fuseProducts). Off by
	// default: on 2 H200s (round 24c, tg128 of the 7B shape at TP=2) it
	// decoded at 460.0 and 441.2 tok/s against 466.2 and 467.8 with the
	// all-reduces apart.
	FuseReduces bool
	// AttnGeometry, when set (w8z16st1: kcuda.ParseAttnGeometry), gives
	// every split decode attention launch that geometry instead of the
	// one Shape chooses (kcuda's attnTable or its rule): for timing
	// candidate geometries end to end. The outputs stay right; their bits
	// follow the warps and blocks (the order of the softmax's sums).
	AttnGeometry string
}

// hostRegions are the regions the engine reads or writes from the host;
// each gets a pinned mirror that the captured graph copies to or from.
var hostRegions = map[string]bool{kernels.RegionIO: true, kernels.RegionIOWindow: true, kernels.RegionLogits: true, kernels.RegionTokens: true,
	kernels.RegionFence: true}

type region struct {
	name string
	dev  driver.DevPtr
	size int
	host []byte // pinned mirror, for hostRegions
}

type graph struct {
	exec     driver.GraphExec
	lastUsed uint64
	took     time.Duration // the last replay's, as wait saw it
}

// Tier is a bundle loaded on the GPU.
type Tier struct {
	dev     driver.Device
	ctx     driver.Context
	stream  driver.Stream
	done    driver.Event
	regions []region
	uploads []int // request tables, uploaded before every replay
	fence   int
	copyOut []int // regions downloaded after every replay (the tokens)
	modules []driver.Module
	// entries[e][k] is kernel k's entry point e (kcuda.Entry), 0 where it
	// has none (most kernels have only the main one).
	entries [kcuda.NumEntries][]driver.Function
	// overlap[k]: kernel k may start before the previous kernel ends, as
	// its PTX waits for it (griddepcontrol.wait, see dep_sync in
	// kernels/cuda/common.cuh); a kernel without the wait is launched the
	// plain way.
	overlap  []bool
	pdl      bool // programmatic dependent launch available and not switched off (Options.NoPDL)
	variants [][]Launch
	keys     []string // each variant's ShapeKey, for the profiler
	graphs   map[int]*graph
	clock    uint64
	maxGr    int
	timeout  time.Duration
	params   []byte // pinned scratch for kernel parameters
	// The persistent kernel (megakernel.go): each variant's plan (nil:
	// the graph path, for the reason in mkWhy), its function, the dynamic
	// shared memory it is allowed, and the tables' allocations.
	mk       []*mkPlan
	mkWhy    []string
	mkOff    bool   // SetMegakernel(false)
	mkCode   []byte // the bundle's megakernel blob's code, if it has one
	mkFn     driver.Function
	mkShared int
	mkMem    []driver.DevPtr
	// staging holds the activation rows staged for the tensor-core tiles
	// and their split-k partials, and the split decode attention's
	// partial states (Launch.Staging), sized for the largest launch; 0
	// when no launch stages.
	staging driver.DevPtr
	info    driver.Info
	prof    *profiler
	omit    []string // Options.Omit
	mask    masker
	drawer  drawer
	device  int        // Options.Device
	comm    *nccl.Comm // Options.Comm
	// stagingBytes is the staging buffer's size.
	stagingBytes int

	// gather receives the ranks' parts of an all_gather before copies
	// place them in its output (collective), sized for the largest.
	gather driver.DevPtr
	// peer is the exchange of the one-shot collectives (peer.go); nil
	// where every collective runs through NCCL.
	peer        *peer
	collectives string // Options.Collectives
	fuseReduces bool   // Options.FuseReduces
	// unfused holds, where the one-shot all-reduces took in the residual
	// adds after them (fuseResiduals), each variant's launches before
	// that, which RunEach replays.
	unfused [][]Launch
	// reduceNorms: the bundle's one-shot all-reduce can also take in the
	// RMS norm after its residual add (its PTX has the norm's parameters,
	// kernels/cuda/family/all_reduce_sum.cuh; a bundle built before has
	// not).
	reduceNorms bool
	// reduceSpreads: the bundle's one-shot all-reduce counts its epoch
	// as a grid where it runs more than kcuda.PeerBlocks blocks
	// (ReduceSpreads), so a large one may spread over the GPU.
	reduceSpreads bool

	// oneRow[vi] is the variant RunOneRow replays for the bundle's
	// variant vi: vi itself, or past the bundle's variants its launches
	// for one-row bits; for steps of more active rows than oneRowMax[vi]
	// (kcuda.SplitRows), oneRowUnsplit[vi], those launches with decode
	// attention unsplit (kcuda.Unsplit), and for all of them where the
	// one-row decode variant, decode1, runs on the persistent kernel. io
	// is the request table's region, whose host view says a step's rows.
	oneRow, oneRowMax, oneRowUnsplit []int
	io                               int
	decode1                          int // the bundle's one-row decode variant, -1: none
	// stage holds the page-locked buffers and the measured rate of the
	// host KV tier's batched copies (stage.go).
	stage stager
}

// regionSlack is the bytes allocated past each region's end.
const regionSlack = 16

// Load prepares a bundle for replay on device opt.Device (0 by default).
func Load(b *bundle.Bundle, opt Options) (*Tier, error) {
	// T-CUDA's kernels address F16 pages and the quantized layouts of
	// kcuda.KVLayouts: a bundle with another cache layout is refused,
	// never read wrongly.
	if err := checkKV(&b.Graph.Hparams); err != nil {
		return nil, err
	}
	info, err := driver.Probe()
	if err != nil {
		return nil, err
	}
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	if opt.Device < 0 || opt.Device >= info.Devices {
		return nil, fmt.Errorf("cuda: no device %d (%d visible)", opt.Device, info.Devices)
	}
	t := &Tier{fence: -1, graphs: map[int]*graph{}, maxGr: opt.MaxGraphs, timeout: opt.Timeout, info: info, omit: opt.Omit,
		device: opt.Device, comm: opt.Comm, collectives: opt.Collectives, fuseReduces: opt.FuseReduces}
	if t.maxGr <= 0 {
		t.maxGr = 16
	}
	if t.timeout <= 0 {
		t.timeout = 60 * time.Second
	}
	t.pdl = info.Major >= 9 && driver.CanOverlapLaunches() && !opt.NoPDL
	if opt.Profile {
		t.prof = newProfiler(os.Stderr)
	}
	if err := t.load(b, opt); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

// checkKV refuses a bundle whose KV cache layout T-CUDA has no kernels
// for, naming it and the ones it has.
func checkKV(h *bundle.Hparams) error {
	kv, err := kernels.BundleKV(h)
	if err != nil {
		return err
	}
	if kv.IsF16() || slices.Contains(kcuda.KVLayouts(), kv) {
		return nil
	}
	names := []string{kernels.F16KV.String()}
	for _, l := range kcuda.KVLayouts() {
		names = append(names, l.String())
	}
	return fmt.Errorf("T-CUDA has no kernels for a %s KV cache (cache_type_k, cache_type_v; it has %s): rebuild the bundle with one of those, or run it on the cpu tier", kv, strings.Join(names, "; "))
}

func (t *Tier) load(b *bundle.Bundle, opt Options) error {
	var err error
	if t.dev, err = driver.GetDevice(t.device); err != nil {
		return err
	}
	if t.ctx, err = t.dev.PrimaryContext(); err != nil {
		return err
	}
	if err = t.ctx.SetCurrent(); err != nil {
		return err
	}
	if t.stream, err = driver.NewStream(driver.StreamNonBlocking); err != nil {
		return err
	}
	if t.done, err = driver.NewEvent(driver.EventDisableTiming); err != nil {
		return err
	}
	if t.params, err = driver.MemHostAlloc(4096); err != nil {
		return err
	}
	g := b.Graph
	if err := fits(g); err != nil {
		return err
	}
	mem := &Memory{}
	for i, r := range g.Regions {
		reg := region{name: r.Name, size: int(r.Bytes)}
		// cuMemAlloc refuses zero bytes; a minimum keeps every region a
		// distinct, valid address range. The slack past the end is for
		// kernels that copy whole aligned words around a block that ends
		// unaligned (mmt's Q6_K windows read up to 2 bytes past it).
		if reg.dev, err = driver.MemAlloc(max(reg.size, 256) + regionSlack); err != nil {
			return fmt.Errorf("region %s: %w", r.Name, err)
		}
		t.regions = append(t.regions, reg)
		rp := &t.regions[len(t.regions)-1]
		if w, ok := b.Weights[r.Name]; ok {
			if len(w) > reg.size {
				return fmt.Errorf("cuda: weights region %s holds %d bytes, the plan %d", r.Name, len(w), reg.size)
			}
			if err := driver.MemcpyHtoD(rp.dev, w); err != nil {
				return fmt.Errorf("uploading %s: %w", r.Name, err)
			}
		} else if err := driver.MemsetD8(rp.dev, 0, max(reg.size, 256)); err != nil {
			return err
		}
		if hostRegions[r.Name] {
			if rp.host, err = driver.MemHostAlloc(max(reg.size, 4)); err != nil {
				return err
			}
			clear(rp.host)
			rp.host = rp.host[:reg.size]
		}
		if r.Name == kernels.RegionIO {
			t.io = i
		}
		switch r.Name {
		case kernels.RegionIO, kernels.RegionIOWindow:
			t.uploads = append(t.uploads, i)
		case kernels.RegionFence:
			t.fence = i
		case kernels.RegionTokens:
			// The logits stay on the device until read (Fetch): a step of
			// 64 slots of a 152k vocabulary has 39 MB of them, and greedy
			// requests read only the tokens.
			t.copyOut = append(t.copyOut, i)
		}
		mem.Base = append(mem.Base, uint64(rp.dev))
		mem.Size = append(mem.Size, uint64(reg.size))
	}
	if len(t.uploads) == 0 || t.fence < 0 {
		return fmt.Errorf("cuda: memory plan lacks the io or fence region")
	}
	loaded := noteSlowLoad(opt.Log, len(b.Blobs), 3*time.Second)
	defer loaded()
	for _, blob := range b.Blobs {
		if blob.Name == kcuda.MegakernelModule {
			// No dispatch names it: initMegakernel loads it, and its
			// place in the entry tables stays empty.
			t.mkCode = blob.Code
			for e := range kcuda.NumEntries {
				t.entries[e] = append(t.entries[e], 0)
			}
			t.overlap = append(t.overlap, false)
			continue
		}
		if err := t.loadKernel(blob.Name, blob.Code); err != nil {
			return err
		}
	}
	loaded()
	if err := t.initMasker(b); err != nil {
		return err
	}
	if err := t.initDrawer(b); err != nil {
		return err
	}
	// Past 48 KiB a kernel must opt in to dynamic shared memory, up to
	// the device's limit, within which the decode attention's stages are
	// fitted (kcuda.FitShared: fewer, the same bits).
	limit, err := t.dev.Attribute(driver.AttrMaxSharedMemoryPerBlockOptin)
	if err != nil {
		return err
	}
	var geo *kcuda.AttnGeometry
	if opt.AttnGeometry != "" {
		g, err := kcuda.ParseAttnGeometry(opt.AttnGeometry)
		if err != nil {
			return err
		}
		geo = &g
	}
	var smem [kcuda.NumEntries][]int // the most any launch of each entry point needs
	for e := range smem {
		smem[e] = make([]int, len(b.Blobs))
	}
	prepare := func(vi int, ls []Launch) error {
		for i := range ls {
			l := &ls[i]
			if l.Collective != nil {
				if err := t.checkCollective(l.Collective, mem); err != nil {
					return fmt.Errorf("cuda: variant %d: %s: %w", vi, l.Name, err)
				}
				continue
			}
			if geo != nil && l.Shape.Entry == kcuda.EntrySplit {
				s, err := kcuda.AttnResplit(l.Shape, l.Name, l.Spec, *geo)
				if err != nil {
					return fmt.Errorf("cuda: variant %d: %s: %w", vi, l.Name, err)
				}
				l.Shape, l.Staging = s, s.Staged
			}
			l.Shape = kcuda.FitShared(l.Name, l.Spec, l.Shape, limit)
			e := l.Shape.Entry
			if t.entries[e][l.Kernel] == 0 {
				return fmt.Errorf("cuda: variant %d: kernel %s has no %q entry: the bundle's PTX is older than this zrt-run, rebuild it with the zrtc of the same version", vi, l.Name, e.Suffix())
			}
			smem[e][l.Kernel] = max(smem[e][l.Kernel], l.Shape.Shared)
		}
		return nil
	}
	for vi := range g.Variants {
		ls, err := Walk(&g.Variants[vi], b.Blobs, mem, t.fence)
		if err != nil {
			return fmt.Errorf("cuda: variant %d: %w", vi, err)
		}
		if err := prepare(vi, ls); err != nil {
			return err
		}
		t.variants = append(t.variants, ls)
		t.keys = append(t.keys, g.Variants[vi].Key())
	}
	if err := t.addOneRow(b, mem, prepare); err != nil {
		return err
	}
	for _, item := range t.omit {
		if !slices.ContainsFunc(t.variants, func(ls []Launch) bool {
			return slices.ContainsFunc(ls, func(l Launch) bool { return omits(item, &l) })
		}) {
			return fmt.Errorf("cuda: omit %q: no launch of the bundle is that kernel family, instance or entry point", item)
		}
	}
	if err := t.planCollectives(t.collectives); err != nil {
		return err
	}
	if err := t.allocStaging(); err != nil {
		return err
	}
	if err := t.allocGather(); err != nil {
		return err
	}
	for e, ns := range smem {
		for k, n := range ns {
			if n > limit {
				return fmt.Errorf("cuda: kernel %s needs %d bytes of shared memory, the device allows %d", b.Blobs[k].Name, n, limit)
			}
			if n > 48<<10 {
				if err := t.entries[e][k].SetAttribute(driver.FuncAttrMaxDynamicSharedSize, n); err != nil {
					return fmt.Errorf("kernel %s: %w", b.Blobs[k].Name, err)
				}
			}
		}
	}
	if err := t.initMegakernel(b, mem, opt); err != nil {
		return err
	}
	for len(t.mk) < len(t.variants) { // the one-row variants take the graph path
		t.mk, t.mkWhy = append(t.mk, nil), append(t.mkWhy, "one-row bits (RunOneRow): the graph path")
	}
	// Capture the bundle's variants up front, so the first step of a
	// request does not pay for it; variants past the bound, and the
	// one-row variants (only speculative decoding runs them), are
	// captured when first run.
	for vi := range min(len(g.Variants), t.maxGr) {
		if _, err := t.graph(vi); err != nil {
			return fmt.Errorf("cuda: capturing variant %d: %w", vi, err)
		}
	}
	return nil
}

// allocStaging allocates the staging buffer for the largest launch that
// needs it, zeroed, and gives every such launch its address.
func (t *Tier) allocStaging() error {
	n := 0
	for _, ls := range t.variants {
		for _, l := range ls {
			n = max(n, l.Staging)
		}
	}
	if n == 0 {
		return nil
	}
	var err error
	if t.staging, err = driver.MemAlloc(n); err != nil {
		return fmt.Errorf("cuda: staging buffer of %d bytes: %w", n, err)
	}
	t.stagingBytes = n
	if err := driver.MemsetD8(t.staging, 0, n); err != nil { // split-k's counters start at zero
		return err
	}
	for _, ls := range t.variants {
		for i := range ls {
			if ls[i].Staging > 0 {
				ls[i].Params[len(ls[i].Params)-1] = uint64(t.staging)
			}
		}
	}
	return nil
}

// noteSlowLoad tells log (when set) about a kernel load still running
// after slow, and how long it took once the returned func is called (the
// first call counts): the driver JIT-compiles each module's PTX unless its
// cache has it, and a fresh H200 host took about a minute for a qwen3
// 0.6B-shaped bundle, time a user should not take for a hang.
func noteSlowLoad(log func(string, ...any), kernels int, after time.Duration) (loaded func()) {
	if log == nil {
		return func() {}
	}
	start := time.Now()
	slow := time.AfterFunc(after, func() {
		log("T-CUDA: the driver is compiling %d kernels for this GPU (a first start; its cache serves later ones)", kernels)
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			if !slow.Stop() {
				log("T-CUDA: kernels ready in %.0f s", time.Since(start).Seconds())
			}
		})
	}
}

// loadKernel JIT-loads a blob's PTX (its code up to the NUL) and finds the
// instance's entry point.
func (t *Tier) loadKernel(name string, code []byte) error {
	if family, _, _ := strings.Cut(name, "."); kcuda.Collective(family) && bytes.HasPrefix(code, []byte(kcuda.NCCLBlobPrefix)) {
		// No PTX: NCCL's only (collective runs it).
		for e := range kcuda.NumEntries {
			t.entries[e] = append(t.entries[e], 0)
		}
		t.overlap = append(t.overlap, false)
		return nil
	}
	n := 0
	for n < len(code) && code[n] != 0 {
		n++
	}
	if n == len(code) {
		return fmt.Errorf("cuda: kernel %s: code has no NUL-terminated PTX", name)
	}
	m, err := driver.ModuleLoadData(code[:n+1])
	if err != nil {
		return fmt.Errorf("kernel %s: %w", name, err)
	}
	t.modules = append(t.modules, m)
	for e := range kcuda.NumEntries {
		f, err := m.Function(kcuda.Entry(name) + e.Suffix())
		if err != nil && e == kcuda.EntryMain {
			return fmt.Errorf("kernel %s: %w", name, err)
		}
		if err != nil {
			f = 0 // most kernels have only the main entry
		}
		t.entries[e] = append(t.entries[e], f)
	}
	t.overlap = append(t.overlap, t.pdl && bytes.Contains(code[:n], []byte("griddepcontrol.wait")))
	if family, _, _ := strings.Cut(name, "."); family == "all_reduce_sum" {
		t.reduceNorms, t.reduceSpreads = ReduceTakesNorm(name, code[:n]), ReduceSpreads(code[:n])
	}
	return nil
}

// Name is the tier's name.
func (t *Tier) Name() string { return "cuda" }

// Device describes the GPU.
func (t *Tier) Device() driver.Info { return t.info }

// Region returns the host mirror of a region the host reads or writes (the
// request table, the outputs, the fence); other regions live only on the
// device and have none.
func (t *Tier) Region(i int) []byte { return t.regions[i].host }

// Launches returns variant vi's launch list (for tests and traces).
func (t *Tier) Launches(vi int) []Launch { return t.variants[vi] }

// Run replays variant vi: the request table goes up, the kernels run, the
// tokens come back, all in one captured graph; then the fence is
// signalled. The logits come back when read (Fetch).
func (t *Tier) Run(ctx context.Context, vi int) error {
	return t.replay(vi, func() error {
		if t.prof != nil && (t.mk == nil || t.mk[vi] == nil || t.mkOff) {
			return t.runProfiled(ctx, vi) // a megakernel step traces itself (reportMk)
		}
		g, err := t.graph(vi)
		if err != nil {
			return fmt.Errorf("cuda: capturing variant %d: %w", vi, err)
		}
		if err := g.exec.Launch(t.stream); err != nil {
			return err
		}
		if err := t.deviceChoices(); err != nil {
			return err
		}
		if err := t.done.Record(t.stream); err != nil {
			return err
		}
		took, err := t.wait(ctx, vi, min(max(waitSpin, 2*g.took), waitSpinMax))
		g.took = took
		return err
	})
}

// RunOneRow is Run for a step whose every row must come out bit for bit
// as it does in a one-row decode step (runtime.Batch.OneRowBits: a
// speculative verify step, whose rows stand for one-row steps). It
// replays decode variant vi's launches for one-row bits
// (kcuda.OneRowShape) where they differ from its own, else vi.
func (t *Tier) RunOneRow(ctx context.Context, vi int) error {
	if vi < 0 || vi >= len(t.oneRow) {
		return fmt.Errorf("cuda: no variant %d (the bundle has %d)", vi, len(t.oneRow))
	}
	// A one-row step on the persistent kernel takes its decode attention
	// unsplit (kcuda.MegakernelShape): so do the rows standing for it.
	mk := t.decode1 >= 0 && t.mk[t.decode1] != nil && !t.mkOff
	if io := t.regions[t.io].host; mk || len(io) >= 4*(kernels.IOWordRows+1) &&
		int(binary.LittleEndian.Uint32(io[4*kernels.IOWordRows:])) > t.oneRowMax[vi] {
		return t.Run(ctx, t.oneRowUnsplit[vi])
	}
	return t.Run(ctx, t.oneRow[vi])
}

// addOneRow gives each decode variant of several rows its launches for
// one-row bits (WalkOneRow) as one more variant past the bundle's, on
// the graph path, where they differ from its own; and where their split
// decode attention bounds a step's rows below the variant's
// (kcuda.SplitRows), or the persistent kernel may run the one-row
// steps, one more with it unsplit. prepare checks a launch list as load
// does the bundle's.
func (t *Tier) addOneRow(b *bundle.Bundle, mem *Memory, prepare func(vi int, ls []Launch) error) error {
	g := b.Graph
	n := len(g.Variants)
	t.oneRow, t.oneRowMax, t.oneRowUnsplit = make([]int, n), make([]int, n), make([]int, n)
	wide := func(k int) bool { return t.entries[kcuda.EntryRows4][k] != 0 }
	add := func(vi int, unsplit bool, key string) (int, []Launch, error) {
		v := &g.Variants[vi]
		ls, err := WalkOneRow(v, b.Blobs, mem, t.fence, wide, unsplit)
		if err != nil {
			return 0, nil, fmt.Errorf("cuda: variant %d, one-row bits: %w", vi, err)
		}
		if err := prepare(vi, ls); err != nil {
			return 0, nil, err
		}
		// A variant the persistent kernel runs has other launches than
		// its graph path's.
		if sameLaunches(ls, t.variants[vi]) && len(g.Schedules) == 0 {
			return vi, ls, nil
		}
		t.variants = append(t.variants, ls)
		t.keys = append(t.keys, v.Key()+key)
		return len(t.variants) - 1, ls, nil
	}
	t.decode1 = -1
	for vi := range g.Variants {
		v := &g.Variants[vi]
		t.oneRow[vi], t.oneRowMax[vi], t.oneRowUnsplit[vi] = vi, int(v.Rows), vi
		if v.Stage == bundle.StageDecode && v.Rows == 1 {
			t.decode1 = vi
		}
		if v.Stage != bundle.StageDecode || v.Rows <= 1 {
			continue
		}
		i, ls, err := add(vi, false, " (one-row bits)")
		if err != nil {
			return err
		}
		t.oneRow[vi], t.oneRowUnsplit[vi] = i, i
		for _, l := range ls {
			t.oneRowMax[vi] = min(t.oneRowMax[vi], kcuda.SplitRows(l.Shape, int(v.Rows)))
		}
		if t.oneRowMax[vi] < int(v.Rows) || len(g.Schedules) > 0 {
			if t.oneRowUnsplit[vi], _, err = add(vi, true, " (one-row bits, unsplit)"); err != nil {
				return err
			}
		}
	}
	return nil
}

// sameLaunches reports whether two launch lists run the same kernels
// with the same shapes and parameters.
func sameLaunches(a, b []Launch) bool {
	return slices.EqualFunc(a, b, func(x, y Launch) bool {
		return x.Kernel == y.Kernel && x.Collective == nil && y.Collective == nil && sameShape(x.Shape, y.Shape) &&
			slices.Equal(x.Params, y.Params)
	})
}

// sameShape reports whether two launch shapes are equal, their stage and
// rest launches too.
func sameShape(a, b kcuda.Launch) bool {
	same := func(x, y *kcuda.Launch) bool {
		return x == nil && y == nil || x != nil && y != nil && sameShape(*x, *y)
	}
	return a.Grid == b.Grid && a.Block == b.Block && a.Shared == b.Shared && a.Entry == b.Entry && a.Staged == b.Staged &&
		same(a.Stage, b.Stage) && same(a.Rest, b.Rest)
}

// replay runs one replay of variant vi by run on a locked thread with the
// tier's context current: the fence is cleared before and signalled after
// it succeeds.
func (t *Tier) replay(vi int, run func() error) error {
	if vi < 0 || vi >= len(t.variants) {
		return fmt.Errorf("cuda: no variant %d (the bundle has %d)", vi, len(t.variants))
	}
	if t.peer != nil && !t.peer.connected {
		return fmt.Errorf("cuda: rank %d's one-shot collectives have no peers yet (the set's loader connects them: ConnectPeers)", t.comm.Rank())
	}
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	if err := t.ctx.SetCurrent(); err != nil {
		return err
	}
	fence := t.regions[t.fence].host
	clear(fence)
	if err := run(); err != nil {
		return err
	}
	if len(fence) >= 4 {
		fence[0] = 1 // the fence value every stream releases (passes/lower.go)
	}
	return nil
}

// RunEach replays variant vi kernel by kernel, without its graph, waiting
// for each kernel and then calling after (when not nil): for inspecting
// values between kernels, not for speed.
func (t *Tier) RunEach(ctx context.Context, vi int, after func(dispatch int) error) error {
	return t.replay(vi, func() error {
		for _, ri := range t.uploads {
			if err := driver.MemcpyHtoD(t.regions[ri].dev, t.regions[ri].host); err != nil {
				return err
			}
		}
		ls := t.variants[vi]
		if t.unfused != nil {
			ls = t.unfused[vi]
		}
		for i := range ls {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := t.launch(&ls[i]); err != nil {
				return fmt.Errorf("cuda: launch %d (%s): %w", i, ls[i].Name, err)
			}
			if err := t.stream.Synchronize(); err != nil {
				return fmt.Errorf("cuda: dispatch %d (%s): %w", i, ls[i].Name, err)
			}
			if after != nil {
				if err := after(i); err != nil {
					return err
				}
			}
		}
		for _, ri := range t.copyOut {
			r := &t.regions[ri]
			if err := driver.MemcpyDtoH(r.host, r.dev); err != nil {
				return err
			}
		}
		if err := t.deviceChoices(); err != nil {
			return err
		}
		return t.stream.Synchronize()
	})
}

// ReadRegion copies n bytes at off of region i from the device.
func (t *Tier) ReadRegion(i int, off, n int64) ([]byte, error) {
	if i < 0 || i >= len(t.regions) || off < 0 || n < 0 || off+n > int64(t.regions[i].size) {
		return nil, fmt.Errorf("cuda: no bytes [%d, %d) in region %d", off, off+n, i)
	}
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	if err := t.ctx.SetCurrent(); err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if n == 0 {
		return b, nil
	}
	if err := driver.MemcpyDtoH(b, t.regions[i].dev+driver.DevPtr(off)); err != nil {
		return nil, fmt.Errorf("cuda: reading region %d: %w", i, err)
	}
	return b, nil
}

// CopyFromRegion copies len(dst) bytes at off of region i from the
// device into dst, after everything queued on the tier's stream (the
// prefix cache's host tier reads KV pages so, between replays).
func (t *Tier) CopyFromRegion(i int, off int64, dst []byte) error {
	return t.regionCopy(i, off, len(dst), func(p driver.DevPtr) error {
		if err := driver.MemcpyDtoHAsync(dst, p, t.stream); err != nil {
			return fmt.Errorf("cuda: reading region %d: %w", i, err)
		}
		if err := t.stream.Synchronize(); err != nil {
			return fmt.Errorf("cuda: reading region %d: %w", i, err)
		}
		return nil
	})
}

// CopyToRegion queues a copy of src into region i at off on the tier's
// stream, so the next replay, queued after it, reads the bytes (the
// prefix cache's host tier writes KV pages back so). src may be reused on
// return: a copy from pageable memory returns once the driver has staged
// it.
func (t *Tier) CopyToRegion(i int, off int64, src []byte) error {
	return t.regionCopy(i, off, len(src), func(p driver.DevPtr) error {
		if err := driver.MemcpyHtoDAsync(p, src, t.stream); err != nil {
			return fmt.Errorf("cuda: writing region %d: %w", i, err)
		}
		return nil
	})
}

// CopyWithinRegion queues a copy of the n bytes at src of region i to
// dst of the same region on the tier's stream, after everything queued
// before it and before the next replay (a SubmitN choice's copy of its
// group's partial prompt page). The two ranges must not overlap.
func (t *Tier) CopyWithinRegion(i int, dst, src, n int64) error {
	if n < 0 || src < 0 || src+n > dst && dst+n > src {
		return fmt.Errorf("cuda: a copy of %d bytes from %d to %d in region %d", n, src, dst, i)
	}
	if i < 0 || i >= len(t.regions) || src+n > int64(t.regions[i].size) {
		return fmt.Errorf("cuda: no bytes [%d, %d) in region %d", src, src+n, i)
	}
	return t.regionCopy(i, dst, int(n), func(p driver.DevPtr) error {
		if err := driver.MemcpyDtoDAsync(p, t.regions[i].dev+driver.DevPtr(src), int(n), t.stream); err != nil {
			return fmt.Errorf("cuda: copying within region %d: %w", i, err)
		}
		return nil
	})
}

// regionCopy checks that the n bytes at off lie in region i and, unless n
// is 0, runs do on the device address of the first of them, on this
// thread with the tier's context current.
func (t *Tier) regionCopy(i int, off int64, n int, do func(p driver.DevPtr) error) error {
	if i < 0 || i >= len(t.regions) || off < 0 || off+int64(n) > int64(t.regions[i].size) {
		return fmt.Errorf("cuda: no bytes [%d, %d) in region %d", off, off+int64(n), i)
	}
	if n == 0 {
		return nil
	}
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	if err := t.ctx.SetCurrent(); err != nil {
		return err
	}
	return do(t.regions[i].dev + driver.DevPtr(off))
}

// Fetch brings bytes [off, off+n) of region i's host view up to date
// with the device (the logits, which Run leaves on the device).
func (t *Tier) Fetch(i int, off, n int64) error {
	if i < 0 || i >= len(t.regions) || off < 0 || n < 0 || off+n > int64(t.regions[i].size) || t.regions[i].host == nil {
		return fmt.Errorf("cuda: no host bytes [%d, %d) in region %d", off, off+n, i)
	}
	return t.regionCopy(i, off, int(n), func(p driver.DevPtr) error {
		if err := driver.MemcpyDtoH(t.regions[i].host[off:off+n], p); err != nil {
			return fmt.Errorf("cuda: reading region %d: %w", i, err)
		}
		return nil
	})
}

// waitSpin and waitSpinMax bound how long wait polls without sleeping.
const (
	waitSpin    = 2 * time.Millisecond
	waitSpinMax = 20 * time.Millisecond
)

// wait polls until the replay of variant vi ends and returns how long it
// waited. For spin it polls yielding the thread; after that it sleeps
// between polls, which saves a core during a long prefill but can wake up
// to a millisecond late (a Go sleep of microseconds does), a third of a
// 3 ms decode step. Run spins for twice the variant's last replay (within
// the bounds), so a steady decode step never sleeps.
func (t *Tier) wait(ctx context.Context, vi int, spin time.Duration) (time.Duration, error) {
	start := time.Now()
	for i := 0; ; i++ {
		ready, err := t.done.Ready()
		if err != nil {
			return 0, fmt.Errorf("cuda: variant %d: %w", vi, err)
		}
		if ready {
			return time.Since(start), nil
		}
		if i%64 == 0 {
			if err := ctx.Err(); err != nil {
				// The graph keeps running; let it finish so the next
				// replay starts from a quiet stream.
				t.stream.Synchronize()
				return 0, err
			}
			if time.Since(start) > t.timeout {
				return 0, fmt.Errorf("cuda: variant %d did not finish within %v: the GPU looks hung (set ZRT_CUDA_TIMEOUT to wait longer)", vi, t.timeout)
			}
		}
		if time.Since(start) > spin {
			time.Sleep(20 * time.Microsecond)
		} else {
			goruntime.Gosched()
		}
	}
}

// graph returns the captured graph of variant vi, capturing it (and
// evicting the least recently used graph past the bound) on first use.
func (t *Tier) graph(vi int) (*graph, error) {
	t.clock++
	if g, ok := t.graphs[vi]; ok {
		g.lastUsed = t.clock
		return g, nil
	}
	if len(t.graphs) >= t.maxGr {
		oldest, at := -1, ^uint64(0)
		for k, g := range t.graphs {
			if g.lastUsed < at {
				oldest, at = k, g.lastUsed
			}
		}
		t.graphs[oldest].exec.Destroy()
		delete(t.graphs, oldest)
	}
	exec, err := t.stream.Capture(func() error { return t.record(vi) })
	if err != nil {
		return nil, err
	}
	g := &graph{exec: exec, lastUsed: t.clock}
	t.graphs[vi] = g
	return g, nil
}

func (t *Tier) record(vi int) error {
	if err := t.upload(); err != nil {
		return err
	}
	if p := t.mk[vi]; p != nil && !t.mkOff {
		if err := t.recordMk(p); err != nil {
			return fmt.Errorf("the megakernel: %w", err)
		}
		return t.recordCopyOut()
	}
	for i := range t.variants[vi] {
		l := &t.variants[vi][i]
		if slices.ContainsFunc(t.omit, func(item string) bool { return omits(item, l) }) {
			continue
		}
		if err := t.launch(l); err != nil {
			return fmt.Errorf("launch %d (%s): %w", i, l.Name, err)
		}
	}
	return t.recordCopyOut()
}

// recordCopyOut queues the tokens' copy to the host.
func (t *Tier) recordCopyOut() error {
	for _, ri := range t.copyOut {
		r := &t.regions[ri]
		if err := driver.MemcpyDtoHAsync(r.host, r.dev, t.stream); err != nil {
			return err
		}
	}
	return nil
}

// omits reports whether item (Options.Omit) names launch l: its kernel
// family, its instance or its entry point.
func omits(item string, l *Launch) bool {
	family, _, _ := strings.Cut(l.Name, ".")
	return item != "" && (item == family || item == l.Name || item == strings.TrimPrefix(l.Shape.Entry.Suffix(), "_"))
}

// launch enqueues one kernel. Its parameters are laid out in pinned
// scratch (C memory, so the pointer array handed to the driver holds no Go
// pointers): values in 8-byte slots, then the array of pointers to them.
// The driver copies them during the call, so the scratch is reused.
func (t *Tier) launch(l *Launch) error {
	if l.Collective != nil && !l.Collective.Peer {
		return t.collective(l.Collective)
	}
	return t.launchFn(t.entries[l.Shape.Entry][l.Kernel], l, t.overlap[l.Kernel])
}

// launchFn enqueues f with l's geometry and parameters, overlapped with
// the kernel before it (programmatic dependent launch) when overlap.
func (t *Tier) launchFn(f driver.Function, l *Launch, overlap bool) error {
	n := len(l.Params)
	if 16*n > len(t.params)-driver.LaunchScratchBytes {
		return fmt.Errorf("%d parameters overflow the parameter scratch", n)
	}
	base := unsafe.Pointer(&t.params[0])
	vals := unsafe.Slice((*uint64)(base), n)
	ptrs := unsafe.Slice((*unsafe.Pointer)(unsafe.Add(base, 8*n)), n)
	for i, v := range l.Params {
		vals[i] = v
		ptrs[i] = unsafe.Pointer(&vals[i])
	}
	if overlap {
		cfg := unsafe.Pointer(&t.params[len(t.params)-driver.LaunchScratchBytes])
		return f.LaunchOverlapped(l.Shape.Grid, l.Shape.Block, l.Shape.Shared, t.stream, unsafe.Pointer(&ptrs[0]), cfg)
	}
	return f.Launch(l.Shape.Grid, l.Shape.Block, l.Shape.Shared, t.stream, unsafe.Pointer(&ptrs[0]))
}

// Close releases the graphs, modules and memory.
func (t *Tier) Close() error {
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	if t.ctx != 0 {
		t.ctx.SetCurrent()
	}
	t.close()
	return nil
}

func (t *Tier) close() {
	if t.stream != 0 {
		t.stream.Synchronize()
	}
	if t.prof != nil {
		t.prof.report()
		if t.ctx != 0 {
			t.reportMk(t.prof.out)
		}
		t.prof.close()
	}
	for k, g := range t.graphs {
		g.exec.Destroy()
		delete(t.graphs, k)
	}
	for _, m := range t.modules {
		m.Unload()
	}
	t.modules, t.entries, t.overlap = nil, [kcuda.NumEntries][]driver.Function{}, nil
	t.mask.free()
	t.drawer.free()
	for _, r := range t.regions {
		driver.MemFree(r.dev)
		if r.host != nil {
			driver.MemFreeHost(r.host[:max(len(r.host), 1)])
		}
	}
	t.regions = nil
	for _, p := range t.mkMem {
		driver.MemFree(p)
	}
	t.mkMem, t.mk = nil, nil
	if t.staging != 0 {
		driver.MemFree(t.staging)
		t.staging = 0
	}
	if t.gather != 0 {
		driver.MemFree(t.gather)
		t.gather = 0
	}
	if t.peer != nil {
		t.peer.free()
		t.peer = nil
	}
	driver.MemFreeHost(t.params)
	t.params = nil
	t.stage.free() // the stream is quiet (Synchronize above): no copy reads them
	if t.done != 0 {
		t.done.Destroy()
		t.done = 0
	}
	if t.stream != 0 {
		t.stream.Destroy()
		t.stream = 0
	}
	if t.ctx != 0 {
		t.dev.ReleasePrimaryContext()
		t.ctx = 0
	}
}

// upload queues the request tables' copy to the device on the stream.
func (t *Tier) upload() error {
	for _, ri := range t.uploads {
		if err := driver.MemcpyHtoDAsync(t.regions[ri].dev, t.regions[ri].host, t.stream); err != nil {
			return err
		}
	}
	return nil
}

// fits refuses up front a plan the GPU has no room for, saying what
// takes the room, rather than failing in the middle of the uploads with
// cuMemAlloc's bare out-of-memory.
func fits(g *bundle.Graph) error {
	free, total, err := driver.MemGetInfo()
	if err != nil {
		return err
	}
	var need, kv int64
	for _, r := range g.Regions {
		need += max(r.Bytes, 256) + regionSlack
		if r.Name == kernels.RegionKV {
			kv = r.Bytes
		}
	}
	if need <= free {
		return nil
	}
	return fmt.Errorf("cuda: the bundle's memory plan needs %s of GPU memory, %s of %s is free (KV cache %s: rebuild with fewer kv_pages or max_slots; given a GGUF, zrt-run takes --slots and --ctx-size)",
		sysmem.Bytes(need), sysmem.Bytes(free), sysmem.Bytes(total), sysmem.Bytes(kv))
}
