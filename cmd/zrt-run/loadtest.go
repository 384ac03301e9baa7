package main

import (
	"encoding/json"
	"os"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/bench/loadtest"
	"github.com/zrtdev/zrt/cmd/internal/exitcode"
)

func loadtestCmd() *cobra.Command {
	var opt loadtest.Options
	var formats []string
	c := &cobra.Command{
		Use:   "loadtest --url URL",
		Short: "Load an OpenAI-compatible server (zrt's or llama-server) and report latency and throughput",
		Long: `loadtest sends --requests completions from --concurrency clients at once to
URL/v1/completions, each a prompt of --prompt-tokens token ids (real ids of
the server's vocabulary, from its /tokenize) asking for --max-tokens with
ignore_eos, so every request generates exactly that many. The prompts are
drawn at random from --seed: requests share no prefix, while two runs with
the same seed send the same prompts (give runs different seeds when a
server's prefix cache must not serve one run from another). It prints time to
first token and inter-token latency percentiles (streamed requests),
end-to-end latency, generated tokens per second and a request, finish
reasons, and errors by status. With --response-format FILE every request
carries that JSON object as its response_format (a json_schema, say);
given several files, request j takes file j mod their number. Such
requests go without ignore_eos: one whose output completes its format
stops before --max-tokens. Against a zrt server the report adds the mask's
cost per token (p50, p99: zrt_constraint_mask_seconds) and the engine's
steps (by kind, replay and host ms, tokens a step) and the tokens constraints
forced, which it took ahead of the model. --turns: multi-turn.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, f := range formats {
				b, err := os.ReadFile(f)
				if err != nil {
					return exitcode.Usagef("--response-format: %v", err)
				}
				var rf map[string]any
				if err := json.Unmarshal(b, &rf); err != nil {
					return exitcode.Usagef("--response-format %s: not a JSON object: %v", f, err)
				}
				opt.Formats = append(opt.Formats, rf)
			}
			return loadtest.Run(cmd.Context(), opt, cmd.OutOrStdout())
		},
	}
	c.Flags().StringVar(&opt.URL, "url", "", "server base URL, e.g. http://127.0.0.1:8080")
	c.Flags().StringVar(&opt.Key, "api-key", "", "bearer API key")
	c.Flags().StringVar(&opt.Model, "model", "", "model name (default: the server's default)")
	c.Flags().IntVar(&opt.Concurrency, "concurrency", 8, "clients sending at once")
	c.Flags().IntVar(&opt.Requests, "requests", 32, "requests in all")
	c.Flags().IntVar(&opt.PromptTokens, "prompt-tokens", 128, "prompt length in tokens")
	c.Flags().IntVar(&opt.MaxTokens, "max-tokens", 128, "tokens each request generates")
	c.Flags().Uint64Var(&opt.Seed, "seed", 1, "seed of the prompts' token ids")
	c.Flags().BoolVar(&opt.Stream, "stream", false, "stream (server-sent events), measuring TTFT and inter-token latency")
	c.Flags().Float64Var(&opt.Temperature, "temperature", 0, "sampling temperature (0: greedy; above, request j samples with seed --seed + j)")
	c.Flags().IntVar(&opt.Turns, "turns", 1, "turns of each conversation: more than 1 makes --requests conversations, every one's turn k before any turn k+1, each later prompt its history (prompt and reply) and --turn-tokens new ids; a row per turn reports TTFT and the prefix hit rate, device + host tier, from /metrics")
	c.Flags().IntVar(&opt.TurnTokens, "turn-tokens", 32, "new prompt tokens of each turn after the first")
	c.Flags().StringSliceVar(&formats, "response-format", nil, "JSON files holding response_format objects, taken by the requests in turn")
	return c
}
