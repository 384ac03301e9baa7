package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/sequence"
)

// TestWeightStatsTied: a model whose LM head is its embedding table
// counts that table's parameters and bytes once, as the GGUF holds it.
func TestWeightStatsTied(t *testing.T) {
	shape := synth.Tiny
	shape.Arch = "gemma2" // tied output
	b, err := synth.Write(shape)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	model, out := filepath.Join(dir, "m.gguf"), filepath.Join(dir, "b")
	os.WriteFile(model, b, 0o644)
	if err := compiler.Compile(context.Background(), model, out, compiler.Options{}); err != nil {
		t.Fatal(err)
	}
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
	noisy := noiseWarning(benchResult{Test: "tg64", TokS: 1084.14, StdDev: 1289.97}, 3)
	if !strings.Contains(noisy, "tg64") || !strings.Contains(noisy, "-r") || !strings.Contains(noisy, "noisy") {
		t.Errorf("noisy run: %q", noisy)
	}
	if w := noiseWarning(benchResult{Test: "pp512", TokS: 1000, StdDev: 150}, 3); w != "" {
		t.Errorf("a 15%% spread warned: %q", w)
	}
}

// TestGenerateContextNote: generate says on stderr when it stopped at the
// context rather than after -n tokens, naming the limit.
func TestGenerateContextNote(t *testing.T) {
	_, bundle := batchedBundle(t) // context 256
	run := func(n string) string {
		root := &cobra.Command{Use: "zrt-run", SilenceUsage: true, SilenceErrors: true}
		root.AddCommand(generateCmd())
		var errb bytes.Buffer
		root.SetOut(&bytes.Buffer{})
		root.SetErr(&errb)
		root.SetArgs([]string{"generate", bundle, "--tokens", "1,5,9", "-n", n, "--threads", "1", "--temp", "0"})
		if err := root.Execute(); err != nil {
			t.Fatal(err)
		}
		return errb.String()
	}
	if note := run("100000"); !strings.Contains(note, "context") || !strings.Contains(note, "256") || !strings.Contains(note, "100000") {
		t.Errorf("-n 100000 on a 256-token context: stderr %q", note)
	}
	if note := run("5"); note != "" {
		t.Errorf("-n 5: stderr %q", note)
	}
}
