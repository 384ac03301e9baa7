// Package bench measures a bundle's speed as llama.cpp's benchmarks do:
// prompt processing and generation of one sequence (llama-bench's pp and
// tg tests), and the aggregate throughput of B sequences at once
// (llama-batched-bench), the latter on the serving engine the server
// runs, with its scheduler and its page pool.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	goruntime "runtime"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/internal/usage"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/sequence"
	"github.com/zrtdev/zrt/runtime/spec"
)

// Options say what to measure and how to report it.
type Options struct {
	// Prompt is the prompt tokens of the pp test (0: skip it) and of
	// every sequence of a batched test; Gen the generated tokens of the
	// tg test (0: skip it) and the decode steps of a batched test.
	Prompt, Gen int
	// Reps is how many times each single-sequence test runs.
	Reps int
	// Depth is llama-bench's -d: the tokens already in the sequence's
	// cache (prefilled, untimed) before each single-sequence test, whose
	// name then says "@ dN".
	Depth int
	// Threads is the T-CPU worker count in effect, for the report and the
	// bandwidth measurement.
	Threads int
	// Slots, when set, runs the batched test with these numbers of
	// concurrent sequences instead of the single-sequence tests.
	Slots []int
	// JSON prints the single-sequence results as one JSON array; JSONL
	// prints a batched test's rows as JSON lines (llama-batched-bench's
	// --output-format jsonl).
	JSON, JSONL bool
	// LlamaBench and LlamaBatched are llama.cpp binaries to run on GGUF
	// with the same test, for a comparison ("": none).
	LlamaBench, LlamaBatched, GGUF string
	// Speculative, when on, adds the tests of a greedy generation of Gen
	// tokens after each of SpecPrompts' texts without speculative
	// decoding and with this mode, and a report of its acceptance and
	// step costs for each, and over all of them where there are several.
	Speculative spec.Mode
	SpecPrompts []string
	// Draft is the draft model of Speculative's kind draft (nil for the
	// others): a bundle sharing the target's vocabulary.
	Draft *sequence.Pool
	// Megakernel says where a GPU tier's tg steps run: "on" or "" (its
	// persistent decode kernel where the variant allows), "off" (the
	// graph path), or "both" (tgN on the kernel, then "tgN graph").
	Megakernel string
	// Out receives the results; Warn the warnings about noisy rates.
	Out  io.Writer
	Warn func(format string, a ...any)
}

// OptionError is a value Options cannot take: a mistake in the call,
// which the commands report as a usage error.
type OptionError = usage.Error

func optionErrorf(format string, a ...any) error { return &OptionError{Err: fmt.Errorf(format, a...)} }

// Check refuses the settings no bundle can run, before one is opened:
// counts out of range, and a speculative generation with the batched
// test.
func (opt Options) Check() error {
	switch {
	case opt.Prompt < 0 || opt.Prompt > 1<<20 || opt.Gen < 0 || opt.Gen > 1<<20:
		return optionErrorf("-p %d, -n %d: each must be in [0, 1048576]", opt.Prompt, opt.Gen)
	case opt.Reps < 1 || opt.Reps > 1000:
		return optionErrorf("-r %d out of range [1, 1000]", opt.Reps)
	case (opt.Speculative.On() || opt.Draft != nil) && len(opt.Slots) > 0:
		return optionErrorf("--speculative measures a generation: give -n and no --slots")
	}
	return nil
}

// Run measures pool's bundle as opt says and writes the report to
// opt.Out. A draft model (Draft) without a speculative mode means
// --speculative draft.
func Run(ctx context.Context, pool *sequence.Pool, opt Options) error {
	if opt.Warn == nil {
		opt.Warn = func(string, ...any) {}
	}
	if opt.Threads <= 0 {
		opt.Threads = goruntime.NumCPU()
	}
	if err := opt.Check(); err != nil {
		return err
	}
	if len(opt.Slots) > 0 {
		return runBatched(ctx, pool, opt)
	}
	if opt.Draft != nil && !opt.Speculative.On() {
		opt.Speculative = spec.Mode{Kind: spec.Draft, K: spec.DefaultK}
	}
	if opt.Speculative.On() {
		if err := spec.CheckWithDraft(pool, opt.Draft, opt.Speculative); err != nil {
			return fmt.Errorf("--speculative %s: %w", opt.Speculative, err)
		}
	}
	if opt.Speculative.On() && opt.Gen == 0 {
		return optionErrorf("--speculative measures a generation: give -n and no --slots")
	}
	if opt.Depth < 0 {
		return optionErrorf("-d %d: want a depth of 0 or more tokens", opt.Depth)
	}
	if n, c := opt.Depth+max(opt.Prompt, opt.Gen+1), pool.Hparams.ContextLength; opt.Depth > 0 && n > c {
		return optionErrorf("-d %d with -p %d and -n %d needs %d tokens of context, the bundle has %d", opt.Depth, opt.Prompt, opt.Gen, n, c)
	}
	if opt.Depth > 0 && (len(opt.Slots) > 0 || opt.Speculative.On()) {
		return optionErrorf("-d is for the single-sequence tests (no --slots or --speculative)")
	}
	switch opt.Megakernel {
	case "", "on", "off", "both":
	default:
		return optionErrorf("--megakernel %q: want on, off or both", opt.Megakernel)
	}
	rows, err := single(ctx, pool, opt)
	if err != nil {
		return err
	}
	report := func() {}
	if opt.Speculative.On() {
		if rows, report, err = speculative(ctx, pool, rows, opt); err != nil {
			return err
		}
	}
	w := opt.Out
	// A comparison that fails (llama-bench missing, crashed, out of
	// memory) still leaves zrt's own rows printed: they may have taken
	// minutes, and are the run's point.
	var llamaErr error
	if opt.LlamaBench != "" {
		llamaErr = compareLlama(ctx, w, rows, opt, pool.TierName() != "cpu", cacheTypes(pool))
	}
	if opt.JSON {
		if err := json.NewEncoder(w).Encode(rows); err != nil {
			return err
		}
		return llamaErr
	}
	fmt.Fprintln(w, "| model | size | params | backend | threads | test | t/s | bytes/token | bandwidth use |")
	fmt.Fprintln(w, "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range rows {
		bw := ""
		if r.BandwidthGBs > 0 {
			bw = fmt.Sprintf("%.0f%% of %.1f GB/s", 100*r.BandwidthUse, r.BandwidthGBs)
		}
		per := ""
		if r.BytesPerToken > 0 {
			per = fmt.Sprintf("%.2f MiB", float64(r.BytesPerToken)/(1<<20))
		}
		threads := "-"
		if r.Threads > 0 {
			threads = strconv.Itoa(r.Threads)
		}
		fmt.Fprintf(w, "| %s | %.2f MiB | %.2f M | %s | %s | %s | %.2f ± %.2f | %s | %s |\n", r.Model,
			float64(r.SizeBytes)/(1<<20), float64(r.Params)/1e6, r.Backend, threads, r.Test, r.TokS, r.StdDev, per, bw)
	}
	report()
	return llamaErr
}

// Result is one row of the single-sequence table (and of its JSON).
type Result struct {
	Model     string  `json:"model"`
	SizeBytes int64   `json:"size_bytes"`
	Params    int64   `json:"params"`
	Backend   string  `json:"backend"`
	Threads   int     `json:"threads,omitempty"` // CPU workers; 0 on a GPU tier
	Test      string  `json:"test"`
	TokS      float64 `json:"avg_ts"`
	StdDev    float64 `json:"stddev_ts"`
	// For generation: weight bytes read per token, and what fraction of
	// the measured memory bandwidth that rate uses.
	BytesPerToken int64   `json:"bytes_per_token,omitempty"`
	BandwidthGBs  float64 `json:"mem_bandwidth_gb_s,omitempty"`
	BandwidthUse  float64 `json:"bandwidth_fraction,omitempty"`
	// For a speculative generation (Options.Speculative): the acceptance
	// rate α of the draft tokens and the tokens each verify step produced,
	// which depend on the text, apart from the rate.
	Acceptance    float64 `json:"acceptance_rate,omitempty"`
	TokensPerStep float64 `json:"tokens_per_verify_step,omitempty"`
}

// single runs llama-bench's tests on one sequence: ppN, a prefill of N
// tokens, and tgN, N decode steps after one token; each warmed up once,
// then run opt.Reps times.
func single(ctx context.Context, e *sequence.Pool, opt Options) ([]Result, error) {
	nv := int32(e.Hparams.NVocab)
	size, params, perToken := weightStats(e)
	// run times a prefill of prompt tokens (gen = 0) or gen decode
	// steps after depth tokens, prefilled untimed (after one token when
	// depth is 0, for the first step's logits).
	run := func(prompt, gen, depth int) (float64, error) {
		seq, err := e.NewSequence()
		if err != nil {
			return 0, err
		}
		defer seq.Release()
		toks := make([]int32, depth+prompt)
		for i := range toks {
			toks[i] = int32(1+i*7919) % nv
		}
		if depth > 0 {
			if _, err := seq.Prefill(ctx, toks[:depth]); err != nil {
				return 0, err
			}
		}
		t0 := time.Now()
		if prompt > 0 {
			if _, err := seq.Prefill(ctx, toks[depth:]); err != nil {
				return 0, err
			}
		}
		if gen == 0 {
			return float64(prompt) / time.Since(t0).Seconds(), nil
		}
		t0 = time.Now()
		for i := 0; i < gen; i++ {
			if err := seq.Advance(ctx, seq.Greedy()); err != nil {
				return 0, err
			}
		}
		return float64(gen) / time.Since(t0).Seconds(), nil
	}
	var rows []Result
	type benchTest struct {
		name string
		p, g int
		mk   bool // the tier's persistent decode kernel on
	}
	tg := fmt.Sprintf("tg%d", opt.Gen)
	tests := []benchTest{{fmt.Sprintf("pp%d", opt.Prompt), opt.Prompt, 0, true}, {tg, 1, opt.Gen, opt.Megakernel != "off"}}
	if has, err := e.SetMegakernel(true); err != nil {
		return nil, err
	} else if has && opt.Megakernel == "both" {
		tests = append(tests, benchTest{tg + " graph", 1, opt.Gen, false})
	}
	defer e.SetMegakernel(true)
	for _, test := range tests {
		if test.p == 0 || (test.g == 0 && test.name[:2] == "tg") {
			continue
		}
		if has, err := e.SetMegakernel(test.mk); err != nil {
			return nil, err
		} else if key, ok := e.Key(runtime.Decode, 1); has && ok && test.g > 0 {
			// Said when asked for, or when the steps leave the graph path:
			// a default bundle has no megakernel, and saying so every run is noise.
			if path := e.StepPath(key); opt.Megakernel != "" || path == "megakernel" {
				opt.Warn("%s: %s steps: %s", test.name, key, path)
			}
		}
		if _, err := run(test.p, min(test.g, 2), 0); err != nil { // warm up (the depth only fills the cache)
			return nil, err
		}
		p := test.p
		if opt.Depth > 0 {
			test.name += fmt.Sprintf(" @ d%d", opt.Depth) // llama-bench's name
			if test.g > 0 {
				p = 0 // the depth's prefill gives the first step's logits
			}
		}
		var rs []float64
		for r := 0; r < opt.Reps; r++ {
			v, err := run(p, test.g, opt.Depth)
			if err != nil {
				return nil, err
			}
			rs = append(rs, v)
		}
		res := Result{Model: e.Hparams.Arch, SizeBytes: size, Params: params, Backend: e.TierName(), Test: test.name}
		if e.TierName() == "cpu" {
			res.Threads = opt.Threads
		}
		res.TokS, res.StdDev = meanSD(rs)
		if test.g > 0 {
			res.BytesPerToken = perToken
			// The fraction is of host memory bandwidth, which only
			// bounds T-CPU; a GPU tier's is its device's.
			if e.TierName() == "cpu" {
				res.BandwidthGBs = memBandwidth(opt.Threads)
				res.BandwidthUse = res.TokS * float64(perToken) / (res.BandwidthGBs * 1e9)
			}
		}
		rows = append(rows, res)
		if warn := noiseWarning(res, opt.Reps); warn != "" {
			opt.Warn("%s", warn)
		}
	}
	return rows, nil
}

// weightStats returns the weights' bytes and element count, and the bytes
// one decode step reads: every weight except the embedding table, of which
// it reads one row, and the routed experts' tensors, of which it reads
// the n_expert_used experts a token is routed to. Weights that share
// their bytes (a tied LM head is the embedding table) count once, at the
// most a step reads of them.
func weightStats(e *sequence.Pool) (size, params, perToken int64) {
	h := &e.Bundle.Graph.Hparams
	type at struct {
		region uint32
		off    int64
	}
	read := map[at]int64{}
	for _, w := range e.Bundle.Graph.Weights {
		r := w.Bytes
		switch {
		case isEmbedTable(w):
			r = w.Bytes / w.Dims[len(w.Dims)-1]
		case len(w.Dims) == 3 && h.NExpert > 0 && w.Dims[2] == int64(h.NExpert):
			r = w.Bytes / int64(h.NExpert) * int64(h.NExpertUsed)
		}
		k := at{uint32(w.Region), int64(w.Offset)}
		if prev, shared := read[k]; shared {
			read[k] = max(prev, r)
			continue
		}
		read[k] = r
		n := int64(1)
		for _, d := range w.Dims {
			n *= d
		}
		size += w.Bytes
		params += n
	}
	for _, r := range read {
		perToken += r
	}
	return size, params, perToken
}

func isEmbedTable(w bundle.Weight) bool {
	return w.Buffer == "model.embed_table"
}

// memBandwidth measures read bandwidth in GB/s: threads goroutines each
// summing their share of a 256 MiB buffer, best of three.
func memBandwidth(threads int) float64 {
	const size = 256 << 20
	buf := make([]uint64, size/8)
	for i := range buf {
		buf[i] = uint64(i)
	}
	best := 0.0
	for rep := 0; rep < 3; rep++ {
		var wg sync.WaitGroup
		per := len(buf) / threads
		sums := make([]uint64, threads*8)
		t0 := time.Now()
		for t := 0; t < threads; t++ {
			wg.Add(1)
			go func(t int) {
				defer wg.Done()
				part := buf[t*per : (t+1)*per]
				var a, b, c, d uint64
				for i := 0; i+4 <= len(part); i += 4 {
					a += part[i]
					b += part[i+1]
					c += part[i+2]
					d += part[i+3]
				}
				sums[t*8] = a + b + c + d
			}(t)
		}
		wg.Wait()
		gbs := float64(per*threads*int(unsafe.Sizeof(buf[0]))) / time.Since(t0).Seconds() / 1e9
		best = math.Max(best, gbs)
	}
	goruntime.KeepAlive(buf)
	return best
}

func meanSD(xs []float64) (float64, float64) {
	m := 0.0
	for _, x := range xs {
		m += x
	}
	m /= float64(len(xs))
	v := 0.0
	for _, x := range xs {
		v += (x - m) * (x - m)
	}
	if len(xs) > 1 {
		v /= float64(len(xs) - 1)
	}
	return m, math.Sqrt(v)
}

// noisySpread is the standard deviation, as a fraction of the mean, past
// which bench calls a rate noisy.
const noisySpread = 0.2

// noiseWarning is bench's warning for a rate whose spread makes the mean
// meaningless ("" when the rate is steady): reps more repetitions, a quiet
// machine or pinned threads tighten it.
func noiseWarning(r Result, reps int) string {
	if r.TokS <= 0 || r.StdDev <= noisySpread*r.TokS {
		return ""
	}
	return fmt.Sprintf("warning: %s is noisy: %.2f ± %.2f t/s, a spread of %.0f%% of the mean over %d repetitions; "+
		"measure again with more (-r %d) on an idle machine", r.Test, r.TokS, r.StdDev, 100*r.StdDev/r.TokS, reps, max(2*reps, 10))
}

// errNoGGUF is the comparisons' error without the model to run them on.
var errNoGGUF = errors.New("needs --gguf, the model the bundle was built from")

// cacheTypes are the bundle's KV cache types by llama.cpp's names, K
// then V ("": F16), for the llama.cpp run beside it.
func cacheTypes(pool *sequence.Pool) [2]string {
	return [2]string{pool.Hparams.CacheTypeK, pool.Hparams.CacheTypeV}
}
