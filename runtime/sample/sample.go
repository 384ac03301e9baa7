// Package sample picks the next token from logits: greedy, or sampled with
// temperature, top-k, top-p, min-p, a logit bias and repetition,
// frequency and presence penalties, from a seeded generator so a run can
// be repeated exactly.
package sample

import (
	"cmp"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sort"

	kcpu "github.com/zrtdev/zrt/kernels/cpu"
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
// it reuses between calls). It never writes the logits it is given.
//
// It never sorts the vocabulary. The cuts (top-k, min-p, top-p) keep a
// prefix of the tokens in the order logit descending, the lower id first
// among equals; where a prefix ends is found by counting and summing the
// weights in bins of logits (cut), and only the bin where it ends is
// sorted. The draw then walks the kept tokens in id order. A
// 151 936-token vocabulary costs a few passes over its logits a token
// (sorting it took 160 ms on a 2-core EPYC).
type Sampler struct {
	p      Params
	src    *rand.PCG // rng's source, which Restart seeds again
	rng    *rand.Rand
	v      []float32     // the adjusted logits, by token id: the caller's, or own
	own    []float32     // the adjusted copy of the logits, where adjust changes any
	w      []float64     // the temperature path's weights, by token id; 0: cut
	bins   []uint16      // cut's bin of each token of positive weight
	counts map[int32]int // occurrences in the penalty window
	order  []int32       // cut's tokens of the bin where a prefix ends
	top    []cand        // SampleLogprobs' most likely tokens
	sums   []binSum      // cut's per-bin counts and weights
	blocks []float64     // exps' sums of w by blocks of drawBlock tokens, for draw; empty: none
	// hi, lo and live bound the logits of the tokens of positive weight
	// and count them (or a set of tokens that holds them), as the pass
	// that set the weights found them: cut's span and bins.
	hi, lo float64
	live   int
	x      [drawBlock]float32 // exps' block of exponents
	idx    [drawBlock]int32   // and their tokens
}

type cand struct {
	id int32
	v  float64
}

// binSum is the tokens and the weight of one of cut's bins.
type binSum struct {
	n int
	w float64
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
	return s.pick()
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
	lse := logSumExp(s.v)
	var alts []Logprob
	if top > 0 {
		for _, c := range s.mostLikely(top) {
			alts = append(alts, Logprob{Token: c.id, Logprob: c.v - lse})
		}
	}
	id := s.pick()
	return id, float64(s.v[id]) - lse, alts
}

// adjust sets v to logits with the bias and the penalties applied (in
// float64, each result rounded to float32 as the logits are): logits
// itself where neither changes a logit, else a copy, so that the caller's
// logits are never written.
func (s *Sampler) adjust(logits []float32, history []int32) {
	s.v = logits
	if !s.adjusts() {
		return
	}
	if cap(s.own) < len(logits) {
		s.own = make([]float32, len(logits))
	}
	s.v = s.own[:len(logits)]
	copy(s.v, logits)
	p := s.p
	for id, b := range p.LogitBias {
		if id >= 0 && int(id) < len(s.v) {
			s.v[id] = float32(float64(s.v[id]) + b)
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
		if t >= 0 && int(t) < len(s.v) {
			s.counts[t]++
		}
	}
	// Each token's change depends only on its own logit and count, so the
	// map's order does not matter.
	for t, n := range s.counts {
		v := float64(s.v[t])
		if repeat {
			if v > 0 {
				v /= p.RepeatPenalty
			} else {
				v *= p.RepeatPenalty
			}
		}
		s.v[t] = float32(v - (float64(n)*p.FrequencyPenalty + p.PresencePenalty))
	}
}

// pick chooses a token from the adjusted logits: the first largest at
// temperature ≤ 0 (or where no token has weight), else a draw from the
// weights.
func (s *Sampler) pick() int32 {
	total := s.weigh()
	if total <= 0 || math.IsInf(total, 0) || math.IsNaN(total) {
		return firstLargest(s.v)
	}
	return draw(s.w, s.blocks, total, s.rng.Float64())
}

// Plain reports whether the sampler draws at a temperature with no cut,
// bias or penalty: the draw a device can make from the logits it holds
// (DrawWith says which), given the sampler's uniform draw (Uniform).
func (s *Sampler) Plain() bool {
	p := s.p
	return p.Temperature > 0 && p.TopK <= 0 && (p.TopP <= 0 || p.TopP >= 1) && p.MinP <= 0 && !s.adjusts()
}

// Uniform takes the sampler's next uniform draw in [0, 1), the one a
// Plain sampler's next Sample would take, for a token drawn elsewhere
// (DrawWith).
func (s *Sampler) Uniform() float64 { return s.rng.Float64() }

// DrawWith is the token a Plain sampler draws from logits with the
// uniform draw u: the first token, in id order, at which the running sum
// of the weights w[t] = expf(float32((logit[t] − max)/T)) (as
// kernels/cpu's expf rounds it, 0 for a token at -Inf or NaN) passes
// u·Σw, the sum taken by blocks of 256 tokens and the blocks walked
// first. A device that samples (runtime.Row.Sample) computes it in the
// same operations, so the two agree bit for bit. Where no token has
// weight, or a logit is +Inf, it is what Sample gives for the logits.
func (s *Sampler) DrawWith(logits []float32, u float64) int32 {
	s.adjust(logits, nil)
	total := s.weigh()
	if total <= 0 || math.IsInf(total, 0) || math.IsNaN(total) {
		return firstLargest(s.v)
	}
	return draw(s.w, s.blocks, total, u)
}

// firstLargest is the index of the first largest of v, NaNs skipped (0
// when all are NaN).
func firstLargest(v []float32) int32 {
	best := -1
	for i, x := range v {
		if best < 0 && x == x || best >= 0 && x > v[best] { // x != x: NaN
			best = i
		}
	}
	return int32(max(best, 0))
}

// weigh sets w to the weights the adjusted logits are drawn by, and
// returns their sum: exp((v − max)/T), the top-k, min-p and top-p cuts
// applied in that order, each keeping a prefix of the order (logit
// descending, the lower id first among equals) and 0 for the tokens it
// drops. Top-p's share is of the top-k's weight, min-p's of the largest
// weight, as llama.cpp's chain of those samplers has them. At
// temperature ≤ 0 it returns 0: the first largest logit is the choice.
// Top-k, which needs no weight, cuts before any is computed, and min-p
// before those of the tokens its logit bound leaves out where top-p does
// not need them. Without cuts it also sums the weights by blocks, for
// draw.
func (s *Sampler) weigh() float64 {
	p := s.p
	if p.Temperature <= 0 {
		return 0
	}
	mx := float32(math.Inf(-1))
	for _, v := range s.v {
		if v > mx { // NaN never is
			mx = v
		}
	}
	s.w = grow(s.w, len(s.v))
	w := s.w
	s.blocks = s.blocks[:0]
	// live: a token at -Inf, or NaN, has no weight; at +Inf only those do.
	floor := float32(math.Inf(-1))
	if math.IsInf(float64(mx), 1) {
		floor = math.MaxFloat32
	}
	live := func(v float32) bool { return v > floor }
	topK := p.TopK > 0 && p.TopK < len(w)
	switch {
	case topK && p.TopK <= maxListedTopK:
		clear(w)
		for _, c := range s.mostLikely(p.TopK) {
			w[c.id] = 1
		}
	case topK:
		s.hi, s.lo, s.live = float64(mx), math.Inf(1), 0
		for i, v := range s.v {
			w[i] = 0
			if live(v) {
				w[i] = 1
				s.lo, s.live = min(s.lo, float64(v)), s.live+1
			}
		}
		s.cut(func(n int, _ float64) bool { return n >= p.TopK })
	}
	topP := p.TopP > 0 && p.TopP < 1
	if math.IsInf(float64(mx), 1) {
		total := 0.0
		for i, v := range s.v {
			keep := v == mx && (!topK || w[i] != 0)
			w[i] = 0
			if keep {
				w[i] = 1
			}
			total += w[i]
		}
		return total
	}
	// Min-p keeps the weights of at least MinP: the logits within
	// T·ln(1/MinP) of the largest, a bound that leaves out the rest's
	// exponentials (the margin leaves the tokens at the bound to the
	// weights' own comparison).
	bound := math.Inf(-1)
	if p.MinP > 0 && !topP {
		bound = float64(mx) + p.Temperature*math.Log(p.MinP)
		bound -= 1e-9 * (math.Abs(bound) + 1)
	}
	total := s.exps(float64(mx), 1/p.Temperature, bound, topK, topP)
	if p.MinP <= 0 && !topP {
		return total
	}
	s.blocks = s.blocks[:0] // the cuts below change the weights the blocks sum
	if p.MinP > 0 {
		// The largest weight is exp(0) = 1. Top-p's share is of the
		// weight before this cut (llama.cpp's top_p normalizes after
		// top_k and before min_p).
		topKTotal := total
		total = 0
		for i, x := range w {
			if x < p.MinP {
				w[i] = 0
			}
			total += w[i]
		}
		if topP {
			total = s.cut(func(_ int, sum float64) bool { return sum >= p.TopP*topKTotal })
		}
	} else if topP {
		target := p.TopP * total
		total = s.cut(func(_ int, sum float64) bool { return sum >= target })
	}
	return total
}

// exps sets w[i] = exp((v[i] − mx)·inv) for the tokens of a finite
// logit of at least bound (and, with topK, of a weight already set), 0
// for the others, and returns their sum, which it also appends a block
// of drawBlock tokens at a time to blocks; with bounds (or topK) it also
// sets hi, lo and live for a cut. A block's exponents go through
// kernels/cpu.Exp together (expf, in float32 as llama.cpp's: eight at a
// time with AVX-512), whose bits a device's draw repeats (DrawWith).
func (s *Sampler) exps(mx, inv, bound float64, topK, bounds bool) float64 {
	v, w := s.v, s.w
	total, lo, live := 0.0, math.Inf(1), 0
	for at := 0; at < len(v); at += drawBlock {
		end := min(at+drawBlock, len(v))
		sum := 0.0
		if !topK {
			// Every token's exponent, -200 (expf: 0) for those left out.
			x := s.x[:end-at]
			for j := range x {
				x[j] = -200
				if f := float64(v[at+j]); f >= bound && f > math.Inf(-1) {
					x[j] = float32((f - mx) * inv)
				}
			}
			if bounds {
				// Apart from the loop above, which this would slow by a
				// sixth where no cut follows.
				for j, e := range x {
					if e != -200 {
						if f := float64(v[at+j]); f < lo {
							lo = f
						}
						live++
					}
				}
			}
			kcpu.Exp(x)
			for j, e := range x {
				w[at+j] = float64(e)
				sum += float64(e)
			}
		} else {
			// The few weights top-k left, gathered.
			x, idx := s.x[:0], s.idx[:0]
			for i := at; i < end; i++ {
				if f := float64(v[i]); w[i] != 0 && f >= bound && f > math.Inf(-1) {
					x, idx = append(x, float32((f-mx)*inv)), append(idx, int32(i))
					if f < lo {
						lo = f
					}
					live++
				}
				w[i] = 0
			}
			kcpu.Exp(x)
			for j, i := range idx {
				w[i] = float64(x[j])
				sum += w[i]
			}
		}
		s.blocks = append(s.blocks, sum)
		total += sum
	}
	if bounds || topK {
		s.hi, s.lo, s.live = mx, lo, live
	}
	return total
}

// drawBlock is the tokens a block of weighAll's sums covers: draw walks
// the blocks' sums to the block where the draw falls, then its tokens.
const drawBlock = 256

// maxListedTopK is the largest top-k that weigh keeps by a list of the
// most likely tokens (each token compared with the list's last, the
// few that enter it inserted); larger ones are cut by bins.
const maxListedTopK = 256

// grow returns b resized to n.
func grow(b []float64, n int) []float64 {
	if cap(b) < n {
		return make([]float64, n)
	}
	return b[:n]
}

// cut keeps the prefix of the tokens of positive weight, in the order
// logit descending and the lower id first among equals, that ends at the
// first token where stop(tokens, weight) — the tokens and the weight
// summed so far in that order, that token's included — is true: it sets
// the later tokens' weights to 0 and returns the weight kept. stop must
// stay true once it is. It sorts no more than the tokens of one bin: the
// logits are binned by value (bins in the order, tokens counted and
// weighed a bin at a time), and only the bin where stop turns true is
// sorted. (The weights are summed by bins, so the prefix may end a token
// away from where a sequential sum in the full order would put it when
// the two sums straddle the target by less than their rounding.)
func (s *Sampler) cut(stop func(n int, sum float64) bool) float64 {
	v, w := s.v, s.w
	hi, lo, live := s.hi, s.lo, s.live
	if live == 0 {
		return 0
	}
	// About eight tokens a bin, at most 4096 bins; a logit the span
	// cannot scale (infinite) goes to the first or last bin.
	nb := min(max(live/8, 1), 4096)
	scale := 0.0
	if span := hi - lo; span > 0 && !math.IsInf(span, 0) {
		scale = float64(nb) / span
	}
	binOf := func(x float64) int {
		if x == hi {
			return 0
		}
		f := (hi - x) * scale
		if !(f < float64(nb-1)) { // NaN and +Inf too: the last bin
			return nb - 1
		}
		return int(f)
	}
	if cap(s.sums) < nb {
		s.sums = make([]binSum, nb)
	}
	sums := s.sums[:nb]
	clear(sums)
	if cap(s.bins) < len(w) {
		s.bins = make([]uint16, len(w))
	}
	bins := s.bins[:len(w)]
	for i, x := range w {
		if x > 0 {
			b := binOf(float64(v[i]))
			bins[i] = uint16(b)
			sums[b].n++
			sums[b].w += x
		}
	}
	n, sum := 0, 0.0
	end := -1 // the bin where the prefix ends
	for b, bs := range sums {
		if stop(n+bs.n, sum+bs.w) {
			end = b
			break
		}
		n, sum = n+bs.n, sum+bs.w
	}
	if end < 0 {
		return sum // stop never turned true: every token stays
	}
	// One pass: the later bins' tokens dropped, the last bin's collected.
	order := s.order[:0]
	for i, x := range w {
		if x > 0 {
			switch b := int(bins[i]); {
			case b > end:
				w[i] = 0
			case b == end:
				order = append(order, int32(i))
			}
		}
	}
	// Collected in id order: a stable sort by logit puts equals' lower
	// ids first.
	slices.SortStableFunc(order, func(a, b int32) int { return cmp.Compare(v[b], v[a]) })
	s.order = order
	k := len(order)
	for j, id := range order {
		n, sum = n+1, sum+w[id]
		if stop(n, sum) {
			k = j + 1
			break
		}
	}
	for _, id := range order[k:] {
		w[id] = 0
	}
	return sum
}

// draw picks a token with probability w[t]/total, given the uniform draw
// u, walking the tokens in id order: where blocks sums w by blocks of
// drawBlock tokens (exps', whose sum total is), from the block where the
// draw falls.
func draw(w, blocks []float64, total, u float64) int32 {
	r := u * total
	from := 0
	if len(blocks) == (len(w)+drawBlock-1)/drawBlock {
		for _, b := range blocks {
			if r < b || from+drawBlock >= len(w) {
				break
			}
			r -= b
			from += drawBlock
		}
	}
	last := -1
	for t := from; t < len(w); t++ {
		if x := w[t]; x > 0 {
			if r -= x; r < 0 {
				return int32(t)
			}
			last = t
		}
	}
	if last < 0 { // the blocks' rounding put the draw past their last weight
		for t := from - 1; t >= 0; t-- {
			if w[t] > 0 {
				return int32(t)
			}
		}
	}
	return int32(max(last, 0)) // the sum's rounding left r ≥ 0
}

// Dist is the distribution a Sampler draws one token from: Dist[t] is
// token t's probability after the logit bias, the penalties, the
// temperature and the top-k, top-p and min-p cuts (a greedy sampler's is
// 1 at the first largest logit). Speculative sampling compares a draft
// model's Dist with the target's (Resolve).
type Dist []float64

// dist is the distribution of the adjusted logits, over n tokens.
func (s *Sampler) dist(n int) Dist {
	d := make(Dist, n)
	total := s.weigh()
	if total <= 0 || math.IsInf(total, 0) || math.IsNaN(total) {
		d[firstLargest(s.v)] = 1
		return d
	}
	for t, x := range s.w {
		d[t] = x / total
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
		return s.pick(), d
	}
	return s.drawDist(d), d
}

// drawDist picks a token with probability d[t] (d need not sum to 1).
func (s *Sampler) drawDist(d Dist) int32 {
	total := 0.0
	for _, x := range d {
		if x > 0 {
			total += x
		}
	}
	return draw(d, nil, total, s.rng.Float64())
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

// mostLikely returns the n largest of the adjusted logits, largest first
// and ties by lower id, leaving out -Inf (a banned token is no
// alternative).
func (s *Sampler) mostLikely(n int) []cand {
	top := s.top[:0]
	for id, x := range s.v {
		v := float64(x)
		if math.IsInf(v, -1) || math.IsNaN(v) || (len(top) == n && v <= top[n-1].v) {
			continue
		}
		// Insert after every entry at least as large: earlier ids win ties.
		i := sort.Search(len(top), func(i int) bool { return top[i].v < v })
		if len(top) < n {
			top = append(top, cand{})
		}
		copy(top[i+1:], top[i:len(top)-1])
		top[i] = cand{int32(id), v}
	}
	s.top = top
	return top
}

// logSumExp is log Σ exp(x) over v, computed from its largest value so
// it neither overflows nor underflows; NaNs are skipped, and it is 0 when
// no value is finite (then no log-probability is either).
func logSumExp(v []float32) float64 {
	mx := math.Inf(-1)
	for _, x := range v {
		if float64(x) > mx { // NaN never is
			mx = float64(x)
		}
	}
	if math.IsInf(mx, 0) {
		return 0
	}
	sum := 0.0
	for _, x := range v {
		if x == x { // not NaN
			sum += math.Exp(float64(x) - mx)
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
