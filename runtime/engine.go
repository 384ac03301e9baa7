// Package runtime is zrt-run's engine: it opens a bundle, picks a tier,
// and drives the variants — prefill chunks and decode steps — over the
// request table, slot by slot. It never imports the compiler.
package runtime

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"unsafe"

	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/vocab"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/runtime/cpu"
	"github.com/zrtdev/zrt/runtime/cuda"
	"github.com/zrtdev/zrt/runtime/tokenizer"
)

// Tier is what the engine needs of an execution tier (seed 000 §8.2,
// reduced to what replay uses): host views of the request table and the
// outputs, and replay of a variant to its fence.
type Tier interface {
	Name() string
	// Region returns the host-visible bytes of a memory-plan region.
	Region(i int) []byte
	// Run replays variant i and waits for its fence.
	Run(ctx context.Context, i int) error
	Close() error
}

// Options configure Open. Every setting is here: the runtime reads no
// environment variables (the commands map ZRT_* onto these fields), so
// one process can hold engines with different settings.
type Options struct {
	Tier    string // auto (default), cpu, cuda, t1, t2, metal
	Threads int    // T-CPU workers (default: all CPUs)
	// Verify hashes the weights pack against the graph file.
	Verify bool
	// Log receives notes such as a tier fallback.
	Log func(format string, args ...any)
	// BatchedPrefill is "on" (default), "off" (evaluate prompts one token
	// at a time through the decode variant) or "validate" (both, reporting
	// the largest difference of the last-token logits through Log).
	BatchedPrefill string
	// Trace is passed to T-CPU (see cpu.Options.Trace).
	Trace func(i int, kernel string, out []byte)
	// CUDA configures T-CUDA when it is the tier.
	CUDA cuda.Options
}

// Engine is a loaded bundle on a tier.
type Engine struct {
	Bundle  *bundle.Bundle
	Hparams bundle.Hparams
	Tok     *tokenizer.Tokenizer
	tier    Tier

	prefill, decode  int // variant indices
	prefillRows      int
	io, logits, toks int // region indices
	slots            []bool
	batched          string // on, off, validate
	log              func(format string, args ...any)
}

// Open loads a bundle and its tier.
func Open(dir string, opt Options) (*Engine, error) {
	b, err := bundle.Open(dir, opt.Verify)
	if err != nil {
		return nil, err
	}
	e := &Engine{Bundle: b, Hparams: b.Graph.Hparams, prefill: -1, decode: -1}
	fail := func(err error) (*Engine, error) { e.Close(); return nil, err }
	if e.Tok, err = loadTokenizer(b.Graph.Vocab); err != nil {
		return fail(fmt.Errorf("bundle %s: tokenizer: %w", dir, err))
	}
	for i, v := range b.Graph.Variants {
		switch v.Stage {
		case bundle.StagePrefill:
			e.prefill, e.prefillRows = i, int(v.Rows)
		case bundle.StageDecode:
			e.decode = i
		}
	}
	if e.prefill < 0 || e.decode < 0 {
		return fail(fmt.Errorf("bundle %s: needs a prefill and a decode variant", dir))
	}
	idx := map[string]*int{kernels.RegionIO: &e.io, kernels.RegionLogits: &e.logits, kernels.RegionTokens: &e.toks}
	for name, p := range idx {
		*p = -1
		for i, r := range b.Graph.Regions {
			if r.Name == name {
				*p = i
			}
		}
		if *p < 0 {
			return fail(fmt.Errorf("bundle %s: memory plan lacks region %s", dir, name))
		}
	}
	if e.tier, err = openTier(b, opt); err != nil {
		return fail(err)
	}
	e.slots = make([]bool, e.Hparams.MaxSlots)
	e.initIO()
	e.log = opt.Log
	if e.log == nil {
		e.log = func(string, ...any) {}
	}
	e.batched = opt.BatchedPrefill
	switch e.batched {
	case "", "on":
		e.batched = "on"
	case "off", "validate":
	default:
		return fail(fmt.Errorf("batched prefill mode %q: want on, off or validate", e.batched))
	}
	return e, nil
}

func loadTokenizer(b []byte) (*tokenizer.Tokenizer, error) {
	v, err := vocab.Unmarshal(b)
	if err != nil {
		return nil, err
	}
	return tokenizer.New(v)
}

// openTier picks the tier: an explicit choice that cannot run fails with
// the reason; auto takes the best that can.
func openTier(b *bundle.Bundle, opt Options) (Tier, error) {
	choice := opt.Tier
	if choice == "" {
		choice = "auto"
	}
	target := b.Graph.Ident.Target
	switch choice {
	case "auto", "cpu":
		if choice == "auto" && strings.HasPrefix(target, "cuda:") {
			return openCUDA(b, opt.CUDA)
		}
		if target != "cpu" {
			return nil, fmt.Errorf("tier %s: bundle was compiled for %s; rebuild with zrtc build --target cpu", choice, target)
		}
		return cpu.Load(b, cpu.Options{Threads: opt.Threads, Trace: opt.Trace})
	case "cuda":
		if !strings.HasPrefix(target, "cuda:") {
			return nil, fmt.Errorf("tier cuda: bundle was compiled for %s; rebuild with zrtc build --target cuda:sm_90", target)
		}
		return openCUDA(b, opt.CUDA)
	case "t1", "t2", "metal":
		return nil, fmt.Errorf("tier %s is not available in this build of zrt-run", choice)
	}
	return nil, fmt.Errorf("unknown tier %q (auto, cpu, cuda, t1, t2, metal)", choice)
}

// openCUDA loads a cuda bundle on T-CUDA; where CUDA cannot run, the
// error is the driver probe's reason.
func openCUDA(b *bundle.Bundle, opt cuda.Options) (Tier, error) {
	t, err := cuda.Load(b, opt)
	if err != nil {
		return nil, fmt.Errorf("tier cuda: %w", err)
	}
	return t, nil
}

// Variants names the variants replayed: the prefill and decode ShapeKeys.
func (e *Engine) Variants() string {
	name := func(i int) string {
		v := e.Bundle.Graph.Variants[i]
		stage := map[uint8]string{bundle.StagePrefill: "prefill", bundle.StageDecode: "decode"}[v.Stage]
		return fmt.Sprintf("%s.s%d.r%d", stage, v.Slots, v.Rows)
	}
	return name(e.prefill) + "+" + name(e.decode)
}

// TierName names the tier in use.
func (e *Engine) TierName() string { return e.tier.Name() }

// Close releases the tier and the bundle.
func (e *Engine) Close() error {
	if e.tier != nil {
		e.tier.Close()
	}
	return e.Bundle.Close()
}

// ioWords views the request table.
func (e *Engine) ioWords() []uint32 {
	b := e.tier.Region(e.io)
	return unsafe.Slice((*uint32)(unsafe.Pointer(&b[0])), len(b)/4)
}

// initIO writes the table's fixed header and a static page table: slot s
// owns pages s·MaxPages … (s+1)·MaxPages-1.
func (e *Engine) initIO() {
	w := e.ioWords()
	maxPages := int(e.Hparams.MaxPages)
	pt := kernels.NewRequestTable(int(e.Hparams.PrefillChunk), int(e.Hparams.MaxSlots), maxPages).PageTable()
	w[kernels.IOWordMaxPages] = uint32(maxPages)
	w[kernels.IOWordPageTable] = uint32(pt)
	for s := 0; s < int(e.Hparams.MaxSlots); s++ {
		for p := 0; p < maxPages; p++ {
			w[pt+s*maxPages+p] = uint32(s*maxPages + p)
		}
	}
}

// Sequence is one conversation's state in a slot: the tokens its KV cache holds.
type Sequence struct {
	slot   int
	Tokens []int32
	e      *Engine
}

// NewSequence claims a free slot.
func (e *Engine) NewSequence() (*Sequence, error) {
	for i, used := range e.slots {
		if !used {
			e.slots[i] = true
			return &Sequence{slot: i, e: e}, nil
		}
	}
	return nil, fmt.Errorf("all %d slots are busy", len(e.slots))
}

// Release frees the sequence's slot.
func (s *Sequence) Release() { s.e.slots[s.slot] = false }

// Pos is the number of tokens in the cache.
func (s *Sequence) Pos() int { return len(s.Tokens) }

func (e *Engine) checkTokens(s *Sequence, toks []int32) error {
	if len(s.Tokens)+len(toks) > int(e.Hparams.ContextLength) {
		return fmt.Errorf("sequence of %d tokens exceeds the context length %d", len(s.Tokens)+len(toks), e.Hparams.ContextLength)
	}
	for _, t := range toks {
		if t < 0 || uint32(t) >= e.Hparams.NVocab {
			return fmt.Errorf("token id %d outside the vocabulary of %d", t, e.Hparams.NVocab)
		}
	}
	return nil
}

// row is one row of a step: a token of a sequence, and whether the step
// must produce logits for that sequence.
type row struct {
	s    *Sequence
	tok  int32
	want bool
}

// run writes rows into the request table, replays a variant, and appends
// each row's token to its sequence.
func (e *Engine) run(ctx context.Context, variant int, rows []row) error {
	w := e.ioWords()
	w[kernels.IOWordRows] = uint32(len(rows))
	pos := map[*Sequence]int{}
	for i, r := range rows {
		p := len(r.s.Tokens) + pos[r.s]
		pos[r.s]++
		rec := w[kernels.IOWordRowBase+i*kernels.IORowWords:]
		rec[kernels.IORowToken] = uint32(r.tok)
		rec[kernels.IORowPos] = uint32(p)
		rec[kernels.IORowSlot] = uint32(r.s.slot)
		rec[kernels.IORowFlags] = 0
		if r.want {
			rec[kernels.IORowFlags] = kernels.RowWantsLogits
		}
	}
	if err := e.tier.Run(ctx, variant); err != nil {
		return err
	}
	for _, r := range rows {
		r.s.Tokens = append(r.s.Tokens, r.tok)
	}
	return nil
}

// step runs one variant over toks of one sequence; the last row asks for
// logits when want is set.
func (e *Engine) step(ctx context.Context, variant int, s *Sequence, toks []int32, want bool) error {
	rows := make([]row, len(toks))
	for i, t := range toks {
		rows[i] = row{s, t, want && i == len(toks)-1}
	}
	return e.run(ctx, variant, rows)
}

// DecodeBatch advances several sequences by one token each in a single
// replay of the decode variant — one row per slot — and returns each
// sequence's logits. The sequences must be distinct.
func (e *Engine) DecodeBatch(ctx context.Context, seqs []*Sequence, toks []int32) ([][]float32, error) {
	if len(seqs) != len(toks) || len(seqs) == 0 || len(seqs) > len(e.slots) {
		return nil, fmt.Errorf("decode batch of %d sequences and %d tokens (at most %d slots)", len(seqs), len(toks), len(e.slots))
	}
	rows := make([]row, len(seqs))
	seen := map[*Sequence]bool{}
	for i, s := range seqs {
		if seen[s] || s.e != e {
			return nil, fmt.Errorf("decode batch: sequence %d repeated or from another engine", i)
		}
		seen[s] = true
		if err := e.checkTokens(s, toks[i:i+1]); err != nil {
			return nil, err
		}
		rows[i] = row{s, toks[i], true}
	}
	if err := e.run(ctx, e.decode, rows); err != nil {
		return nil, err
	}
	out := make([][]float32, len(seqs))
	for i, s := range seqs {
		out[i] = s.Logits()
	}
	return out, nil
}

// Prefill evaluates toks and returns the logits after the last one. By
// default it runs the prefill variant over prompt-sized chunks, one batched
// replay each (seed 001); see Options.BatchedPrefill for the per-token path
// and the validate mode that runs both.
func (s *Sequence) Prefill(ctx context.Context, toks []int32) ([]float32, error) {
	e := s.e
	if len(toks) == 0 {
		return nil, fmt.Errorf("prefill of no tokens")
	}
	if err := e.checkTokens(s, toks); err != nil {
		return nil, err
	}
	start := len(s.Tokens)
	if e.batched != "off" {
		for i := 0; i < len(toks); i += e.prefillRows {
			chunk := toks[i:min(len(toks), i+e.prefillRows)]
			if err := e.step(ctx, e.prefill, s, chunk, i+len(chunk) == len(toks)); err != nil {
				return nil, err
			}
		}
		if e.batched == "on" {
			return s.Logits(), nil
		}
	}
	batched := s.Logits()
	s.Tokens = s.Tokens[:start] // the per-token pass rewrites the same cache entries
	for _, t := range toks {
		if err := e.step(ctx, e.decode, s, []int32{t}, true); err != nil {
			return nil, err
		}
	}
	logits := s.Logits()
	if e.batched == "validate" {
		d := 0.0
		for i := range logits {
			d = math.Max(d, math.Abs(float64(logits[i]-batched[i])))
		}
		e.log("batched prefill: %d tokens, max |Δ| of last-token logits vs per-token = %.3g", len(toks), d)
	}
	return logits, nil
}

// Decode appends one token and returns the logits after it.
func (s *Sequence) Decode(ctx context.Context, tok int32) ([]float32, error) {
	if err := s.e.checkTokens(s, []int32{tok}); err != nil {
		return nil, err
	}
	if err := s.e.step(ctx, s.e.decode, s, []int32{tok}, true); err != nil {
		return nil, err
	}
	return s.Logits(), nil
}

// Logits is a copy of the slot's current logits.
func (s *Sequence) Logits() []float32 {
	nv := int(s.e.Hparams.NVocab)
	b := s.e.tier.Region(s.e.logits)[s.slot*nv*4 : (s.slot+1)*nv*4]
	out := make([]float32, nv)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// Greedy is the token the graph's ARGMAX picked for the slot.
func (s *Sequence) Greedy() int32 {
	return int32(binary.LittleEndian.Uint32(s.e.tier.Region(s.e.toks)[4*s.slot:]))
}
