package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"
)

// prefixCounters are the server's prefix-cache counters, in prompt
// tokens: looked up, found on the device, found in the host tier (zrt's
// names; a server without them reports none).
var prefixCounters = []string{"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "zrt_prefix_cache_host_hits_total"}

// runTurns is the multi-turn chat load (Options.Turns): conversation j's
// first prompt is PromptTokens ids drawn from Seed, and each later turn's
// its previous prompt, its previous reply (as the server tokenizes the
// reply's text) and TurnTokens new ids. Every conversation's turn k runs
// (Concurrency at once) before any turn k+1, as users who read a reply
// before they answer would, so between two turns of one conversation
// every other conversation has had one: a server whose KV pool cannot
// hold every history evicts it, and serves the next turn from its prefix
// cache only if it kept the pages somewhere.
func (lt *loadtest) runTurns(ctx context.Context, ids []int, opt Options, w io.Writer) error {
	prompts := make([][]int, opt.Requests)
	for j := range prompts {
		prompts[j] = draw(ids, opt.Seed, uint64(j), 0, opt.PromptTokens)
	}
	var all loadResult
	var rows []string
	t0 := time.Now()
	for turn := range opt.Turns {
		before := lt.counters(ctx, prefixCounters...)
		res := lt.turn(ctx, prompts, opt.Concurrency)
		after := lt.counters(ctx, prefixCounters...)
		all.outcomes = append(all.outcomes, res.outcomes...)
		var ttft []time.Duration
		ok, mean := 0, 0
		for j, o := range res.outcomes {
			mean += len(prompts[j])
			if o.status != 200 {
				continue
			}
			ok++
			if opt.Stream {
				ttft = append(ttft, o.ttft)
			}
		}
		rows = append(rows, fmt.Sprintf("| %d | %d/%d | %d | %s | %s |", turn+1, ok, len(prompts), mean/max(len(prompts), 1), percentiles(ttft), hitRate(before, after)))
		if turn == opt.Turns-1 {
			break
		}
		for j, o := range res.outcomes {
			reply, err := lt.tokenize(ctx, o.text)
			if err != nil {
				return err
			}
			prompts[j] = append(append(prompts[j], reply...), draw(ids, opt.Seed, uint64(j), uint64(turn+1), opt.TurnTokens)...)
		}
	}
	all.wall = time.Since(t0)
	all.print(w, opt.Concurrency, opt.Requests*opt.Turns, opt.PromptTokens, opt.MaxTokens, opt.Stream)
	fmt.Fprintf(w, "\n%d conversations × %d turns, %d new prompt tokens a later turn; prefix cache hits in prompt tokens, from the server's /metrics (device + host tier)\n", opt.Requests, opt.Turns, opt.TurnTokens)
	fmt.Fprintln(w, "| turn | ok | mean prompt tokens | TTFT p50 / p95 / p99 ms | prefix hit rate |")
	fmt.Fprintln(w, "| ---: | ---: | ---: | ---: | ---: |")
	for _, r := range rows {
		fmt.Fprintln(w, r)
	}
	return nil
}

// draw is n ids of ids, drawn from (seed, conversation, turn): the same
// run sends the same prompts, and no two conversations share a prefix.
func draw(ids []int, seed, conversation, turn uint64, n int) []int {
	rng := rand.New(rand.NewPCG(seed, conversation<<20|turn))
	out := make([]int, n)
	for i := range out {
		out[i] = ids[rng.IntN(len(ids))]
	}
	return out
}

// turn sends every prompt, concurrency at once, and returns the outcomes
// in the prompts' order.
func (lt *loadtest) turn(ctx context.Context, prompts [][]int, concurrency int) loadResult {
	res := loadResult{outcomes: make([]outcome, len(prompts))}
	jobs := make(chan int)
	var wg sync.WaitGroup
	t0 := time.Now()
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				res.outcomes[j] = lt.one(ctx, j, prompts[j])
			}
		}()
	}
	for j := range prompts {
		jobs <- j
	}
	close(jobs)
	wg.Wait()
	res.wall = time.Since(t0)
	return res
}

// tokenize is text's ids as the server tokenizes it, without special
// tokens (a reply continues its prompt).
func (lt *loadtest) tokenize(ctx context.Context, text string) ([]int, error) {
	if text == "" {
		return nil, nil
	}
	resp, err := lt.post(ctx, "/tokenize", map[string]any{"content": text})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out struct {
		Tokens []int `json:"tokens"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
		return nil, fmt.Errorf("%s/tokenize of a reply: status %d, %v", lt.url, resp.StatusCode, err)
	}
	return out.Tokens, nil
}

// counters reads the named counters from the server's GET /metrics,
// summed over their label sets; a counter the server lacks is absent.
func (lt *loadtest) counters(ctx context.Context, names ...string) map[string]float64 {
	out := map[string]float64{}
	ok := lt.scrapeMetrics(ctx, func(line string) {
		for _, n := range names {
			rest, ok := strings.CutPrefix(line, n)
			if !ok || rest == "" || rest[0] != '{' && rest[0] != ' ' {
				continue
			}
			if i := strings.LastIndexByte(rest, ' '); i >= 0 {
				if v, err := strconv.ParseFloat(rest[i+1:], 64); err == nil {
					out[n] += v
				}
			}
		}
	})
	if !ok {
		return nil
	}
	return out
}

// hitRate is the report's cell for the prefix-cache hits between two
// reads of the counters: the share of looked-up prompt tokens found, and
// how many of them on the device and in the host tier.
func hitRate(before, after map[string]float64) string {
	d := func(n string) float64 { return after[n] - before[n] }
	q, dev, host := d(prefixCounters[0]), d(prefixCounters[1]), d(prefixCounters[2])
	if _, ok := after[prefixCounters[0]]; !ok || q <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%% (%.0f device + %.0f host of %.0f)", 100*(dev+host)/q, dev, host, q)
}
