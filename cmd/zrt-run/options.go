package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/cmd/internal/exitcode"
	"github.com/zrtdev/zrt/format/autobuild"
	"github.com/zrtdev/zrt/format/zrtp"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/decode"
	"github.com/zrtdev/zrt/runtime/pick"
	"github.com/zrtdev/zrt/runtime/sequence"
	"github.com/zrtdev/zrt/runtime/tiers"
)

// envHelp documents the environment the commands map onto runtime.Options;
// the runtime itself reads none. The tiers are the tier table's. It is
// computed once and never written.
var envHelp = fmt.Sprintf("Environment (a flag wins over its variable):\n  %-36s %s\n",
	"ZRT_TIER="+strings.Join(tiers.Names(tiers.Table()), "|"), "execution tier (default auto)") + envRest

// envRest is the part of envHelp that does not come from the tier table.
const envRest = `  ZRT_THREADS=N                        T-CPU workers (default all CPUs)
  ZRT_BATCHED_PREFILL=on|off|validate  prompt evaluation (validate runs both and reports the difference)
  ZRT_TRACE=1                          print every dispatch's output (compare with llama-eval-callback)
  ZRT_CUDA_TIMEOUT=60s                 bound on one T-CUDA replay
  ZRT_CUDA_PDL=0                       turn off programmatic dependent launch
  ZRT_CUDA_COLLECTIVES=auto|nccl|peer  a TP set's collectives (auto: one-shot peer kernels for small ones, NCCL above)
  ZRT_CUDA_FUSE_REDUCES=1              fold a TP set's one-shot all-reduces into the matmuls before them (A/B runs)
  ZRT_CUDA_PROFILE=1                   time every T-CUDA kernel, per variant (replays launches one by one)
  ZRT_CUDA_ATTN=w8z16st1               the split decode attention's warps, blocks a head group and stages (timing)
  ZRT_CUDA_OMIT=flash_attn,stage       leave kernel families, instances or entry points out of the captured
                                       graphs: wrong outputs, for measuring what they cost inside the graph
  ZRT_KFD=kfd|sim                      T1's device: /dev/kfd (default), or the simulated KFD that runs T-CPU kernels
                                       (ZRT_TIER=t2: T1's path over an amdgpu render node's user-mode queues)`

// engineFlags are shared by every command that loads a bundle.
type engineFlags struct {
	tier          string
	threads       int
	mmap          bool
	verifyWeights bool
	explain       bool
	unpackDir     string
	build         buildFlags
	beside        *runtime.Program // runtime.Options.Beside: the target of a draft model opened next
}

func (f *engineFlags) add(c *cobra.Command) {
	c.Flags().StringVar(&f.tier, "tier", "", "execution tier: "+strings.Join(tiers.Names(tiers.Table()), ", ")+" (default $ZRT_TIER or auto)")
	c.Flags().IntVar(&f.threads, "threads", 0, "CPU worker threads (default $ZRT_THREADS or all CPUs)")
	c.Flags().BoolVar(&f.mmap, "mmap", false, "T-CPU: keep the weights in the mapped pack (shared page cache, no copy) instead of copying them into huge-page memory, which decodes faster")
	c.Flags().BoolVar(&f.verifyWeights, "verify-weights", false, "hash the weights pack against the graph file before running (every load checks the rest)")
	c.Flags().BoolVar(&f.explain, "explain", false, "given a bundle set (zrtc build --target a,b) or a pack of one, say on stderr which bundle fits this machine and why")
	c.Flags().StringVar(&f.unpackDir, "unpack-dir", "", "given a pack (.zrtp), unpack its member for this machine under this directory (default: the user cache directory's zrt/unpacked)")
	f.build.add(c)
}

// bundleDir returns the bundle to open for path: path itself for a
// bundle; for a bundle set, the member that fits this machine best under
// the tier choice (runtime/pick), said on stderr with --explain; for a
// pack (.zrtp), that member unpacked once into the unpack directory; for
// a GGUF, its build in the build cache, made by zrtc the first time.
func (f *engineFlags) bundleDir(ctx context.Context, path string, opt runtime.Options) (string, error) {
	src := pick.Source{Probes: machineProbes(opt), Tier: opt.Tier, UnpackDir: f.unpackDir}
	var err error
	switch {
	case autobuild.IsGGUF(path):
		src.Build, err = f.build.request()
	case zrtp.Is(path) && src.UnpackDir == "":
		src.UnpackDir, err = defaultUnpackDir()
	}
	if err != nil {
		return "", err
	}
	dir, choice, err := pick.Locate(ctx, path, src)
	if choice != nil && f.explain && err == nil {
		kind := "bundle set"
		if zrtp.Is(path) {
			kind = "pack"
		}
		lines := strings.Split(strings.TrimSuffix(choice.Explain(), "\n"), "\n")
		fmt.Fprintf(os.Stderr, "zrt-run: %s %s on this machine: %s\nzrt-run: %s\n", kind, path, choice.Machine, strings.Join(lines, "\nzrt-run: "))
	}
	return dir, err
}

// machineProbes are the GPU probes a set's choice uses: the tier
// table's, which with the simulated KFD (ZRT_KFD=sim) find the
// simulator's AMD GPU.
func machineProbes(opt runtime.Options) []pick.Probe {
	return pick.TableProbes(tiers.Table(), opt.TierOptions())
}

// options fills runtime.Options from the flags and the environment.
func (f *engineFlags) options() (runtime.Options, error) {
	if err := checkThreads(f.threads); err != nil {
		return runtime.Options{}, err
	}
	opt := runtime.Options{Tier: f.tier, Threads: f.threads, Verify: f.verifyWeights, MapWeights: f.mmap, Beside: f.beside,
		Log: func(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }}
	if opt.Tier == "" {
		opt.Tier = os.Getenv("ZRT_TIER")
	}
	if s := os.Getenv("ZRT_THREADS"); opt.Threads == 0 && s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || checkThreads(n) != nil {
			return opt, fmt.Errorf("ZRT_THREADS=%q: want a number of threads in [1, %d]", s, maxThreadsPerCPU*goruntime.NumCPU())
		}
		opt.Threads = n
	}
	if os.Getenv("ZRT_TRACE") != "" {
		opt.Trace = runtime.TraceTo(os.Stderr)
	}
	if s := os.Getenv("ZRT_CUDA_TIMEOUT"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return opt, fmt.Errorf("ZRT_CUDA_TIMEOUT=%q: want a positive duration such as 90s", s)
		}
		opt.CUDA.Timeout = d
	}
	opt.CUDA.NoPDL, opt.CUDA.Collectives, opt.CUDA.AttnGeometry = os.Getenv("ZRT_CUDA_PDL") == "0", os.Getenv("ZRT_CUDA_COLLECTIVES"), os.Getenv("ZRT_CUDA_ATTN")
	opt.CUDA.Profile, opt.CUDA.FuseReduces = os.Getenv("ZRT_CUDA_PROFILE") == "1", os.Getenv("ZRT_CUDA_FUSE_REDUCES") == "1"
	if s := os.Getenv("ZRT_CUDA_OMIT"); s != "" {
		opt.CUDA.Omit = strings.Split(s, ",")
		opt.Log("zrt-run: ZRT_CUDA_OMIT=%s: those kernels are left out, so outputs are wrong (for timing only)", s)
	}
	switch s := os.Getenv("ZRT_KFD"); s {
	case "", "kfd", "sim":
		opt.KFD = s
	default:
		return opt, fmt.Errorf("ZRT_KFD=%q: want kfd (the /dev/kfd device) or sim (the simulated device)", s)
	}
	return opt, nil
}

// program opens the bundle for path (a bundle, set, pack or GGUF, as
// bundleDir takes) with opt.
func (f *engineFlags) program(ctx context.Context, path string, opt runtime.Options) (*runtime.Program, error) {
	dir, err := f.bundleDir(ctx, path, opt)
	if err != nil {
		return nil, err
	}
	return runtime.Open(dir, opt)
}

// open opens the bundle for path as a pool of sequences, with the
// prefill mode of $ZRT_BATCHED_PREFILL.
func (f *engineFlags) open(ctx context.Context, path string) (*sequence.Pool, error) {
	opt, err := f.options()
	if err != nil {
		return nil, err
	}
	p, err := f.program(ctx, path, opt)
	if err != nil {
		return nil, err
	}
	pool, err := sequence.New(p, os.Getenv("ZRT_BATCHED_PREFILL"), opt.Log)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("ZRT_BATCHED_PREFILL: %w", err)
	}
	return pool, nil
}

// flagError names the flag of a request setting outside its range.
func flagError(err error) error {
	if re := (*decode.RangeError)(nil); errors.As(err, &re) {
		return re.FlagError()
	}
	return err
}

// maxThreads bounds --threads: more workers than this many per CPU only
// add scheduling overhead.
const maxThreadsPerCPU = 4

func checkThreads(n int) error {
	if limit := maxThreadsPerCPU * goruntime.NumCPU(); n < 0 || n > limit {
		return exitcode.Usagef("--threads %d out of range [1, %d] (0: one per CPU)", n, limit)
	}
	return nil
}
