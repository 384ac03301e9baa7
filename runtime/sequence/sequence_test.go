package sequence_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/sequence"
)

// build compiles the tiny synthetic model with the given model config.
func build(t *testing.T, config string) string {
	t.Helper()
	b, err := synth.Write(synth.Tiny)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	model, cfg, out := filepath.Join(dir, "m.gguf"), filepath.Join(dir, "m.toml"), filepath.Join(dir, "b")
	if err := os.WriteFile(model, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := compiler.Compile(context.Background(), model, out, compiler.Options{ConfigPath: cfg}); err != nil {
		t.Fatal(err)
	}
	return out
}

func open(t *testing.T, dir string) *sequence.Pool {
	t.Helper()
	p, err := sequence.Open(dir, runtime.Options{Tier: "cpu", Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestVariantsAndPages: a bundle with several prefill and decode variants
// and a small page pool gives the same logits as one with a single
// variant of each stage and full-context pages per slot; sequences take
// pages as they grow, a full pool is a clear error, and released pages
// are reused.
func TestVariantsAndPages(t *testing.T) {
	many := open(t, build(t, "decode_slots = [1, 2]\nprefill_rows = [4, 8]\nkv_pages = 3\n"))
	one := open(t, build(t, "max_slots = 2\nprefill_chunk = 8\n"))
	if got := len(many.Keys()); got != 4 {
		t.Fatalf("variants %v, want 4", many.Keys())
	}
	if many.KVPages() != 3 || one.KVPages() != 2*16 {
		t.Fatalf("pools of %d and %d pages, want 3 and 32", many.KVPages(), one.KVPages())
	}
	ctx := context.Background()
	prompt := []int32{1, 300, 301, 302, 303, 304, 305, 306, 307, 308, 309} // chunks of 8 and 3 rows
	run := func(p *sequence.Pool) []float32 {
		s, err := p.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Release()
		if _, err := s.Prefill(ctx, prompt); err != nil {
			t.Fatal(err)
		}
		l, err := s.Decode(ctx, 310)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	if a, b := run(many), run(one); !slices.Equal(a, b) {
		t.Error("logits differ between the bundle with several variants and the one with one of each")
	}

	// 3 pages hold 48 positions in all.
	a, _ := many.NewSequence()
	b, _ := many.NewSequence()
	if _, err := a.Prefill(ctx, make([]int32, 40)); err != nil { // 3 pages
		t.Fatal(err)
	}
	if _, err := b.Prefill(ctx, []int32{1}); err == nil || !strings.Contains(err.Error(), "KV cache full") {
		t.Errorf("a fourth page was handed out: %v", err)
	}
	a.Release()
	if _, err := b.Prefill(ctx, make([]int32, 40)); err != nil {
		t.Errorf("released pages were not reused: %v", err)
	}
	b.Release()
}

// TestPrefillBatch packs three prompts (5, 40 and 17 tokens) into steps of
// the largest prefill variant, one of them split across steps, and gets
// each sequence the logits, tokens and positions it gets prefilled alone
// (T-CPU is batch invariant); the batch is refused for a repeated
// sequence or an empty prompt.
func TestPrefillBatch(t *testing.T) {
	p := open(t, build(t, "max_slots = 4\nprefill_rows = [8, 16]\n"))
	ctx := context.Background()
	prompts := make([][]int32, 3)
	for i, n := range []int{5, 40, 17} {
		for j := range n {
			prompts[i] = append(prompts[i], int32(1+(i*31+j*7)%200))
		}
	}
	var alone [][]float32
	for _, pr := range prompts {
		s, err := p.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		l, err := s.Prefill(ctx, pr)
		if err != nil {
			t.Fatal(err)
		}
		alone = append(alone, slices.Clone(l))
		s.Release()
	}
	var seqs []*sequence.Sequence
	for range prompts {
		s, err := p.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Release()
		seqs = append(seqs, s)
	}
	if err := p.PrefillBatch(ctx, seqs, prompts); err != nil {
		t.Fatal(err)
	}
	for i, s := range seqs {
		if !slices.Equal(s.Tokens, prompts[i]) || s.Pos() != len(prompts[i]) {
			t.Errorf("sequence %d holds %d tokens, want its prompt of %d", i, s.Pos(), len(prompts[i]))
		}
		if got := s.Logits(); !slices.Equal(got, alone[i]) {
			t.Errorf("sequence %d: batched prefill's logits differ from its own prefill's", i)
		}
	}
	if err := p.PrefillBatch(ctx, []*sequence.Sequence{seqs[0], seqs[0]}, prompts[:2]); err == nil || !strings.Contains(err.Error(), "repeated") {
		t.Errorf("repeated sequence: %v", err)
	}
	if err := p.PrefillBatch(ctx, seqs[:1], [][]int32{nil}); err == nil || !strings.Contains(err.Error(), "no prompt tokens") {
		t.Errorf("empty prompt: %v", err)
	}
}
