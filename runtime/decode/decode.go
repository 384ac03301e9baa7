// Package decode is per-request decoding: it turns each step's logits into
// the request's next token and the text that may be shown for it, and says
// when and why the request is finished. It holds the sampler, the stop
// filter and the stream detokenizer of one request, and nothing of how the
// logits were computed, so one-shot generation and the serving engine share
// it.
package decode

import (
	"math"
	"math/bits"
	"slices"

	"github.com/zrtdev/zrt/runtime/sample"
	"github.com/zrtdev/zrt/runtime/tokenizer"
)

// Finish says why a request ended; "" while it runs.
type Finish string

// The finish reasons.
const (
	Running    Finish = ""
	EOG        Finish = "eog"         // the model produced an end-of-generation token
	StopString Finish = "stop string" // the text reached one of the stop strings
	Length     Finish = "length"      // MaxTokens were generated
	Context    Finish = "context"     // the sequence filled its context
)

// Params configure one request's decoding.
type Params struct {
	// MaxTokens bounds the generated tokens (≤ 0: none are generated).
	MaxTokens int
	Sampling  sample.Params
	// Stops end generation when the text contains one; it is not shown.
	Stops []string
	// ContextLength is the positions a sequence may hold; a request whose
	// sequence is full finishes instead of being fed another token.
	ContextLength int
	// IgnoreEOS never samples an end-of-generation token (llama-server's
	// ignore_eos, which benchmarks use to generate exactly MaxTokens).
	IgnoreEOS bool
	// Logprobs asks for each generated token's log-probability and those
	// of the TopLogprobs most likely tokens at its position (of the
	// distribution sample.Sampler.SampleLogprobs describes); every Step
	// that takes a token carries them. They need the logits, so a greedy
	// request with Logprobs never takes the model's own choice.
	Logprobs    bool
	TopLogprobs int
	// Constraint, when set, restricts every token to those it allows (a
	// grammar's matcher, one per request): the logits of the others are
	// -Inf before sampling, greedy or not, logprobs included, so the
	// model's own greedy choice is never taken. The request finishes
	// with EOG once the constraint is Done, or when the model picks an
	// end-of-generation token, which the constraint allows only when the
	// output is complete. It is not in a step log (a matcher's state is
	// not data), so a rerun samples such a request unconstrained.
	Constraint Constraint `json:"-"`
	// Keep are special tokens whose text the output shows (a chat
	// format's markers, such as gpt-oss's <|channel|>, which a reply
	// parser must see); other control tokens show nothing.
	Keep []int32 `json:"keep,omitempty"`
}

// Constraint is what decoding needs of a constrained-output matcher
// (*grammar.Matcher satisfies it).
type Constraint interface {
	// Mask sets bit i of allowed[i/64] for each token i that may come
	// next and clears the others.
	Mask(allowed []uint64)
	// Accept advances past a token; it fails for one not allowed.
	Accept(tok int32) error
	// Done says that the output is complete and nothing may follow.
	Done() bool
}

// Ender is a Constraint that can say, without advancing, whether a token
// it allows next would leave it Done (*grammar.Matcher.Ends): Advance
// then needs no Accept to decide the step, and leaves it to MaskNext,
// off the caller's path.
type Ender interface {
	Ends(tok int32) bool
}

// Logprobs are a generated token's log-probability and the most likely
// tokens at its position, most likely first.
type Logprobs struct {
	Token   int32
	Logprob float64
	Top     []sample.Logprob
}

// Decoder decodes one request.
type Decoder struct {
	p         Params
	tok       *tokenizer.Tokenizer
	sampler   *sample.Sampler
	text      *tokenizer.StreamDecoder
	filter    *StopFilter
	generated int
	finish    Finish
	banned    []int32  // end-of-generation ids masked out (IgnoreEOS)
	allowed   []uint64 // the constraint's mask, reused across steps
	// masked is closed once allowed holds the mask of the next token,
	// computed by a goroutine started as soon as the last token was
	// accepted: it runs while the model computes the next step's logits,
	// and the masks of a batch's rows run at once (xgrammar overlaps them
	// the same way). nil: none is being computed.
	masked chan struct{}
	// onDevice: the step that follows DeviceMask takes the greedy choice
	// under the mask it returned, so NextFrom reads that choice.
	onDevice bool
	// drawn: DeviceSample took the sampler's uniform draw u for the next
	// token, which the step draws on the device.
	drawn bool
	u     float64
	// advanced: Advance has accepted token accepted into the constraint
	// (with error acceptErr, leaving it Done or not: advDone) for the
	// next NextFrom.
	advanced  bool
	accepted  int32
	acceptErr error
	advDone   bool
	// deferred: Advance took accepted without accepting it (the
	// constraint is an Ender); MaskNext accepts it before the mask, and
	// sets deadEnd when the constraint refused it after all. waitMask,
	// once that mask is in, copies it to dead, and NextFrom then ends
	// the request, as a dead end of the grammar does.
	deferred, deadEnd, dead bool
	// due, set by an Advance that reported the next mask due, is closed
	// by MaskNext once allowed holds it; NextFrom then takes it as the
	// mask being computed instead of starting one. Only Advance writes
	// it, so MaskNext may read it while NextFrom runs.
	due chan struct{}
	// proposal is NextDrafted's draft for the token being decided.
	proposal *proposal
	// ahead are the tokens the constraint forces next, which it has
	// already taken (lookahead, on the goroutine that computed the mask
	// allowing the first of them alone): while there are any, the next
	// token is ahead[0], allowed holds it alone, and aheadMask holds the
	// mask of the token after the last (unless aheadDone: the last
	// completes the output).
	ahead     []int32
	aheadMask []uint64
	aheadDone bool
	// advAhead: the token Advance took is ahead[0].
	advAhead bool
}

// maxAhead bounds a forced run taken ahead: a run longer than a step's
// spare rows waits anyway, and each of its tokens costs the constraint a
// walk and a mask.
const maxAhead = 32

// proposal is a draft token and the distribution it was drawn from.
type proposal struct {
	tok int32
	q   sample.Dist
}

// New returns a decoder for one request of a model with tokenizer tok.
func New(tok *tokenizer.Tokenizer, p Params) *Decoder {
	d := &Decoder{p: p, tok: tok, sampler: sample.New(p.Sampling), text: tok.NewStreamDecoder(), filter: NewStopFilter(p.Stops)}
	if p.IgnoreEOS {
		d.banned = tok.EOGTokens()
	}
	d.prefetchMask()
	return d
}

// prefetchMask starts computing the constraint's mask of the next token.
// Nothing else touches the constraint until waitMask.
func (d *Decoder) prefetchMask() {
	c := d.p.Constraint
	if c == nil {
		return
	}
	if w := (d.tok.NVocab() + 63) / 64; len(d.allowed) < w {
		d.allowed = make([]uint64, w)
	}
	done := make(chan struct{})
	d.masked = done
	go func() {
		c.Mask(d.allowed)
		d.lookahead()
		close(done)
	}()
}

// lookahead, after the mask of the next token was computed into allowed,
// has the constraint take the tokens it forces from there (the next
// token, where the mask allows it alone, then each the mask after it
// allows alone): they are certain, so taking them now, on the goroutine
// that computes the masks (beside the device's step), leaves NextForced
// nothing to compute. It runs where the mask is computed, with the same
// exclusive hold of the constraint.
func (d *Decoder) lookahead() {
	d.ahead, d.aheadDone = d.ahead[:0], false
	tok, ok := d.only(d.allowed)
	if !ok {
		return
	}
	if len(d.aheadMask) < len(d.allowed) {
		d.aheadMask = make([]uint64, len(d.allowed))
	}
	c := d.p.Constraint
	for ok && len(d.ahead) < maxAhead {
		if c.Accept(tok) != nil {
			break // (never: the mask allowed it) NextFrom's Accept ends the request
		}
		d.ahead = append(d.ahead, tok)
		if d.aheadDone = c.Done(); d.aheadDone {
			return
		}
		c.Mask(d.aheadMask)
		tok, ok = d.only(d.aheadMask)
	}
}

// waitMask waits for the mask prefetchMask started.
func (d *Decoder) waitMask() {
	if d.masked != nil {
		<-d.masked
		d.masked = nil
		d.dead = d.dead || d.deadEnd
	}
}

// Step is what one call of Next decided.
type Step struct {
	// Token is the sampled token, to be fed to the model next unless the
	// request finished; -1 when none was taken (an end-of-generation token
	// or no tokens to generate).
	Token int32
	// Text is the output that may be shown now: complete UTF-8, with any
	// possible start of a stop string held back until it is decided.
	Text string
	// Finish is set when the request is done; Token must then not be fed.
	Finish Finish
	// Logprobs are Token's, when Params.Logprobs asks for them and a
	// token was taken.
	Logprobs *Logprobs
}

// Source is where a step's outcome for one sequence is read: the model's
// own greedy choice (the graph's ARGMAX), and the logits, which a
// decoder fetches only when it needs more than that choice (Logits may
// return a buffer it then modifies).
type Source interface {
	Greedy() int32
	Logits() []float32
}

// LogitsViewer is a Source that can also show its logits without copying
// them, read-only (nil when it cannot), for a pass that reads only the
// allowed tokens' logits.
type LogitsViewer interface {
	LogitsView() []float32
}

// viewLogits is src's logits to read, not modify: its view when it has
// one, else its Logits.
func viewLogits(src Source) []float32 {
	if v, ok := src.(LogitsViewer); ok {
		if l := v.LogitsView(); l != nil {
			return l
		}
	}
	return src.Logits()
}

// Logits is a Source of logits alone.
type Logits []float32

// Greedy is -1: no choice is known apart from the logits.
func (l Logits) Greedy() int32 { return -1 }

// Logits returns l.
func (l Logits) Logits() []float32 { return l }

// Next samples the token that follows history (every token of the
// sequence so far, for the penalties) from its logits, which it
// may modify; pos is the positions the sequence already holds.
func (d *Decoder) Next(logits []float32, history []int32, pos int) Step {
	return d.NextFrom(Logits(logits), history, pos)
}

// NextFrom is Next reading src. A greedy request that changes no logit
// (no penalty, no logit bias) and reads none (no logprobs) takes src's
// greedy choice when it is not a banned token — the same token the logits
// would give (the first largest) — so the logits, a vocabulary of floats
// per sequence, are never copied out for it.
func (d *Decoder) NextFrom(src Source, history []int32, pos int) Step {
	d.waitMask()
	onDevice, advanced, drawn := d.onDevice, d.advanced, d.drawn
	d.onDevice, d.advanced, d.drawn = false, false, false
	if d.finish != Running {
		return Step{Token: -1, Finish: d.finish}
	}
	if d.dead {
		return d.end(Step{Token: -1}, EOG)
	}
	if d.generated >= d.p.MaxTokens {
		return d.end(Step{Token: -1}, Length)
	}
	if d.p.Constraint != nil && !advanced && len(d.ahead) == 0 && d.p.Constraint.Done() {
		// (An advanced constraint was not done before the token Advance
		// took: that token is this step's.)
		return d.end(Step{Token: -1}, EOG)
	}
	tok := int32(-1)
	if d.sampler.Greedy() && !d.p.Logprobs && d.p.Constraint == nil {
		if g := src.Greedy(); g >= 0 && !slices.Contains(d.banned, g) {
			tok = g
		}
	}
	var lp *Logprobs
	if tok < 0 && d.p.Constraint != nil && d.sampler.Greedy() && !d.p.Logprobs {
		// The largest allowed logit, read through the mask: the same
		// token as masking the logits and taking the first largest, in a
		// pass over the allowed tokens alone.
		if onDevice {
			tok = src.Greedy() // -1 where the mask allows nothing: the logits say the same below
		}
		if tok < 0 {
			d.dropBanned()
			tok = sample.MaskedArgmax(viewLogits(src), d.allowed)
		}
	}
	if tok < 0 && d.p.Constraint != nil && !d.p.Logprobs {
		// A token the mask allows alone is taken without a draw, as
		// NextForced takes it: a sampled request's stream then does not
		// depend on whether the engine took that token ahead of the
		// model (its spare rows) or here.
		tok, _ = d.only(d.allowed)
	}
	if tok < 0 && drawn {
		// The device's draw, or where it left none (no token of weight,
		// a logit at +Inf) the host's with the same uniform draw.
		if tok = src.Greedy(); tok < 0 {
			tok = d.sampler.DrawWith(d.ban(src.Logits()), d.u)
		}
	}
	if tok < 0 {
		// The sampler never writes the logits: a view of them serves
		// where no ban or constraint does (no copy of the vocabulary).
		var logits []float32
		if len(d.banned) == 0 && d.p.Constraint == nil {
			logits = viewLogits(src)
		} else {
			logits = d.ban(src.Logits())
		}
		if d.p.Constraint != nil {
			d.maskLogits(logits)
		}
		switch {
		case d.p.Logprobs:
			id, l, top := d.sampler.SampleLogprobs(logits, history, d.p.TopLogprobs)
			tok, lp = id, &Logprobs{Token: id, Logprob: l, Top: top}
		case d.proposal != nil && d.proposal.q != nil:
			tok, _ = d.sampler.Resolve(logits, history, d.proposal.tok, d.proposal.q)
		default:
			tok = d.sampler.Sample(logits, history)
		}
	}
	return d.take(tok, lp, advanced, pos)
}

// take is NextFrom's and NextForced's end: the constraint accepts tok
// (unless Advance did: advanced), which then joins the output and may
// end the request.
func (d *Decoder) take(tok int32, lp *Logprobs, advanced bool, pos int) Step {
	due := false // MaskNext computes the next mask: the constraint is its
	done := false
	// forced: tok is ahead[0], which the constraint took already. (After
	// an Advance that took another token, ahead belongs to the mask of
	// the token after it, which MaskNext may be computing now.)
	forced := advanced && d.advAhead || !advanced && len(d.ahead) > 0
	d.advAhead = false
	switch {
	case forced && tok != d.ahead[0]:
		// (Never: the mask allowed ahead[0] alone.) The constraint is
		// past tokens the output will not have: it cannot go on.
		return d.end(Step{Token: -1}, EOG)
	case forced:
		d.ahead = append(d.ahead[:0], d.ahead[1:]...)
		done = len(d.ahead) == 0 && d.aheadDone
	case d.p.Constraint != nil:
		// A token the constraint refuses can only be sampled when it
		// allows none (a dead end of the grammar): the output cannot go
		// on, so the request ends.
		err := d.acceptErr
		due, done = advanced && d.due != nil, d.advDone
		if !advanced || tok != d.accepted {
			if due {
				// (Not a choice Advance took: never with a device mask's
				// greedy choice.) The constraint is MaskNext's until it
				// is done.
				d.masked = d.due
				d.waitMask()
				due = false
			}
			err = d.p.Constraint.Accept(tok)
			done = err == nil && d.p.Constraint.Done()
		}
		if err != nil {
			return d.end(Step{Token: -1}, EOG)
		}
	}
	if d.tok.IsEOG(tok) {
		return d.end(Step{Token: -1}, EOG)
	}
	d.generated++
	piece := d.text.Add(tok)
	if slices.Contains(d.p.Keep, tok) {
		piece += string(d.tok.TokenToPiece(tok, true))
	}
	text, stopped := d.filter.Add(piece)
	st := Step{Token: tok, Text: text, Logprobs: lp}
	switch {
	case stopped:
		d.finish, st.Finish = StopString, StopString // the held text is the stop string: never shown
		return st
	case done:
		return d.end(st, EOG)
	case d.generated >= d.p.MaxTokens:
		return d.end(st, Length)
	case pos >= d.p.ContextLength:
		return d.end(st, Context)
	}
	switch {
	case forced && len(d.ahead) > 0:
		// The next token is forced too: its mask allows it alone.
		clear(d.allowed)
		d.allowed[d.ahead[0]>>6] = 1 << (d.ahead[0] & 63)
	case forced:
		// The mask after the forced run, which lookahead computed.
		d.allowed, d.aheadMask = d.aheadMask, d.allowed
		d.dropBanned()
	case due:
		d.masked = d.due
	default:
		d.prefetchMask()
	}
	return st
}

// NextForced takes the next token without the model where the
// constraint allows that one token alone (the rest of a JSON key, say),
// as NextFrom would take it from any logits, and reports true; it takes
// nothing and reports false where the request is not constrained, wants
// logprobs (which need the model) or has ended, or where the constraint
// allows several tokens, or only an end-of-generation one. The token may
// end the request (MaxTokens, the context, a stop string, a complete
// output), as NextFrom's would. The constraint took the token when the
// mask allowing it alone was computed (lookahead), so NextForced only
// waits for that mask: it must be computed or being computed (a due mask
// MaskNext has not started would never come). pos is as NextFrom's: the
// positions the sequence will hold before the token.
func (d *Decoder) NextForced(pos int) (Step, bool) {
	if d.p.Constraint == nil || d.p.Logprobs || d.finish != Running || d.generated >= d.p.MaxTokens {
		return Step{}, false
	}
	d.waitMask()
	if d.dead || len(d.ahead) == 0 {
		return Step{}, false
	}
	return d.take(d.ahead[0], nil, false, pos), true
}

// only is the token mask allows alone, unless that is an
// end-of-generation token.
func (d *Decoder) only(mask []uint64) (int32, bool) {
	tok := int32(-1)
	for w, x := range mask {
		if x == 0 {
			continue
		}
		if tok >= 0 || x&(x-1) != 0 {
			return -1, false
		}
		tok = int32(64*w + bits.TrailingZeros64(x))
	}
	if tok < 0 || int(tok) >= d.tok.NVocab() || d.tok.IsEOG(tok) || slices.Contains(d.banned, tok) {
		return -1, false
	}
	return tok, true
}

// NextDrafted is NextFrom for a row whose next token a draft model
// proposed: draft, drawn from the draft's distribution q. A sampled
// request decides by speculative sampling's rule (sample.Resolve): the
// draft is kept with probability min(1, p/q) and otherwise replaced by a
// draw from the residual, so the token follows the target's distribution
// p as NextFrom's would, and equals the draft as often as p and q allow.
// A greedy request, or a nil q (a draft of probability one), decides as
// NextFrom does: for a point draft, taking the target's own sample and
// comparing it with the draft is that same rule. The caller keeps the
// draft when the step's Token equals it.
func (d *Decoder) NextDrafted(src Source, history []int32, pos int, draft int32, q sample.Dist) Step {
	d.proposal = &proposal{draft, q}
	defer func() { d.proposal = nil }()
	return d.NextFrom(src, history, pos)
}

// Greedy reports whether the request decodes greedily (the sampler's
// Greedy): a draft model then proposes its own most likely tokens.
func (d *Decoder) Greedy() bool { return d.sampler.Greedy() }

// Sampling is the request's sampling parameters, for a draft model that
// proposes tokens the way the request samples them.
func (d *Decoder) Sampling() sample.Params { return d.p.Sampling }

// DeviceMask returns the buffer of the tokens the next token may be (the
// bits of runtime.Row.Mask), for a step that takes the request's greedy
// choice under them on the device; nil when that is not the token Next
// would take (no constraint, a sampled request, one that wants
// logprobs). The mask may still be being computed (since the last
// token): read it only once MaskReady has returned, which a tier does
// after it started the step's forward pass, so that the mask's time on
// the host overlaps the device's. After it returned a mask, the next
// NextFrom takes src.Greedy() as the choice under it and reads no
// logits.
func (d *Decoder) DeviceMask() []uint64 {
	if d.p.Constraint == nil || !d.sampler.Greedy() || d.p.Logprobs || d.finish != Running {
		return nil
	}
	d.onDevice = true
	return d.allowed
}

// AdvancesCheaply says that Advance does no walk of the constraint (it
// is an Ender): a caller may Advance a batch's rows one by one, and
// leave only MaskNext to other goroutines.
func (d *Decoder) AdvancesCheaply() bool {
	_, ok := d.p.Constraint.(Ender)
	return ok
}

// WantsLogits reports whether the next token comes from the logits on
// the host whatever the step's greedy choice: the sampler draws from or
// changes them, or logprobs are asked for. (A greedy request reads them
// only where its greedy choice is banned or its constraint's mask was
// not applied on the device.)
func (d *Decoder) WantsLogits() bool { return (!d.sampler.Greedy() || d.p.Logprobs) && !d.drawn }

// DeviceSample is the next token's draw for a model that draws on the
// device (runtime.Row.Sample): the inverse temperature, the uniform draw
// and the banned tokens, for a request that samples at a temperature
// with no cut, bias or penalty (sample.Sampler.Plain), no logprobs, no
// constraint and at most maxBans banned tokens; ok is false otherwise,
// and the host draws. It takes the sampler's uniform draw, which the
// next NextFrom's token is then drawn with: the step's, read as its
// greedy choice.
func (d *Decoder) DeviceSample(maxBans int) (inv, u float64, ban []int32, ok bool) {
	if !d.sampler.Plain() || d.p.Logprobs || d.p.Constraint != nil || len(d.banned) > maxBans || d.proposal != nil || d.finish != Running {
		return 0, 0, nil, false
	}
	d.drawn, d.u = true, d.sampler.Uniform()
	return 1 / d.p.Sampling.Temperature, d.u, d.banned, true
}

// OnDevice says that the step after DeviceMask takes this request's
// token on the device: Advance then has work to do.
func (d *Decoder) OnDevice() bool { return d.onDevice }

// Advance, after a step that took the request's greedy choice under the
// mask DeviceMask returned, advances the constraint past that choice
// (src.Greedy()), which NextFrom would otherwise do: the decoders of a
// batch's requests may Advance at once, each touching only its own
// request's state, before their NextFrom calls, which must follow one
// by one. It does nothing where NextFrom would not accept that token
// (no device mask, a request that ends before it, a choice the mask
// does not allow).
//
// It reports whether the mask of the token after is due: the request
// goes on as far as its constraint and MaxTokens tell. The caller then
// calls MaskNext, on any goroutine, before or while NextFrom runs
// (instead of NextFrom starting a goroutine for the mask), so that the
// goroutines that advanced a batch compute its next masks too.
//
// A constraint that is an Ender is not advanced here: Ends says whether
// the token ends the output, which is all NextFrom needs, and MaskNext
// accepts the token before it computes the mask, so that the grammar's
// walk of the token is off the caller's path too.
func (d *Decoder) Advance(src Source) bool {
	if !d.onDevice || d.advanced || d.finish != Running || d.generated >= d.p.MaxTokens {
		return false
	}
	d.waitMask()
	tok := src.Greedy()
	if len(d.ahead) > 0 {
		// The token the mask allowed alone, which the constraint took
		// ahead (lookahead): the mask after it is known too.
		if tok == d.ahead[0] {
			d.advanced, d.accepted, d.acceptErr, d.advDone = true, tok, nil, len(d.ahead) == 1 && d.aheadDone
			d.due, d.deferred, d.advAhead = nil, false, true
		}
		return false
	}
	if d.p.Constraint.Done() {
		return false
	}
	if tok < 0 || int(tok>>6) >= len(d.allowed) || d.allowed[tok>>6]&(1<<(tok&63)) == 0 {
		return false
	}
	d.due, d.deferred = nil, false
	if e, ok := d.p.Constraint.(Ender); ok {
		// The token is one the mask allows, which the constraint accepts;
		// whether it ends the output is all this step needs to know.
		d.advanced, d.accepted, d.acceptErr, d.advDone = true, tok, nil, e.Ends(tok)
		d.deferred = true
	} else {
		d.advanced, d.accepted, d.acceptErr = true, tok, d.p.Constraint.Accept(tok)
		d.advDone = d.acceptErr == nil && d.p.Constraint.Done()
	}
	if d.acceptErr != nil || d.advDone || d.generated+1 >= d.p.MaxTokens || d.tok.IsEOG(tok) {
		// The request ends at this token: nothing follows it, so a
		// deferred Accept is not needed.
		d.deferred = false
		return false
	}
	d.due = make(chan struct{})
	return true
}

// MaskNext computes the mask of the token after the one Advance took,
// when Advance reported it due. It touches only the constraint and the
// mask, which nothing else does until NextFrom or the next step waits
// for it; if the request ends at NextFrom instead (a stop string, its
// context), the mask goes unused.
func (d *Decoder) MaskNext() {
	ch := d.due
	if d.deferred {
		d.deferred = false
		if err := d.p.Constraint.Accept(d.accepted); err != nil {
			clear(d.allowed) // nothing may follow
			d.deadEnd = true
			close(ch)
			return
		}
	}
	d.p.Constraint.Mask(d.allowed)
	d.lookahead()
	close(ch)
}

// MaskReady waits until the mask DeviceMask returned holds the next
// token's tokens, end-of-generation ids banned (IgnoreEOS) cleared.
func (d *Decoder) MaskReady() {
	if d.masked == nil {
		return
	}
	d.waitMask()
	d.dropBanned()
}

// ban sets the banned tokens' logits to -Inf and returns logits.
func (d *Decoder) ban(logits []float32) []float32 {
	for _, id := range d.banned {
		if int(id) < len(logits) {
			logits[id] = float32(math.Inf(-1))
		}
	}
	return logits
}

// dropBanned clears the banned tokens' bits in the mask.
func (d *Decoder) dropBanned() {
	for _, id := range d.banned {
		if int(id>>6) < len(d.allowed) {
			d.allowed[id>>6] &^= 1 << (id & 63)
		}
	}
}

// maskLogits sets the logits of the tokens the constraint does not
// allow to -Inf: those the prefetched mask clears (logits past the
// vocabulary, which no token has, too).
func (d *Decoder) maskLogits(logits []float32) {
	inf := float32(math.Inf(-1))
	for i := 64 * len(d.allowed); i < len(logits); i++ {
		logits[i] = inf
	}
	for w, keep := range d.allowed {
		base := w * 64
		if base >= len(logits) {
			break
		}
		for drop := ^keep; drop != 0; drop &= drop - 1 {
			if i := base + bits.TrailingZeros64(drop); i < len(logits) {
				logits[i] = inf
			}
		}
	}
}

// end finishes the request with reason f, appending the text held back.
func (d *Decoder) end(st Step, f Finish) Step {
	rest, _ := d.filter.Add(d.text.Flush())
	st.Text += rest + d.filter.Flush()
	d.finish, st.Finish = f, f
	return st
}

// Release, once the request is finished, lets the constraint give back
// what it holds (one with a Release method: a grammar matcher hands its
// memoized machine to its grammar's next request), as soon as no mask is
// being computed for it: it does not wait for one (a goroutine releases
// it after), so a request ended while a slow mask runs holds up no
// caller. The decoder must not be used after it.
func (d *Decoder) Release() {
	r, ok := d.p.Constraint.(interface{ Release() })
	if !ok {
		return
	}
	// The mask prefetched or taken from MaskNext, and MaskNext's when
	// the request ended at the token Advance took.
	pending := []chan struct{}{d.masked, d.due}
	d.masked = nil
	for _, ch := range pending {
		if ch == nil {
			continue
		}
		select {
		case <-ch:
		default:
			go func() {
				for _, ch := range pending {
					if ch != nil {
						<-ch
					}
				}
				r.Release()
			}()
			return
		}
	}
	r.Release()
}

// Generated returns the tokens generated so far (an end-of-generation
// token is not counted).
func (d *Decoder) Generated() int { return d.generated }

// Finish returns why the request ended, or Running.
func (d *Decoder) Finish() Finish { return d.finish }
