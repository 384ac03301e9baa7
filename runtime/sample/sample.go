// Package sample picks the next token from logits: greedy, or sampled with
// temperature, top-k, top-p, min-p, a logit bias and repetition,
// frequency and presence penalties, from a seeded generator so a run can
// be repeated exactly.
package sample

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"sort"
)

// Params configure a Sampler. The zero value is greedy.
type Params struct {
	Temperature float64 // ≤ 0: greedy
	TopK        int     // ≤ 0: all
	TopP        float64 // ≥ 1 or ≤ 0: off
	MinP        float64 // ≤ 0: off
	// RepeatPenalty divides positive (multiplies negative) logits of the
	// tokens among the last RepeatLastN of the sequence (≤ 0: all of it),
	// as llama.cpp does; 1 is off.
	RepeatPenalty float64
	RepeatLastN   int
	// FrequencyPenalty and PresencePenalty are OpenAI's: a token that
	// occurs n > 0 times among the same last RepeatLastN tokens has
	// n·FrequencyPenalty + PresencePenalty subtracted from its logit,
	// after the repetition penalty. Which tokens count is llama.cpp's
	// choice (llama_sampler_penalties fed the prompt too), not OpenAI's
	// (generated tokens only): a server that feeds this the whole sequence
	// penalizes what the prompt repeats as well. 0 is off.
	FrequencyPenalty float64
	PresencePenalty  float64
	// LogitBias is added to the logits of its tokens before the penalties
	// (llama.cpp's order; it matters for the repetition penalty's
	// scaling). Ids outside the logits are ignored.
	LogitBias map[int32]float64
	Seed      uint64
}

// Logprob is a token and its log-probability.
type Logprob struct {
	Token   int32
	Logprob float64
}

// Sampler is stateful only through its random generator (and the buffers
// it reuses between calls).
type Sampler struct {
	p      Params
	src    *rand.PCG // rng's source, which Restart seeds again
	rng    *rand.Rand
	buf    []cand
	w      []float64     // the temperature path's weights, by buf's order
	counts map[int32]int // occurrences in the penalty window
	top    []cand        // SampleLogprobs' most likely tokens
}

type cand struct {
	id int32
	v  float64
}

// New returns a sampler.
func New(p Params) *Sampler {
	src := rand.NewPCG(p.Seed, p.Seed^streamMix)
	return &Sampler{p: p, src: src, rng: rand.New(src)}
}

// streamMix makes the generator's second seed word from the first.
const streamMix = 0x9E3779B97F4A7C15

// Restart sets the generator to the start of the seed's stream number
// stream (a state of its own, mixed from the seed and the number): a
// caller that draws for positions of a sequence in an order it does not
// control (a speculative draft, made again after a rejection) restarts
// at each position's stream, so that a position's draw does not depend
// on how many draws came before it.
func (s *Sampler) Restart(stream uint64) {
	s.src.Seed(s.p.Seed^splitmix(stream), s.p.Seed^streamMix^splitmix(^stream))
}

// splitmix is SplitMix64's output function: nearby inputs give
// unrelated outputs.
func splitmix(x uint64) uint64 {
	x += streamMix
	x = (x ^ x>>30) * 0xBF58476D1CE4E5B9
	x = (x ^ x>>27) * 0x94D049BB133111EB
	return x ^ x>>31
}

// adjusts reports whether the sampler changes any logit before choosing.
func (s *Sampler) adjusts() bool {
	p := s.p
	return (p.RepeatPenalty > 0 && p.RepeatPenalty != 1) || p.FrequencyPenalty != 0 || p.PresencePenalty != 0 || len(p.LogitBias) > 0
}

// Greedy reports whether the sampler takes the largest logit as it is:
// greedy, with no penalty and no logit bias. The graph's ARGMAX then gives
// the same token without the logits leaving the device; any setting that
// changes a logit first makes this false, or that token would be wrong.
func (s *Sampler) Greedy() bool {
	return s.p.Temperature <= 0 && !s.adjusts()
}

// Sample picks a token; history holds the tokens so far (for the
// penalties).
func (s *Sampler) Sample(logits []float32, history []int32) int32 {
	if s.Greedy() {
		return Argmax(logits)
	}
	s.adjust(logits, history)
	return s.pick().id
}

// SampleLogprobs is Sample that also returns the picked token's
// log-probability and those of the top most likely tokens (most likely
// first, ties by lower id; tokens of probability 0 are left out). The
// log-probabilities are of the logits after the bias and the penalties
// and before the temperature and the top-k, top-p and min-p cuts: the
// model's distribution as this request shaped it, the same whatever the
// temperature (llama-server's default reports the raw logits'; OpenAI
// does not say). It draws from the generator exactly as Sample does, so
// asking for them never changes the tokens of a seeded run.
func (s *Sampler) SampleLogprobs(logits []float32, history []int32, top int) (int32, float64, []Logprob) {
	s.adjust(logits, history)
	lse := logSumExp(s.buf)
	var alts []Logprob
	if top > 0 {
		for _, c := range s.mostLikely(top) {
			alts = append(alts, Logprob{Token: c.id, Logprob: c.v - lse})
		}
	}
	c := s.pick()
	return c.id, c.v - lse, alts
}

// adjust loads logits into buf and applies the bias and the penalties.
func (s *Sampler) adjust(logits []float32, history []int32) {
	s.buf = s.buf[:0]
	for i, v := range logits {
		s.buf = append(s.buf, cand{int32(i), float64(v)})
	}
	p := s.p
	for id, b := range p.LogitBias {
		if id >= 0 && int(id) < len(s.buf) {
			s.buf[id].v += b
		}
	}
	repeat := p.RepeatPenalty > 0 && p.RepeatPenalty != 1
	if !repeat && p.FrequencyPenalty == 0 && p.PresencePenalty == 0 {
		return
	}
	window := history
	if p.RepeatLastN > 0 && len(window) > p.RepeatLastN {
		window = window[len(window)-p.RepeatLastN:]
	}
	if s.counts == nil {
		s.counts = map[int32]int{}
	}
	clear(s.counts)
	for _, t := range window {
		if t >= 0 && int(t) < len(s.buf) {
			s.counts[t]++
		}
	}
	// Each token's change depends only on its own logit and count, so the
	// map's order does not matter.
	for t, n := range s.counts {
		c := &s.buf[t]
		if repeat {
			if c.v > 0 {
				c.v /= p.RepeatPenalty
			} else {
				c.v *= p.RepeatPenalty
			}
		}
		c.v -= float64(n)*p.FrequencyPenalty + p.PresencePenalty
	}
}

// pick chooses from the adjusted buf, returning the token with its
// adjusted logit.
func (s *Sampler) pick() cand {
	c, w := s.weights()
	if w == nil {
		return c[0]
	}
	return c[s.draw(w)]
}

// weights orders the adjusted buf as pick chooses from it and returns it
// with the weights of its candidates after the temperature and the cuts
// (w[i] is c[i]'s; the candidates past len(w) are cut), not normalized
// to 1 after the cuts. At temperature ≤ 0 it returns the first largest
// alone as c[0] and no weights.
func (s *Sampler) weights() ([]cand, []float64) {
	p := s.p
	if p.Temperature <= 0 {
		best := 0
		for i, c := range s.buf {
			if c.v > s.buf[best].v {
				best = i
			}
		}
		return s.buf[best : best+1], nil
	}
	c := s.buf
	sort.SliceStable(c, func(i, j int) bool { return c[i].v > c[j].v })
	if p.TopK > 0 && p.TopK < len(c) {
		c = c[:p.TopK]
	}
	// Softmax at temperature, into w so that c keeps the logits.
	w := s.w[:0]
	mx := c[0].v
	sum := 0.0
	for i := range c {
		w = append(w, math.Exp((c[i].v-mx)/p.Temperature))
		sum += w[i]
	}
	s.w = w
	for i := range w {
		w[i] /= sum
	}
	if p.MinP > 0 {
		n := 1
		for n < len(w) && w[n] >= p.MinP*w[0] {
			n++
		}
		w = w[:n]
	}
	if p.TopP > 0 && p.TopP < 1 {
		cum, n := 0.0, 0
		for n < len(w) {
			cum += w[n]
			n++
			if cum >= p.TopP {
				break
			}
		}
		w = w[:n]
	}
	return c, w
}

// draw picks an index of w with probability proportional to its weight,
// one draw of the generator.
func (s *Sampler) draw(w []float64) int {
	total := 0.0
	for _, x := range w {
		total += x
	}
	r := s.rng.Float64() * total
	for i, x := range w {
		r -= x
		if r < 0 {
			return i
		}
	}
	return len(w) - 1
}

// Dist is the distribution a Sampler draws one token from: Dist[t] is
// token t's probability after the logit bias, the penalties, the
// temperature and the top-k, top-p and min-p cuts (a greedy sampler's is
// 1 at the first largest logit). Speculative sampling compares a draft
// model's Dist with the target's (Resolve).
type Dist []float64

// dist is the distribution of the adjusted buf, over n tokens.
func (s *Sampler) dist(n int) Dist {
	d := make(Dist, n)
	c, w := s.weights()
	if w == nil {
		d[c[0].id] = 1
		return d
	}
	total := 0.0
	for _, x := range w {
		total += x
	}
	for i, x := range w {
		d[c[i].id] = x / total
	}
	return d
}

// SampleDist is Sample that also returns the distribution the token was
// drawn from: a draft model's proposal and its Dist for Resolve. It draws
// from the generator as Sample does.
func (s *Sampler) SampleDist(logits []float32, history []int32) (int32, Dist) {
	s.adjust(logits, history)
	d := s.dist(len(logits))
	if s.p.Temperature <= 0 {
		return s.pick().id, d
	}
	return s.drawDist(d), d
}

// drawDist picks a token with probability d[t] (d need not sum to 1).
func (s *Sampler) drawDist(d Dist) int32 {
	total := 0.0
	last := -1
	for t, x := range d {
		if x > 0 {
			total += x
			last = t
		}
	}
	r := s.rng.Float64() * total
	for t, x := range d {
		if x > 0 {
			if r -= x; r < 0 {
				return int32(t)
			}
		}
	}
	return int32(last)
}

// Resolve is speculative sampling's rule (Leviathan et al., Chen et al.)
// for one position: given the target's logits there and a draft token
// drawn from the draft's distribution q, it keeps the draft with
// probability min(1, p(draft)/q(draft)), where p is this sampler's
// distribution over the logits; otherwise it draws from max(p − q, 0)
// renormalized. Either way the token it returns follows p exactly,
// whatever q is, and it is the draft as often as the two distributions
// allow (Σ min(p, q)). A nil q is a draft proposed with probability one
// (greedy drafts, lookups). It reports whether the draft was kept.
func (s *Sampler) Resolve(logits []float32, history []int32, draft int32, q Dist) (int32, bool) {
	s.adjust(logits, history)
	p := s.dist(len(logits))
	qd := 1.0
	if q != nil {
		qd = 0
		if int(draft) < len(q) && draft >= 0 {
			qd = q[draft]
		}
	}
	if draft >= 0 && int(draft) < len(p) && qd > 0 {
		if s.rng.Float64()*qd < p[draft] {
			return draft, true
		}
	}
	// The residual: p where it exceeds q. For a draft of probability one
	// it is p without the draft token.
	r := make(Dist, len(p))
	any := false
	for t, x := range p {
		qt := 0.0
		switch {
		case q != nil && t < len(q):
			qt = q[t]
		case q == nil && int32(t) == draft:
			qt = 1
		}
		if x > qt {
			r[t], any = x-qt, true
		}
	}
	if !any { // p ≤ q everywhere means p = q: the draft was kept above unless p(draft) = 0
		return s.drawDist(p), false
	}
	return s.drawDist(r), false
}

// mostLikely returns the n largest of the adjusted buf, largest first and
// ties by lower id, leaving out -Inf (a banned token is no alternative).
// buf must still be in id order.
func (s *Sampler) mostLikely(n int) []cand {
	top := s.top[:0]
	for _, c := range s.buf {
		if math.IsInf(c.v, -1) || math.IsNaN(c.v) || (len(top) == n && c.v <= top[n-1].v) {
			continue
		}
		// Insert after every entry at least as large: earlier ids win ties.
		i := sort.Search(len(top), func(i int) bool { return top[i].v < c.v })
		if len(top) < n {
			top = append(top, cand{})
		}
		copy(top[i+1:], top[i:len(top)-1])
		top[i] = c
	}
	s.top = top
	return top
}

// logSumExp is log Σ exp(v) over buf, computed from its largest value so
// it neither overflows nor underflows; NaNs are skipped, and it is 0 when
// no value is finite (then no log-probability is either).
func logSumExp(buf []cand) float64 {
	mx := math.Inf(-1)
	for _, c := range buf {
		if c.v > mx { // NaN never is
			mx = c.v
		}
	}
	if math.IsInf(mx, 0) {
		return 0
	}
	sum := 0.0
	for _, c := range buf {
		if !math.IsNaN(c.v) {
			sum += math.Exp(c.v - mx)
		}
	}
	return mx + math.Log(sum)
}

// Argmax is the index of the first largest logit, as the graph's ARGMAX
// picks it: greedy decoding.
func Argmax(logits []float32) int32 {
	if len(logits) == 0 {
		return 0
	}
	best, bv := 0, logits[0]
	for i, v := range logits {
		if v > bv {
			best, bv = i, v
		}
	}
	return int32(best)
}

// MaskedArgmax is the first largest of the logits whose bit is set in
// allowed (bit t%64 of word t/64 for token t), or -1 when none is.
func MaskedArgmax(logits []float32, allowed []uint64) int32 {
	best, bv := int32(-1), float32(0)
	for w, keep := range allowed {
		base := w * 64
		for ; keep != 0; keep &= keep - 1 {
			i := base + bits.TrailingZeros64(keep)
			if i >= len(logits) {
				return best
			}
			if v := logits[i]; best < 0 || v > bv {
				best, bv = int32(i), v
			}
		}
	}
	return best
}
