// Package spec is speculative decoding of one sequence (seed 000 §20): a
// drafter guesses the next tokens, the target model evaluates the pending
// token and the guesses in one verify step (sequence.Verify), and the
// request's decoder takes tokens from the rows in order for as long as the
// guesses agree with what it takes. Rows past the first disagreement are
// rolled back (sequence.Truncate).
//
// The decoder decides every token from the target's own logits after
// exactly the tokens before it, as without speculation, so the output is
// the same: greedy bit for bit on a batch-invariant tier, and sampled
// token for token given the same seed, since the sampler draws once per
// token taken, in the same order. Both drafts here propose one token a
// position with probability one (a lookup, or the draft variant's
// argmax), and for such a draft taking the target's sample and accepting
// the draft when they are equal is the standard rejection rule: the draft is
// accepted with probability p(x), and a rejected row's token follows p
// without x, renormalized.
package spec

import (
	"context"
	"fmt"
	"time"

	"github.com/zrtdev/zrt/runtime/decode"
	"github.com/zrtdev/zrt/runtime/sequence"
	"github.com/zrtdev/zrt/runtime/spec/draft"
)

// Stats count what speculation did for one sequence. Acceptance and
// tokens per step depend on the text (how much it repeats), not on the
// engine; time per token depends on both.
type Stats struct {
	// Steps are the verify steps that carried a draft; Plain the steps
	// without one (nothing was proposed, or the policy found no draft
	// worth its cost), plain decode steps.
	Steps, Plain int
	// Drafted counts the draft tokens verified; Accepted those the
	// target agreed with.
	Drafted, Accepted int
	// ByRows counts the steps by their rows: ByRows[r] steps had r rows.
	ByRows []int
	// DraftTime is the time spent drafting.
	DraftTime time.Duration
}

// Tokens is the tokens the steps fed the sequence: the pending token of
// each and the draft tokens accepted.
func (s Stats) Tokens() int { return s.Steps + s.Plain + s.Accepted }

// Acceptance is the fraction of draft tokens accepted (α), 0 without any.
func (s Stats) Acceptance() float64 {
	if s.Drafted == 0 {
		return 0
	}
	return float64(s.Accepted) / float64(s.Drafted)
}

// TokensPerStep is the tokens each verify step produced: the draft tokens
// accepted and the target's own after them.
func (s Stats) TokensPerStep() float64 {
	if s.Steps == 0 {
		return 0
	}
	return float64(s.Accepted+s.Steps) / float64(s.Steps)
}

// Decoding is one sequence's speculative decoding.
type Decoding struct {
	seq  *sequence.Sequence
	pool *sequence.Pool
	dec  *decode.Decoder
	// drafter proposes the tokens of a pure draft (ngram); nil for a
	// model's (self), which Step runs through the draft variant.
	drafter draft.Drafter
	k       int
	max     int
	// policy picks each step's draft length; nil verifies all the
	// drafter offers.
	policy *Policy
	mode   Mode
	Stats  Stats
}

// New speculates for seq, whose tokens dec takes, drafting up to m.K
// tokens a step the way m.Kind says (ngram: draft.DefaultNGram; self:
// the bundle's draft variant), as many as a Policy finds worth their cost
// unless m.Fixed; maxTokens is the decoder's MaxTokens (a step drafts no
// more than the decoder may still take). On a model that keeps state in
// its slots it refuses (sequence.ErrSlotState).
func New(pool *sequence.Pool, seq *sequence.Sequence, dec *decode.Decoder, m Mode, maxTokens int) (*Decoding, error) {
	if err := Check(pool, m); err != nil {
		return nil, err
	}
	d := &Decoding{seq: seq, pool: pool, dec: dec, k: m.K, max: maxTokens, mode: m}
	if m.Kind == NGram {
		d.drafter = draft.DefaultNGram
	}
	if !m.Fixed {
		d.policy = &Policy{}
	}
	return d, nil
}

// Check says whether pool's bundle can speculate as m asks: a model
// without per-slot state (else sequence.ErrSlotState), a draft length in
// range, and for self a draft variant.
func Check(pool *sequence.Pool, m Mode) error {
	if pool.SlotState() {
		return sequence.ErrSlotState
	}
	if m.K < 1 || m.K > MaxK {
		return fmt.Errorf("draft length %d outside [1, %d]", m.K, MaxK)
	}
	switch m.Kind {
	case NGram:
	case Self:
		if !pool.CanDraft() {
			return fmt.Errorf("speculative mode self: the bundle has no draft variant (it has %v); build it with draft_layers = N in the model config (zrtc build --draft-layers N; given a GGUF, zrt-run's --draft-layers N)", pool.Keys())
		}
	default:
		return fmt.Errorf("speculative mode %q: nothing to draft with", m.Kind)
	}
	return nil
}

// Step evaluates pending — the token the decoder took last, not yet in
// the sequence — and a draft after it in one step, and returns what the
// decoder decided for each row it read: the draft tokens it agreed with,
// then its own token after them. The last step's Token is the next
// pending one, unless its Finish is set.
func (d *Decoding) Step(ctx context.Context, pending int32) ([]decode.Step, error) {
	s := d.seq
	start := s.Pos()
	k := min(d.k, d.pool.VerifyRows()-1, d.pool.Hparams.ContextLength-start-1)
	if d.max > 0 {
		k = min(k, d.max-d.dec.Generated()-1) // row i gives the decoder its (i+1)th token
	}
	rows := []int32{pending}
	switch {
	case k <= 0:
	case d.drafter != nil:
		t0 := time.Now()
		history := append(s.Tokens[:start:start], pending)
		rows = append(rows, d.drafter.Draft(history, k)...)
		d.Stats.DraftTime += time.Since(t0)
		rows = rows[:min(len(rows), k+1)] // a drafter may return more than asked
		if d.policy != nil {
			rows = rows[:1+d.policy.Choose(len(rows)-1)]
		}
	default:
		// A model's draft costs a step a token: the policy decides how
		// many are worth it before any is made.
		if d.policy != nil {
			k = d.policy.Choose(k)
		}
		var err error
		if rows, err = d.selfDraft(ctx, pending, k); err != nil {
			return nil, err
		}
	}
	// A step's time is the verify step's and the decoder's over its
	// rows: what a plain step costs too, apart from the draft.
	t0 := time.Now()
	out, err := s.Verify(ctx, rows)
	if err != nil {
		return nil, err
	}
	if len(rows) > 1 {
		d.Stats.Steps++
		d.Stats.Drafted += len(rows) - 1
	} else {
		d.Stats.Plain++
	}
	for len(d.Stats.ByRows) <= len(rows) {
		d.Stats.ByRows = append(d.Stats.ByRows, 0)
	}
	d.Stats.ByRows[len(rows)]++
	var steps []decode.Step
	accepted := 0
	for i := range rows {
		n := start + i + 1 // the positions the sequence holds after row i
		st := d.dec.NextFrom(&out[i], s.Tokens[:n], n)
		steps = append(steps, st)
		if st.Finish != decode.Running || i+1 == len(rows) || st.Token != rows[i+1] {
			if err := s.Truncate(n); err != nil {
				return nil, err
			}
			break
		}
		accepted++
	}
	d.Stats.Accepted += accepted
	if d.policy != nil {
		d.policy.Observe(len(rows), accepted, time.Since(t0))
	}
	return steps, nil
}

// selfDraft returns pending and k tokens the draft variant guesses after
// it, one draft step each, with the sequence rolled back to where it was
// (the steps wrote the first layers' K and V of positions the verify
// step writes again).
func (d *Decoding) selfDraft(ctx context.Context, pending int32, k int) ([]int32, error) {
	s := d.seq
	start := s.Pos()
	rows := []int32{pending}
	if k == 0 {
		return rows, nil
	}
	t0 := time.Now()
	for range k {
		next, err := s.Draft(ctx, rows[len(rows)-1])
		if err != nil {
			return nil, err
		}
		rows = append(rows, next)
	}
	took := time.Since(t0)
	d.Stats.DraftTime += took
	if d.policy != nil {
		d.policy.ObserveDraft(k, took)
	}
	return rows, s.Truncate(start)
}

// Report adds the run's speculative figures to m (sequence.Speculator).
func (d *Decoding) Report(m *sequence.Metrics) {
	s := d.Stats
	m.Speculative, m.VerifySteps, m.PlainSteps, m.DraftTokens, m.Accepted = d.mode.String(), s.Steps, s.Plain, s.Drafted, s.Accepted
	m.Acceptance, m.TokensPerStep = s.Acceptance(), s.TokensPerStep()
}
