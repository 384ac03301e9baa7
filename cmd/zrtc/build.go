package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/cmd/internal/exitcode"
	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/buildkey"
	"github.com/zrtdev/zrt/format/buildcache"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/bundleset"
	"github.com/zrtdev/zrt/format/filedigest"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/format/publish"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/runtime/sysmem"
)

// cacheEnv names the build cache directory when --cache is not given.
const cacheEnv = "ZRTC_CACHE"

func buildCmd() *cobra.Command {
	var cfg, target, out, cacheDir string
	var quiet, verifyEach, noFuse, noCache, asJSON bool
	var budget byteSize
	var phases phaseFlags
	var sizes sizeFlags
	c := &cobra.Command{
		Use:   "build MODEL.gguf [IR.zir] -o OUT",
		Short: "Compile a model into a bundle directory, or a bundle set for several targets (written atomically)",
		Long: `build compiles a model into a bundle directory, written atomically.

Without a config it builds to serve: the GGUF's trained context, decode
variants for 16 requests at once on cpu and 64 on cuda, and a KV pool of
max_slots × min(context, 2048) tokens (at least one whole context). It
prints each default it took ("zrtc: default …"; -q keeps them quiet).
--ctx-size and --slots set the context and the requests at once without
a config file; they win over one.

Several targets (--target cpu,cuda:sm_90) make a bundle set: OUT holds one
bundle per target, in a directory named after it (cuda:sm_90 → cuda_sm_90),
and set.json, the index that says what each needs of a machine; zrt-run
given OUT runs the bundle that fits its machine best. The set is written as
one directory: a reader sees the old set or the new one, whole.

Build cache: with --cache DIR (or $ZRTC_CACHE), a build whose key is in
the cache is not compiled: the cached bundle is put at OUT by hard links
where the file system allows (else reflinks or copies), through the same
atomic write. The key (zrtc key prints it) is a SHA-256 over exactly what
decides the output: the GGUF's content (not its name or timestamps), the
effective model config, the target, --no-fuse, the kernel source
($ZRT_PTX_DIR), zrtc's version, kernel ABI and format versions, and the
zrtc executable's own digest, so an upgraded zrtc never gets a stale
bundle. A GGUF's digest is remembered by (device, inode, size, mtime), so
a large model is hashed once; a miss, which reads the whole file anyway,
checks the remembered digest. --dump-after runs the passes (and refreshes
the entry) even on a hit; --compile-to/--compile-from do not use the cache.
With a cache and no -o, the bundle goes into the cache alone, and the
entry's path is printed (--json: outputs[0].path); zrt-run given a GGUF
builds it so and runs the entry in place.
zrtc cache ls|prune keep it bounded.

--json prints one JSON object on stdout when done: every output with its
target, path, key, cache result (hit, miss, off), per-phase timings in
milliseconds and plan sizes in bytes. Progress goes to stderr, always.

Environment: ZRTC_CACHE, the cache directory when --cache is not given
(--no-cache ignores it). ZRT_PTX_DIR, when set, supplies T-CUDA's PTX from
a directory (kernels/cuda/build_ptx.sh DIR writes one) instead of the PTX
built into zrtc, for trying new kernels without rebuilding zrtc.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			start := time.Now()
			opt := compiler.Options{ConfigPath: cfg, VerifyEach: verifyEach, NoFuse: noFuse,
				PTXDir: os.Getenv("ZRT_PTX_DIR")}
			if err := sizes.apply(&opt); err != nil {
				return err
			}
			if !noCache && !cmd.Flags().Changed("cache") {
				cacheDir = os.Getenv(cacheEnv)
			}
			cacheOnly := out == "" && cacheDir != "" && !noCache && phases.to == ""
			if err := phases.apply(args, out, cacheOnly, &opt); err != nil {
				return err
			}
			stderr := cmd.ErrOrStderr()
			say := func(f string, a ...any) {
				if !quiet {
					fmt.Fprintf(stderr, "zrtc: "+f+"\n", a...)
				}
			}
			if !quiet {
				opt.Progress = say
			}
			opt.Warn = func(f string, a ...any) { fmt.Fprintf(stderr, "zrtc: warning: "+f+"\n", a...) }
			if opt.MemoryBudget = int64(budget); budget == 0 {
				opt.MemoryBudget, _ = sysmem.Available()
			}
			targets, err := splitTargets(target)
			if err != nil {
				return err
			}
			if opt.CompileTo != "" {
				if len(targets) > 1 || asJSON {
					return exitcode.Usagef("build: --compile-to writes text IR for one target; it takes neither several targets nor --json")
				}
				opt.Target = target
				if out == "" {
					return compiler.CompileIR(cmd.Context(), args[0], cmd.OutOrStdout(), opt)
				}
				return compiler.Compile(cmd.Context(), args[0], out, opt)
			}
			if cacheOnly && len(targets) > 1 {
				return fmt.Errorf("build: a bundle set is written to -o OUT; only one target may go to the cache alone")
			}
			if len(targets) > 1 && opt.CompileFrom != "" {
				return exitcode.Usagef("build: --compile-from resumes one target's IR; build the set's targets from the GGUF")
			}
			if len(targets) > 1 && opt.DumpAfter != "" {
				return exitcode.Usagef("build: --dump-after with several targets would write every target's dumps over each other; dump one target at a time")
			}
			b := &builder{model: args[0], opt: opt, say: say, warn: opt.Warn, forceBuild: opt.DumpAfter != "",
				wantKey: asJSON || len(targets) > 1}
			if cacheDir != "" && !noCache {
				if why := buildkey.Uncacheable(opt); why != nil {
					say("not using the cache: %v", why)
				} else if b.cache, err = buildcache.Open(cacheDir); err != nil {
					return err
				}
			}
			sum := &summary{Model: args[0], Out: out, Set: len(targets) > 1}
			if b.cache != nil {
				sum.CacheDir = b.cache.Dir()
			}
			if sum.Set {
				err = b.buildSet(cmd.Context(), targets, out, sum)
			} else {
				var o *outcome
				o, err = b.build(cmd.Context(), targets[0], dest{path: out})
				if o != nil {
					sum.Outputs = append(sum.Outputs, o)
				}
			}
			if err != nil {
				return err
			}
			if cacheOnly {
				say("cached at %s", sum.Outputs[0].Path)
			} else {
				say("wrote %s", out)
			}
			if !asJSON {
				return nil
			}
			sum.TotalMs = ms(time.Since(start))
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(sum)
		},
	}
	c.Flags().StringVar(&cfg, "config", "", "TOML model config overriding the GGUF defaults")
	c.Flags().StringVar(&target, "target", "", "compile target: "+strings.Join(compiler.Targets(), ", ")+"; several, comma-separated, make a bundle set (default: the config's)")
	c.Flags().StringVarP(&out, "out", "o", "", "output bundle directory (or bundle set directory)")
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "print nothing on stderr on success but warnings")
	c.Flags().Var(&budget, "memory-budget", "warn when the plan keeps more than this resident, e.g. 16GiB (default: this machine's available memory)")
	c.Flags().BoolVar(&verifyEach, "verify-each", false, "re-verify the IR after every pass")
	c.Flags().BoolVar(&noFuse, "no-fuse", false, "skip the fuse pass (for bisecting a numerical difference)")
	c.Flags().StringVar(&cacheDir, "cache", "", "build cache directory: reuse a bundle built before from the same inputs (default $"+cacheEnv+")")
	c.Flags().BoolVar(&noCache, "no-cache", false, "use no build cache, even if $"+cacheEnv+" is set")
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON summary on stdout: outputs, keys, cache hit or miss, phase timings, plan sizes")
	phases.register(c)
	sizes.register(c)
	return c
}

// splitTargets reads --target: one target, a comma-separated list for a
// set, or nothing (the config's target). A set's targets are put in the
// registry's order and deduplicated, so the same set is written whatever
// order they were given in.
func splitTargets(s string) ([]string, error) {
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

// summary is build --json's output.
type summary struct {
	Model    string     `json:"model"`
	Out      string     `json:"out"`
	Set      bool       `json:"set"`
	CacheDir string     `json:"cache_dir,omitempty"`
	Outputs  []*outcome `json:"outputs"`
	TotalMs  float64    `json:"total_ms"`
}

// outcome is one bundle's build, as --json reports it.
type outcome struct {
	Target string `json:"target"`
	Path   string `json:"path"`
	Key    string `json:"key,omitempty"`
	// Cache is hit, miss, or off (no cache, or one the options rule out).
	Cache  string             `json:"cache"`
	Phases []phaseTime        `json:"phases"`
	Placed *buildcache.Placed `json:"placed,omitempty"`
	Plan   planSizes          `json:"plan"`
	// Bytes is the size of the bundle's files.
	Bytes int64 `json:"bytes"`

	graph *bundle.Graph // the output's, for a set's index
}

// phaseTime is one timed step: digest, key, materialise on a hit; load,
// each pass, hash, write, materialise on a miss.
type phaseTime struct {
	Name string  `json:"name"`
	Ms   float64 `json:"ms"`
}

// planSizes is what the bundle's memory plan keeps resident, as zrtc
// build's progress line says it.
type planSizes struct {
	WeightsBytes  int64 `json:"weights_bytes"`
	KVBytes       int64 `json:"kv_bytes"`
	OtherBytes    int64 `json:"scratch_io_bytes"`
	ResidentBytes int64 `json:"resident_bytes"`
	Variants      int   `json:"variants"`
	Kernels       int   `json:"kernels"`
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (o *outcome) phase(name string, since time.Time) {
	o.Phases = append(o.Phases, phaseTime{name, ms(time.Since(since))})
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
func (b *builder) inputs(target string, model [32]byte) (buildkey.Inputs, error) {
	tc, err := b.identity()
	if err != nil {
		return buildkey.Inputs{}, err
	}
	opt := b.opt
	opt.Target = target
	return buildkey.Resolve(b.model, model, opt, tc)
}

// build builds the model for target into d: from the cache on a hit,
// else by compiling (and adding the result to the cache when there is
// one).
func (b *builder) build(ctx context.Context, target string, d dest) (*outcome, error) {
	opt := b.opt
	opt.Target = target
	o := &outcome{Path: d.path, Cache: "off"}
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
		if in, err = b.inputs(target, sum); err != nil {
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
			if in, err = b.inputs(target, c.SourceHash()); err != nil {
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
func compiled(c *compiler.Compiled) []phaseTime {
	out := make([]phaseTime, len(c.Phases))
	for i, p := range c.Phases {
		out[i] = phaseTime{p.Name, ms(p.Dur)}
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
func (o *outcome) describe(dir string) error {
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
