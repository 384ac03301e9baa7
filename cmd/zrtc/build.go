package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/build"
	"github.com/zrtdev/zrt/runtime/sysmem"
)

// cacheEnv names the build cache directory when --cache is not given.
const cacheEnv = "ZRTC_CACHE"

func buildCmd() *cobra.Command {
	var cfg, target, out, cacheDir string
	var tp int
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
checks the remembered digest. --dump-after runs the passes even on a hit
(an entry is only replaced where it is damaged); --compile-to/--compile-from
do not use the cache.
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
			if noCache {
				cacheDir = ""
			}
			cacheOnly := out == "" && cacheDir != "" && phases.to == ""
			if err := phases.apply(args, out, cacheOnly, &opt); err != nil {
				return err
			}
			stderr := cmd.ErrOrStderr()
			if !quiet {
				opt.Progress = func(f string, a ...any) { fmt.Fprintf(stderr, "zrtc: "+f+"\n", a...) }
			}
			opt.Warn = func(f string, a ...any) { fmt.Fprintf(stderr, "zrtc: warning: "+f+"\n", a...) }
			if opt.MemoryBudget = int64(budget); budget == 0 {
				opt.MemoryBudget, _ = sysmem.Available()
			}
			targets, err := build.SplitTargets(target)
			if err != nil {
				return err
			}
			if opt.CompileTo != "" {
				opt.Target = target
			}
			sum, err := build.Run(cmd.Context(), build.Options{Model: args[0], Targets: targets, Compiler: opt, Out: out, IR: cmd.OutOrStdout(),
				Cache: cacheDir, WantKey: asJSON, Say: opt.Progress, TP: tp})
			if err != nil || !asJSON || opt.CompileTo != "" {
				return err
			}
			sum.TotalMs = float64(time.Since(start).Microseconds()) / 1000
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
	c.Flags().IntVar(&tp, "tp", 0, "build a tensor-parallel set of this many rank bundles (2, 4, 8): heads, FFN columns and vocabulary split over the ranks, which run together")
	c.Flags().StringVar(&cacheDir, "cache", "", "build cache directory: reuse a bundle built before from the same inputs (default $"+cacheEnv+")")
	c.Flags().BoolVar(&noCache, "no-cache", false, "use no build cache, even if $"+cacheEnv+" is set")
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON summary on stdout: outputs, keys, cache hit or miss, phase timings, plan sizes")
	phases.register(c)
	sizes.register(c)
	return c
}
