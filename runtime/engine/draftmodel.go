package engine

import (
	"context"
	"fmt"
	"math"

	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/engine/kvpool"
	"github.com/zrtdev/zrt/runtime/sample"
	"github.com/zrtdev/zrt/runtime/spec"
)

// draftModel is a draft bundle served beside the target (Config.DraftModel,
// speculative kind draft; seed 000 §18.12's second model of an engine):
// its own KV pages, and for each request that drafted the tokens its KV
// holds. A request drafts in the draft model's slot of the same number as
// its own; the draft's KV lives in its pages, so a request that moves to
// another slot keeps it. For a greedy request the draft proposes its
// greedy tokens, which the target's decoder takes or not as it takes an
// n-gram's, so its output is the target's alone bit for bit. For a
// sampled one it draws them from its own distribution q as the request
// samples, and the target's decoder keeps each with probability
// min(1, p/q) or else draws from the residual max(p − q, 0) (speculative
// sampling): the output follows the target's distribution p exactly,
// while the draft is kept as often as p and q overlap (Σ min(p, q)),
// where a greedy draft is kept only with probability p of its token.
type draftModel struct {
	m    Model
	pool *kvpool.Pool
	seqs map[uint64]*draftSeq
}

// draftSeq is the draft model's KV of one request: the tokens it holds
// at positions 0… and the pages that hold them.
type draftSeq struct {
	tokens []int32
	pages  []uint32
}

func newDraftModel(m Model) *draftModel {
	return &draftModel{m: m, pool: kvpool.New(m.KVPages()), seqs: map[uint64]*draftSeq{}}
}

// drop gives back a request's draft pages.
func (d *draftModel) drop(id uint64) {
	s := d.seqs[id]
	if s == nil {
		return
	}
	for _, pg := range s.pages {
		d.pool.Release(pg)
	}
	delete(d.seqs, id)
}

// truncate keeps the first n tokens of s and the pages they need.
func (d *draftModel) truncate(s *draftSeq, n int) {
	s.tokens = s.tokens[:n]
	keep := (n + pageTokens - 1) / pageTokens
	for _, pg := range s.pages[keep:] {
		d.pool.Release(pg)
	}
	s.pages = s.pages[:keep]
}

// grow gives s pages for n positions; false when the draft pool has too
// few free.
func (d *draftModel) grow(s *draftSeq, n int) bool {
	for len(s.pages)*pageTokens < n {
		pg, ok := d.pool.Alloc("")
		if !ok {
			return false
		}
		s.pages = append(s.pages, pg)
	}
	return true
}

// modelDraft makes the draft tokens of the step's proposals with the draft
// model: for each request that proposes k placeholders, its draft KV is
// rolled back to where it agrees with the request's tokens and fed the
// rest up to the pending token (prefill steps, in the request's slot),
// then one step a token after the first. A request whose draft KV does
// not fit the draft model's free pages (after those of requests not
// running are given back) drafts nothing this step, and so does one
// whose draft step fails (the draft is only a guess: the request goes on
// without it, the failure counted in Stats.SpecDraftErrors). It logs the
// step's drafts by their tokens, so that a rerun needs no draft model.
func (e *Engine) modelDraft(ctx context.Context) {
	d := e.dm
	if d == nil {
		return // (a rerun without the draft model pins its tokens)
	}
	running := map[uint64]bool{}
	live := map[uint64]bool{}
	for _, r := range e.reqs {
		live[r.id], running[r.id] = true, r.slot >= 0
	}
	for id := range d.seqs {
		if !live[id] {
			d.drop(id)
		}
	}
	for _, r := range e.reqs {
		if r.spec == nil || r.slot < 0 || len(r.spec.draft) == 0 {
			continue
		}
		k := len(r.spec.draft)
		s := d.seqs[r.id]
		if s == nil {
			s = &draftSeq{}
			d.seqs[r.id] = s
		}
		end := r.done + k // positions the draft writes: r.tokens[:r.done+1] and k-1 draft tokens
		if !d.grow(s, end) {
			for id := range d.seqs {
				if !running[id] {
					d.drop(id)
				}
			}
			if !d.grow(s, end) {
				d.truncate(s, min(len(s.tokens), len(s.pages)*pageTokens))
				r.spec.draft, r.spec.q = r.spec.draft[:0], r.spec.q[:0]
				continue
			}
		}
		if err := e.draftTokens(ctx, r, s); err != nil {
			d.drop(r.id)
			r.spec.draft, r.spec.q = r.spec.draft[:0], r.spec.q[:0]
			e.mu.Lock()
			e.stats.SpecDraftErrors++
			e.stats.SpecDraftError = err.Error()
			e.mu.Unlock()
		}
	}
	e.logDrafts()
}

// draftTokens fills r's placeholders with the draft model's greedy
// tokens, s holding the draft's KV of r and pages for them.
func (e *Engine) draftTokens(ctx context.Context, r *request, s *draftSeq) error {
	d := e.dm
	same := 0
	for same < min(len(s.tokens), r.done) && s.tokens[same] == r.tokens[same] {
		same++
	}
	s.tokens = s.tokens[:same] // the pages stay: grow gave them for this step
	pages := []runtime.SlotPages{{Slot: r.slot, Pages: s.pages}}
	step := func(stage runtime.Stage, toks []int32) error {
		key, ok := d.m.Key(stage, len(toks))
		if !ok {
			return fmt.Errorf("engine: draft model has no %s variant for %d rows", stage, len(toks))
		}
		b := runtime.Batch{Key: key, Pages: pages}
		prompt := 0
		if stage == runtime.Prefill {
			prompt = len(toks)
		}
		for i, t := range toks {
			b.Rows = append(b.Rows, runtime.Row{Slot: r.slot, Pos: len(s.tokens) + i, Token: t, Logits: i == len(toks)-1, Prompt: prompt})
		}
		at := e.cfg.Now()
		if err := d.m.Step(ctx, b); err != nil {
			return fmt.Errorf("engine: draft model step: %w", err)
		}
		if stage == runtime.Decode {
			// A draft token's cost: a prompt's catch-up, once a request,
			// is not what the next draft costs.
			e.specPolicy.observeDraft(e.cfg.Now().Sub(at))
		} else {
			e.specPolicy.spend(e.cfg.Now().Sub(at)) // a catch-up: a probe's cost, when it probes
		}
		s.tokens = append(s.tokens, toks...)
		return nil
	}
	feed := r.tokens[same : r.done+1]
	for len(feed) > 1 {
		n := len(feed)
		for _, ok := d.m.Key(runtime.Prefill, n); !ok && n > 1; _, ok = d.m.Key(runtime.Prefill, n) {
			n /= 2
		}
		if n == 1 {
			break
		}
		if err := step(runtime.Prefill, feed[:n]); err != nil {
			return err
		}
		feed = feed[n:]
	}
	for _, t := range feed {
		if err := step(runtime.Decode, []int32{t}); err != nil {
			return err
		}
	}
	for j := range r.spec.draft {
		if j > 0 {
			if err := step(runtime.Decode, r.spec.draft[j-1:j]); err != nil {
				return err
			}
		}
		if r.spec.sampler == nil {
			r.spec.draft[j] = d.m.Greedy(r.slot)
			continue
		}
		tok, q := e.sampleDraft(r, j)
		r.spec.draft[j], r.spec.q = tok, append(r.spec.q, q)
	}
	return nil
}

// sampleDraft draws r's j-th draft token from the draft model's logits of
// the last step in r's slot, as r's sampling parameters shape them (end-of-
// generation tokens banned where the request bans them), and returns it
// with the distribution it was drawn from. The generator restarts at the
// token's position, so that a position's draft is the same however often
// and at whatever draft length it is made (a rerun makes it again).
func (e *Engine) sampleDraft(r *request, j int) (int32, sample.Dist) {
	logits := e.dm.m.Logits(r.slot, e.logits)
	e.logits = logits
	if r.Decode.IgnoreEOS {
		for _, id := range e.tok.Vocab().EOGTokens() {
			if int(id) < len(logits) {
				logits[id] = float32(math.Inf(-1))
			}
		}
	}
	history := append(r.tokens[:r.done+1:r.done+1], r.spec.draft[:j]...)
	r.spec.sampler.Restart(uint64(r.done + 1 + j))
	return r.spec.sampler.SampleDist(logits, history)
}

// CheckDraft says whether program draft can draft for target: the same
// vocabulary, token for token (runtime/spec's CheckDraft).
func CheckDraft(target, draft *runtime.Program) error { return spec.CheckDraft(target, draft) }

// checkDraftModel refuses a draft model the engine cannot draft with.
func checkDraftModel(dm Model, slots int) error {
	switch {
	case dm == nil:
		return fmt.Errorf("no draft model: give one with --draft BUNDLE|MODEL.gguf (the config's draft key)")
	case dm.SlotState():
		return fmt.Errorf("the draft model keeps state in its slots (recurrent layers or a window ring), which cannot be rolled back")
	case dm.Slots() < slots:
		return fmt.Errorf("the draft model has %d slots, the engine serves %d: build it with --slots %d or more", dm.Slots(), slots, slots)
	}
	if _, ok := dm.Key(runtime.Decode, 1); !ok {
		return fmt.Errorf("the draft model has no single-row decode variant")
	}
	return nil
}
