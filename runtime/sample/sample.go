// Package sample picks the next token from logits: greedy, or sampled with
// temperature, top-k, top-p, min-p and a repetition penalty, from a seeded
// generator so a run can be repeated exactly.
package sample

import (
	"math"
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
	// last RepeatLastN tokens, as llama.cpp does; 1 is off.
	RepeatPenalty float64
	RepeatLastN   int
	Seed          uint64
}

// Sampler is stateful only through its random generator.
type Sampler struct {
	p   Params
	rng *rand.Rand
	buf []cand
}

type cand struct {
	id int32
	v  float64
}

// New returns a sampler.
func New(p Params) *Sampler {
	return &Sampler{p: p, rng: rand.New(rand.NewPCG(p.Seed, p.Seed^0x9E3779B97F4A7C15))}
}

// Greedy reports whether the sampler takes the largest logit as it is:
// greedy, with no repetition penalty. The graph's ARGMAX then gives the
// same token without the logits leaving the device.
func (s *Sampler) Greedy() bool {
	return s.p.Temperature <= 0 && (s.p.RepeatPenalty <= 0 || s.p.RepeatPenalty == 1)
}

// Sample picks a token; history holds the tokens so far (for the penalty).
func (s *Sampler) Sample(logits []float32, history []int32) int32 {
	if s.Greedy() {
		return argmax(logits)
	}
	p := s.p
	s.buf = s.buf[:0]
	for i, v := range logits {
		s.buf = append(s.buf, cand{int32(i), float64(v)})
	}
	if p.RepeatPenalty > 0 && p.RepeatPenalty != 1 {
		seen := map[int32]bool{}
		from := max(0, len(history)-max(p.RepeatLastN, 0))
		if p.RepeatLastN <= 0 {
			from = 0
		}
		for _, t := range history[from:] {
			if t < 0 || int(t) >= len(s.buf) || seen[t] {
				continue
			}
			seen[t] = true
			if c := &s.buf[t]; c.v > 0 {
				c.v /= p.RepeatPenalty
			} else {
				c.v *= p.RepeatPenalty
			}
		}
	}
	if p.Temperature <= 0 {
		best := 0
		for i, c := range s.buf {
			if c.v > s.buf[best].v {
				best = i
			}
		}
		return s.buf[best].id
	}
	c := s.buf
	sort.SliceStable(c, func(i, j int) bool { return c[i].v > c[j].v })
	if p.TopK > 0 && p.TopK < len(c) {
		c = c[:p.TopK]
	}
	// Softmax at temperature.
	mx := c[0].v
	sum := 0.0
	for i := range c {
		c[i].v = math.Exp((c[i].v - mx) / p.Temperature)
		sum += c[i].v
	}
	for i := range c {
		c[i].v /= sum
	}
	if p.MinP > 0 {
		n := 1
		for n < len(c) && c[n].v >= p.MinP*c[0].v {
			n++
		}
		c = c[:n]
	}
	if p.TopP > 0 && p.TopP < 1 {
		cum, n := 0.0, 0
		for n < len(c) {
			cum += c[n].v
			n++
			if cum >= p.TopP {
				break
			}
		}
		c = c[:n]
	}
	total := 0.0
	for _, x := range c {
		total += x.v
	}
	r := s.rng.Float64() * total
	for _, x := range c {
		r -= x.v
		if r < 0 {
			return x.id
		}
	}
	return c[len(c)-1].id
}

// argmax is the index of the first largest logit, as the graph's ARGMAX
// picks it.
func argmax(logits []float32) int32 {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	return int32(best)
}
