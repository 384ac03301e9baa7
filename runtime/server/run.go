package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"time"

	"github.com/zrtdev/zrt/format/autobuild"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/engine"
	"github.com/zrtdev/zrt/runtime/server/ledger"
)

// Bundle is one model Run serves.
type Bundle struct {
	// Dir is the bundle directory to open; Path what the caller was
	// given for it (a set, a pack, a GGUF), for messages.
	Dir, Path string
	// Name is the model's name in requests ("": Path's name when it is
	// a GGUF, else that of the GGUF the bundle was built from, else the
	// directory's).
	Name string
	// Draft, when set, is the directory of a draft model for speculative
	// kind draft (alone it means draft with the default draft length):
	// a bundle of the same vocabulary with as many slots, on the same
	// tier; DraftPath what the caller was given for it.
	Draft, DraftPath string
}

// Locate makes the Bundles of the paths zrt-run serve is given: each
// path's directory by locate (a set's member, a pack unpacked, a GGUF
// built), named by names[i] and drafted for by drafts[i]'s where those
// are given. names and drafts are empty or one a path (else a usage
// error).
func Locate(ctx context.Context, paths, names, drafts []string, locate func(context.Context, string) (string, error)) ([]Bundle, error) {
	switch {
	case len(names) > 0 && len(names) != len(paths):
		return nil, usageError{fmt.Errorf("--model-alias given %d times for %d bundles", len(names), len(paths))}
	case len(drafts) > 0 && len(drafts) != len(paths):
		return nil, usageError{fmt.Errorf("--draft given %d times for %d bundles (one a bundle, in order)", len(drafts), len(paths))}
	}
	var out []Bundle
	for i, path := range paths {
		b := Bundle{Path: path}
		var err error
		if b.Dir, err = locate(ctx, path); err != nil {
			return nil, err
		}
		if len(names) > 0 {
			b.Name = names[i]
		}
		if len(drafts) > 0 && drafts[i] != "" {
			if b.Draft, err = locate(ctx, drafts[i]); err != nil {
				return nil, fmt.Errorf("--draft %s: %w", drafts[i], err)
			}
			b.DraftPath = drafts[i]
		}
		out = append(out, b)
	}
	return out, nil
}

// Options are everything Run needs: the runtime reads no environment, so
// the command passes each setting here.
type Options struct {
	Bundles []Bundle
	// Runtime opens every bundle.
	Runtime runtime.Options
	// Config is the server config; ConfigPath where it was read from
	// ("": none, one local tenant), read again on each value of Reload.
	Config     *Config
	ConfigPath string
	Reload     <-chan os.Signal
	// Listen is the TCP address; CertFile and KeyFile, when set, serve
	// HTTPS.
	Listen, CertFile, KeyFile string
	// DrainTimeout bounds how long running requests may finish once ctx
	// is cancelled.
	DrainTimeout time.Duration
	// Speculative, when set, is every model's speculative decoding (off,
	// ngram[:K[:fixed]], self[:K[:fixed]], draft[:K[:fixed]] with a
	// Bundle's Draft), over the config's speculative keys.
	Speculative string
	// HostKVMiB, when > 0, is every model's host KV tier in MiB, over
	// the config's host_kv_mib; < 0 turns the tier off; 0 leaves the
	// config's (zrt-run serve's --host-kv-mib).
	HostKVMiB int
	// Replicas runs each bundle as this many engines (0 or 1: one),
	// replica r on GPU r of those CUDA_VISIBLE_DEVICES shows (a
	// tensor-parallel set of N ranks on GPUs r·N to r·N+N-1; on T-CPU each
	// replica with an even share of the threads), behind the one server
	// (route.go: which replica a request goes to).
	Replicas int
	// Trace and StepLog are paths of each engine's Chrome trace and step
	// log ("": none); with several engines (bundles or replicas), engine
	// k's has .k before the extension: bundle i's replica r is engine
	// i·Replicas + r.
	Trace, StepLog string
	// Log receives what Run says on the way (the models, the address,
	// reloads, the drain), a line each; Logger the requests' log.
	Log    func(format string, a ...any)
	Logger *slog.Logger
}

// Run opens the bundles, runs an engine for each and serves them until
// ctx is cancelled or the listener fails. On cancellation it stops
// admitting (503), lets running requests finish for up to DrainTimeout,
// shuts the HTTP server down and returns nil.
func Run(ctx context.Context, opt Options) error {
	if opt.Log == nil {
		opt.Log = func(string, ...any) {}
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.NewJSONHandler(io.Discard, nil))
	}
	if opt.Replicas < 0 {
		return usageError{fmt.Errorf("--replicas %d: want 1 or more engines a model", opt.Replicas)}
	}
	var flagSpec engine.Speculation
	if opt.Speculative != "" { // checked before any bundle loads
		var err error
		if flagSpec, err = engine.ParseSpeculation(opt.Speculative); err != nil {
			return usageError{fmt.Errorf("--speculative: %w", err)}
		}
	}
	cfg := opt.Config
	policy := NewPolicy(cfg)
	replicas := max(1, opt.Replicas)
	hostKV := int64(cfg.HostKVMiB) << 20
	if opt.HostKVMiB != 0 {
		hostKV = max(0, int64(opt.HostKVMiB)<<20)
	}
	var models []*Model
	for i, b := range opt.Bundles {
		m := &Model{}
		gpus := 1 // a replica's: a tensor-parallel set's ranks, known once replica 0 is open
		for r := range replicas {
			ropt := replicaOptions(opt.Runtime, r*gpus, replicas)
			p, err := runtime.Open(b.Dir, ropt)
			if err != nil {
				if replicas > 1 {
					return fmt.Errorf("%s, replica %d of %d (from GPU %d; on T-CPU a share of the threads): %w", b.Path, r, replicas, r*gpus, err)
				}
				return err
			}
			defer p.Close()
			if r == 0 {
				gpus = max(1, p.Hparams.TPRanks)
			}
			k, n := i*replicas+r, len(opt.Bundles)*replicas // the engine's files' index
			trace, err := create(opt.Trace, "--trace", k, n)
			if err != nil {
				return err
			}
			defer closeFile(trace)
			stepLog, err := create(opt.StepLog, "--step-log", k, n)
			if err != nil {
				return err
			}
			defer closeFile(stepLog)
			if r == 0 {
				m.Name, m.Tok, m.ContextLength = modelName(b, p), p.Tok, p.Hparams.ContextLength
			}
			name := m.Name
			sp := cfg.SpeculationFor(name)
			if opt.Speculative != "" {
				sp = flagSpec
			}
			var draft *runtime.Program
			if b.Draft != "" {
				if draft, err = openDraft(p, b, ropt); err != nil {
					return err
				}
				defer draft.Close()
				if !sp.On() {
					sp, _ = engine.ParseSpeculation("draft") // --draft alone
				}
			}
			// What a variant's first replay does once is paid here, not
			// by the first client (runtime.Program.Warm).
			start := time.Now()
			for _, w := range []*runtime.Program{p, draft} {
				if w != nil {
					if err := w.Warm(ctx); err != nil {
						return fmt.Errorf("%s: %w", b.Path, err)
					}
				}
			}
			opt.Log("model %s: warmed up in %v", name, time.Since(start).Round(time.Millisecond))
			e, err := newEngine(p, draft, cfg, policy, sp, hostKV, trace, stepLog)
			if err != nil {
				return fmt.Errorf("%s: %w", b.Path, err)
			}
			// Deferred after the program's and the file's Close, so it runs
			// before them: the step loop ends (a tier must not be closed
			// under a running step), the trace's end is written, then the
			// file closed.
			loop, stopLoop := context.WithCancel(context.Background())
			stepped := make(chan struct{})
			go func() { e.Run(loop); close(stepped) }()
			defer func() {
				stopLoop()
				<-stepped
				if err := e.Close(); err != nil {
					opt.Log("%s: %v", b.Path, err)
				}
			}()
			m.Engines = append(m.Engines, e)
			who := name
			if replicas > 1 {
				who = fmt.Sprintf("%s, replica %d", name, r)
			}
			opt.Log("model %s: %s on tier %s, %d slots", who, b.Path, p.TierName(), p.Slots())
			if r == 0 {
				logModel(opt.Log, name, p, hostKV, sp)
			}
		}
		models = append(models, m)
	}
	var led *ledger.Ledger
	if cfg.Ledger != "" {
		var err error
		if led, err = ledger.Open(cfg.Ledger); err != nil {
			return err
		}
		if led.Dropped > 0 {
			opt.Log("ledger %s: dropped a torn tail of %d bytes (a crash mid-write)", cfg.Ledger, led.Dropped)
		}
		defer led.Close()
	}
	srv := New(cfg, policy, models, led, opt.Logger)
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second}
	ln, err := net.Listen("tcp", opt.Listen)
	if err != nil {
		return err
	}
	scheme := "http"
	if opt.CertFile != "" {
		scheme = "https"
	}
	who := "tenants from " + opt.ConfigPath
	if opt.ConfigPath == "" {
		who = "one local tenant, no API key"
	}
	opt.Log("serving on %s://%s (%s)", scheme, ln.Addr(), who)
	errc := make(chan error, 1)
	go func() {
		if opt.CertFile != "" {
			errc <- hs.ServeTLS(ln, opt.CertFile, opt.KeyFile)
		} else {
			errc <- hs.Serve(ln)
		}
	}()
wait:
	for {
		select {
		case err := <-errc:
			return err
		case <-opt.Reload:
			if opt.ConfigPath == "" {
				continue
			}
			next, err := LoadConfig(opt.ConfigPath)
			if err != nil {
				opt.Log("SIGHUP: %v; keeping the running config", err)
				continue
			}
			srv.Reload(next)
			opt.Log("SIGHUP: reloaded %d tenants from %s", len(next.Tenants), opt.ConfigPath)
		case <-ctx.Done():
			break wait
		}
	}
	opt.Log("draining (up to %s)", opt.DrainTimeout)
	srv.Drain()
	dctx, cancel := context.WithTimeout(context.Background(), opt.DrainTimeout)
	defer cancel()
	for _, m := range models {
		for _, e := range m.Engines {
			if err := e.Drain(dctx); err != nil {
				opt.Log("model %s: %v; cancelling what remains", m.Name, err)
			}
		}
	}
	if err := hs.Shutdown(dctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// logModel says what serving model name (opened as p) takes beyond its
// engine: its host KV tier, speculation, and why it has no prefix cache.
func logModel(log func(string, ...any), name string, p *runtime.Program, hostKV int64, sp engine.Speculation) {
	if hostKV > 0 && p.SlotState() {
		log("model %s: no prefix cache, so no host KV tier", name)
	} else if hostKV > 0 {
		log("model %s: host KV tier of %d MiB (%d pages of %d KiB)", name, hostKV>>20, hostKV/int64(p.KVPageBytes()), p.KVPageBytes()>>10)
	}
	if sp.On() {
		log("model %s: speculative decoding %s (drafts verified in the slots requests leave free, as many as pay for their rows)", name, sp)
	}
	if h := p.Hparams; h.KVWindowRing > 0 {
		log("model %s keeps its sliding-window layers in a ring of %d pages a slot: no prefix cache (build with swa_full = true to have one)",
			name, h.KVWindowRing)
	} else if h.RecurrentBytes > 0 {
		log("model %s has recurrent layers: no prefix cache", name)
	}
}

// modelName is the name requests use for b's model (opened as p):
// b.Name, else the GGUF's name it was given as or built from, else the
// directory's.
func modelName(b Bundle, p *runtime.Program) string {
	name := b.Name
	switch {
	case name == "" && autobuild.IsGGUF(b.Path):
		// A cache entry keeps the name of the GGUF first built into
		// it, which may have been a copy of this one.
		name = strings.TrimSuffix(filepath.Base(b.Path), filepath.Ext(b.Path))
	case name == "":
		name = strings.TrimSuffix(p.Bundle.Graph.Ident.SourceName, ".gguf")
	}
	if name == "" {
		name = filepath.Base(b.Path)
	}
	return name
}

// replicaOptions are those of one of n replicas whose first GPU is gpu
// (of those CUDA_VISIBLE_DEVICES shows: a tensor-parallel set's ranks
// take that one and the next) on T-CUDA, and on T-CPU an even share of
// the threads (of all CPUs where none are set), so the replicas' worker
// pools do not contend for the cores. One replica keeps opt.
func replicaOptions(opt runtime.Options, gpu, n int) runtime.Options {
	if n <= 1 {
		return opt
	}
	opt.CUDA.Device = gpu
	threads := opt.Threads
	if threads <= 0 {
		threads = goruntime.NumCPU()
	}
	opt.Threads = max(1, threads/n)
	return opt
}

// newEngine makes a model's engine from the server config and policy,
// with the program's slots and largest prefill variant where the config is
// silent.
func newEngine(p, draft *runtime.Program, cfg *Config, policy *Policy, sp engine.Speculation, hostKV int64, trace, stepLog io.Writer) (*engine.Engine, error) {
	ec := policy.EngineConfig(cfg)
	ec.Speculative, ec.HostKVBytes = sp, hostKV
	if draft != nil {
		ec.DraftModel = draft
	}
	ec.Trace, ec.StepLog = trace, stepLog
	ec.ContextLength = p.Hparams.ContextLength
	if ec.Slots == 0 {
		ec.Slots = p.Slots()
	}
	if k, ok := p.Largest(runtime.Prefill); ec.ChunkCap == 0 && ok {
		ec.ChunkCap = k.Rows
	}
	return engine.New(p, p.Tok, ec)
}

// openDraft opens b's draft model beside its target p, refusing one
// whose vocabulary differs.
func openDraft(p *runtime.Program, b Bundle, opt runtime.Options) (*runtime.Program, error) {
	opt.Beside = p // one step at a time: on T-CPU, one worker pool
	d, err := runtime.Open(b.Draft, opt)
	if err != nil {
		return nil, fmt.Errorf("--draft %s: %w", b.DraftPath, err)
	}
	if err := engine.CheckDraft(p, d); err != nil {
		d.Close()
		return nil, fmt.Errorf("--draft %s for %s: %w", b.DraftPath, b.Path, err)
	}
	return d, nil
}

// create makes engine i of n's file at path (flag names it in errors):
// path itself for one engine, else path with ".i" before its extension,
// so engines never share a file. It returns nil for no path.
func create(path, flag string, i, n int) (io.Writer, error) {
	if path == "" {
		return nil, nil
	}
	if n > 1 {
		ext := filepath.Ext(path)
		path = fmt.Sprintf("%s.%d%s", strings.TrimSuffix(path, ext), i, ext)
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return f, nil
}

func closeFile(w io.Writer) {
	if f, ok := w.(*os.File); ok {
		f.Close()
	}
}

// usageError marks a mistake in Options as the caller's (the commands'
// exit status 2).
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// Usage reports that the error is the caller's.
func (e usageError) Usage() bool { return true }
