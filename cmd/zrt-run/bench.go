package main

import (
	"fmt"
	"os"
	"runtime/pprof"
	"slices"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/bench"
	"github.com/zrtdev/zrt/cmd/internal/exitcode"
	"github.com/zrtdev/zrt/format/autobuild"
	"github.com/zrtdev/zrt/runtime/spec"
)

func benchCmd() *cobra.Command {
	var ef engineFlags
	var opt bench.Options
	var cpuProfile, slotList, format, speculative, draft string
	c := &cobra.Command{
		Use:   "bench BUNDLE|MODEL.gguf",
		Short: "Measure prompt processing (pp) and generation (tg) speed, llama-bench style",
		Long: `bench times a prefill of -p tokens (ppN) and -n decode steps after one
token (tgN), -r times each, and prints a llama-bench-style table. For tg it
also reports the weight bytes read per token and the fraction of this
machine's memory bandwidth (measured here with the same thread count) that
the rate implies.

With --slots 1,4,16 it measures aggregate throughput instead, as llama.cpp's
llama-batched-bench does, on the engine zrt-run serve runs (its scheduler
and KV page pool): for each B, B requests of -p prompt tokens at once
(their rows packed into the largest prefill variant's steps, as
llama-batched-bench packs them into its batch; the prompt time ends when
each has its first token), then -n steps that each decode one token of
all B in one replay (the bundle needs max_slots ≥ B and a decode variant
for B: decode_slots in the model config). --output-format jsonl prints
one JSON object per row with llama-batched-bench's keys;
--llama-batched-bench PATH --gguf FILE runs that tool on the same model,
threads, test and KV cache types (-ctk, -ctv, -fa 1) and prints its table.

With --speculative ngram|self|draft[:K[:fixed]] (draft: --draft's model,
which shares the target's vocabulary) it also generates -n tokens greedily
after --prompt, without speculation and with it in turn, -r rounds (tests
"tgN off" and "tgN MODE"), and reports α, K, the step costs relative to a
decode step, the predicted speedups and the measured one of every round.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case slotList != "" && format != "md" && format != "jsonl":
				return exitcode.Usagef("--output-format %q: want md or jsonl", format)
			case (opt.LlamaBench != "" || opt.LlamaBatched != "") && opt.GGUF == "":
				return exitcode.Usagef("--llama-bench and --llama-batched-bench need --gguf, the model the bundle was built from")
			}
			var err error
			if opt.Speculative, err = spec.ParseMode(speculative); err != nil {
				return exitcode.Usagef("--speculative: %v", err)
			}
			if opt.Slots, err = bench.ParseSlots(slotList); err != nil {
				return err
			}
			if err := opt.Check(); err != nil {
				return err
			} else if opt.GGUF == "" && autobuild.IsGGUF(args[0]) {
				opt.GGUF = args[0] // the model llama-bench runs, given one
			}
			if len(opt.Slots) > 0 {
				ef.build.slots = slices.Max(opt.Slots) // given a GGUF, build it for the largest batch asked for
			}
			pool, err := ef.open(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			defer pool.Close()
			if ef.beside = pool.Program; draft != "" {
				if opt.Draft, err = ef.open(cmd.Context(), draft); err != nil {
					return fmt.Errorf("--draft %s: %w", draft, err)
				}
				defer opt.Draft.Close()
			}
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
			eo, _ := ef.options() // ef.open has checked them
			opt.Threads, opt.JSONL, opt.Out = eo.Threads, format == "jsonl", cmd.OutOrStdout()
			opt.Warn = func(f string, a ...any) { cmd.PrintErrf("zrt-run: "+f+"\n", a...) }
			return bench.Run(cmd.Context(), pool, opt)
		},
	}
	ef.add(c)
	c.Flags().IntVarP(&opt.Prompt, "p", "p", 512, "prompt tokens for the pp test (0: skip)")
	c.Flags().IntVarP(&opt.Gen, "n", "n", 128, "generated tokens for the tg test (0: skip)")
	c.Flags().IntVarP(&opt.Reps, "r", "r", 3, "repetitions")
	c.Flags().IntVarP(&opt.Depth, "d", "d", 0, "tokens in the cache before each test (llama-bench's -d; given a GGUF, pass --ctx-size ≥ d + max(p, n+1))")
	c.Flags().BoolVar(&opt.JSON, "json", false, "print the results as JSON")
	c.Flags().StringVar(&opt.LlamaBench, "llama-bench", "", "also run this llama-bench binary on --gguf with the same settings (the bundle's KV cache types too) and print its command line and the ratio")
	c.Flags().StringVar(&opt.GGUF, "gguf", "", "the GGUF the bundle was built from, for --llama-bench (default: BUNDLE itself when it is a GGUF)")
	c.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a Go CPU profile of the run to this file")
	c.Flags().StringVar(&speculative, "speculative", "off", "also generate -n tokens after --prompt without and with speculative decoding: ngram[:K[:fixed]], self[:K[:fixed]] or draft[:K[:fixed]]")
	c.Flags().StringVar(&draft, "draft", "", "--speculative draft: the draft model, a bundle or GGUF with the target's vocabulary (alone: --speculative draft)")
	c.Flags().StringArrayVar(&opt.SpecPrompts, "prompt", []string{"Once upon a time"}, "--speculative: a prompt text the generations start from; repeated, a set of prompts, each measured in turn and the speedup reported over all")
	c.Flags().StringVar(&slotList, "slots", "", "batched test: aggregate throughput with these numbers of concurrent sequences (e.g. 1,4,16)")
	c.Flags().StringVar(&format, "output-format", "md", "batched test output: md or jsonl")
	c.Flags().StringVar(&opt.Megakernel, "megakernel", "on", "T-CUDA's tg steps on the persistent kernel of a bundle built with megakernel = true (on), on the graph path (off), or both, as tests tgN and tgN graph")
	c.Flags().StringVar(&opt.LlamaBatched, "llama-batched-bench", "", "batched test: also run this llama-batched-bench binary on --gguf")
	return c
}
