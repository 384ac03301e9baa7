package main

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/cmd/internal/exitcode"
	"github.com/zrtdev/zrt/runtime/server"
)

func serveCmd() *cobra.Command {
	var ef engineFlags
	var opt server.Options
	var configPath string
	var aliases, drafts []string
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
chrome://tracing or ui.perfetto.dev); with several engines (bundles, replicas)
engine k's goes to FILE with .k before its extension. Complete JSON once serve exits;
if serve dies first, the file lacks only its closing "]}".

--step-log FILE writes a JSON line per engine step of everything it
depended on (arrivals with their prompt tokens and sampling parameters,
the plan, the slot table, the query rows) and the tokens it sampled;
zrt-run rerun BUNDLE FILE runs it again. It holds the prompts, so treat it
as the requests themselves. With several engines, numbered as --trace.

` + envHelp,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := server.LoadConfig(configPath)
			var notRead *fs.PathError
			switch {
			case errors.As(err, &notRead):
				return err // an I/O failure, not a mistake in the call
			case err != nil:
				return &exitcode.UsageError{Err: err} // an unknown key, a bad value: a mistake in --config
			}
			if opt.Runtime, err = ef.options(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			locate := func(ctx context.Context, path string) (string, error) { return ef.bundleDir(ctx, path, opt.Runtime) }
			if opt.Bundles, err = server.Locate(ctx, args, aliases, drafts, locate); err != nil {
				return err
			}
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			opt.Config, opt.ConfigPath, opt.Reload = cfg, configPath, hup
			opt.Log = func(f string, a ...any) { cmd.PrintErrf("zrt-run: "+f+"\n", a...) }
			opt.Logger = slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), nil))
			return server.Run(ctx, opt)
		},
	}
	ef.add(c)
	ef.build.addSlots(c)
	c.Flags().StringVar(&opt.Listen, "listen", "127.0.0.1:8080", "address to listen on")
	c.Flags().StringVar(&configPath, "config", "", "server config (TOML): tenants, keys, limits, slots, chunk_cap")
	c.Flags().StringArrayVar(&aliases, "model-alias", nil, "name of each bundle's model, in order (default: its GGUF's name)")
	c.Flags().StringArrayVar(&drafts, "draft", nil, "draft model of each bundle, in order (\"\": none), for --speculative draft[:K[:fixed]] (alone: draft:4): a bundle or GGUF of the same vocabulary and slots")
	c.Flags().DurationVar(&opt.DrainTimeout, "drain-timeout", 30*time.Second, "how long running requests may finish after SIGTERM")
	c.Flags().StringVar(&opt.CertFile, "tls-cert", "", "serve HTTPS with this certificate (with --tls-key)")
	c.Flags().StringVar(&opt.KeyFile, "tls-key", "", "the certificate's key")
	c.Flags().StringVar(&opt.Speculative, "speculative", "", "speculative decoding of every model: off, ngram[:K[:fixed]], self[:K[:fixed]] (by the bundle's draft variants, which a default build has where the model can draft: zrtc build --draft-layers) or draft[:K[:fixed]] (--draft; default: the config's speculative keys, else off); up to K draft tokens (default 4) a step, as many as pay for their rows; greedy output is the same, sampled output follows the same distribution (a draft model's drafts are kept by speculative sampling)")
	c.Flags().IntVar(&opt.Replicas, "replicas", 1, "run each model as this many engines behind this server, replica r on GPU r of those CUDA_VISIBLE_DEVICES shows (a set of N ranks: GPUs r·N to r·N+N-1; on T-CPU an even share of --threads each); a request goes to the replica that served its prompt's longest prefix while it has a free slot, else to the least loaded")
	c.Flags().IntVar(&opt.HostKVMiB, "host-kv-mib", 0, "host-memory tier of each model's prefix cache, in MiB: KV pages the device's pool evicts keep their bytes in RAM and come back on a prefix hit (0: the config's host_kv_mib, else off; -1: off)")
	c.Flags().StringVar(&opt.Trace, "trace", "", "write a Chrome trace-event file of the engine's steps to this path")
	c.Flags().StringVar(&opt.StepLog, "step-log", "", "write every engine step's inputs and sampled tokens to this path, for zrt-run rerun")
	return c
}
