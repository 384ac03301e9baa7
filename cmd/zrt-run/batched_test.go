package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/sequence"
)

// batchedBundle compiles the tiny synthetic model with decode variants of
// 1 and 2 slots and returns its GGUF and the bundle.
func batchedBundle(t *testing.T) (model, out string) {
	t.Helper()
	b, err := synth.Write(synth.Tiny)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	model, cfg, out := filepath.Join(dir, "m.gguf"), filepath.Join(dir, "m.toml"), filepath.Join(dir, "b")
	os.WriteFile(model, b, 0o644)
	os.WriteFile(cfg, []byte("decode_slots = [1, 2]\nprefill_rows = [16]\n"), 0o644)
	if err := compiler.Compile(context.Background(), model, out, compiler.Options{ConfigPath: cfg}); err != nil {
		t.Fatal(err)
	}
	return model, out
}

func TestBatchedBench(t *testing.T) {
	_, out := batchedBundle(t)
	pool, err := sequence.Open(out, runtime.Options{Tier: "cpu", Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	rows, err := batchedBench(context.Background(), pool, []int{1, 2}, 20, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[1].PL != 2 || rows[1].NKV != 2*25 || rows[1].SpeedTG <= 0 || rows[1].T < rows[1].TTG {
		t.Fatalf("rows %+v", rows)
	}
	var md, jl bytes.Buffer
	printBatched(&md, rows, false)
	printBatched(&jl, rows, true)
	if !strings.Contains(md.String(), "S_TG t/s") || strings.Count(md.String(), "\n") != 4 {
		t.Errorf("table:\n%s", md.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(jl.String()), "\n") {
		var m map[string]float64
		if err := json.Unmarshal([]byte(line), &m); err != nil || m["speed_tg"] <= 0 || m["pl"] == 0 {
			t.Errorf("jsonl line %q: %v", line, err)
		}
	}
	if _, err := batchedBench(context.Background(), pool, []int{3}, 20, 5); err == nil || !strings.Contains(err.Error(), "decode_slots") {
		t.Errorf("B beyond the bundle's slots: %v", err)
	}
}

// TestPrintComparison pairs the two benches' rows by B: a B that
// llama-batched-bench left out gets no line.
func TestPrintComparison(t *testing.T) {
	zrt := []batchedResult{{PL: 1, SpeedTG: 600, SpeedPP: 4000}, {PL: 16, SpeedTG: 5000, SpeedPP: 50000}, {PL: 64, SpeedTG: 11000, SpeedPP: 50000}}
	ref := []batchedResult{{PL: 1, SpeedTG: 500, SpeedPP: 4000}, {PL: 64, SpeedTG: 10000, SpeedPP: 40000}}
	var b bytes.Buffer
	if err := printComparison(&b, zrt, ref); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("want a header, a rule and two rows:\n%s", b.String())
	}
	for i, want := range []string{"|    1 |   600.00 |         500.00 |            1.20 |", "|   64 | 11000.00 |       10000.00 |            1.10 |"} {
		if !strings.HasPrefix(lines[2+i], want) {
			t.Errorf("row %d: %q, want it to start %q", i, lines[2+i], want)
		}
	}
}

// TestBenchSlotsAgainstLlama runs `zrt-run bench --slots` beside a stand-in
// llama-batched-bench that checks the arguments it is given (the context
// fits the largest B, the test and B list are zrt's) and prints JSONL rows
// for B = 2 only, as llama-batched-bench does when it skips a row.
func TestBenchSlotsAgainstLlama(t *testing.T) {
	model, out := batchedBundle(t)
	fake := filepath.Join(t.TempDir(), "llama-batched-bench")
	script := `#!/bin/sh
case "$*" in *"-c 50 -npp 20 -ntg 5 -npl 1,2 -t 1 -ngl 0 --output-format jsonl"*) ;; *) echo "args: $*" >&2; exit 3;; esac
echo "main: some log line"
echo '{"n_kv_max": 50, "pp": 20, "tg": 5, "pl": 2, "n_kv": 50, "t_pp": 0.01, "speed_pp": 4000, "t_tg": 0.1, "speed_tg": 100, "t": 0.11, "speed": 454}'
`
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := execCommand(benchCmd(), out, "--tier", "cpu", "--threads", "1", "--slots", "1,2", "-p", "20", "-n", "5",
		"--llama-batched-bench", fake, "--gguf", model)
	if err != nil {
		t.Fatalf("%v\n%s%s", err, stdout, stderr)
	}
	at := strings.Index(stdout, "|    B | S_TG")
	if at < 0 {
		t.Fatalf("no comparison table:\n%s", stdout)
	}
	table := stdout[at:]
	if lines := strings.Split(strings.TrimSpace(table), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[2], "|    2 |") ||
		!strings.Contains(lines[2], "100.00") || !strings.Contains(lines[2], "4000.00") {
		t.Errorf("comparison:\n%s", table)
	}
}
