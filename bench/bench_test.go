package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/internal/testmodel"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/sequence"
)

// batchedBundle compiles the tiny synthetic model with decode variants of
// 1 and 2 slots and opens it on T-CPU.
func batchedBundle(t *testing.T) *sequence.Pool {
	t.Helper()
	_, out := testmodel.Bundle(t, "decode_slots = [1, 2]\nprefill_rows = [16]\n", compiler.Options{})
	pool, err := sequence.Open(out, runtime.Options{Tier: "cpu", Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	return pool
}

// TestBatchedBench runs the batched test on the engine: every row has
// the sizes asked for and positive rates, the table and the JSON lines
// carry them, and a B beyond the bundle's slots is a usage error.
func TestBatchedBench(t *testing.T) {
	pool := batchedBundle(t)
	rows, err := Batched(context.Background(), pool.Program, []int{1, 2}, 20, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[1].PL != 2 || rows[1].NKV != 2*25 || rows[1].SpeedTG <= 0 || rows[1].SpeedPP <= 0 || rows[1].T < rows[1].TTG {
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
	var oe *OptionError
	if _, err := Batched(context.Background(), pool.Program, []int{3}, 20, 5); !errors.As(err, &oe) || !oe.Usage() || !strings.Contains(err.Error(), "decode_slots") {
		t.Errorf("B beyond the bundle's slots: %v", err)
	}
	if _, err := Batched(context.Background(), pool.Program, []int{2}, 1<<20, 5); !errors.As(err, &oe) || !strings.Contains(err.Error(), "KV pages") {
		t.Errorf("sequences beyond the KV pool: %v", err)
	}
}

// TestRunSingle runs the single-sequence tests through Run and checks the
// JSON rows' fields.
func TestRunSingle(t *testing.T) {
	pool := batchedBundle(t)
	var out bytes.Buffer
	if err := Run(context.Background(), pool, Options{Prompt: 8, Gen: 4, Reps: 1, Threads: 1, JSON: true, Out: &out}); err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil || len(rows) != 2 {
		t.Fatalf("%v: %s", err, out.String())
	}
	if rows[0]["test"] != "pp8" || rows[1]["test"] != "tg4" || rows[1]["avg_ts"].(float64) <= 0 || rows[1]["bytes_per_token"].(float64) <= 0 {
		t.Errorf("rows %v", rows)
	}
}

// TestRunLlamaFails: when the llama-bench given cannot run, Run still
// prints zrt's rows before it returns the comparison's error.
func TestRunLlamaFails(t *testing.T) {
	pool := batchedBundle(t)
	var out bytes.Buffer
	missing := filepath.Join(t.TempDir(), "llama-bench")
	err := Run(context.Background(), pool, Options{Prompt: 8, Gen: 4, Reps: 1, Threads: 1, Out: &out, LlamaBench: missing, GGUF: "m.gguf"})
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("a missing llama-bench: %v", err)
	}
	for _, test := range []string{"| pp8 |", "| tg4 |"} {
		if !strings.Contains(out.String(), test) {
			t.Errorf("no row %q in:\n%s", test, out.String())
		}
	}
}

// TestRunDepth runs the single-sequence tests after a filled cache, as
// llama-bench's -d does, and refuses a depth past the bundle's context.
func TestRunDepth(t *testing.T) {
	pool := batchedBundle(t)
	var out bytes.Buffer
	if err := Run(context.Background(), pool, Options{Prompt: 8, Gen: 4, Depth: 40, Reps: 1, Threads: 1, JSON: true, Out: &out}); err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil || len(rows) != 2 {
		t.Fatalf("%v: %s", err, out.String())
	}
	if rows[0]["test"] != "pp8 @ d40" || rows[1]["test"] != "tg4 @ d40" || rows[1]["avg_ts"].(float64) <= 0 {
		t.Errorf("rows %v", rows)
	}
	var oe *OptionError
	c := pool.Hparams.ContextLength
	err := Run(context.Background(), pool, Options{Prompt: 8, Gen: 4, Depth: c, Reps: 1, Out: &out})
	if !errors.As(err, &oe) || !strings.Contains(err.Error(), fmt.Sprint(c)) {
		t.Errorf("a depth of the whole context: %v", err)
	}
}

// TestPrintComparison pairs the two benches' rows by B: a B that
// llama-batched-bench left out gets no line.
func TestPrintComparison(t *testing.T) {
	zrt := []BatchedResult{{PL: 1, SpeedTG: 600, SpeedPP: 4000}, {PL: 16, SpeedTG: 5000, SpeedPP: 50000}, {PL: 64, SpeedTG: 11000, SpeedPP: 50000}}
	ref := []BatchedResult{{PL: 1, SpeedTG: 500, SpeedPP: 4000}, {PL: 64, SpeedTG: 10000, SpeedPP: 40000}}
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

// TestWeightStatsTied: a model whose LM head is its embedding table
// counts that table's parameters and bytes once, as the GGUF holds it.
func TestWeightStatsTied(t *testing.T) {
	shape := synth.Tiny
	shape.Arch = "gemma2" // tied output
	dir := t.TempDir()
	model := testmodel.Write(t, dir, "m.gguf", shape)
	out := testmodel.Compile(t, model, filepath.Join(dir, "b"), "", compiler.Options{})
	f, err := gguf.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	var params, size int64
	for _, ti := range f.Tensors {
		n := int64(1)
		for _, d := range ti.Dims {
			n *= d
		}
		params, size = params+n, size+ti.Size
	}
	f.Close()
	pool, err := sequence.Open(out, runtime.Options{Tier: "cpu", Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	gotSize, gotParams, perToken := weightStats(pool)
	if gotParams != params || gotSize != size {
		t.Errorf("weightStats: %d params in %d bytes; the GGUF holds %d in %d", gotParams, gotSize, params, size)
	}
	if perToken <= 0 || perToken > size {
		t.Errorf("bytes per token %d of %d", perToken, size)
	}
}

// TestNoiseWarning: a rate whose spread is large beside its mean is
// flagged, with the advice to repeat more; a steady one is not.
func TestNoiseWarning(t *testing.T) {
	noisy := noiseWarning(Result{Test: "tg64", TokS: 1084.14, StdDev: 1289.97}, 3)
	if !strings.Contains(noisy, "tg64") || !strings.Contains(noisy, "-r") || !strings.Contains(noisy, "noisy") {
		t.Errorf("noisy run: %q", noisy)
	}
	if w := noiseWarning(Result{Test: "pp512", TokS: 1000, StdDev: 150}, 3); w != "" {
		t.Errorf("a 15%% spread warned: %q", w)
	}
}

// TestLlamaCacheArgs: llama.cpp runs with the bundle's KV cache types,
// flash attention on where they are quantized, and refuses a type it has
// no cache of.
func TestLlamaCacheArgs(t *testing.T) {
	for _, tc := range []struct {
		cache [2]string
		want  string
		err   string
	}{
		{[2]string{}, "", ""},
		{[2]string{"q8_0", "q8_0"}, "-ctk q8_0 -ctv q8_0 -fa 1", ""},
		{[2]string{"q8_0", ""}, "-ctk q8_0 -ctv f16 -fa 1", ""},
		{[2]string{"fp8_e4m3", "fp8_e4m3"}, "", "no fp8_e4m3 KV cache"},
	} {
		args, err := llamaCacheArgs(tc.cache)
		if got := strings.Join(args, " "); got != tc.want || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q: %q, %v; want %q, an error saying %q", tc.cache, got, err, tc.want, tc.err)
		}
	}
}

// TestCompareLlama runs a stand-in llama-bench that records its
// arguments: the comparison prints the command line it ran, with the
// bundle's cache types, and pairs the rows by test name.
func TestCompareLlama(t *testing.T) {
	dir := t.TempDir()
	bin, argsFile := filepath.Join(dir, "llama-bench"), filepath.Join(dir, "args")
	script := "#!/bin/sh\necho \"$@\" > " + argsFile + "\n" +
		`echo '[{"n_prompt": 512, "n_gen": 0, "n_depth": 0, "avg_ts": 100, "stddev_ts": 1}, {"n_prompt": 0, "n_gen": 128, "n_depth": 0, "avg_ts": 10, "stddev_ts": 0}]'` + "\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	rows := []Result{{Test: "pp512", TokS: 150}, {Test: "tg128", TokS: 13}}
	var out bytes.Buffer
	opt := Options{Prompt: 512, Gen: 128, Reps: 1, Threads: 2, LlamaBench: bin, GGUF: "m.gguf"}
	if err := compareLlama(context.Background(), &out, rows, opt, true, [2]string{"q8_0", "q8_0"}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(argsFile)
	if err != nil {
		t.Fatal(err)
	}
	want := "-m m.gguf -p 512 -n 128 -d 0 -r 1 -t 2 -ngl 99 -ctk q8_0 -ctv q8_0 -fa 1"
	if strings.TrimSpace(string(got)) != want+" -o json" {
		t.Errorf("llama-bench ran with %q, want %q", got, want+" -o json")
	}
	for _, line := range []string{"llama.cpp: " + bin + " " + want, "| pp512 | 150.00 ± 0.00 | 100.00 ± 1.00 | 1.50× |", "| tg128 | 13.00 ± 0.00 | 10.00 ± 0.00 | 1.30× |"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("no line %q in:\n%s", line, out.String())
		}
	}
	if err := compareLlama(context.Background(), &out, rows, opt, true, [2]string{"fp8_e4m3", "fp8_e4m3"}); err == nil {
		t.Error("an FP8 cache compared with llama.cpp's")
	}
}
