package bench

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
)

// compareLlama runs llama-bench with the same tests and threads, and a
// KV cache of the bundle's types (cache, llamaCacheArgs), prints its
// command line, then both rates and zrt's ratio to llama.cpp's. With gpu
// (zrt ran on a GPU tier) llama.cpp offloads every layer (-ngl 99), else
// none.
func compareLlama(ctx context.Context, w io.Writer, rows []Result, opt Options, gpu bool, cache [2]string) error {
	if opt.GGUF == "" {
		return fmt.Errorf("--llama-bench %w", errNoGGUF)
	}
	kv, err := llamaCacheArgs(cache)
	if err != nil {
		return fmt.Errorf("--llama-bench: %w", err)
	}
	args := append([]string{"-m", opt.GGUF, "-p", strconv.Itoa(opt.Prompt), "-n", strconv.Itoa(opt.Gen),
		"-d", strconv.Itoa(opt.Depth), "-r", strconv.Itoa(opt.Reps), "-t", strconv.Itoa(opt.Threads), "-ngl", offload(gpu)}, kv...)
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, opt.LlamaBench, append(args, "-o", "json")...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", opt.LlamaBench, strings.Join(args, " "), err, lastLines(stderr.String(), 5))
	}
	fmt.Fprintf(w, "llama.cpp: %s %s\n\n", opt.LlamaBench, strings.Join(args, " "))
	var lb []struct {
		NPrompt int     `json:"n_prompt"`
		NGen    int     `json:"n_gen"`
		NDepth  int     `json:"n_depth"`
		AvgTS   float64 `json:"avg_ts"`
		StdTS   float64 `json:"stddev_ts"`
	}
	if err := json.Unmarshal(out, &lb); err != nil {
		return fmt.Errorf("llama-bench output: %w", err)
	}
	fmt.Fprintln(w, "| test | zrt t/s | llama.cpp t/s | ratio |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: |")
	for _, r := range rows {
		for _, l := range lb {
			name := fmt.Sprintf("pp%d", l.NPrompt)
			if l.NGen > 0 {
				name = fmt.Sprintf("tg%d", l.NGen)
			}
			if l.NDepth > 0 {
				name += fmt.Sprintf(" @ d%d", l.NDepth)
			}
			if name == r.Test && l.AvgTS > 0 {
				fmt.Fprintf(w, "| %s | %.2f ± %.2f | %.2f ± %.2f | %.2f× |\n", name, r.TokS, r.StdDev, l.AvgTS, l.StdTS, r.TokS/l.AvgTS)
			}
		}
	}
	fmt.Fprintln(w)
	return nil
}

// runLlamaBatched runs llama-batched-bench on the same model with the same
// test, threads, offload and KV cache types (llamaCacheArgs), its context
// large enough for the largest B so that it skips no row, and returns its
// JSONL rows.
func runLlamaBatched(ctx context.Context, bin, gguf string, slots []int, pp, tg, threads int, gpu bool, cache [2]string) ([]BatchedResult, error) {
	if gguf == "" {
		return nil, fmt.Errorf("--llama-batched-bench %w", errNoGGUF)
	}
	npl := make([]string, len(slots))
	maxB := 0
	for i, b := range slots {
		npl[i] = strconv.Itoa(b)
		maxB = max(maxB, b)
	}
	kv, err := llamaCacheArgs(cache)
	if err != nil {
		return nil, fmt.Errorf("--llama-batched-bench: %w", err)
	}
	args := append([]string{"-m", gguf, "-c", strconv.Itoa(maxB * (pp + tg)), "-npp", strconv.Itoa(pp), "-ntg", strconv.Itoa(tg),
		"-npl", strings.Join(npl, ","), "-t", strconv.Itoa(threads), "-ngl", offload(gpu), "--output-format", "jsonl"}, kv...)
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w\n%s", bin, strings.Join(args, " "), err, lastLines(stderr.String(), 5))
	}
	var rows []BatchedResult
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var r BatchedResult
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

// offload is llama.cpp's -ngl for a run on a GPU tier (every layer) or
// on T-CPU (none).
func offload(gpu bool) string {
	if gpu {
		return "99"
	}
	return "0"
}

// llamaCacheArgs are llama.cpp's flags for a KV cache of the bundle's
// types (bundle.Hparams.CacheTypeK and CacheTypeV, by llama.cpp's names;
// "" is F16): none for an F16 cache, which is llama.cpp's default, else
// -ctk and -ctv, with flash attention on (-fa 1), without which
// llama.cpp refuses a quantized V cache. A type llama.cpp has no cache
// of (fp8_e4m3) is an error: no run of llama.cpp compares with it.
func llamaCacheArgs(cache [2]string) ([]string, error) {
	if cache == [2]string{} {
		return nil, nil
	}
	args := []string{"-ctk", "f16", "-ctv", "f16", "-fa", "1"}
	for i, t := range cache {
		switch t {
		case "", "f16":
		case "fp8_e4m3":
			return nil, fmt.Errorf("llama.cpp has no %s KV cache to compare this bundle with: build one with cache_type_k and cache_type_v f16 or q8_0", t)
		default:
			args[2*i+1] = t
		}
	}
	return args, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
