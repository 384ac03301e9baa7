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
// rest in prefill steps in the request's slot, up to its last few tokens;
// then decode steps feed every such request's next position in one (its
// last tokens, then its draft tokens as they are made; draftRows of them
// a step at most). A request whose draft KV does not fit the draft
// model's free pages (after those of requests not running are given
// back) drafts nothing this step, and so does one whose draft step fails
// (the draft is only a guess: the request goes on without it, the
// failure counted in Stats.SpecDraftErrors). It logs the step's drafts by
// their tokens, so that a rerun needs no draft model.
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
	var ready []*request
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
		if err := e.draftCatchUp(ctx, r, s); err != nil {
			e.draftFailed(r, err)
			continue
		}
		ready = append(ready, r)
	}
	if err := e.draftPositions(ctx, ready); err != nil {
		for _, r := range ready {
			e.draftFailed(r, err)
		}
	}
	e.logDrafts()
}

// draftFailed drops r's draft for the step, and its draft KV, after err.
func (e *Engine) draftFailed(r *request, err error) {
	e.dm.drop(r.id)
	r.spec.draft, r.spec.q = r.spec.draft[:0], r.spec.q[:0]
	e.mu.Lock()
	e.stats.SpecDraftErrors++
	e.stats.SpecDraftError = err.Error()
	e.mu.Unlock()
}

// draftTail is how many of a request's tokens before its pending one
// its draft KV may lack and still take them in the draft's decode steps,
// batched with the other requests' rows, rather than a prefill step of
// its own: after a verify step it lacks the target's token and any draft
// token rejected before it.
const draftTail = 3

// draftCatchUp feeds s, r's draft KV, r's tokens from where they agree up
// to draftTail tokens before its pending token, in prefill steps in r's
// slot (a decode step a token where no prefill variant fits). Its time is
// a catch-up's, a probe's cost when the step probes, not what a draft
// token costs.
func (e *Engine) draftCatchUp(ctx context.Context, r *request, s *draftSeq) error {
	d := e.dm
	same := 0
	for same < min(len(s.tokens), r.done) && s.tokens[same] == r.tokens[same] {
		same++
	}
	s.tokens = s.tokens[:same] // the pages stay: grow gave them for this step
	feed := r.tokens[same:max(same, r.done-draftTail)]
	for len(feed) > 0 {
		// The longest run a prefill variant takes, else a token alone.
		stage, n := runtime.Decode, len(feed)
		for _, ok := d.m.Key(runtime.Prefill, n); !ok && n > 1; _, ok = d.m.Key(runtime.Prefill, n) {
			n /= 2
		}
		if n > 1 {
			stage = runtime.Prefill
		}
		key, ok := d.m.Key(stage, n)
		if !ok {
			return fmt.Errorf("engine: draft model has no %s variant for %d rows", stage, n)
		}
		b := runtime.Batch{Key: key, Pages: []runtime.SlotPages{{Slot: r.slot, Pages: s.pages}}}
		prompt := 0
		if stage == runtime.Prefill {
			prompt = n
		}
		for i, t := range feed[:n] {
			b.Rows = append(b.Rows, runtime.Row{Slot: r.slot, Pos: len(s.tokens) + i, Token: t, Logits: i == n-1, Prompt: prompt})
		}
		at := e.cfg.Now()
		if err := d.m.Step(ctx, b); err != nil {
			return fmt.Errorf("engine: draft model step: %w", err)
		}
		e.specPolicy.spend(e.cfg.Now().Sub(at))
		s.tokens = append(s.tokens, feed[:n]...)
		feed = feed[n:]
	}
	return nil
}

// draftPositions makes the draft tokens of the requests ready (their
// draft KV at most draftTail tokens short of their pending tokens):
// decode steps of a row for each request that has one to feed (draftRows
// of them a step at most), each its next position: its tokens up to its
// pending one, then its draft tokens, each made from the step that fed
// the position before it. A request's draft token is the draft model's
// greedy choice, or for a sampled request a draw from its distribution.
func (e *Engine) draftPositions(ctx context.Context, ready []*request) error {
	d := e.dm
	for {
		var at []*request
		for _, r := range ready {
			if len(d.seqs[r.id].tokens) < r.done+len(r.spec.draft) {
				at = append(at, r)
			}
		}
		if len(at) == 0 {
			return nil
		}
		err := draftReplays(ctx, e, d.m, runtime.Decode, at, func(r *request) (runtime.Row, runtime.SlotPages) {
			s := d.seqs[r.id]
			p := len(s.tokens)
			tok := r.tokens[min(p, r.done)]
			if p > r.done {
				tok = r.spec.draft[p-r.done-1]
			}
			s.tokens = append(s.tokens, tok)
			return runtime.Row{Slot: r.slot, Pos: p, Token: tok, Logits: p >= r.done}, runtime.SlotPages{Slot: r.slot, Pages: s.pages}
		}, func(r *request) {
			switch j := len(d.seqs[r.id].tokens) - 1 - r.done; { // the draft token the row's logits make
			case j < 0:
			case r.spec.sampler == nil:
				r.spec.draft[j] = d.m.Greedy(r.slot)
			default:
				tok, q := e.sampleDraft(r, j)
				r.spec.draft[j], r.spec.q = tok, append(r.spec.q, q)
			}
		})
		if err != nil {
			return err
		}
	}
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
