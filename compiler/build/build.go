// Package build is zrtc build behind its flags: a model built for one
// target or a bundle set of several, each bundle from the build cache on
// a hit (format/buildcache, keyed by compiler/buildkey) or compiled and
// added to it on a miss, with the phase timings and plan sizes zrtc
// build --json reports.
package build

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/buildkey"
	"github.com/zrtdev/zrt/compiler/config"
	"github.com/zrtdev/zrt/format/buildcache"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/bundleset"
	"github.com/zrtdev/zrt/format/filedigest"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/format/publish"
	"github.com/zrtdev/zrt/internal/usage"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/passes"
)

// Options say what to build and where.
type Options struct {
	// Model is the GGUF; Targets the targets (SplitTargets), one for a
	// bundle, several for a set; Compiler the rest of the compile.
	Model    string
	Targets  []string
	Compiler compiler.Options
	// TP, above 1, builds a tensor-parallel set: TP rank bundles of each
	// target (compiler.Options.TP is set per rank).
	TP int
	// Out is where the bundle or set goes ("" with a cache: into the
	// cache alone, the entry's path in the summary).
	Out string
	// Cache is the build cache's directory ("": none).
	Cache string
	// WantKey computes each output's key even without a cache.
	WantKey bool
	// IR receives the text IR of a --compile-to without Out.
	IR io.Writer
	// Say receives the progress lines (nil: quiet); Compiler.Warn the
	// warnings.
	Say func(format string, a ...any)
}

// OptionError is a combination of Options Run cannot take: a mistake in
// the call.
type OptionError = usage.Error

// Run builds o.Model as o says (with Compiler.CompileTo, only its text
// IR, and no summary) and returns what it did.
func Run(ctx context.Context, o Options) (*Summary, error) {
	say := o.Say
	if say == nil {
		say = func(string, ...any) {}
	}
	warn := o.Compiler.Warn
	if warn == nil {
		warn = func(string, ...any) {}
	}
	if len(o.Targets) == 0 {
		o.Targets = []string{""} // the config's target
	}
	set := len(o.Targets) > 1 || o.TP > 1
	switch c := o.Compiler; {
	case o.TP < 0 || o.TP == 1 || o.TP > 64:
		return nil, &OptionError{Err: fmt.Errorf("build: --tp %d: a tensor-parallel set has 2 to 64 ranks", o.TP)}
	case o.TP > 1 && (c.CompileTo != "" || c.CompileFrom != ""):
		return nil, &OptionError{Err: errors.New("build: --tp builds every rank's bundle from the GGUF; --compile-to and --compile-from take one bundle")}
	case c.CompileTo != "" && (set || o.WantKey):
		return nil, &OptionError{Err: errors.New("build: --compile-to writes text IR for one target; it takes neither several targets nor --json")}
	case c.CompileTo != "" && o.Out == "":
		return nil, compiler.CompileIR(ctx, o.Model, o.IR, c)
	case c.CompileTo != "":
		return nil, compiler.Compile(ctx, o.Model, o.Out, c)
	case set && c.CompileFrom != "":
		return nil, &OptionError{Err: errors.New("build: --compile-from resumes one target's IR; build the set's targets from the GGUF")}
	case o.TP > 1 && c.DumpAfter != "":
		return nil, &OptionError{Err: errors.New("build: --dump-after with --tp would write every rank's dumps over each other; dump one rank with zrtc dump ir --after PASS --tp N --tp-rank R")}
	case set && c.DumpAfter != "":
		return nil, &OptionError{Err: errors.New("build: --dump-after with several targets would write every target's dumps over each other; dump one target at a time")}
	}
	b := &builder{model: o.Model, opt: o.Compiler, say: say, warn: warn, forceBuild: o.Compiler.DumpAfter != "",
		wantKey: o.WantKey || set, tp: o.TP}
	if o.Cache != "" {
		if why := buildkey.Uncacheable(o.Compiler); why != nil {
			say("not using the cache: %v", why)
		} else {
			var err error
			if b.cache, err = buildcache.Open(o.Cache); err != nil {
				return nil, err
			}
		}
	}
	sum := &Summary{Model: o.Model, Out: o.Out, Set: set}
	if b.cache != nil {
		sum.CacheDir = b.cache.Dir()
	}
	if sum.Set {
		if o.Out == "" {
			return nil, errors.New("build: a bundle set is written to -o OUT; only one target may go to the cache alone")
		}
		if o.Targets[0] == "" { // --tp without --target: the config's
			c, err := config.LoadModel(o.Model, o.Compiler.ConfigPath, o.Compiler.Overrides())
			if err != nil {
				return nil, err
			}
			o.Targets = []string{c.Target}
		}
		if err := b.buildSet(ctx, o.Targets, o.Out, sum); err != nil {
			return nil, err
		}
	} else {
		out, err := b.build(ctx, o.Targets[0], passes.TP{}, dest{path: o.Out})
		if out != nil {
			sum.Outputs = append(sum.Outputs, out)
		}
		if err != nil {
			return nil, err
		}
	}
	if o.Out == "" {
		say("cached at %s", sum.Outputs[0].Path)
	} else {
		say("wrote %s", o.Out)
	}
	return sum, nil
}

// Keys returns the key's inputs of o's build for each of its targets,
// without building: the GGUF's digest from the cache's memo when o has
// a cache (remembering it there), else from hashing the file.
func Keys(o Options) ([]buildkey.Inputs, error) {
	b := &builder{model: o.Model, opt: o.Compiler}
	memo := filedigest.Memo{} // without a cache: hash the file
	if o.Cache != "" {
		var err error
		if b.cache, err = buildcache.Open(o.Cache); err != nil {
			return nil, err
		}
		memo = b.cache.Digests()
	}
	parts, err := gguf.Parts(o.Model)
	if err != nil {
		return nil, err
	}
	sum, _, err := memo.SumAll(parts)
	if err != nil {
		return nil, err
	}
	var out []buildkey.Inputs
	for _, t := range o.Targets {
		in, err := b.inputs(t, passes.TP{}, sum)
		if err != nil {
			return nil, err
		}
		out = append(out, in)
	}
	return out, nil
}

// SplitTargets reads zrtc's --target: one target, a comma-separated list for a
// set, or nothing (the config's target). A set's targets are put in the
// registry's order and deduplicated, so the same set is written whatever
// order they were given in.
func SplitTargets(s string) ([]string, error) {
	if !strings.Contains(s, ",") {
		return []string{strings.TrimSpace(s)}, nil
	}
	known := compiler.Targets()
	seen := map[string]bool{}
	for _, t := range strings.Split(s, ",") {
		t = strings.TrimSpace(t)
		if !slices.Contains(known, t) {
			return nil, fmt.Errorf("--target: %w", compiler.UnsupportedTarget(t))
		}
		seen[t] = true
	}
	var out []string
	for _, t := range known {
		if seen[t] {
			out = append(out, t)
		}
	}
	return out, nil
}

// Summary is a build's outcome: zrtc build --json's output.
type Summary struct {
	Model    string     `json:"model"`
	Out      string     `json:"out"`
	Set      bool       `json:"set"`
	CacheDir string     `json:"cache_dir,omitempty"`
	Outputs  []*Outcome `json:"outputs"`
	TotalMs  float64    `json:"total_ms"`
}

// Outcome is one bundle's build, as zrtc build --json reports it.
type Outcome struct {
	Target string `json:"target"`
	Path   string `json:"path"`
	Key    string `json:"key,omitempty"`
	// Cache is hit, miss, or off (no cache, or one the options rule out).
	Cache  string             `json:"cache"`
	Phases []PhaseTime        `json:"phases"`
	Placed *buildcache.Placed `json:"placed,omitempty"`
	Plan   PlanSizes          `json:"plan"`
	// Bytes is the size of the bundle's files.
	Bytes int64 `json:"bytes"`

	graph *bundle.Graph // the output's, for a set's index
}

// PhaseTime is one timed step: digest, key, materialise on a hit; load,
// each pass, hash, write, materialise on a miss.
type PhaseTime struct {
	Name string  `json:"name"`
	Ms   float64 `json:"ms"`
}

// PlanSizes is what the bundle's memory plan keeps resident, as zrtc
// build's progress line says it.
type PlanSizes struct {
	WeightsBytes  int64 `json:"weights_bytes"`
	KVBytes       int64 `json:"kv_bytes"`
	OtherBytes    int64 `json:"scratch_io_bytes"`
	ResidentBytes int64 `json:"resident_bytes"`
	Variants      int   `json:"variants"`
	Kernels       int   `json:"kernels"`
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (o *Outcome) phase(name string, since time.Time) {
	o.Phases = append(o.Phases, PhaseTime{name, ms(time.Since(since))})
}

// builder builds one model for one or more targets, with or without the
// cache.
type builder struct {
	model      string
	opt        compiler.Options
	cache      *buildcache.Cache // nil: no cache
	say, warn  func(string, ...any)
	forceBuild bool   // run the passes even on a hit (--dump-after)
	wantKey    bool   // report the key without a cache (--json, a set's index)
	toolchain  string // compiler.Toolchain plus the executable digest, once computed
	tp         int    // ranks of a tensor-parallel set (≤ 1: none)
}

// dest is where a bundle goes: published at path, or, for a member of a
// set, written into the directory into under the set's temporary (path is
// then where it will end up); with neither, only into the cache.
type dest struct{ path, into string }

// cacheOnly reports a build for the cache alone (zrtc build --cache DIR
// without -o): its output is the cache entry.
func (d dest) cacheOnly() bool { return d.path == "" && d.into == "" }

// write puts a freshly built bundle at d.
func (d dest) write(fill func(dir string) error) error {
	if d.into != "" {
		if err := os.Mkdir(d.into, 0o755); err != nil {
			return err
		}
		return fill(d.into)
	}
	return publish.Dir(publish.OS{}, d.path, bundleset.IsOutput, fill)
}

// dir is where the bundle's files are once written.
func (d dest) dir() string {
	if d.into != "" {
		return d.into
	}
	return d.path
}

// identity returns zrtc's toolchain identity for the key: the versions
// the compiler reports and the digest of this executable, so two zrtc
// builds that differ in any code never share entries.
func (b *builder) identity() (string, error) {
	if b.toolchain != "" {
		return b.toolchain, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("cache key: cannot find the zrtc executable to identify it: %w", err)
	}
	memo := filedigest.Memo{}
	if b.cache != nil {
		memo = b.cache.Digests()
	}
	sum, _, err := memo.Sum(exe)
	if err != nil {
		return "", fmt.Errorf("cache key: identifying the zrtc executable: %w", err)
	}
	b.toolchain = fmt.Sprintf("%s; executable sha256:%x", compiler.Toolchain(), sum)
	return b.toolchain, nil
}

// inputs resolves the key's inputs for a build of target, given the
// GGUF's digest.
func (b *builder) inputs(target string, tp passes.TP, model [32]byte) (buildkey.Inputs, error) {
	tc, err := b.identity()
	if err != nil {
		return buildkey.Inputs{}, err
	}
	opt := b.opt
	opt.Target, opt.TP = target, tp
	return buildkey.Resolve(b.model, model, opt, tc)
}

// build builds the model for target into d: from the cache on a hit,
// else by compiling (and adding the result to the cache when there is
// one).
func (b *builder) build(ctx context.Context, target string, tp passes.TP, d dest) (*Outcome, error) {
	opt := b.opt
	opt.Target, opt.TP = target, tp
	o := &Outcome{Path: d.path, Cache: "off"}
	var in buildkey.Inputs
	var parts []string // the GGUF's files, when a cache keys the build
	if b.cache != nil {
		t := time.Now()
		var err error
		if parts, err = gguf.Parts(b.model); err != nil {
			return nil, err
		}
		sum, remembered, err := b.cache.Digests().SumAll(parts)
		if err != nil {
			return nil, err
		}
		o.phase("digest", t)
		t = time.Now()
		if in, err = b.inputs(target, tp, sum); err != nil {
			return nil, err
		}
		o.Key = in.Key().String()
		o.phase("key", t)
		hit := false
		if !b.forceBuild { // --dump-after: the passes must run
			if hit, err = b.cache.Lookup(in.Key()); err != nil {
				return nil, err
			}
		}
		if hit && d.cacheOnly() {
			entry, err := b.cache.Use(in.Key())
			if err == nil {
				o.Cache, o.Path = "hit", entry
				b.say("cache hit %s: %s", o.Key, entry)
				return o, o.describe(entry)
			}
			if !errors.Is(err, buildcache.ErrMiss) {
				return nil, err
			}
			hit = false // pruned between the lookup and now: build it
		}
		if hit {
			t = time.Now()
			placed, err := b.materialise(in.Key(), d)
			if err == nil {
				o.phase("materialise", t)
				o.Cache, o.Placed = "hit", &placed
				b.say("cache hit %s: %s (%s)", o.Key, d.path, placed)
				return o, o.describe(d.dir())
			}
			if !errors.Is(err, buildcache.ErrMiss) {
				return nil, err
			}
			// Pruned between the lookup and now: build it.
		}
		o.Cache = "miss"
		how := "digest remembered"
		if !remembered {
			how = "digest computed"
		}
		b.say("cache miss %s (%s): compiling", o.Key, how)
	}
	c, err := compiler.Prepare(ctx, b.model, opt)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	fill := func(dir string) error { return c.Write(ctx, dir) }
	if b.cache == nil {
		if err := d.write(fill); err != nil {
			return nil, err
		}
		o.Phases = append(o.Phases, compiled(c)...)
		if b.wantKey {
			if in, err = b.inputs(target, tp, c.SourceHash()); err != nil {
				return nil, err
			}
			o.Key = in.Key().String()
		}
		return o, o.describe(d.dir())
	}
	if c.SourceHash() != in.Model {
		// The file changed without changing its identity (rewritten in
		// place within a timestamp tick, or its mtime set back): key the
		// entry by the bytes this build read, and forget the memo.
		b.warn("%s: its remembered digest is stale (the file changed in place?); keying by the bytes read", b.model)
		if err := b.cache.Digests().ForgetAll(parts); err != nil {
			b.warn("%v", err)
		}
		in.Model = c.SourceHash()
		o.Key = in.Key().String()
	}
	release, err := b.cache.Hold()
	if err != nil {
		return nil, err
	}
	defer release()
	if err := b.cache.Insert(in.Key(), fill); err != nil {
		return nil, err
	}
	o.Phases = append(o.Phases, compiled(c)...)
	if d.cacheOnly() {
		if o.Path, err = b.cache.Use(in.Key()); err != nil {
			return nil, err
		}
		return o, o.describe(o.Path)
	}
	t := time.Now()
	if _, err := b.materialise(in.Key(), d); err != nil {
		return nil, err
	}
	o.phase("materialise", t)
	return o, o.describe(d.dir())
}

// compiled converts the compiler's phase timings.
func compiled(c *compiler.Compiled) []PhaseTime {
	out := make([]PhaseTime, len(c.Phases))
	for i, p := range c.Phases {
		out[i] = PhaseTime{p.Name, ms(p.Dur)}
	}
	return out
}

// materialise puts key's cached bundle at d, with this build's GGUF name
// recorded in it.
func (b *builder) materialise(k buildcache.Key, d dest) (buildcache.Placed, error) {
	mo := buildcache.MaterialiseOptions{SourceName: filepath.Base(b.model), Owned: bundleset.IsOutput}
	if d.into != "" {
		if err := os.Mkdir(d.into, 0o755); err != nil {
			return buildcache.Placed{}, err
		}
		p, err := b.cache.MaterialiseInto(k, d.into, mo)
		if err != nil {
			os.RemoveAll(d.into) // so a rebuild after a miss starts empty
		}
		return p, err
	}
	return b.cache.Materialise(k, d.path, mo)
}

// describe fills the target, sizes and plan from the bundle written at
// dir.
func (o *Outcome) describe(dir string) error {
	g, _, err := bundle.ReadGraph(filepath.Join(dir, bundle.GraphFile))
	if err != nil {
		return fmt.Errorf("reading back %s: %w", dir, err)
	}
	o.graph, o.Target = g, g.Ident.Target
	p := &o.Plan
	for _, r := range g.Regions {
		switch {
		case strings.HasPrefix(r.Name, kernels.RegionWeights):
			p.WeightsBytes += r.Bytes
		case r.Name == kernels.RegionKV || r.Name == kernels.RegionKVWindow:
			p.KVBytes += r.Bytes
		default:
			p.OtherBytes += r.Bytes
		}
	}
	p.ResidentBytes = p.WeightsBytes + p.KVBytes + p.OtherBytes
	p.Variants, p.Kernels = len(g.Variants), len(g.Kernels)
	return filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			o.Bytes += fi.Size()
		}
		return err
	})
}

// buildSet builds one bundle per target into a bundle set at out, written
// as one directory (format/bundleset), each bundle from the cache when it
// holds its key.
func (b *builder) buildSet(ctx context.Context, targets []string, out string, sum *Summary) error {
	x := &bundleset.Index{Producer: compiler.Version}
	if b.tp > 1 {
		x.TPRanks = b.tp
	}
	for _, t := range targets {
		req, err := requirementsFor(t)
		if err != nil {
			return err
		}
		if b.tp <= 1 {
			x.Bundles = append(x.Bundles, bundleset.Member{Target: t, Dir: bundleset.SanitizeTarget(t), Requires: req})
			continue
		}
		if t2, _ := kernels.LookupTarget(t); t2.Tier != kernels.TierCPU {
			req.Devices = b.tp // a GPU a rank
		}
		for r := range b.tp {
			x.Bundles = append(x.Bundles, bundleset.Member{Target: t, Rank: r, Dir: fmt.Sprintf("%s.tp%d", bundleset.SanitizeTarget(t), r), Requires: req})
		}
	}
	cfgSum, err := sharedConfig(b.model, b.opt)
	if err != nil {
		return err
	}
	say, progress := b.say, b.opt.Progress
	defer func() { b.say, b.opt.Progress = say, progress }()
	return bundleset.Write(out, x, func(tmp string) error {
		for i := range x.Bundles {
			m := &x.Bundles[i]
			// Each line of progress says which member it is about.
			prefix := "[" + m.Target + "] "
			var tp passes.TP
			if x.TPRanks > 1 {
				tp = passes.TP{Rank: m.Rank, Ranks: x.TPRanks}
				prefix = fmt.Sprintf("[%s rank %d/%d] ", m.Target, m.Rank, x.TPRanks)
			}
			b.say = func(f string, a ...any) { say(prefix+f, a...) }
			if progress != nil {
				b.opt.Progress = func(f string, a ...any) { progress(prefix+f, a...) }
			}
			o, err := b.build(ctx, m.Target, tp, dest{path: m.Path(out), into: m.Path(tmp)})
			if err != nil {
				if tp.Split() {
					return fmt.Errorf("target %s, rank %d of %d: %w", m.Target, m.Rank, tp.Ranks, err)
				}
				return fmt.Errorf("target %s: %w", m.Target, err)
			}
			sum.Outputs = append(sum.Outputs, o)
			m.Key = o.Key
			id := o.graph.Ident
			x.Model = bundleset.Model{Source: id.SourceName, SHA256: hex.EncodeToString(id.SourceHash[:]),
				Architecture: o.graph.Hparams.Arch, ConfigSHA256: cfgSum}
		}
		return nil
	})
}

// requirementsFor says what a machine needs to run a target's bundles,
// for the set's index: the tier, for CUDA the compute capability its PTX
// targets (cuda:sm_90 → 9.0; the driver JIT-compiles PTX for that
// architecture or a later one), for AMD the gfx processor its code
// objects are for.
func requirementsFor(target string) (bundleset.Requires, error) {
	t, ok := kernels.LookupTarget(target)
	if !ok {
		return bundleset.Requires{}, fmt.Errorf("target %s: not in the target registry (%s)", target, strings.Join(kernels.TargetNames(), ", "))
	}
	req := bundleset.Requires{Tier: string(t.Tier)}
	if t.Tier == kernels.TierCUDA {
		major, minor, ok := t.ComputeCapability()
		if !ok {
			return req, fmt.Errorf("target %s: cannot read its compute capability (want cuda:sm_NN)", target)
		}
		req.CUDAComputeCapability = fmt.Sprintf("%d.%d", major, minor)
	}
	if t.Tier == kernels.TierAMD {
		req.AMDGfx = strings.TrimPrefix(target, "amd:")
	}
	return req, nil
}

// sharedConfig is the digest of the effective model config with the
// target left out: what every member of a set shares. It is resolved for
// the config's own target (no --target), so it is one value for the set;
// the defaults that depend on the target (slots, variants) are in each
// member's graph file.
func sharedConfig(model string, opt compiler.Options) (string, error) {
	f, err := gguf.OpenModel(model)
	if err != nil {
		return "", err
	}
	defer f.Close()
	o := opt.Overrides()
	o.Target = ""
	c, err := config.Load(f, opt.ConfigPath, o)
	if err != nil {
		return "", err
	}
	c.Target = ""
	sum := sha256.Sum256([]byte(c.TOML()))
	return hex.EncodeToString(sum[:]), nil
}
