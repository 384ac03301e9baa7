package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/internal/testmodel"
)

// batchedBundle compiles the tiny synthetic model with decode variants of
// 1 and 2 slots and returns its GGUF and the bundle.
func batchedBundle(t *testing.T) (model, out string) {
	t.Helper()
	return testmodel.Bundle(t, "decode_slots = [1, 2]\nprefill_rows = [16]\n", compiler.Options{})
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
