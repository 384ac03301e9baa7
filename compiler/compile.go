// Package compiler is zrtc's driver: GGUF + config → IR → passes →
// bundle. Compile is the whole pipeline; the stages are importable on
// their own for dumps and tests.
package compiler

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/zrtdev/zrt/compiler/arch"
	"github.com/zrtdev/zrt/compiler/config"
	"github.com/zrtdev/zrt/compiler/ir"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/filedigest"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/format/publish"
	"github.com/zrtdev/zrt/format/vocab"
	"github.com/zrtdev/zrt/format/zrt"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/passes"
	"github.com/zrtdev/zrt/version"
)

// Version is the compiler version recorded in every bundle.
const Version = "zrtc " + version.Release

// Options are the inputs of one compilation besides the GGUF.
type Options struct {
	ConfigPath string // optional TOML overrides
	Target     string // overrides the config's target when set
	// ContextLength and Slots, when positive, override the config's
	// context_length and max_slots (with the decode variants up to it):
	// zrtc build --ctx-size and --slots.
	ContextLength, Slots int
	// TP, when TP.Ranks > 1, compiles rank TP.Rank of a tensor-parallel
	// set (the shard pass); compiler/build writes the whole set.
	TP passes.TP
	// DraftLayers, when set, overrides the config's draft_layers (zrtc
	// build --draft-layers): 0 builds no draft variant. Nil keeps the
	// config's, which unset is the graph builder's default.
	DraftLayers *int
	// VerifyEach re-runs verify after every pass.
	VerifyEach bool
	// NoFuse turns the fuse pass off.
	NoFuse bool
	// PTXDir, when set, supplies T-CUDA's PTX instead of the copies
	// embedded in zrtc (kernel development; see kernels/cuda/ptx.Source).
	PTXDir string
	// Progress, when set, is told about each stage.
	Progress func(format string, args ...any)
	// MemoryBudget, when positive, is the memory a bundle's plan should
	// fit; Warn is told when it does not (the bundle is still written: it
	// may be meant for a larger machine).
	MemoryBudget int64
	Warn         func(format string, args ...any)

	// DumpAfter selects passes, by name separated by commas or "all",
	// after which every variant's text IR and the pass's tables are
	// written to DumpDir (see phases.go for the file names).
	DumpAfter, DumpDir string
	// CompileTo stops after the named pass and writes text IR instead of
	// a bundle.
	CompileTo string
	// CompileFrom resumes after the named pass from the text IR in
	// IRPath; weights and state sizes still come from the GGUF.
	CompileFrom, IRPath string
}

// Overrides are the options that override the model config's settings.
func (opt Options) Overrides() config.Overrides {
	return config.Overrides{Target: opt.Target, ContextLength: opt.ContextLength, Slots: opt.Slots, DraftLayers: opt.DraftLayers}
}

// Frontend is a parsed model ready for the passes.
type Frontend struct {
	GGUF   *gguf.File
	Config *config.Config
	Model  *arch.Model
	Unit   *passes.Unit
	// Megakernel is T-CUDA's persistent decode kernel when the config
	// asks for it (megakernel = true), written after the instances.
	Megakernel *zrt.Blob
}

// Load opens the GGUF, resolves the config and builds the IR. Valid input
// that zrtc cannot build (architecture, config feature, tensor type for
// the target) fails with a *support.Error.
func Load(path string, opt Options) (*Frontend, error) {
	f, err := gguf.OpenModel(path)
	if err != nil {
		return nil, err
	}
	fe, err := frontend(f, opt)
	if err != nil {
		f.Close()
		return nil, err
	}
	return fe, nil
}

// LoadConfig is the effective config of a build of the GGUF at path
// with opt, as zrtc config prints it: the GGUF's defaults, then the
// config file and opt, then what the graph builder settles (arch.Settle:
// an unset draft_layers).
func LoadConfig(path string, opt Options) (*config.Config, error) {
	f, err := gguf.OpenModel(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	c, err := config.Load(f, opt.ConfigPath, opt.Overrides())
	if err == nil {
		err = arch.Settle(f, c)
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

func frontend(f *gguf.File, opt Options) (*Frontend, error) {
	if err := arch.CheckSupported(f); err != nil {
		return nil, err
	}
	cfg, err := config.Load(f, opt.ConfigPath, opt.Overrides())
	if err != nil {
		return nil, err
	}
	templates, err := templatesFor(cfg.Target, opt)
	if err != nil {
		return nil, err
	}
	m, err := arch.Build(f, cfg)
	if err != nil {
		return nil, err
	}
	if err := checkWeightTypes(m, cfg.Target); err != nil {
		return nil, err
	}
	if err := checkKernelFamilies(m, cfg.Target); err != nil {
		return nil, err
	}
	if err := checkKVTypes(m, cfg.Target, opt.PTXDir); err != nil {
		return nil, err
	}
	var mk *zrt.Blob
	if cfg.Megakernel {
		if mk, err = megakernelBlob(cfg.Target, opt.PTXDir); err != nil {
			return nil, err
		}
	}
	u := NewUnit(m)
	u.NoFuse, u.Templates, u.TP, u.MegakernelTiles = opt.NoFuse, templates, opt.TP, cfg.MegakernelTiles
	u.Lacks = lacks(cfg.Target, opt.PTXDir, cfg.Megakernel)
	return &Frontend{GGUF: f, Config: cfg, Model: m, Unit: u, Megakernel: mk}, nil
}

// NewUnit wraps a built model for the passes, sizing the state buffers
// from its hyperparameters.
func NewUnit(m *arch.Model) *passes.Unit {
	h, c := &m.Hparams, m.Config
	return &passes.Unit{
		Graphs: m.Graphs,
		Target: c.Target,
		KV:     m.KV,
		State: passes.StateSizes{
			KV:          int64(c.KVPages) * int64(kernels.PageBytes(h)),
			KVPageBytes: int64(kernels.PageBytes(h)),
			IO:          4 * int64(kernels.NewRequestTable(c.PrefillChunk, c.MaxSlots, h.MaxPages).Words()),
			Logits:      4 * int64(c.MaxSlots) * int64(h.NVocab),
			Tokens:      4 * int64(c.MaxSlots),
			Recurrent:   int64(c.MaxSlots) * int64(h.RecurrentBytes),
			KVWindow:    int64(c.MaxSlots) * int64(h.KVWindowRing) * int64(h.KVWindowPageBytes),
		},
	}
}

// Close releases the GGUF mapping.
func (fe *Frontend) Close() error { return fe.GGUF.Close() }

// Compile runs the whole pipeline and writes the bundle to out atomically.
func Compile(ctx context.Context, path, out string, opt Options) error {
	if opt.CompileTo != "" {
		return compileToFile(ctx, path, out, opt)
	}
	c, err := Prepare(ctx, path, opt)
	if err != nil {
		return err
	}
	defer c.Close()
	return bundle.WriteDir(out, func(tmp string) error { return c.Write(ctx, tmp) })
}

// Phase is one timed step of a build.
type Phase struct {
	// Name is load, a pass name, write, or hash: the GGUF's SHA-256,
	// which runs beside the passes and the write (its time overlaps
	// theirs).
	Name string
	Dur  time.Duration
}

// Compiled is a model taken through every pass, held in memory until
// Write puts the bundle in a directory. Splitting the two lets a caller
// decide where the bundle goes after it knows what was built (the build
// cache stores it under a key that needs SourceHash).
type Compiled struct {
	fe       *Frontend
	opt      Options
	graph    *bundle.Graph
	progress func(string, ...any)
	// digest delivers the GGUF's SHA-256 from its goroutine, once; then
	// it is nil and source holds it.
	digest chan Phase
	source [32]byte
	// Phases are the steps so far: load, each pass, then, after Write,
	// write; hash once the GGUF's digest is known.
	Phases []Phase
}

// SourceHash is the SHA-256 of the GGUF's bytes (of a split GGUF, the
// filedigest.Combine of its parts'), as the graph file records it. It is computed beside the passes and the write (a multi-GB file
// takes seconds), so the first call may wait for it.
func (c *Compiled) SourceHash() [32]byte {
	if c.digest != nil {
		c.Phases = append(c.Phases, <-c.digest)
		c.digest = nil
	}
	return c.source
}

// Prepare loads the model and runs every pass; nothing is written but
// what opt.DumpAfter asks for. Close releases the model.
func Prepare(ctx context.Context, path string, opt Options) (*Compiled, error) {
	progress := opt.Progress
	if progress == nil {
		progress = func(string, ...any) {}
	}
	start := time.Now()
	fe, err := Load(path, opt)
	if err != nil {
		return nil, err
	}
	c := &Compiled{fe: fe, opt: opt, progress: progress, digest: make(chan Phase, 1)}
	go func() {
		t := time.Now()
		var sums [][32]byte
		for _, b := range fe.GGUF.Sources() {
			sums = append(sums, sha256.Sum256(b))
		}
		c.source = filedigest.Combine(sums)
		c.digest <- Phase{"hash", time.Since(t)}
	}()
	if err := c.prepare(ctx, path, start); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Compiled) prepare(ctx context.Context, path string, start time.Time) error {
	fe, opt := c.fe, c.opt
	voc, err := vocab.FromGGUF(fe.GGUF)
	if err != nil {
		return err
	}
	if n := len(voc.Tokens); n != fe.Model.Hparams.NVocab {
		// llama.cpp sizes token_embd by the token list and refuses a
		// mismatch; an id past either end would index out of the other.
		return fmt.Errorf("%s has %d tokens but the embedding has %d rows: the vocabulary and the model disagree", vocab.KeyTokens, n, fe.Model.Hparams.NVocab)
	}
	if fe.Config.ChatTemplate != "" {
		voc.ChatTemplate = fe.Config.ChatTemplate
	}
	vocabBytes, err := voc.MarshalBinary()
	if err != nil {
		return err
	}
	c.Phases = append(c.Phases, Phase{"load", time.Since(start)})
	for _, d := range fe.Config.Defaults() {
		c.progress("default %s", d)
	}
	c.progress("built IR for %d variants of %s", len(fe.Unit.Graphs), fe.Model.Hparams.Arch)
	times, err := fe.RunPasses(ctx, opt)
	if err != nil {
		return err
	}
	for _, t := range times {
		c.Phases = append(c.Phases, Phase{t.Pass, t.Dur})
	}
	reportTimes(opt, times)
	reportPlan(opt, fe.Unit.Plan)
	c.graph = graphFile(fe, vocabBytes, filepath.Base(path))
	return nil
}

// Write writes the bundle's files into dir, an existing empty directory
// (the temporary of an atomic publish). Call it once.
func (c *Compiled) Write(ctx context.Context, dir string) error {
	if c.graph == nil {
		return fmt.Errorf("compiler: the bundle was already written")
	}
	start := time.Now()
	g := c.graph
	c.graph = nil
	if err := writeKernels(dir, c.fe, g); err != nil {
		return err
	}
	c.progress("writing weights pack")
	h, err := writePack(ctx, filepath.Join(dir, bundle.WeightsFile), c.fe)
	if err != nil {
		return err
	}
	g.Ident.WeightsHash = h
	g.Ident.SourceHash = c.SourceHash()
	if err := os.WriteFile(filepath.Join(dir, bundle.GraphFile), g.Encode(), 0o644); err != nil {
		return err
	}
	c.Phases = append(c.Phases, Phase{"write", time.Since(start)})
	return nil
}

// Close releases the model's mapping, once the digest no longer reads it.
func (c *Compiled) Close() error {
	c.SourceHash()
	return c.fe.Close()
}

// reportPlan says what the plan keeps resident, and warns past the budget.
func reportPlan(opt Options, plan *passes.MemPlan) {
	var weights, kv, other int64
	mib := func(n int64) string {
		if n >= 1<<30 {
			return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
		}
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	for i, r := range plan.Regions {
		switch {
		case strings.HasPrefix(r.Name, kernels.RegionWeights):
			weights += r.Bytes
		case i == plan.KV || i == plan.KVWindow:
			kv += r.Bytes
		default:
			other += r.Bytes
		}
	}
	total := weights + kv + other
	if opt.Progress != nil {
		opt.Progress("plan: weights %s, KV %s (%d pages, k=%s v=%s), scratch and I/O %s: %s resident", mib(weights), mib(kv),
			plan.KVPages, plan.KVTypeK, plan.KVTypeV, mib(other), mib(total))
	}
	if opt.MemoryBudget > 0 && total > opt.MemoryBudget && opt.Warn != nil {
		opt.Warn("the plan keeps %s resident (KV %s), more than the %s budget: zrt-run will refuse it on a machine without that much memory (lower kv_pages or max_slots in the config, or set cache_type_k and cache_type_v to q8_0 on cpu and cuda)",
			mib(total), mib(kv), mib(opt.MemoryBudget))
	}
}

// graphFile assembles everything but the kernel hashes and the source and
// weights hashes.
func graphFile(fe *Frontend, vocabBytes []byte, srcName string) *bundle.Graph {
	u, c := fe.Unit, fe.Config
	h := fe.Model.Hparams
	h.MaxSlots, h.PrefillChunk, h.ContextLength = c.MaxSlots, c.PrefillChunk, c.ContextLength
	if u.TP.Split() {
		// A rank's KV pages hold its heads only (the shard pass sized them).
		h.TPRanks, h.TPRank = u.TP.Ranks, u.TP.Rank
		h.KVPageBytes = int(u.State.KVPageBytes)
		h.KVWindowPageBytes = int(u.TP.KVWindow.Of(int64(h.KVWindowPageBytes)))
	}
	g := &bundle.Graph{
		Ident:      bundle.Ident{Producer: Version, Flags: buildFlags(c.Target, u.NoFuse, u.TP), Target: c.Target, SourceName: srcName},
		Hparams:    h,
		ConfigTOML: c.TOML(),
		Vocab:      vocabBytes,
	}
	for _, r := range u.Plan.Regions {
		g.Regions = append(g.Regions, bundle.Region{Name: r.Name, Heap: uint8(r.Heap), Bytes: r.Bytes, Align: r.Align})
	}
	for _, p := range u.Plan.Weights {
		g.Weights = append(g.Weights, bundle.Weight{Buffer: p.Buffer, Tensor: strings.Join(p.Sources, "+"), Type: uint32(p.Type),
			Dims: p.Dims, Region: uint32(p.Region), Offset: p.Offset, Bytes: p.Bytes})
	}
	for i, gr := range u.Graphs {
		s, lv, pm := u.Streams[i], u.Liveness[i], u.Physical[i]
		v := bundle.Variant{Stage: gr.Key.Stage, Slots: u32(gr.Key.Slots), Rows: u32(gr.Key.Rows), Words: s.Words,
			Relocs: s.Relocs, Dispatches: u32(s.Dispatches), ScratchBytes: pm.ScratchBytes, PeakBytes: lv.PeakBytes}
		for r := range gr.Regs {
			p := pm.RegisterToPhysical[r]
			off := int64(-1)
			if p >= 0 {
				off = pm.PhysicalOffsets[p]
			}
			v.Liveness = append(v.Liveness, bundle.RegLive{Name: gr.Regs[r].Name, Bytes: gr.Regs[r].Bytes(),
				Def: int32(lv.Def[r]), LastRead: int32(lv.RegisterLastRead[r]), Physical: int32(p), Offset: off})
		}
		g.Variants = append(g.Variants, v)
	}
	g.Schedules = u.Schedules
	return g
}

func u32(x int) uint32 { return uint32(x) }

// Toolchain identifies what in this zrtc decides a bundle's bytes besides
// its inputs: the version and the kernel ABI and artifact format versions.
// The build cache's key includes it (and zrtc adds its executable's
// digest), so a toolchain upgrade never hits an entry an older one wrote.
func Toolchain() string {
	return fmt.Sprintf("%s; kernel ABI %d; graph format %d.%d; weights pack %d",
		Version, zrt.ABIVersion, bundle.VersionMajor, bundle.VersionMinor, bundle.PackVersion)
}

// RecordedFlags is what a build for target with opt records as its flags
// in the graph file: the options that change the output besides the
// model, the config and the kernels' source. The rest of Options
// (progress, dumps, the memory budget, VerifyEach) leaves the bundle as
// it is.
func RecordedFlags(target string, opt Options) string { return buildFlags(target, opt.NoFuse, opt.TP) }

// buildFlags records the options that change what a build produces (the
// effective config is recorded whole in its own section). Paths are left
// out so the same inputs give the same bytes wherever they live.
func buildFlags(target string, noFuse bool, tp passes.TP) string {
	f := "--target " + target
	if noFuse {
		f += " --no-fuse"
	}
	if tp.Split() {
		f += fmt.Sprintf(" --tp %d (rank %d)", tp.Ranks, tp.Rank)
	}
	return f
}

// writeKernels writes every instance's blob and, after them where the
// build has megakernel schedules and asked for the kernel, the persistent
// kernel's: a kernel no dispatch names, so the instances keep their
// indices.
func writeKernels(dir string, fe *Frontend, g *bundle.Graph) error {
	kdir := filepath.Join(dir, bundle.KernelDir)
	if err := os.Mkdir(kdir, 0o755); err != nil {
		return err
	}
	u := fe.Unit
	blobs := u.Blobs[:len(u.Kernels)]
	if fe.Megakernel != nil && len(g.Schedules) > 0 {
		blobs = append(blobs[:len(blobs):len(blobs)], fe.Megakernel)
	}
	for i, b := range blobs {
		data := b.Encode()
		file := fmt.Sprintf("%03d_%s.zrt", i, strings.ReplaceAll(b.Name, ".", "_"))
		if err := os.WriteFile(filepath.Join(kdir, file), data, 0o644); err != nil {
			return err
		}
		g.Kernels = append(g.Kernels, bundle.Kernel{Name: b.Name, File: file, Hash: sha256.Sum256(data)})
	}
	return nil
}

// writePack copies every weight tensor into its region of the pack.
func writePack(ctx context.Context, path string, fe *Frontend) ([32]byte, error) {
	var zero [32]byte
	plan := fe.Unit.Plan
	var names []string
	var sizes []int64
	index := map[int]int{} // plan region → pack region
	for _, p := range plan.Weights {
		if _, ok := index[p.Region]; !ok {
			index[p.Region] = len(names)
			names = append(names, plan.Regions[p.Region].Name)
			sizes = append(sizes, plan.Regions[p.Region].Bytes)
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return zero, err
	}
	defer f.Close()
	pw, err := bundle.NewPackWriter(&publish.Writeback{File: f}, names, sizes)
	if err != nil {
		return zero, err
	}
	defer pw.Abort() // on an early return
	ws := append([]passes.Placement(nil), plan.Weights...)
	sort.SliceStable(ws, func(a, b int) bool {
		if index[ws[a].Region] != index[ws[b].Region] {
			return index[ws[a].Region] < index[ws[b].Region]
		}
		return ws[a].Offset < ws[b].Offset
	})
	type at struct {
		region int
		off    int64
	}
	written := map[at]bool{}
	for _, p := range ws {
		if err := ctx.Err(); err != nil {
			return zero, err
		}
		if written[at{p.Region, p.Offset}] {
			continue // a second buffer on the same bytes (a tied LM head)
		}
		written[at{p.Region, p.Offset}] = true
		off := p.Offset
		for _, name := range p.Sources {
			parts, err := sourceData(fe.GGUF, name)
			if err != nil {
				return zero, fmt.Errorf("weights pack: %w", err)
			}
			for _, b := range parts {
				if err := pw.Put(index[p.Region], off, b); err != nil {
					return zero, err
				}
				off += int64(len(b))
			}
		}
	}
	h, err := pw.Close()
	if err != nil {
		return zero, err
	}
	return h, f.Close()
}

// sourceData returns the bytes a weight source (ir.Source) takes from f,
// in order: its tensor's data, or the rows of it the source slices.
func sourceData(f *gguf.File, text string) ([][]byte, error) {
	src, err := ir.ParseSource(text)
	if err != nil {
		return nil, err
	}
	t, ok := f.Tensor(src.Tensor)
	if !ok {
		return nil, fmt.Errorf("tensor %s missing", src.Tensor)
	}
	rows := int64(1)
	for _, d := range t.Dims[1:] {
		rows *= d
	}
	ranges, err := src.Ranges(rows, t.Size, t.Type.RowBytes)
	if err != nil {
		return nil, err
	}
	data := f.TensorData(t)
	out := make([][]byte, len(ranges))
	for i, r := range ranges {
		out[i] = data[r[0]:r[1]]
	}
	return out, nil
}
