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

// compareLlama runs llama-bench with the same tests and threads and prints
// both rates and zrt's ratio to llama.cpp's. With gpu (zrt ran on a GPU
// tier) llama.cpp offloads every layer (-ngl 99), else none.
func compareLlama(ctx context.Context, w io.Writer, rows []Result, opt Options, gpu bool) error {
	if opt.GGUF == "" {
		return fmt.Errorf("--llama-bench %w", errNoGGUF)
	}
	ngl := "0"
	if gpu {
		ngl = "99"
	}
	out, err := exec.CommandContext(ctx, opt.LlamaBench, "-m", opt.GGUF, "-p", strconv.Itoa(opt.Prompt), "-n", strconv.Itoa(opt.Gen),
		"-d", strconv.Itoa(opt.Depth), "-r", strconv.Itoa(opt.Reps), "-t", strconv.Itoa(opt.Threads), "-ngl", ngl, "-o", "json").Output()
	if err != nil {
		return fmt.Errorf("llama-bench: %w", err)
	}
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
// test, threads and offload, its context large enough for the largest B
// so that it skips no row, and returns its JSONL rows.
func runLlamaBatched(ctx context.Context, bin, gguf string, slots []int, pp, tg, threads int, gpu bool) ([]BatchedResult, error) {
	if gguf == "" {
		return nil, fmt.Errorf("--llama-batched-bench %w", errNoGGUF)
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

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
