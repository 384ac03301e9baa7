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

	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/decode"
	"github.com/zrtdev/zrt/runtime/sample"
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
	// Rejected counts the verify steps that rejected a draft token
	// (the others accepted all they verified): a draft token is judged
	// when it is accepted or is the first rejected, so the per-token
	// acceptance rate of the standard formula is Accepted over Accepted +
	// Rejected (PerToken).
	Rejected int
	// DraftTime is the time spent drafting; DraftSteps the replays of a
	// draft model it made (the catch-up after a verify step and a step
	// a draft token after the first).
	DraftTime  time.Duration
	DraftSteps int
}

// PerToken is the probability that a draft token is accepted once those
// before it were — α of the standard formula, whose draft of K tokens
// yields (1 − α^(K+1)) / (1 − α) tokens a step — estimated as accepted
// over judged.
func (s Stats) PerToken() float64 {
	if s.Accepted+s.Rejected == 0 {
		return 0
	}
	return float64(s.Accepted) / float64(s.Accepted+s.Rejected)
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
	// last is the draft tokens the last step verified.
	last []int32
	// policy picks each step's draft length; nil verifies all the
	// drafter offers.
	policy *Policy
	mode   Mode
	// model is a draft model's sequence (Draft kind), which holds the
	// target's tokens up to where they last agreed; sampler draws its
	// tokens for a sampled request.
	model     *sequence.Sequence
	modelPool *sequence.Pool
	sampler   *sample.Sampler
	Stats     Stats
}

// New speculates for seq, whose tokens dec takes, drafting up to m.K
// tokens a step the way m.Kind says (ngram: draft.DefaultNGram; self:
// the bundle's draft variant), as many as a Policy finds worth their cost
// unless m.Fixed; maxTokens is the decoder's MaxTokens (a step drafts no
// more than the decoder may still take). On a model that keeps state in
// its slots it refuses (sequence.ErrSlotState).
func New(pool *sequence.Pool, seq *sequence.Sequence, dec *decode.Decoder, m Mode, maxTokens int) (*Decoding, error) {
	return NewWithDraft(pool, nil, seq, dec, m, maxTokens)
}

// draftSeed is mixed into a request's seed for its draft model's
// sampler, so that the draft's draws are not the target's.
const draftSeed = 0x5DEC0DE5

// NewWithDraft is New for every kind, with draft the draft model of kind
// Draft (nil for the others): a bundle sharing the target's vocabulary
// (CheckDraft), in which the Decoding takes a sequence of its own until
// Close.
func NewWithDraft(pool, model *sequence.Pool, seq *sequence.Sequence, dec *decode.Decoder, m Mode, maxTokens int) (*Decoding, error) {
	if err := CheckWithDraft(pool, model, m); err != nil {
		return nil, err
	}
	d := &Decoding{seq: seq, pool: pool, dec: dec, k: m.K, max: maxTokens, mode: m}
	if m.Kind == Draft {
		var err error
		d.modelPool = model
		if d.model, err = model.NewSequence(); err != nil {
			return nil, fmt.Errorf("draft model: %w", err)
		}
		if !dec.Greedy() {
			sp := dec.Sampling()
			sp.Seed ^= draftSeed
			d.sampler = sample.New(sp)
		}
	}
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
func Check(pool *sequence.Pool, m Mode) error { return CheckWithDraft(pool, nil, m) }

// CheckWithDraft is Check with draft the draft model of kind Draft.
func CheckWithDraft(pool, model *sequence.Pool, m Mode) error {
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
			return fmt.Errorf("speculative mode self: the bundle has no draft variant (it has %v: built with draft_layers = 0, by an older zrtc, or of a model that cannot draft); build it with draft_layers = N in the model config (zrtc build --draft-layers N; given a GGUF, zrt-run's --draft-layers N)", pool.Keys())
		}
	case Draft:
		if model == nil {
			return fmt.Errorf("speculative mode draft: no draft model; give one with --draft BUNDLE|MODEL.gguf")
		}
		if model.SlotState() {
			return fmt.Errorf("draft model: %w", sequence.ErrSlotState)
		}
		return CheckDraft(pool.Program, model.Program)
	default:
		return fmt.Errorf("speculative mode %q: nothing to draft with", m.Kind)
	}
	if model != nil {
		return fmt.Errorf("speculative mode %s drafts without a draft model: --draft goes with --speculative draft[:K[:fixed]]", m)
	}
	return nil
}

// CheckDraft says whether draft can draft for target: its tokens must
// be the target's tokens — the same vocabulary, token for token, the
// same logits width and the same special tokens — or its guesses would
// be other tokens' ids.
func CheckDraft(target, draft *runtime.Program) error {
	tv, dv := target.Tok.Vocab(), draft.Tok.Vocab()
	switch {
	case target.Hparams.NVocab != draft.Hparams.NVocab:
		return fmt.Errorf("draft model's vocabulary differs from the target's: %d logits against %d", draft.Hparams.NVocab, target.Hparams.NVocab)
	case len(tv.Tokens) != len(dv.Tokens):
		return fmt.Errorf("draft model's vocabulary differs from the target's: %d tokens against %d", len(dv.Tokens), len(tv.Tokens))
	case tv.Model != dv.Model:
		return fmt.Errorf("draft model's tokenizer differs from the target's: %s against %s", dv.Model, tv.Model)
	case tv.BOS != dv.BOS || tv.EOS != dv.EOS || tv.EOT != dv.EOT:
		return fmt.Errorf("draft model's special tokens differ from the target's: BOS/EOS/EOT %d/%d/%d against %d/%d/%d", dv.BOS, dv.EOS, dv.EOT, tv.BOS, tv.EOS, tv.EOT)
	}
	for i, t := range tv.Tokens {
		if dv.Tokens[i] != t {
			return fmt.Errorf("draft model's vocabulary differs from the target's: token %d is %q, the target's %q", i, dv.Tokens[i], t)
		}
	}
	return nil
}

// LastDraft is the draft tokens the last Step verified (none for a plain
// step), until the next Step.
func (d *Decoding) LastDraft() []int32 { return d.last }

// Prime evaluates the prompt in the draft model's sequence, as the
// target's prefill does in its own, so that the first step drafts after
// a step of one row rather than a prefill of the prompt. Without a draft
// model it does nothing; without it the first step catches up.
func (d *Decoding) Prime(ctx context.Context, prompt []int32) error {
	if d.model == nil || len(prompt) == 0 {
		return nil
	}
	if err := d.model.Truncate(0); err != nil {
		return err
	}
	_, err := d.model.Prefill(ctx, prompt)
	return err
}

// Close gives back the draft model's sequence.
func (d *Decoding) Close() {
	if d.model != nil {
		d.model.Release()
		d.model = nil
	}
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
	var qs []sample.Dist
	switch {
	case k <= 0:
	case d.model != nil:
		if d.policy != nil {
			k = d.policy.Choose(k)
		}
		var err error
		if rows, qs, err = d.modelDraft(ctx, pending, k); err != nil {
			return nil, err
		}
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
	d.last = append(d.last[:0], rows[1:]...)
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
		var st decode.Step
		if i < len(qs) {
			st = d.dec.NextDrafted(&out[i], s.Tokens[:n], n, rows[i+1], qs[i])
		} else {
			st = d.dec.NextFrom(&out[i], s.Tokens[:n], n)
		}
		steps = append(steps, st)
		if st.Finish != decode.Running || i+1 == len(rows) || st.Token != rows[i+1] {
			if i+1 < len(rows) && st.Token != rows[i+1] {
				d.Stats.Rejected++ // (not a request that finished on an agreeing token)
			}
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

// modelDraft returns pending and k tokens the draft model guesses after
// it, with the distributions they were drawn from when the request
// samples (nil when the draft is greedy). The draft model's sequence is
// first rolled back to where it last agreed with the target's and fed
// what it lacks — the tokens accepted since and pending, in one step —
// then one step a token after the first; it keeps the draft tokens it
// was fed, which the next call keeps as far as the target accepted them.
func (d *Decoding) modelDraft(ctx context.Context, pending int32, k int) ([]int32, []sample.Dist, error) {
	rows := []int32{pending}
	if k == 0 {
		return rows, nil, nil
	}
	t0 := time.Now()
	m, s := d.model, d.seq
	start := s.Pos()
	same := 0
	for same < min(len(m.Tokens), start) && m.Tokens[same] == s.Tokens[same] {
		same++
	}
	if err := m.Truncate(same); err != nil {
		return nil, nil, err
	}
	feed := append(s.Tokens[same:start:start], pending)
	var src decode.Source = m
	switch {
	case len(feed) == 1:
		if err := m.Advance(ctx, pending); err != nil {
			return nil, nil, err
		}
	case len(feed) <= d.modelPool.VerifyRows():
		out, err := m.Verify(ctx, feed)
		if err != nil {
			return nil, nil, err
		}
		src = &out[len(out)-1]
	default:
		if _, err := m.Prefill(ctx, feed); err != nil {
			return nil, nil, err
		}
	}
	d.Stats.DraftSteps++
	var qs []sample.Dist
	for j := range k {
		if j > 0 {
			if err := m.Advance(ctx, rows[len(rows)-1]); err != nil {
				return nil, nil, err
			}
			d.Stats.DraftSteps++
			src = m
		}
		if d.sampler == nil {
			rows = append(rows, src.Greedy())
			continue
		}
		tok, q := d.sampler.SampleDist(src.Logits(), m.Tokens)
		rows, qs = append(rows, tok), append(qs, q)
	}
	took := time.Since(t0)
	d.Stats.DraftTime += took
	if d.policy != nil {
		d.policy.ObserveDraft(k, took)
	}
	return rows, qs, nil
}

// Speculator is a run's speculative decoding for sequence's Generate
// (GenerateOptions.Speculate): it checks mode over pool and the draft
// model (kind draft; a draft model with mode off means draft with
// DefaultK) now, and for the run warns through warn when the bundle's
// verify steps hold fewer rows than the draft length, then speculates on
// the run's sequence. The draft model's sequence stays taken until the
// draft pool closes.
func Speculator(pool, model *sequence.Pool, m Mode, maxTokens int, warn func(format string, a ...any)) (func(*sequence.Sequence, *decode.Decoder) (sequence.Speculator, error), error) {
	if model != nil && !m.On() {
		m = Mode{Kind: Draft, K: DefaultK}
	}
	if err := CheckWithDraft(pool, model, m); err != nil {
		return nil, fmt.Errorf("--speculative %s: %w", m, err)
	}
	return func(seq *sequence.Sequence, d *decode.Decoder) (sequence.Speculator, error) {
		if rows := pool.VerifyRows(); rows <= m.K {
			warn("--speculative %s: verify steps of this bundle hold %d rows (a free slot each, within the largest decode variant); drafts are cut to %d tokens", m, rows, rows-1)
		}
		sd, err := NewWithDraft(pool, model, seq, d, m, maxTokens)
		if err != nil {
			return nil, fmt.Errorf("--speculative %s: %w", m, err)
		}
		return sd, nil
	}, nil
}

// Report adds the run's speculative figures to m (sequence.Speculator).
func (d *Decoding) Report(m *sequence.Metrics) {
	s := d.Stats
	m.Speculative, m.VerifySteps, m.PlainSteps, m.DraftTokens, m.Accepted = d.mode.String(), s.Steps, s.Plain, s.Drafted, s.Accepted
	m.Acceptance, m.TokensPerStep = s.Acceptance(), s.TokensPerStep()
}
