package engine

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/decode"
	"github.com/zrtdev/zrt/runtime/engine/sched"
	"github.com/zrtdev/zrt/runtime/sample"
	"github.com/zrtdev/zrt/runtime/sequence"
	"github.com/zrtdev/zrt/runtime/spec"
	"github.com/zrtdev/zrt/runtime/spec/draft"
)

// Speculation is a --speculative setting (runtime/spec's Mode): off, or
// a kind of draft, the most tokens a step drafts for a request (K), and
// whether every step verifies all the draft offers (Fixed) rather than
// what the engine's policy finds worth their rows.
type Speculation = spec.Mode

// ParseSpeculation reads a --speculative setting: off, ngram[:K[:fixed]]
// or self[:K[:fixed]].
func ParseSpeculation(s string) (Speculation, error) { return spec.ParseMode(s) }

// Speculative decoding in the engine (seed 000 §20). Each step, before
// the scheduler decides, the engine proposes drafts for the running
// requests that decode, greedy or sampled — n-gram lookups, or for
// self-speculation a length, whose tokens the bundle's draft variant
// makes once the plan has given the rows their pages (selfDraft) — and
// its policy (specPolicy) keeps as many as pay for their rows. Requests
// under a constraint do not speculate: a grammar's matcher advances a
// token at a time. The scheduler gives each kept draft token a row of
// its own after the request's decode row (sched.Chunk.Draft), in a slot
// no request holds, mapping the request's page table; the pages the
// draft rows reach are taken from what is free. After the step the
// request's decoder takes tokens from the rows in order for as long as
// the draft agrees with what it takes, exactly as it would one step at a
// time, and the pages past the tokens it keeps go back to the pool. So
// greedy output is the same bit for bit on a batch-invariant tier, and on
// T-CUDA for a request decoded alone, whose verify steps take the one-row
// kernels there (runtime.Batch.OneRowBits; batched with other requests,
// its rows have no one-row bits without speculation either). So is
// sampled output token for token given the seed with n-gram and self
// drafts: they propose one token a position with probability one, and
// for such a draft taking the target's sample and accepting the draft
// token when they are equal is the rejection rule of speculative
// sampling (runtime/spec). A draft model draws a sampled request's draft
// tokens from its own distribution, which the rule weighs them by
// (draftmodel.go): that output follows the target's distribution
// exactly, but not the same tokens for a seed as without speculation.

const pageTokens = kernels.KVPageTokens

// Tuning of the engine's speculation policy.
const (
	specDecay  = 0.9  // weight of the past in a request's acceptance counts, per verify step
	costWindow = 8    // the recent decode steps of a row count whose least time is its cost
	specMargin = 1.05 // how much faster than without drafts a step must promise to be
	// specProbe is how many steps in a row without a draft, while some
	// request could draft, pass before one draft token is verified
	// anyway: it measures a step of one more row, and follows text that
	// turns repetitive. Once a step of one more row has been timed
	// specTrust times, each probe after which the policy still drafts
	// nothing doubles the wait, up to specProbeMax, so where drafts never
	// pay the probes cost next to nothing.
	specProbe    = 16
	specProbeMax = 512
	// specTrust is how many steps of a row count must have been timed
	// before their cost may make a step look cheaper than the counts
	// timed that often say (cost): one lucky measurement on a busy
	// machine must not pass for free rows.
	specTrust = 3
)

// speculating is a request's speculative state.
type speculating struct {
	// tried and accepted count the draft tokens the target judged and
	// those it accepted, decayed, for the request's acceptance rate.
	tried, accepted float64
	// draft is the tokens proposed this step (after the pending one);
	// the plan's chunk says how many of them are verified.
	draft []int32
	// sampler draws a sampled request's draft tokens from the draft
	// model's distribution (nil: the draft proposes its greedy tokens,
	// with probability one); q[i] is the distribution draft[i] was drawn
	// from, which the rejection rule weighs it by.
	sampler *sample.Sampler
	q       []sample.Dist
}

// draftSeed is mixed into a request's seed for its draft model's
// sampler, so that the draft's draws are not the target's.
const draftSeed = 0x5DEC0DE5

// newSpeculating is the speculative state of a request decoded by dec:
// with a draft model, a sampled request's drafts are drawn as it samples
// (its sampling parameters, another seed).
func (e *Engine) newSpeculating(dec *decode.Decoder) *speculating {
	s := &speculating{}
	if e.dm != nil && !dec.Greedy() {
		sp := dec.Sampling()
		sp.Seed ^= draftSeed
		s.sampler = sample.New(sp)
	}
	return s
}

// alpha is the estimated acceptance rate of a draft token: its own
// counts, after two tokens' worth of prior (the engine's rate over every
// request: how well a draft agrees is mostly the model's and the
// draft's, so a new request starts from what the others found).
func (s *speculating) alpha(prior float64) float64 { return (s.accepted + 2*prior) / (s.tried + 2) }

// observe records a verify step that judged a draft of n tokens,
// accepting the first accepted.
func (s *speculating) observe(n, accepted int) {
	judged := accepted
	if accepted < n {
		judged++ // the first rejected
	}
	s.tried = specDecay*s.tried + float64(judged)
	s.accepted = specDecay*s.accepted + float64(accepted)
}

// prior is the acceptance rate a request without counts of its own is
// taken to have: the engine's over every request (0.5 before any draft
// token was judged).
func (p *specPolicy) prior() float64 { return p.all.alpha(0.5) }

// specPolicy is the engine's choice of draft lengths from measured
// acceptance and its step cost by rows.
type specPolicy struct {
	// recent[r] are the replay times of the last decode-only steps of r
	// rows (a ring of costWindow, the newest at next[r]); a step's cost
	// is the least of them, as other work on the machine only ever adds
	// time.
	recent map[int][]float64
	next   map[int]int
	idle   int // steps since a draft was last verified
	// draft is the time a draft replay costs (of a bundle's draft
	// variant, or a draft model's step; a moving average, 0 until
	// measured and for n-gram drafts, which cost nothing next to a
	// step), and draftRows the requests' tokens of one position one
	// replay makes (the engine's draftRows).
	draft     float64
	draftRows int
	// probeAt is the idle steps before the next probe (0: specProbe).
	probeAt int
	// budget holds the probes within spec.ProbeShare of the time of the
	// decode-only steps and the drafts: what a probe costs beyond plain
	// steps is its draft (a draft model's catch-up included) and its
	// row's share of the step. probing says this step's draft is a probe.
	budget  spec.ProbeBudget
	probing bool
	// all counts the draft tokens judged and accepted over every
	// request, decayed as a request's are: the prior of a request's
	// acceptance rate.
	all speculating
}

// spend records time d of a draft model's or the draft variant's steps,
// all of it a probe's when this step probes.
func (p *specPolicy) spend(d time.Duration) {
	extra := time.Duration(0)
	if p.probing {
		extra = d
	}
	p.budget.Spend(d, extra)
}

// observe records a decode-only step of rows rows that took d.
func (p *specPolicy) observe(rows int, d time.Duration) {
	if d <= 0 {
		return // a simulation's clock: nothing measured
	}
	extra := time.Duration(0)
	if p.probing {
		extra = d - time.Duration(p.cost(rows-1)*float64(time.Second))
	}
	p.budget.Spend(d, extra)
	if p.recent == nil {
		p.recent, p.next = map[int][]float64{}, map[int]int{}
	}
	if r := p.recent[rows]; len(r) < costWindow {
		p.recent[rows] = append(r, d.Seconds())
	} else {
		r[p.next[rows]] = d.Seconds()
		p.next[rows] = (p.next[rows] + 1) % costWindow
	}
}

// observeDraft records a replay of a draft variant (or a draft model's
// draft step) that took d.
func (p *specPolicy) observeDraft(d time.Duration) {
	if d <= 0 {
		return
	}
	p.spend(d)
	if p.draft == 0 {
		p.draft = d.Seconds()
	} else {
		p.draft += 0.2 * (d.Seconds() - p.draft)
	}
}

// below is the most rows of a step timed specTrust times that has fewer
// than rows rows, else the fewest rows of a step timed at all (0: none
// timed below rows).
func (p *specPolicy) below(rows int) int {
	near, least := 0, 0
	for r, t := range p.recent {
		if r >= rows {
			continue
		}
		if len(t) >= specTrust && r > near {
			near = r
		}
		if least == 0 || r < least {
			least = r
		}
	}
	if near > 0 {
		return near
	}
	return least
}

// cost is a step of rows rows' estimated time: from the row counts
// timed specTrust times or more where they say it takes longer than all
// the counts timed do, so that a lucky measurement or two on a busy
// machine cannot make rows look cheaper than the steps timed often say.
func (p *specPolicy) cost(rows int) float64 {
	return max(p.costFrom(rows, 1), p.costFrom(rows, specTrust))
}

// costFrom is a step of rows rows' estimated time from the row counts
// timed at least min times: measured, interpolated between the nearest
// such counts, or past the largest extrapolated along the last two (with
// one, every row costing as much as the rows measured: a compute-bound
// step, which drafts never pay for). 0 when no count qualifies.
func (p *specPolicy) costFrom(rows, min int) float64 {
	var known []int
	for r, t := range p.recent {
		if len(t) >= min {
			known = append(known, r)
		}
	}
	if len(known) == 0 {
		return 0
	}
	sort.Ints(known)
	at := func(r int) float64 { return slices.Min(p.recent[r]) }
	i := sort.SearchInts(known, rows)
	switch {
	case i < len(known) && known[i] == rows:
		return at(rows)
	case i == 0: // below every measured count: proportional
		return at(known[0]) * float64(rows) / float64(known[0])
	case i < len(known):
		lo, hi := known[i-1], known[i]
		return at(lo) + (at(hi)-at(lo))*float64(rows-lo)/float64(hi-lo)
	case len(known) == 1:
		return at(known[0]) * float64(rows) / float64(known[0])
	}
	lo, hi := known[len(known)-2], known[len(known)-1]
	slope := max((at(hi)-at(lo))/float64(hi-lo), 0)
	return at(hi) + slope*float64(rows-hi)
}

// choose cuts each request's proposed draft to the tokens worth their
// rows in a step of base decode rows: the draft tokens are taken in the
// order of their expected yield (a request's j-th is accepted with
// probability α^j), each while it adds more to the step's expected
// tokens than its row, and a model draft's replays, add to the step's
// time, in proportion (a token that needs a draft replay more is weighed
// with the likeliest tokens of its position the replay makes too); the whole
// must beat the step without drafts by specMargin, else nothing is
// drafted. At a high batch a row costs about what a step costs per
// request, so nothing is. At most rows draft tokens are taken in all
// (the slots free for their rows). It returns the draft lengths by
// request.
func (p *specPolicy) choose(base, rows int, reqs []*request) map[*request]int {
	out := map[*request]int{}
	type cand struct {
		r     *request
		j     int
		yield float64
	}
	var cands []cand
	prior := p.prior()
	for _, r := range reqs {
		a, y := r.spec.alpha(prior), 1.0
		for j := 1; j <= len(r.spec.draft); j++ {
			y *= a
			cands = append(cands, cand{r, j, y})
		}
	}
	if len(cands) == 0 {
		return out
	}
	c0 := p.cost(base)
	if c0 > 0 {
		// Yield descending; a request's j-th before its (j+1)-th (equal
		// yields keep their order), then earlier requests first.
		sort.SliceStable(cands, func(a, b int) bool { return cands[a].yield > cands[b].yield })
		maxRows := rows
		// A step's time grows at least as fast past base rows as it
		// did up to them from the nearest count below measured often
		// (step costs grow faster with rows as they grow: flat while the
		// weights' reads bound the step, then a row's compute each),
		// which keeps a noisy measurement of a step of a row or two more
		// than base from passing for free rows. The nearest count, not
		// the fewest: a GPU's steps cost what their variant costs, flat
		// over its rows, and a step of one row against one of eight (a
		// 1-row and a 16-row variant) made every row past eight look
		// dear and drafts at eight clients never pay.
		slope := 0.0
		if lo := p.below(base); lo > 0 {
			slope = max(0, (c0-p.cost(lo))/float64(base-lo))
		}
		step := func(n int) float64 { return max(p.cost(n), c0+slope*float64(n-base)) }
		tokens, rows, c := float64(base), base, c0
		taken := map[*request]int{}
		// at[j] counts the tokens taken at draft position j+1, and
		// replays the draft replays they need: a model draft token costs
		// its row and, where its position's replays are full, a replay
		// more, which the likeliest other tokens of that position share
		// (up to draftRows of them): such a token is weighed with those
		// of them that pay, as one move.
		per := max(p.draftRows, 1)
		var at []int
		replays := 0
		for i, x := range cands {
			if rows == base+maxRows {
				break
			}
			if taken[x.r] != x.j-1 {
				continue // its earlier token was not taken, or it was
			}
			if len(at) < x.j {
				at = append(at, 0)
			}
			more, move := 0, []cand{x}
			if at[x.j-1]%per == 0 {
				more = 1
				for _, y := range cands[i+1:] {
					if len(move) == per || rows+len(move) == base+maxRows {
						break
					}
					if y.j == x.j && taken[y.r] == y.j-1 {
						move = append(move, y)
					}
				}
			}
			n, best, t := 0, tokens/c, tokens
			for k, y := range move {
				t += y.yield
				if rate := t / (step(rows+k+1) + float64(replays+more)*p.draft); rate > best {
					n, best = k+1, rate
				}
			}
			if n == 0 {
				continue
			}
			for _, y := range move[:n] {
				taken[y.r] = y.j
				tokens += y.yield
			}
			at[x.j-1] += n
			rows, replays = rows+n, replays+more
			c = step(rows) + float64(replays)*p.draft
		}
		if tokens/c > specMargin*float64(base)/c0 {
			out = taken
		}
	}
	if p.probeAt == 0 || len(out) > 0 {
		p.probeAt = specProbe
	}
	p.probing = false
	if len(out) == 0 {
		p.idle++
		if p.idle >= p.probeAt && p.budget.Allows() {
			p.probing = true
			if len(p.recent[base+1]) >= specTrust {
				// Back off once a step of one more row is timed often
				// enough to trust.
				p.probeAt = min(2*p.probeAt, specProbeMax)
			}
			best := cands[0] // one draft token of the likeliest request
			for _, x := range cands {
				if x.j == 1 && x.yield > best.yield {
					best = x
				}
			}
			out[best.r] = 1
		}
	}
	if len(out) > 0 {
		p.idle = 0
	}
	return out
}

// propose drafts for the running requests that decode, keeping what the
// policy chooses (all of it with Fixed): each one's spec.draft is its
// proposal for the step.
func (e *Engine) propose() {
	if !e.cfg.Speculative.On() {
		return
	}
	var reqs []*request
	base := 0
	// A model's draft (the bundle's draft variant, or a draft model)
	// costs a step a token: the policy decides how many before any is
	// made.
	self := e.cfg.Speculative.Kind == spec.Self || e.dm != nil
	for _, r := range e.reqs {
		if r.spec == nil || r.slot < 0 {
			continue
		}
		r.spec.draft, r.spec.q = r.spec.draft[:0], r.spec.q[:0]
		if r.done < max(len(r.Prompt), r.replay) || r.done != len(r.tokens)-1 {
			continue // prefilling
		}
		base++
		k := min(e.cfg.Speculative.K, r.Decode.MaxTokens-r.dec.Generated()-1, e.cfg.ContextLength-r.done-1, r.need*pageTokens-r.done-1)
		if k <= 0 {
			continue
		}
		switch {
		case e.pinDrafts != nil:
			r.spec.draft = append(r.spec.draft, e.pinDrafts(r.id)...)
		case self:
			// The draft variant makes the tokens once the step's plan
			// says how many (selfDraft), a draft model once the policy
			// has (modelDraft): a placeholder each until then.
			for range k {
				r.spec.draft = append(r.spec.draft, -1)
			}
		default:
			d := e.drafter.Draft(r.tokens, k)
			r.spec.draft = append(r.spec.draft, d[:min(len(d), k)]...)
		}
		if len(r.spec.draft) > 0 {
			reqs = append(reqs, r)
		}
	}
	if !e.cfg.Speculative.Fixed && e.pinDrafts == nil && len(reqs) > 0 {
		keep := e.specPolicy.choose(base, len(e.borrowSlots()), reqs)
		for _, r := range reqs {
			r.spec.draft = r.spec.draft[:keep[r]]
		}
	}
	if e.dm == nil {
		e.logDrafts() // (modelDraft logs a draft model's once made)
	}
}

// logDrafts records the step's proposals for a rerun: n-gram drafts'
// tokens, a model draft's length (the rerun's model makes the same
// tokens).
func (e *Engine) logDrafts() {
	if e.rec == nil {
		return
	}
	for _, r := range e.reqs {
		if r.spec == nil || r.slot < 0 || len(r.spec.draft) == 0 {
			continue
		}
		d := LoggedDraft{ID: r.id, Sampled: len(r.spec.q) > 0}
		if e.cfg.Speculative.Kind == spec.Self {
			d.N = len(r.spec.draft)
		} else {
			d.Tokens = slices.Clone(r.spec.draft)
		}
		e.rec.Drafts = append(e.rec.Drafts, d)
	}
}

// selfDraft makes the draft tokens of the plan's verify chunks with the
// bundle's draft variants (the model's first layers and its head): a
// replay a token position, each request's row in its slot at the
// position its verify rows take next (whose pages the step has given
// it), starting from its pending token, every request drafting that far
// in the one replay (draftRows of them at most: one a replay with a
// bundle of only the one-row draft variant). They write the first
// layers' K and V of those positions, which the verify step writes
// again through every layer.
func (e *Engine) selfDraft(ctx context.Context, plan sched.Plan, byID map[uint64]*request) error {
	if e.cfg.Speculative.Kind != spec.Self {
		return nil
	}
	type drafting struct {
		r    *request
		from int
		n    int
		prev int32
	}
	var ds []drafting
	for _, c := range plan.Rows {
		if r := byID[c.ID]; c.Draft > 0 && r.spec != nil {
			ds = append(ds, drafting{r, c.From, c.Draft, r.tokens[c.From]})
		}
	}
	for j := 0; ; j++ {
		var at []*drafting
		for i := range ds {
			if ds[i].n > j {
				at = append(at, &ds[i])
			}
		}
		if len(at) == 0 {
			return nil
		}
		err := draftReplays(ctx, e, e.m, runtime.Draft, at, func(d *drafting) (runtime.Row, runtime.SlotPages) {
			return runtime.Row{Slot: d.r.slot, Pos: d.from + j, Token: d.prev, Logits: true}, runtime.SlotPages{Slot: d.r.slot, Pages: d.r.pages}
		}, func(d *drafting) {
			d.prev = e.m.Greedy(d.r.slot)
			d.r.spec.draft[j] = d.prev
		})
		if err != nil {
			return err
		}
	}
}

// draftReplays runs steps of stage on model m (the bundle's draft
// variants, or a draft model's decode variants) of a row for each of
// items, draftRows of them a step at most: row gives an item's row and
// its slot's pages, and took is called for each item of a step after it
// ran. Each step's time is a draft replay's.
func draftReplays[T any](ctx context.Context, e *Engine, m Model, stage runtime.Stage, items []T,
	row func(T) (runtime.Row, runtime.SlotPages), took func(T)) error {
	per := max(e.specPolicy.draftRows, 1)
	for len(items) > 0 {
		part := items[:min(per, len(items))]
		items = items[len(part):]
		key, ok := m.Key(stage, len(part))
		if !ok {
			return fmt.Errorf("engine: no %s variant for %d draft rows", stage, len(part))
		}
		b := runtime.Batch{Key: key}
		for _, it := range part {
			r, pg := row(it)
			b.Rows, b.Pages = append(b.Rows, r), append(b.Pages, pg)
		}
		start := e.cfg.Now()
		if err := m.Step(ctx, b); err != nil {
			return fmt.Errorf("engine: draft step: %w", err)
		}
		e.specPolicy.observeDraft(e.cfg.Now().Sub(start))
		for _, it := range part {
			took(it)
		}
	}
	return nil
}

// draftRows is how many requests' draft tokens of one position one
// draft replay makes: the rows of the largest draft variant with
// self-speculation (a bundle built before there was one for each decode
// variant has only the one-row one), of the draft model's largest decode
// variant with a draft model, and 1 for the others.
func draftRows(m Model, s Speculation, dm Model) int {
	stage := runtime.Draft
	switch {
	case dm != nil:
		m, stage = dm, runtime.Decode
	case s.Kind != spec.Self:
		return 1
	}
	for n := m.Slots(); n > 1; n-- { // the largest variant: the one that fits the most rows
		if k, ok := m.Key(stage, n); ok {
			return k.Rows
		}
	}
	return 1
}

// borrowSlots are the model's slots no request holds during the step,
// for draft rows.
func (e *Engine) borrowSlots() []int {
	var free []int
	for i := range e.m.Slots() {
		if i >= len(e.slots) || e.slots[i] == nil {
			free = append(free, i)
		}
	}
	return free
}

// verify takes r's tokens from the rows of its chunk c with draft tokens
// (rows[0] its pending token in its own slot, rows[i] its i-th draft
// token in slots[i]): the decoder takes a token from each row in turn for
// as long as the draft agrees with it — a token drawn from a draft
// model's distribution by speculative sampling's rule (decode's
// NextDrafted), any other by taking its own and comparing — then r keeps
// the KV of the tokens taken and gives back the pages past them. It
// returns the tokens taken.
func (e *Engine) verify(r *request, from int, slots []int) int {
	d := len(slots) - 1
	accepted, taken := 0, 0
	for i, slot := range slots {
		r.done = from + i + 1
		src := slotSource{e, slot, &e.logits}
		var st decode.Step
		if i < d && i < len(r.spec.q) {
			st = e.resolve(r.dec, src, r.tokens, r.done, r.spec.draft[i], r.spec.q[i])
		} else {
			st = r.dec.NextFrom(src, r.tokens, r.done)
		}
		taken++
		if !e.take(r, st) {
			break // finished
		}
		if i == d || r.tokens[len(r.tokens)-1] != r.spec.draft[i] {
			break
		}
		accepted++
	}
	r.spec.observe(d, accepted)
	e.specPolicy.all.observe(d, accepted)
	e.mu.Lock()
	e.stats.SpecDrafts++
	e.stats.SpecDraftTokens += uint64(d)
	e.stats.SpecAccepted += uint64(accepted)
	for len(e.stats.SpecAcceptedAt) < d {
		e.stats.SpecAcceptedAt = append(e.stats.SpecAcceptedAt, 0)
	}
	for i := range accepted {
		e.stats.SpecAcceptedAt[i]++
	}
	e.mu.Unlock()
	if r.events == nil {
		return taken // finished: its pages are gone
	}
	// The rows past the tokens kept wrote KV that later rows overwrite;
	// the pages only they reached go back.
	keep := (r.done + pageTokens - 1) / pageTokens
	for _, pg := range r.pages[keep:] {
		e.pool.Release(pg)
	}
	r.pages = r.pages[:keep]
	return taken
}

// checkSpeculation refuses a speculative setting the model cannot serve.
func checkSpeculation(m Model, s Speculation) error {
	if !s.On() {
		return nil
	}
	if s.K < 1 || s.K > spec.MaxK {
		return fmt.Errorf("engine: speculative %s: draft length %d outside [1, %d]", s, s.K, spec.MaxK)
	}
	if m.SlotState() {
		return fmt.Errorf("engine: speculative %s: %w", s, sequence.ErrSlotState)
	}
	switch s.Kind {
	case spec.NGram:
	case spec.Draft: // the draft model: New checks it
	case spec.Self:
		if _, ok := m.Key(runtime.Draft, 1); !ok {
			return fmt.Errorf("engine: speculative %s: the bundle has no draft variant (built with draft_layers = 0, by an older zrtc, or of a model that cannot draft); build it with draft_layers = N in the model config (zrtc build --draft-layers N; given a GGUF, zrt-run's --draft-layers N)", s)
		}
	default:
		return fmt.Errorf("engine: speculative mode %q: nothing to draft with", s.Kind)
	}
	if _, ok := m.Key(runtime.Decode, 2); !ok {
		return fmt.Errorf("engine: speculative %s: the bundle has no decode variant of 2 rows or more for a verify step", s)
	}
	return nil
}

// testHookSpeculative, set by the package's tests when they run with
// speculation on (go test -args -speculative MODE), gives every engine
// made without speculation the mode and drafter it returns.
var testHookSpeculative func() (Speculation, draft.Drafter)

// defaultDrafter is the drafter of a mode without Config.Drafter.
func defaultDrafter(s Speculation) draft.Drafter { return draft.DefaultNGram }
