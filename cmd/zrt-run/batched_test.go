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

func TestBatchedBench(t *testing.T) {
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
