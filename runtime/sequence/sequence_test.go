package sequence_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/internal/testmodel"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/sequence"
)

// build compiles the tiny synthetic model with the given model config.
func build(t *testing.T, config string) string {
	t.Helper()
	_, out := testmodel.Bundle(t, config, compiler.Options{})
	return out
}

// prefilled starts a sequence on p and prefills prompt; the caller
// releases it.
func prefilled(t *testing.T, p *sequence.Pool, prompt []int32) *sequence.Sequence {
	t.Helper()
	s, err := p.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prefill(context.Background(), prompt); err != nil {
		s.Release()
		t.Fatal(err)
	}
	return s
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
	// Prefill r4 and r8, decode r1 and r2, and the default build's draft
	// variant of each decode variant.
	if got := len(many.Keys()); got != 6 {
		t.Fatalf("variants %v, want 6", many.Keys())
	}
	if many.KVPages() != 3 || one.KVPages() != 2*16 {
		t.Fatalf("pools of %d and %d pages, want 3 and 32", many.KVPages(), one.KVPages())
	}
	ctx := context.Background()
	prompt := []int32{1, 300, 301, 302, 303, 304, 305, 306, 307, 308, 309} // chunks of 8 and 3 rows
	run := func(p *sequence.Pool) []float32 {
		s := prefilled(t, p, prompt)
		defer s.Release()
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

// TestVerify: a verify step of five rows gives each row the greedy token
// and the logits a decode of the rows one by one gives, bit for bit
// (T-CPU is batch invariant); Truncate then rolls the sequence back,
// returning the page the rejected rows took, and decoding from there
// matches too. Bad steps are refused.
func TestVerify(t *testing.T) {
	p := open(t, build(t, "decode_slots = [1, 2, 4, 8]\nprefill_rows = [8]\nkv_pages = 8\n"))
	ctx := context.Background()
	prompt := []int32{1, 300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 310, 311, 312} // 14: the rows cross a page
	rows := []int32{40, 41, 42, 43, 44}
	type out struct {
		greedy int32
		logits []float32
	}
	var want []out
	one, err := p.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := one.Prefill(ctx, prompt); err != nil {
		t.Fatal(err)
	}
	for _, tok := range rows {
		l, err := one.Decode(ctx, tok)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, out{one.Greedy(), l})
	}
	one.Release()

	s := prefilled(t, p, prompt)
	defer s.Release()
	if got := p.VerifyRows(); got != 8 {
		t.Errorf("VerifyRows = %d with 7 free slots and decode variants up to 8 rows, want 8", got)
	}
	free := p.FreePages()
	got, err := s.Verify(ctx, rows)
	if err != nil {
		t.Fatal(err)
	}
	if s.Pos() != len(prompt)+len(rows) || s.Pages() != 2 || p.FreePages() != free-1 {
		t.Fatalf("after verify: %d tokens on %d pages (%d free), want %d on 2 (%d free)", s.Pos(), s.Pages(), p.FreePages(), len(prompt)+len(rows), free-1)
	}
	for i := range rows {
		if got[i].Greedy() != want[i].greedy || !slices.Equal(got[i].Logits(), want[i].logits) {
			t.Errorf("row %d: greedy %d, decode gives %d; logits equal: %v", i, got[i].Greedy(), want[i].greedy, slices.Equal(got[i].Logits(), want[i].logits))
		}
	}
	// Accept two of the rows: the third's page goes back.
	if err := s.Truncate(len(prompt) + 2); err != nil {
		t.Fatal(err)
	}
	if s.Pages() != 1 || p.FreePages() != free || !slices.Equal(s.Tokens[len(prompt):], rows[:2]) {
		t.Fatalf("after truncate: %d pages (%d free), tokens %v", s.Pages(), p.FreePages(), s.Tokens[len(prompt):])
	}
	l, err := s.Decode(ctx, rows[2])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(l, want[2].logits) {
		t.Error("decoding after the rollback gives other logits than decoding without one")
	}
	if _, err := s.Verify(ctx, make([]int32, 9)); err == nil || !strings.Contains(err.Error(), "room for 8") {
		t.Errorf("9 rows: %v", err)
	}
	if _, err := s.Verify(ctx, nil); err == nil {
		t.Error("a verify step of no rows was accepted")
	}
	if _, err := s.Verify(ctx, []int32{1 << 20}); err == nil || !strings.Contains(err.Error(), "vocabulary") {
		t.Errorf("token outside the vocabulary: %v", err)
	}
	if err := s.Truncate(s.Pos() + 1); err == nil {
		t.Error("truncating past the end was accepted")
	}
}
