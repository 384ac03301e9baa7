package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/decode"
	"github.com/zrtdev/zrt/runtime/engine"
	"github.com/zrtdev/zrt/runtime/sequence"
)

// BatchedResult is one row of a batched bench, with llama-batched-bench's
// JSONL keys so the two tools' outputs read alike.
type BatchedResult struct {
	PP      int     `json:"pp"`
	TG      int     `json:"tg"`
	PL      int     `json:"pl"`
	NKV     int     `json:"n_kv"`
	TPP     float64 `json:"t_pp"`
	SpeedPP float64 `json:"speed_pp"`
	TTG     float64 `json:"t_tg"`
	SpeedTG float64 `json:"speed_tg"`
	T       float64 `json:"t"`
	Speed   float64 `json:"speed"`
}

// ParseSlots reads a list of counts of sequences such as "1,4,16"
// (zrt-run bench --slots; "" is none).
func ParseSlots(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, optionErrorf("--slots %q: want positive counts separated by commas", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// runBatched is Run's batched test: the table of Batched's rows, and
// llama-batched-bench's beside it when opt asks for it.
func runBatched(ctx context.Context, pool *sequence.Pool, opt Options) error {
	rows, err := Batched(ctx, pool.Program, opt.Slots, opt.Prompt, opt.Gen)
	if err != nil {
		return err
	}
	w := opt.Out
	if !opt.JSONL {
		fmt.Fprintf(w, "zrt %s, tier %s, %d threads, %s\n", pool.Hparams.Arch, pool.TierName(), opt.Threads, pool.Variants())
	}
	if err := printBatched(w, rows, opt.JSONL); err != nil || opt.LlamaBatched == "" {
		return err
	}
	ref, err := runLlamaBatched(ctx, opt.LlamaBatched, opt.GGUF, opt.Slots, opt.Prompt, opt.Gen, opt.Threads, pool.TierName() != "cpu", cacheTypes(pool))
	if err != nil {
		return err
	}
	if !opt.JSONL {
		fmt.Fprintf(w, "\nllama-batched-bench (%s), same model, test and threads\n", opt.LlamaBatched)
	}
	if err := printBatched(w, ref, opt.JSONL); err != nil || opt.JSONL {
		return err
	}
	fmt.Fprintln(w)
	return printComparison(w, rows, ref)
}

// Batched measures, for each B in slots, llama-batched-bench's test on
// the serving engine: B requests of pp prompt tokens submitted at once,
// each generating tg tokens after its prompt's, greedily and ignoring
// end of generation. The engine schedules them as it schedules a
// server's requests (prompt rows packed into its chunk cap, the largest
// prefill variant's rows; every running request's decode row each step;
// pages from its pool), so the rates are those of the step loop the
// server runs. The prompt phase (t_pp) ends when every request has its
// first token; the decode phase (t_tg) is the rest. The prefix cache is
// off, so no run is served from an earlier one's pages, and so is the
// interactive latency budget, which would cut prefill while a request
// decodes.
func Batched(ctx context.Context, p *runtime.Program, slots []int, pp, tg int) ([]BatchedResult, error) {
	// Every count is checked before any is measured: a mistake in the
	// list is a usage error, found at once.
	for _, b := range slots {
		if b > p.Slots() {
			return nil, optionErrorf("--slots %d: the bundle serves at most %d (build it with decode_slots = [..., %d] in the model config)", b, p.Slots(), b)
		}
		need := (pp + tg + 1 + kernels.KVPageTokens - 1) / kernels.KVPageTokens
		if pages := p.KVPages(); b*need > pages {
			return nil, optionErrorf("--slots %d: %d sequences of %d tokens need %d KV pages, the bundle has %d", b, b, pp+tg+1, b*need, pages)
		}
	}
	if pp < 1 {
		return nil, optionErrorf("-p %d: the batched test needs a prompt of at least one token", pp)
	}
	// Warm up (first-touch of weights and scratch, thread start) as
	// llama-batched-bench does, untimed.
	if _, err := batchedRun(ctx, p, slots[0], pp, min(tg, 2)); err != nil {
		return nil, err
	}
	var out []BatchedResult
	for _, b := range slots {
		r, err := batchedRun(ctx, p, b, pp, tg)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// batchedRun is one row of Batched, on an engine of b slots of its own.
func batchedRun(ctx context.Context, p *runtime.Program, b, pp, tg int) (BatchedResult, error) {
	chunk, ok := p.Largest(runtime.Prefill)
	if !ok {
		return BatchedResult{}, fmt.Errorf("bundle has no prefill variant (it has %v)", p.Keys())
	}
	e, err := engine.New(p, p.Tok, engine.Config{Slots: b, ChunkCap: max(chunk.Rows, b), ContextLength: p.Hparams.ContextLength,
		NoPrefixCache: true, InteractiveSlack: -1})
	if err != nil {
		return BatchedResult{}, fmt.Errorf("--slots %d: %w", b, err)
	}
	defer e.Close()
	nv := int32(p.Hparams.NVocab)
	// The decode phase feeds tg tokens to each request: the one its
	// prompt sampled and tg-1 more, so it samples tg+1.
	params := decode.Params{MaxTokens: tg + 1, IgnoreEOS: true}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // a failed run leaves no request behind
	t0 := time.Now()
	events := make([]<-chan engine.Event, b)
	for i := range events {
		prompt := make([]int32, pp)
		for j := range prompt {
			prompt[j] = int32(1+(i+1)*j*7919) % nv
		}
		if events[i], err = e.Submit(ctx, engine.Request{Tenant: "bench", Prompt: prompt, Decode: params}); err != nil {
			return BatchedResult{}, fmt.Errorf("--slots %d: %w", b, err)
		}
	}
	got := make([]int, b) // tokens each request has received
	var tPP time.Time
	early := 0 // decode tokens sampled before the prompt phase ended
	for open := b; open > 0; {
		did, err := e.Step(ctx)
		if err != nil {
			return BatchedResult{}, fmt.Errorf("--slots %d: %w", b, err)
		}
		if !did {
			// Every request is admitted at once (the pages were counted
			// above), so a step with nothing to compute is a stall.
			return BatchedResult{}, fmt.Errorf("--slots %d: the engine planned an empty step with %d requests open", b, open)
		}
		for i, ch := range events {
		drain:
			for ch != nil {
				select {
				case ev, more := <-ch:
					if !more {
						events[i], open = nil, open-1
						break drain
					}
					if ev.Finish == engine.Failed || ev.Finish == engine.Cancelled || ev.Finish == engine.ClientTooSlow {
						return BatchedResult{}, fmt.Errorf("--slots %d: request %d ended %s: %v", b, i, ev.Finish, ev.Err)
					}
					if ev.Token >= 0 {
						got[i]++
					}
				default:
					break drain
				}
			}
		}
		if tPP.IsZero() && minOf(got) > 0 {
			tPP = time.Now()
			for _, n := range got {
				early += n - 1
			}
		}
	}
	end := time.Now()
	for i, n := range got {
		if n != tg+1 {
			return BatchedResult{}, fmt.Errorf("--slots %d: request %d generated %d tokens, want %d", b, i, n, tg+1)
		}
	}
	r := BatchedResult{PP: pp, TG: tg, PL: b, NKV: b * (pp + tg), TPP: tPP.Sub(t0).Seconds(), TTG: end.Sub(tPP).Seconds()}
	r.T = r.TPP + r.TTG
	r.SpeedPP, r.Speed = float64(b*pp)/r.TPP, float64(r.NKV)/r.T
	if r.TTG > 0 {
		// The decode rows that shared a step with another request's
		// prompt rows count in the prompt phase's time, so the decode
		// rate counts only the tokens of the decode phase.
		r.SpeedTG = float64(b*tg-early) / r.TTG
	}
	return r, nil
}

func minOf(xs []int) int {
	m := xs[0]
	for _, x := range xs[1:] {
		m = min(m, x)
	}
	return m
}

// printBatched writes results as llama-batched-bench does: a markdown
// table, or one JSON object per line.
func printBatched(w io.Writer, rows []BatchedResult, jsonl bool) error {
	if jsonl {
		enc := json.NewEncoder(w)
		for _, r := range rows {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	fmt.Fprintln(w, "|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |")
	fmt.Fprintln(w, "|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|")
	for _, r := range rows {
		_, err := fmt.Fprintf(w, "| %5d | %6d | %4d | %6d | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | %8.2f |\n",
			r.PP, r.TG, r.PL, r.NKV, r.TPP, r.SpeedPP, r.TTG, r.SpeedTG, r.T, r.Speed)
		if err != nil {
			return err
		}
	}
	return nil
}

// printComparison writes, for each B both benches ran, zrt's and
// llama.cpp's S_TG and S_PP and their ratios, so that the summary reads on
// its own. Rows are paired by B, not by position: llama-batched-bench
// leaves out a B whose batch does not fit its context.
func printComparison(w io.Writer, zrt, ref []BatchedResult) error {
	fmt.Fprintln(w, "|    B | S_TG zrt | S_TG llama.cpp | zrt / llama.cpp | S_PP zrt | S_PP llama.cpp | zrt / llama.cpp |")
	fmt.Fprintln(w, "|------|----------|----------------|-----------------|----------|----------------|-----------------|")
	for _, z := range zrt {
		for _, r := range ref {
			if r.PL != z.PL {
				continue
			}
			if _, err := fmt.Fprintf(w, "| %4d | %8.2f | %14.2f | %15.2f | %8.2f | %14.2f | %15.2f |\n", z.PL,
				z.SpeedTG, r.SpeedTG, z.SpeedTG/r.SpeedTG, z.SpeedPP, r.SpeedPP, z.SpeedPP/r.SpeedPP); err != nil {
				return err
			}
			break
		}
	}
	return nil
}
