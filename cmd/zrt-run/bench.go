package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	goruntime "runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/cmd/internal/exitcode"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/runtime/sequence"
	"github.com/zrtdev/zrt/runtime/spec"
)

// benchResult is one row of the table (and of --json).
type benchResult struct {
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
	// For a speculative generation (--speculative): the acceptance rate
	// α of the draft tokens and the tokens each verify step produced,
	// which depend on the text, apart from the rate.
	Acceptance    float64 `json:"acceptance_rate,omitempty"`
	TokensPerStep float64 `json:"tokens_per_verify_step,omitempty"`
}

func benchCmd() *cobra.Command {
	var ef engineFlags
	var pp, tg, reps int
	var asJSON bool
	var llamaBench, gguf, cpuProfile, slotList, format, llamaBatched, speculative, prompt string
	c := &cobra.Command{
		Use:   "bench BUNDLE|MODEL.gguf",
		Short: "Measure prompt processing (pp) and generation (tg) speed, llama-bench style",
		Long: `bench times a prefill of -p tokens (ppN) and -n decode steps after one
token (tgN), -r times each, and prints a llama-bench-style table. For tg it
also reports the weight bytes read per token and the fraction of this
machine's memory bandwidth (measured here with the same thread count) that
the rate implies.

With --slots 1,4,16 it measures aggregate throughput instead, as llama.cpp's
llama-batched-bench does: for each B, B sequences of -p prompt tokens
prefilled together (their rows packed into the largest prefill variant's
steps, as llama-batched-bench packs them into its batch), then
-n steps that each decode one token of all B in one replay (the bundle needs
max_slots ≥ B and a decode variant for B: decode_slots in the model
config). --output-format jsonl prints one JSON object per row with
llama-batched-bench's keys; --llama-batched-bench PATH --gguf FILE runs that
tool on the same model, threads and test and prints its table below.

With --speculative ngram[:K[:fixed]] or self[:K[:fixed]] it also
generates -n tokens greedily after --prompt through a request's decoder,
without speculation and with it (tests "tgN off" and "tgN MODE"), and
reports the draft tokens'
acceptance rate and the tokens per verify step (which depend on the
text), the cost of a step by its rows relative to a decode step, the
speedup those predict and the speedup measured.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case pp < 0 || pp > 1<<20:
				return exitcode.Usagef("-p %d out of range [0, 1048576]", pp)
			case tg < 0 || tg > 1<<20:
				return exitcode.Usagef("-n %d out of range [0, 1048576]", tg)
			case reps < 1 || reps > 1000:
				return exitcode.Usagef("-r %d out of range [1, 1000]", reps)
			case slotList != "" && format != "md" && format != "jsonl":
				return exitcode.Usagef("--output-format %q: want md or jsonl", format)
			case (llamaBench != "" || llamaBatched != "") && gguf == "":
				return exitcode.Usagef("--llama-bench and --llama-batched-bench need --gguf, the model the bundle was built from")
			}
			mode, err := spec.ParseMode(speculative)
			switch {
			case err != nil:
				return exitcode.Usagef("--speculative: %v", err)
			case mode.On() && (slotList != "" || tg == 0):
				return exitcode.Usagef("--speculative measures a generation: give -n and no --slots")
			}
			var slots []int
			if slotList != "" {
				var err error
				if slots, err = parseSlots(slotList); err != nil {
					return err
				}
			}
			if gguf == "" && isGGUF(args[0]) {
				gguf = args[0] // the model llama-bench runs, given one
			}
			if slotList != "" {
				// Given a GGUF, build it for the largest batch asked for.
				if s, err := parseSlots(slotList); err == nil {
					ef.build.slots = slices.Max(s)
				}
			}
			e, err := ef.open(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			defer e.Close()
			ctx := cmd.Context()
			nv := int32(e.Hparams.NVocab)
			threads := ef.threadsOr()
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			if slotList != "" {
				rows, err := batchedBench(ctx, e, slots, pp, tg)
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				if format == "md" {
					fmt.Fprintf(w, "zrt %s, tier %s, %d threads, %s\n", e.Hparams.Arch, e.TierName(), threads, e.Variants())
				}
				if err := printBatched(w, rows, format == "jsonl"); err != nil {
					return err
				}
				if llamaBatched == "" {
					return nil
				}
				ref, err := runLlamaBatched(ctx, llamaBatched, gguf, slots, pp, tg, threads, e.TierName() != "cpu")
				if err != nil {
					return err
				}
				if format == "md" {
					fmt.Fprintf(w, "\nllama-batched-bench (%s), same model, test and threads\n", llamaBatched)
				}
				if err := printBatched(w, ref, format == "jsonl"); err != nil {
					return err
				}
				if format != "md" {
					return nil
				}
				fmt.Fprintln(w)
				return printComparison(w, rows, ref)
			}
			size, params, perToken := weightStats(e)
			run := func(prompt, gen int) (float64, error) {
				seq, err := e.NewSequence()
				if err != nil {
					return 0, err
				}
				defer seq.Release()
				toks := make([]int32, prompt)
				for i := range toks {
					toks[i] = int32(1+i*7919) % nv
				}
				t0 := time.Now()
				if _, err := seq.Prefill(ctx, toks); err != nil {
					return 0, err
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
			var rows []benchResult
			tests := []struct {
				name string
				p, g int
			}{{fmt.Sprintf("pp%d", pp), pp, 0}, {fmt.Sprintf("tg%d", tg), 1, tg}}
			for _, test := range tests {
				if test.p == 0 || (test.g == 0 && test.name[:2] == "tg") {
					continue
				}
				if _, err := run(test.p, min(test.g, 2)); err != nil { // warm up
					return err
				}
				var rs []float64
				for r := 0; r < reps; r++ {
					v, err := run(test.p, test.g)
					if err != nil {
						return err
					}
					rs = append(rs, v)
				}
				res := benchResult{Model: e.Hparams.Arch, SizeBytes: size, Params: params, Backend: e.TierName(), Test: test.name}
				if e.TierName() == "cpu" {
					res.Threads = threads
				}
				res.TokS, res.StdDev = meanSD(rs)
				if test.g > 0 {
					res.BytesPerToken = perToken
					// The fraction is of host memory bandwidth, which only
					// bounds T-CPU; a GPU tier's is its device's.
					if e.TierName() == "cpu" {
						res.BandwidthGBs = memBandwidth(threads)
						res.BandwidthUse = res.TokS * float64(perToken) / (res.BandwidthGBs * 1e9)
					}
				}
				rows = append(rows, res)
				if warn := noiseWarning(res, reps); warn != "" {
					fmt.Fprintln(cmd.ErrOrStderr(), "zrt-run:", warn)
				}
			}
			var specRun func() error
			if mode.On() {
				if rows, specRun, err = benchSpeculative(cmd, e, rows, mode, prompt, tg, reps, threads); err != nil {
					return err
				}
			}
			w := cmd.OutOrStdout()
			if llamaBench != "" {
				if err := compareLlama(cmd, rows, llamaBench, gguf, pp, tg, reps, threads, e.TierName() != "cpu"); err != nil {
					return err
				}
			}
			if asJSON {
				return json.NewEncoder(w).Encode(rows)
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
			if specRun != nil {
				return specRun()
			}
			return nil
		},
	}
	ef.add(c)
	ef.build.addDraftLayers(c)
	c.Flags().IntVarP(&pp, "p", "p", 512, "prompt tokens for the pp test (0: skip)")
	c.Flags().IntVarP(&tg, "n", "n", 128, "generated tokens for the tg test (0: skip)")
	c.Flags().IntVarP(&reps, "r", "r", 3, "repetitions")
	c.Flags().BoolVar(&asJSON, "json", false, "print the results as JSON")
	c.Flags().StringVar(&llamaBench, "llama-bench", "", "also run this llama-bench binary on --gguf with the same settings and print the ratio")
	c.Flags().StringVar(&gguf, "gguf", "", "the GGUF the bundle was built from, for --llama-bench (default: BUNDLE itself when it is a GGUF)")
	c.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a Go CPU profile of the run to this file")
	c.Flags().StringVar(&slotList, "slots", "", "batched test: aggregate throughput with these numbers of concurrent sequences (e.g. 1,4,16)")
	c.Flags().StringVar(&format, "output-format", "md", "batched test output: md or jsonl")
	c.Flags().StringVar(&llamaBatched, "llama-batched-bench", "", "batched test: also run this llama-batched-bench binary on --gguf")
	c.Flags().StringVar(&speculative, "speculative", "off", "also generate -n tokens after --prompt without and with speculative decoding: ngram[:K[:fixed]] or self[:K[:fixed]]")
	c.Flags().StringVar(&prompt, "prompt", "Once upon a time", "--speculative: the prompt text the generations start from")
	return c
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
		case isEmbedTable(e.Bundle.Graph, w):
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

func isEmbedTable(g *bundle.Graph, w bundle.Weight) bool {
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

// threadsOr is the thread count in effect: the flag, else $ZRT_THREADS,
// else all CPUs.
func (f *engineFlags) threadsOr() int {
	if opt, err := f.options(); err == nil && opt.Threads > 0 {
		return opt.Threads
	}
	return goruntime.NumCPU()
}

// compareLlama runs llama-bench with the same tests and threads and prints
// both rates and zrt's ratio to llama.cpp's. With gpu (zrt ran on a GPU
// tier) llama.cpp offloads every layer (-ngl 99), else none.
func compareLlama(cmd *cobra.Command, rows []benchResult, bin, gguf string, pp, tg, reps, threads int, gpu bool) error {
	if gguf == "" {
		return fmt.Errorf("--llama-bench needs --gguf, the model the bundle was built from")
	}
	ngl := "0"
	if gpu {
		ngl = "99"
	}
	out, err := exec.CommandContext(cmd.Context(), bin, "-m", gguf, "-p", strconv.Itoa(pp), "-n", strconv.Itoa(tg),
		"-r", strconv.Itoa(reps), "-t", strconv.Itoa(threads), "-ngl", ngl, "-o", "json").Output()
	if err != nil {
		return fmt.Errorf("llama-bench: %w", err)
	}
	var lb []struct {
		NPrompt int     `json:"n_prompt"`
		NGen    int     `json:"n_gen"`
		AvgTS   float64 `json:"avg_ts"`
		StdTS   float64 `json:"stddev_ts"`
	}
	if err := json.Unmarshal(out, &lb); err != nil {
		return fmt.Errorf("llama-bench output: %w", err)
	}
	w := cmd.OutOrStdout()
	fmt.Fprintln(w, "| test | zrt t/s | llama.cpp t/s | ratio |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: |")
	for _, r := range rows {
		for _, l := range lb {
			name := fmt.Sprintf("pp%d", l.NPrompt)
			if l.NGen > 0 {
				name = fmt.Sprintf("tg%d", l.NGen)
			}
			if name == r.Test && l.AvgTS > 0 {
				fmt.Fprintf(w, "| %s | %.2f ± %.2f | %.2f ± %.2f | %.2f× |\n", name, r.TokS, r.StdDev, l.AvgTS, l.StdTS, r.TokS/l.AvgTS)
			}
		}
	}
	fmt.Fprintln(w)
	return nil
}

// noisySpread is the standard deviation, as a fraction of the mean, past
// which bench calls a rate noisy.
const noisySpread = 0.2

// noiseWarning is bench's warning for a rate whose spread makes the mean
// meaningless ("" when the rate is steady): reps more repetitions, a quiet
// machine or pinned threads tighten it.
func noiseWarning(r benchResult, reps int) string {
	if r.TokS <= 0 || r.StdDev <= noisySpread*r.TokS {
		return ""
	}
	return fmt.Sprintf("warning: %s is noisy: %.2f ± %.2f t/s, a spread of %.0f%% of the mean over %d repetitions; "+
		"measure again with more (-r %d) on an idle machine", r.Test, r.TokS, r.StdDev, 100*r.StdDev/r.TokS, reps, max(2*reps, 10))
}
