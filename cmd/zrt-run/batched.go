package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/zrtdev/zrt/cmd/internal/exitcode"
	"github.com/zrtdev/zrt/runtime/sequence"
)

// batchedResult is one row of a batched bench, with llama-batched-bench's
// JSONL keys so the two tools' outputs read alike.
type batchedResult struct {
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

// parseSlots reads a list like "1,4,16".
func parseSlots(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, exitcode.Usagef("--slots %q: want positive counts separated by commas", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// batchedBench measures, for each B in slots, B sequences of pp prompt
// tokens prefilled together (their rows packed into the largest prefill
// variant's steps, as llama-batched-bench packs them into its batch), then
// tg steps that each decode one token of all B in one replay —
// llama-batched-bench's test, on the bundle's decode variant for B slots.
func batchedBench(ctx context.Context, pool *sequence.Pool, slots []int, pp, tg int) ([]batchedResult, error) {
	// Every count is checked before any is measured: a mistake in the
	// list is a usage error, found at once.
	for _, b := range slots {
		if b > pool.Slots() {
			return nil, exitcode.Usagef("--slots %d: the bundle serves at most %d (build it with decode_slots = [..., %d] in the model config)", b, pool.Slots(), b)
		}
	}
	// Warm up (first-touch of weights and scratch, thread start) as
	// llama-batched-bench does, untimed.
	if _, err := batchedRun(ctx, pool, slots[0], pp, min(tg, 2)); err != nil {
		return nil, err
	}
	var out []batchedResult
	for _, b := range slots {
		r, err := batchedRun(ctx, pool, b, pp, tg)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// batchedRun is one row of batchedBench.
func batchedRun(ctx context.Context, pool *sequence.Pool, b, pp, tg int) (batchedResult, error) {
	nv := int32(pool.Hparams.NVocab)
	if b > pool.Slots() {
		return batchedResult{}, fmt.Errorf("--slots %d: the bundle serves at most %d (build it with decode_slots = [..., %d] in the model config)", b, pool.Slots(), b)
	}
	seqs := make([]*sequence.Sequence, b)
	defer func() {
		for _, s := range seqs {
			if s != nil {
				s.Release()
			}
		}
	}()
	prompts := make([][]int32, b)
	for i := range seqs {
		s, err := pool.NewSequence()
		if err != nil {
			return batchedResult{}, err
		}
		seqs[i] = s
		prompts[i] = make([]int32, pp)
		for j := range prompts[i] {
			prompts[i][j] = int32(1+(i+1)*j*7919) % nv
		}
	}
	t0 := time.Now()
	if err := pool.PrefillBatch(ctx, seqs, prompts); err != nil {
		return batchedResult{}, err
	}
	tPP := time.Since(t0).Seconds()
	t0 = time.Now()
	next := make([]int32, b)
	for range tg {
		for i, s := range seqs {
			next[i] = s.Greedy()
		}
		if err := pool.DecodeBatch(ctx, seqs, next); err != nil {
			return batchedResult{}, fmt.Errorf("--slots %d: %w", b, err)
		}
	}
	tTG := time.Since(t0).Seconds()
	r := batchedResult{PP: pp, TG: tg, PL: b, NKV: b * (pp + tg), TPP: tPP, TTG: tTG, T: tPP + tTG}
	r.SpeedPP, r.SpeedTG, r.Speed = float64(b*pp)/tPP, float64(b*tg)/tTG, float64(r.NKV)/r.T
	return r, nil
}

// printBatched writes results as llama-batched-bench does: a markdown
// table, or one JSON object per line.
func printBatched(w io.Writer, rows []batchedResult, jsonl bool) error {
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
func printComparison(w io.Writer, zrt, ref []batchedResult) error {
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

// runLlamaBatched runs llama-batched-bench on the same model with the same
// test, threads and offload, its context large enough for the largest B
// so that it skips no row, and returns its JSONL rows.
func runLlamaBatched(ctx context.Context, bin, gguf string, slots []int, pp, tg, threads int, gpu bool) ([]batchedResult, error) {
	if gguf == "" {
		return nil, fmt.Errorf("--llama-batched-bench needs --gguf, the model the bundle was built from")
	}
	npl := make([]string, len(slots))
	maxB := 0
	for i, b := range slots {
		npl[i] = strconv.Itoa(b)
		maxB = max(maxB, b)
	}
	ngl := "0"
	if gpu {
		ngl = "99"
	}
	args := []string{"-m", gguf, "-c", strconv.Itoa(maxB * (pp + tg)), "-npp", strconv.Itoa(pp), "-ntg", strconv.Itoa(tg),
		"-npl", strings.Join(npl, ","), "-t", strconv.Itoa(threads), "-ngl", ngl, "--output-format", "jsonl"}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w\n%s", bin, strings.Join(args, " "), err, lastLines(stderr.String(), 5))
	}
	var rows []batchedResult
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var r batchedResult
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("llama-batched-bench output %q: %w", line, err)
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("llama-batched-bench printed no JSONL rows:\n%s", lastLines(string(out)+stderr.String(), 5))
	}
	return rows, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
