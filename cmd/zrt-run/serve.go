package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/cmd/internal/exitcode"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/engine"
	"github.com/zrtdev/zrt/runtime/server"
	"github.com/zrtdev/zrt/runtime/server/ledger"
)

func serveCmd() *cobra.Command {
	var ef engineFlags
	var listen, configPath, certFile, keyFile, tracePath, stepLogPath string
	var aliases []string
	var drainTimeout time.Duration
	c := &cobra.Command{
		Use:   "serve BUNDLE|MODEL.gguf [...]",
		Short: "Serve bundles over an OpenAI-compatible HTTP API, many requests at once",
		Long: `serve loads each bundle as a model, runs a serving engine for it and answers
OpenAI-compatible requests: POST /v1/completions, /v1/chat/completions and
/v1/responses (streaming with server-sent events or not), GET /v1/models,
POST /tokenize and /detokenize, GET /health. A request's "model" field picks
the bundle (named after its GGUF, or by --model-alias).

Without --config there is one local tenant and no API key, so the default
--listen is loopback only. A config (TOML) names tenants, their API keys,
QoS classes and limits, and the engine's slots and chunk_cap.

SIGHUP reloads the tenants, their keys and limits from --config without
dropping running requests (slots, chunk_cap and reserved pages stay).
SIGINT or SIGTERM stops admitting (503), lets running requests finish for
up to --drain-timeout, and exits 0.

--trace FILE writes a Chrome trace-event file of each engine's steps, slot
and page counters, admissions, preemptions and finishes (open it in
chrome://tracing or ui.perfetto.dev); with several bundles, bundle i's goes
to FILE with .i before its extension. It is complete JSON once serve exits;
if serve dies first, the file lacks only its closing "]}".

--step-log FILE writes a JSON line per engine step of everything it
depended on (arrivals with their prompt tokens and sampling parameters,
the plan, the slot table, the query rows) and the tokens it sampled;
zrt-run rerun BUNDLE FILE runs it again. It holds the prompts, so treat it
as the requests themselves. With several bundles, numbered as --trace.

` + envHelp,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := server.LoadConfig(configPath)
			var notRead *fs.PathError
			switch {
			case errors.As(err, &notRead):
				return err // an I/O failure, not a mistake in the call
			case err != nil:
				// An unknown key, a bad value: a mistake in --config.
				return &exitcode.UsageError{Err: err}
			}
			if len(aliases) > 0 && len(aliases) != len(args) {
				return exitcode.Usagef("--model-alias given %d times for %d bundles", len(aliases), len(args))
			}
			opt, err := ef.options()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			policy := server.NewPolicy(cfg)
			var models []*server.Model
			for i, dir := range args {
				bdir, err := ef.bundleDir(ctx, dir, opt)
				if err != nil {
					return err
				}
				p, err := runtime.Open(bdir, opt)
				if err != nil {
					return err
				}
				defer p.Close()
				var trace io.Writer
				if tracePath != "" {
					f, err := os.Create(tracePathFor(tracePath, i, len(args)))
					if err != nil {
						return fmt.Errorf("--trace: %w", err)
					}
					defer f.Close()
					trace = f
				}
				var stepLog io.Writer
				if stepLogPath != "" {
					f, err := os.Create(tracePathFor(stepLogPath, i, len(args)))
					if err != nil {
						return fmt.Errorf("--step-log: %w", err)
					}
					defer f.Close()
					stepLog = f
				}
				e, err := newEngine(p, cfg, policy, trace, stepLog)
				if err != nil {
					return fmt.Errorf("%s: %w", dir, err)
				}
				// Deferred after the program's and the file's Close, so it
				// runs before them: the step loop ends (a tier must not be
				// closed under a running step), the trace's end is
				// written, then the file closed.
				loop, stopLoop := context.WithCancel(context.Background())
				stepped := make(chan struct{})
				go func() { e.Run(loop); close(stepped) }()
				defer func() {
					stopLoop()
					<-stepped
					if err := e.Close(); err != nil {
						fmt.Fprintf(cmd.ErrOrStderr(), "zrt-run: %s: %v\n", dir, err)
					}
				}()
				name := strings.TrimSuffix(p.Bundle.Graph.Ident.SourceName, ".gguf")
				if isGGUF(dir) {
					// A cache entry keeps the name of the GGUF first built
					// into it, which may have been a copy of this one.
					name = strings.TrimSuffix(filepath.Base(dir), filepath.Ext(dir))
				}
				if len(aliases) > 0 {
					name = aliases[i]
				} else if name == "" {
					name = filepath.Base(dir)
				}
				models = append(models, &server.Model{Name: name, Engine: e, Tok: p.Tok, ContextLength: p.Hparams.ContextLength})
				fmt.Fprintf(cmd.ErrOrStderr(), "zrt-run: model %s: %s on tier %s, %d slots\n", name, dir, p.TierName(), p.Slots())
				if h := p.Hparams; h.KVWindowRing > 0 {
					fmt.Fprintf(cmd.ErrOrStderr(), "zrt-run: model %s keeps its sliding-window layers in a ring of %d pages a slot: no prefix cache (build with swa_full = true to have one)\n",
						name, h.KVWindowRing)
				} else if h.RecurrentBytes > 0 {
					fmt.Fprintf(cmd.ErrOrStderr(), "zrt-run: model %s has recurrent layers: no prefix cache\n", name)
				}
			}
			log := slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), nil))
			var led *ledger.Ledger
			if cfg.Ledger != "" {
				if led, err = ledger.Open(cfg.Ledger); err != nil {
					return err
				}
				if led.Dropped > 0 {
					fmt.Fprintf(cmd.ErrOrStderr(), "zrt-run: ledger %s: dropped a torn tail of %d bytes (a crash mid-write)\n", cfg.Ledger, led.Dropped)
				}
				defer led.Close()
			}
			srv := server.New(cfg, policy, models, led, log)
			hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			scheme := "http"
			if certFile != "" {
				scheme = "https"
			}
			who := "tenants from " + configPath
			if configPath == "" {
				who = "one local tenant, no API key"
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "zrt-run: serving on %s://%s (%s)\n", scheme, ln.Addr(), who)
			errc := make(chan error, 1)
			go func() {
				if certFile != "" {
					errc <- hs.ServeTLS(ln, certFile, keyFile)
				} else {
					errc <- hs.Serve(ln)
				}
			}()
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
		wait:
			for {
				select {
				case err := <-errc:
					return err
				case <-hup:
					if configPath == "" {
						continue
					}
					next, err := server.LoadConfig(configPath)
					if err != nil {
						fmt.Fprintf(cmd.ErrOrStderr(), "zrt-run: SIGHUP: %v; keeping the running config\n", err)
						continue
					}
					srv.Reload(next)
					fmt.Fprintf(cmd.ErrOrStderr(), "zrt-run: SIGHUP: reloaded %d tenants from %s\n", len(next.Tenants), configPath)
				case <-ctx.Done():
					break wait
				}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "zrt-run: draining (up to %s)\n", drainTimeout)
			srv.Drain()
			dctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
			defer cancel()
			for _, m := range models {
				if err := m.Engine.Drain(dctx); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "zrt-run: model %s: %v; cancelling what remains\n", m.Name, err)
				}
			}
			if err := hs.Shutdown(dctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			return nil
		},
	}
	ef.add(c)
	ef.build.addSlots(c)
	c.Flags().StringVar(&listen, "listen", "127.0.0.1:8080", "address to listen on")
	c.Flags().StringVar(&configPath, "config", "", "server config (TOML): tenants, keys, limits, slots, chunk_cap")
	c.Flags().StringArrayVar(&aliases, "model-alias", nil, "name of each bundle's model, in order (default: its GGUF's name)")
	c.Flags().DurationVar(&drainTimeout, "drain-timeout", 30*time.Second, "how long running requests may finish after SIGTERM")
	c.Flags().StringVar(&certFile, "tls-cert", "", "serve HTTPS with this certificate (with --tls-key)")
	c.Flags().StringVar(&keyFile, "tls-key", "", "the certificate's key")
	c.Flags().StringVar(&tracePath, "trace", "", "write a Chrome trace-event file of the engine's steps to this path")
	c.Flags().StringVar(&stepLogPath, "step-log", "", "write every engine step's inputs and sampled tokens to this path, for zrt-run rerun")
	return c
}

// newEngine makes a model's engine from the server config and policy,
// with the program's slots and largest prefill variant where the config is
// silent.
func newEngine(p *runtime.Program, cfg *server.Config, policy *server.Policy, trace, stepLog io.Writer) (*engine.Engine, error) {
	ec := policy.EngineConfig(cfg)
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

// tracePathFor is the trace (or step log) file of bundle i of n: path itself for one
// bundle, else path with ".i" before its extension, so engines never share
// a file.
func tracePathFor(path string, i, n int) string {
	if n == 1 {
		return path
	}
	ext := filepath.Ext(path)
	return fmt.Sprintf("%s.%d%s", strings.TrimSuffix(path, ext), i, ext)
}
