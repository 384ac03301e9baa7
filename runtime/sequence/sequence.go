// Package sequence runs whole sequences on a runtime.Program, one call at
// a time: it owns the slots, hands each sequence KV pages from the
// program's pool as it grows (first free page first), splits a prompt into
// prefill chunks, and keeps each sequence's tokens. It is the simple policy
// zrt-run's generate, eval and bench need; the serving engine replaces it
// with a scheduler and a shared page pool over the same Program.
package sequence

import (
	"context"
	"fmt"
	"math"

	"github.com/zrtdev/zrt/format/support"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/runtime"
)

// Prefill modes (see Pool.Prefill).
const (
	PrefillBatched  = "on"       // prompt chunks through the prefill variant (default)
	PrefillPerToken = "off"      // one token at a time through the decode variant
	PrefillValidate = "validate" // both, logging the last-token logits' largest difference
)

// Pool is a program's slots and KV pages.
type Pool struct {
	*runtime.Program
	slots   []bool
	free    []uint32 // free KV pages, the next to hand out last
	prefill runtime.ShapeKey
	mode    string
	log     func(format string, args ...any)
}

// Open opens the bundle at dir and wraps it in a pool with batched
// prefill.
func Open(dir string, opt runtime.Options) (*Pool, error) {
	p, err := runtime.Open(dir, opt)
	if err != nil {
		return nil, err
	}
	pool, err := New(p, PrefillBatched, opt.Log)
	if err != nil {
		p.Close()
		return nil, err
	}
	return pool, nil
}

// New wraps p. mode is one of the Prefill constants ("" is batched); log
// receives validate mode's report (nil: discarded).
func New(p *runtime.Program, mode string, log func(format string, args ...any)) (*Pool, error) {
	pool := &Pool{Program: p, slots: make([]bool, p.Slots()), mode: mode, log: log}
	for pg := p.KVPages() - 1; pg >= 0; pg-- {
		pool.free = append(pool.free, uint32(pg))
	}
	switch pool.mode {
	case "":
		pool.mode = PrefillBatched
	case PrefillBatched, PrefillPerToken, PrefillValidate:
	default:
		return nil, fmt.Errorf("batched prefill mode %q: want on, off or validate", mode)
	}
	if pool.log == nil {
		pool.log = func(string, ...any) {}
	}
	if _, ok := p.Key(runtime.Decode, 1); !ok {
		return nil, fmt.Errorf("bundle has no decode variant (it has %v)", p.Keys())
	}
	var ok bool
	if pool.prefill, ok = p.Largest(runtime.Prefill); !ok {
		return nil, fmt.Errorf("bundle has no prefill variant (it has %v)", p.Keys())
	}
	return pool, nil
}

// Variants names the variants one sequence replays: its largest prefill
// and its single-row decode ShapeKeys.
func (p *Pool) Variants() string {
	d, _ := p.Key(runtime.Decode, 1)
	return p.prefill.String() + "+" + d.String()
}

// Sequence is one conversation in a slot: the tokens its KV cache holds
// and the pages that hold them.
type Sequence struct {
	slot   int
	Tokens []int32
	pages  []uint32
	pool   *Pool
}

// NewSequence claims a free slot.
func (p *Pool) NewSequence() (*Sequence, error) {
	for i, used := range p.slots {
		if !used {
			p.slots[i] = true
			return &Sequence{slot: i, pool: p}, nil
		}
	}
	return nil, fmt.Errorf("all %d slots are busy", len(p.slots))
}

// Release frees the sequence's slot and pages.
func (s *Sequence) Release() {
	for i := len(s.pages) - 1; i >= 0; i-- {
		s.pool.free = append(s.pool.free, s.pages[i])
	}
	s.pages = nil
	s.pool.slots[s.slot] = false
}

// Pos is the number of tokens in the cache.
func (s *Sequence) Pos() int { return len(s.Tokens) }

// table returns the sequence's page table grown to hold n positions,
// taking pages from the pool.
func (s *Sequence) table(n int) (runtime.SlotPages, error) {
	for len(s.pages)*kernels.KVPageTokens < n {
		p := s.pool
		if len(p.free) == 0 {
			return runtime.SlotPages{}, fmt.Errorf("KV cache full: all %d pages are in use (the bundle's kv_pages)", p.KVPages())
		}
		s.pages = append(s.pages, p.free[len(p.free)-1])
		p.free = p.free[:len(p.free)-1]
	}
	return runtime.SlotPages{Slot: s.slot, Pages: s.pages}, nil
}

func (s *Sequence) checkTokens(toks []int32) error {
	if n, ctx := len(s.Tokens)+len(toks), s.pool.Hparams.ContextLength; n > ctx {
		return fmt.Errorf("sequence of %d tokens exceeds the context length %d", n, ctx)
	}
	for _, t := range toks {
		if t < 0 || int(t) >= s.pool.Hparams.NVocab {
			return fmt.Errorf("token id %d outside the vocabulary of %d", t, s.pool.Hparams.NVocab)
		}
	}
	return nil
}

// step runs the smallest variant of stage that fits toks over them, the
// last row asking for logits when want is set, and appends toks to s.
// prompt is the length of the prompt toks are part of (0: decode rows).
func (s *Sequence) step(ctx context.Context, stage runtime.Stage, toks []int32, prompt int, want bool) error {
	key, ok := s.pool.Key(stage, len(toks))
	if !ok {
		return fmt.Errorf("no %s variant for %d rows (the bundle has %v)", stage, len(toks), s.pool.Keys())
	}
	pages, err := s.table(len(s.Tokens) + len(toks))
	if err != nil {
		return err
	}
	b := runtime.Batch{Key: key, Rows: make([]runtime.Row, len(toks)), Pages: []runtime.SlotPages{pages}}
	for i, t := range toks {
		b.Rows[i] = runtime.Row{Slot: s.slot, Pos: len(s.Tokens) + i, Token: t, Logits: want && i == len(toks)-1, Prompt: prompt}
	}
	if err := s.pool.Step(ctx, b); err != nil {
		return err
	}
	s.Tokens = append(s.Tokens, toks...)
	return nil
}

// DecodeBatch advances several sequences by one token each in a single
// replay of the decode variant — one row per slot. The sequences must be
// distinct. Each one's logits (Logits) and greedy token (Greedy) are then
// ready; nothing is copied out for a caller that wants neither.
func (p *Pool) DecodeBatch(ctx context.Context, seqs []*Sequence, toks []int32) error {
	if len(seqs) != len(toks) || len(seqs) == 0 || len(seqs) > len(p.slots) {
		return fmt.Errorf("decode batch of %d sequences and %d tokens (at most %d slots)", len(seqs), len(toks), len(p.slots))
	}
	key, ok := p.Key(runtime.Decode, len(seqs))
	if !ok {
		return fmt.Errorf("decode batch of %d sequences: no decode variant serves that many (the bundle has %v)", len(seqs), p.Keys())
	}
	b := runtime.Batch{Key: key}
	seen := map[*Sequence]bool{}
	for i, s := range seqs {
		if seen[s] || s.pool != p {
			return fmt.Errorf("decode batch: sequence %d repeated or from another pool", i)
		}
		seen[s] = true
		if err := s.checkTokens(toks[i : i+1]); err != nil {
			return err
		}
		pages, err := s.table(len(s.Tokens) + 1)
		if err != nil {
			return err
		}
		b.Rows = append(b.Rows, runtime.Row{Slot: s.slot, Pos: len(s.Tokens), Token: toks[i], Logits: true})
		b.Pages = append(b.Pages, pages)
	}
	if err := p.Step(ctx, b); err != nil {
		return err
	}
	for i, s := range seqs {
		s.Tokens = append(s.Tokens, toks[i])
	}
	return nil
}

// PrefillBatch evaluates each sequence's prompt as a server's batch
// would: the rows of all of them packed, sequence after sequence, into as
// few replays of the largest prefill variant as hold them (a prompt that
// does not fit a step's remaining rows goes on in the next). Each
// sequence's logits after its last prompt token are then ready (Logits).
// A row's computation depends on its own request, not on the step's other
// rows, on a batch-invariant tier (T-CPU), so the logits are those each
// prompt gets alone. Outside the batched prefill mode it prefills the
// sequences one by one.
func (p *Pool) PrefillBatch(ctx context.Context, seqs []*Sequence, prompts [][]int32) error {
	if len(seqs) != len(prompts) {
		return fmt.Errorf("prefill batch of %d sequences and %d prompts", len(seqs), len(prompts))
	}
	seen := map[*Sequence]bool{}
	for i, s := range seqs {
		if seen[s] || s.pool != p {
			return fmt.Errorf("prefill batch: sequence %d repeated or from another pool", i)
		}
		seen[s] = true
		if len(prompts[i]) == 0 {
			return fmt.Errorf("prefill batch: sequence %d has no prompt tokens", i)
		}
		if err := s.checkTokens(prompts[i]); err != nil {
			return fmt.Errorf("prefill batch: sequence %d: %w", i, err)
		}
	}
	if p.mode != PrefillBatched {
		for i, s := range seqs {
			if _, err := s.Prefill(ctx, prompts[i]); err != nil {
				return err
			}
		}
		return nil
	}
	type span struct {
		s    *Sequence
		toks []int32
	}
	var b runtime.Batch
	var spans []span
	flush := func() error {
		if len(b.Rows) == 0 {
			return nil
		}
		b.Key, _ = p.Key(runtime.Prefill, len(b.Rows)) // the largest variant holds them
		if err := p.Step(ctx, b); err != nil {
			return err
		}
		for _, sp := range spans {
			sp.s.Tokens = append(sp.s.Tokens, sp.toks...)
		}
		b, spans = runtime.Batch{}, nil
		return nil
	}
	for i, s := range seqs {
		toks := prompts[i]
		for from := 0; from < len(toks); {
			if len(b.Rows) == p.prefill.Rows {
				if err := flush(); err != nil {
					return err
				}
			}
			to := min(len(toks), from+p.prefill.Rows-len(b.Rows))
			pages, err := s.table(len(s.Tokens) + to - from)
			if err != nil {
				return err
			}
			for j := from; j < to; j++ {
				b.Rows = append(b.Rows, runtime.Row{Slot: s.slot, Pos: len(s.Tokens) + j - from, Token: toks[j], Logits: j == len(toks)-1, Prompt: len(toks)})
			}
			b.Pages = append(b.Pages, pages)
			spans = append(spans, span{s, toks[from:to]})
			from = to
		}
	}
	return flush()
}

// Prefill evaluates toks and returns the logits after the last one. By
// default it runs the prefill variant over prompt-sized chunks, one batched
// replay each (seed 001); the pool's mode selects the per-token path or
// the validate mode that runs both.
func (s *Sequence) Prefill(ctx context.Context, toks []int32) ([]float32, error) {
	p := s.pool
	if len(toks) == 0 {
		return nil, fmt.Errorf("prefill of no tokens")
	}
	if err := s.checkTokens(toks); err != nil {
		return nil, err
	}
	start := len(s.Tokens)
	var batched []float32
	if p.mode != PrefillPerToken {
		for i := 0; i < len(toks); i += p.prefill.Rows {
			chunk := toks[i:min(len(toks), i+p.prefill.Rows)]
			if err := s.step(ctx, runtime.Prefill, chunk, len(toks), i+len(chunk) == len(toks)); err != nil {
				return nil, err
			}
		}
		batched = s.Logits()
		if p.mode == PrefillBatched {
			return batched, nil
		}
		s.Tokens = s.Tokens[:start] // the per-token pass rewrites the same cache entries
	}
	for _, t := range toks {
		if err := s.step(ctx, runtime.Decode, []int32{t}, 0, true); err != nil {
			return nil, err
		}
	}
	logits := s.Logits()
	if p.mode == PrefillValidate {
		d := 0.0
		for i := range logits {
			d = math.Max(d, math.Abs(float64(logits[i]-batched[i])))
		}
		p.log("batched prefill: %d tokens, max |Δ| of last-token logits vs per-token = %.3g", len(toks), d)
	}
	return logits, nil
}

// Decode appends one token and returns the logits after it.
func (s *Sequence) Decode(ctx context.Context, tok int32) ([]float32, error) {
	if err := s.Advance(ctx, tok); err != nil {
		return nil, err
	}
	return s.Logits(), nil
}

// Advance appends one token without copying the logits out, for a caller
// that takes the graph's choice (Greedy) or only times the step: a
// vocabulary of logits is a large copy per token for a small model.
func (s *Sequence) Advance(ctx context.Context, tok int32) error {
	if err := s.checkTokens([]int32{tok}); err != nil {
		return err
	}
	return s.step(ctx, runtime.Decode, []int32{tok}, 0, true)
}

// VerifyRows is the most rows one Verify step may evaluate: the
// sequence's own and one per slot no sequence holds, within the largest
// decode variant. A model that keeps state in its slots verifies one row
// at a time (see Verify).
func (p *Pool) VerifyRows() int {
	if p.SlotState() {
		return 1
	}
	free := 0
	for _, used := range p.slots {
		if !used {
			free++
		}
	}
	d, _ := p.Largest(runtime.Decode)
	return min(1+free, d.Rows)
}

// Verified is one row's outcome of a Verify step: the graph's greedy
// choice and the logits after the row's token. It has the methods of
// runtime/decode's Source. Its logits can be read until the pool's next
// step.
type Verified struct {
	pool   *Pool
	slot   int
	greedy int32
}

// Greedy is the token the graph's ARGMAX picked after the row.
func (v *Verified) Greedy() int32 { return v.greedy }

// Logits is a copy of the logits after the row.
func (v *Verified) Logits() []float32 { return v.pool.Logits(v.slot, nil) }

// ErrSlotState refuses a verify step of several rows, or a rollback, on a
// model that keeps state in its slots (recurrent layers, a window ring):
// that state follows one token at a time and cannot be shared between a
// step's rows or rolled back.
var ErrSlotState = &support.Error{What: "speculative decoding", Value: "of a model with per-slot state",
	Detail: "recurrent layers and a sliding-window ring cannot be rolled back; decode one token at a time"}

// Verify evaluates toks at the sequence's next positions in a single
// replay of a decode variant, appending them, with logits after every
// row: the verify step of speculative decoding (seed 000 §20, VERIFY_K),
// where toks are the next token followed by a draft's guesses.
//
// The logits region holds one row of logits per slot, so row i takes a
// slot of its own — the sequence's for the first row, a free one for
// each other — and every one of those slots maps the sequence's page
// table. Each row writes its K and V at its position through that table
// before any row attends, and attends to the positions up to its own, so
// row i sees the rows before it as a decode of them one by one would. Its
// logits are those decode steps' bit for bit: on a batch-invariant tier
// (T-CPU) by that invariance, on T-CUDA by the one-row kernels it takes
// for the step (runtime.Batch.OneRowBits). The borrowed slots are free
// again when Verify returns.
//
// Rows past what the caller accepts are taken back with Truncate; their
// KV entries are simply overwritten later.
func (s *Sequence) Verify(ctx context.Context, toks []int32) ([]Verified, error) {
	p := s.pool
	switch {
	case len(toks) == 0:
		return nil, fmt.Errorf("verify step of no tokens")
	case len(toks) > 1 && p.SlotState():
		return nil, ErrSlotState
	case len(toks) > p.VerifyRows():
		return nil, fmt.Errorf("verify step of %d rows: the pool has room for %d (a free slot per row after the first, within the largest decode variant)", len(toks), p.VerifyRows())
	}
	if err := s.checkTokens(toks); err != nil {
		return nil, err
	}
	key, ok := p.Key(runtime.Decode, len(toks))
	if !ok {
		return nil, fmt.Errorf("verify step: no decode variant for %d rows (the bundle has %v)", len(toks), p.Keys())
	}
	pages, err := s.table(len(s.Tokens) + len(toks))
	if err != nil {
		return nil, err
	}
	slots := []int{s.slot}
	for i, used := range p.slots {
		if len(slots) == len(toks) {
			break
		}
		if !used {
			slots = append(slots, i)
		}
	}
	b := runtime.Batch{Key: key, Rows: make([]runtime.Row, len(toks)), Pages: make([]runtime.SlotPages, len(toks)), OneRowBits: true}
	for i, t := range toks {
		b.Rows[i] = runtime.Row{Slot: slots[i], Pos: len(s.Tokens) + i, Token: t, Logits: true}
		b.Pages[i] = runtime.SlotPages{Slot: slots[i], Pages: pages.Pages}
	}
	if err := p.Step(ctx, b); err != nil {
		return nil, err
	}
	s.Tokens = append(s.Tokens, toks...)
	out := make([]Verified, len(toks))
	for i, slot := range slots {
		out[i] = Verified{pool: p, slot: slot, greedy: p.Greedy(slot)}
	}
	return out, nil
}

// Truncate rolls the sequence back to its first n tokens, returning the
// pages it no longer needs to the pool (the first of them is the next
// handed out). The KV entries past n stay until positions reach them
// again and overwrite them. A model with per-slot state cannot roll back
// (ErrSlotState).
func (s *Sequence) Truncate(n int) error {
	switch {
	case n < 0 || n > len(s.Tokens):
		return fmt.Errorf("truncate to %d tokens: the sequence holds %d", n, len(s.Tokens))
	case n == len(s.Tokens):
		return nil
	case s.pool.SlotState():
		return ErrSlotState
	}
	s.Tokens = s.Tokens[:n]
	keep := (n + kernels.KVPageTokens - 1) / kernels.KVPageTokens
	for i := len(s.pages) - 1; i >= keep; i-- {
		s.pool.free = append(s.pool.free, s.pages[i])
	}
	s.pages = s.pages[:keep]
	return nil
}

// CanDraft reports whether the bundle has a draft variant (built with
// draft_layers) for Draft.
func (p *Pool) CanDraft() bool {
	_, ok := p.Key(runtime.Draft, 1)
	return ok
}

// Draft appends tok through the bundle's draft variant — the model's
// first layers and its output head — and returns the token that
// variant's logits make most likely: self-speculation's guess of the
// next token. It writes K and V of the first layers only; the caller
// rolls the sequence back (Truncate) before the verify step evaluates
// the same positions through every layer.
func (s *Sequence) Draft(ctx context.Context, tok int32) (int32, error) {
	if err := s.checkTokens([]int32{tok}); err != nil {
		return -1, err
	}
	if err := s.step(ctx, runtime.Draft, []int32{tok}, 0, true); err != nil {
		return -1, err
	}
	return s.Greedy(), nil
}

// Pages is how many KV pages the sequence holds.
func (s *Sequence) Pages() int { return len(s.pages) }

// FreePages is how many KV pages no sequence holds.
func (p *Pool) FreePages() int { return len(p.free) }

// Logits is a copy of the slot's current logits.
func (s *Sequence) Logits() []float32 { return s.pool.Logits(s.slot, nil) }

// Greedy is the token the graph's ARGMAX picked for the slot.
func (s *Sequence) Greedy() int32 { return s.pool.Greedy(s.slot) }
