package sample

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/zrtdev/zrt/internal/chisq"
	kcpu "github.com/zrtdev/zrt/kernels/cpu"
)

// sortedDist is the distribution by the definition the cuts follow,
// computed the slow way: the whole vocabulary sorted (logit descending,
// ties by lower id), softmax at the temperature over the top k, then the
// min-p and top-p prefixes of that order. Its weights round as the
// sampler's do, so the two differ only by their sums' order.
func sortedDist(v []float32, p Params) Dist {
	type c struct {
		id int
		v  float64
	}
	cs := make([]c, len(v))
	for i, x := range v {
		cs[i] = c{i, float64(x)}
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].v > cs[j].v })
	if p.TopK > 0 && p.TopK < len(cs) {
		cs = cs[:p.TopK]
	}
	// The weights as precise as the sampler's: float32's exponential
	// (kernels/cpu.Exp).
	w := make([]float64, len(cs))
	sum := 0.0
	for i := range cs {
		e := []float32{float32((cs[i].v - cs[0].v) * (1 / p.Temperature))}
		kcpu.Exp(e)
		w[i] = float64(e[0])
		sum += w[i]
	}
	n := len(w)
	if p.MinP > 0 {
		n = 1
		for n < len(w) && w[n] >= p.MinP*w[0] {
			n++
		}
	}
	if p.TopP > 0 && p.TopP < 1 {
		cum, k := 0.0, 0
		for k < n {
			cum += w[k] / sum
			k++
			if cum >= p.TopP {
				break
			}
		}
		n = k
	}
	total := 0.0
	for _, x := range w[:n] {
		total += x
	}
	d := make(Dist, len(v))
	for i := range n {
		d[cs[i].id] = w[i] / total
	}
	return d
}

// TestCutsMatchSort: the binned cuts keep the tokens and give the
// probabilities that sorting the whole vocabulary gives, over random
// logits (some with many equal values, to hold the ties' order) of small
// and large vocabularies and random settings.
func TestCutsMatchSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 400 {
		n := 1 + rng.IntN(40)
		if trial%4 == 0 {
			n = 1000 + rng.IntN(20000)
		}
		logits := make([]float32, n)
		ties := trial%3 == 0
		for i := range logits {
			x := rng.NormFloat64() * 3
			if ties {
				x = math.Round(x)
			}
			logits[i] = float32(x)
		}
		p := Params{Temperature: 0.2 + 1.8*rng.Float64(), Seed: uint64(trial)}
		if rng.IntN(2) == 0 {
			p.TopK = 1 + rng.IntN(n+5)
		}
		if rng.IntN(2) == 0 {
			p.TopP = rng.Float64()
		}
		if rng.IntN(3) == 0 {
			p.MinP = rng.Float64() * 0.3
		}
		s := New(p)
		s.adjust(logits, nil)
		got := s.dist(n)
		want := sortedDist(s.v, p)
		for id := range want {
			if (got[id] > 0) != (want[id] > 0) || math.Abs(got[id]-want[id]) > 1e-9*max(want[id], 1e-300)+1e-15 {
				t.Fatalf("trial %d (%d tokens, %+v): token %d has probability %v, the sorted definition %v", trial, n, p, id, got[id], want[id])
			}
		}
	}
}

// TestSampleFollowsDist: Sample's draws follow the distribution dist
// describes (χ²), the cuts on; and Sample takes the first largest logit
// when every weight is 0.
func TestSampleFollowsDist(t *testing.T) {
	const vocab, n = 40, 100_000
	rng := rand.New(rand.NewPCG(5, 6))
	logits := make([]float32, vocab)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 2)
	}
	for _, p := range []Params{{Temperature: 1}, {Temperature: 0.8, TopK: 10, TopP: 0.9}, {Temperature: 1.5, MinP: 0.1}} {
		s := New(p)
		want := New(p).dist0(logits, nil)
		counts := make([]int, vocab)
		for range n {
			counts[s.Sample(logits, nil)]++
		}
		if x2, df := chisq.Statistic(counts, want, n); x2 > chisq.Critical(df) {
			t.Errorf("%+v: χ² %.1f over %d degrees of freedom", p, x2, df)
		}
	}
	inf := float32(math.Inf(-1))
	if got := New(Params{Temperature: 1}).Sample([]float32{inf, inf, inf}, nil); got != 0 {
		t.Errorf("all banned: picked %d, want the first", got)
	}
}

// BenchmarkSample is a sampled token's cost on vocabularies of llama 2's
// and Qwen's sizes, with the server's default settings (temperature 1)
// and two common cut settings.
func BenchmarkSample(b *testing.B) {
	for _, n := range []int{32000, 151936} {
		logits := make([]float32, n)
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range logits {
			logits[i] = float32(rng.NormFloat64() * 3)
		}
		for _, c := range []struct {
			name string
			p    Params
		}{{"temp1", Params{Temperature: 1}}, {"topp0.95", Params{Temperature: 0.8, TopP: 0.95}}, {"topk40", Params{Temperature: 0.7, TopK: 40, TopP: 0.9, MinP: 0.05}}} {
			b.Run(c.name+"/"+map[int]string{32000: "32k", 151936: "152k"}[n], func(b *testing.B) {
				s := New(c.p)
				for range b.N {
					s.Sample(logits, nil)
				}
			})
		}
	}
}

// TestDrawWith: a Plain sampler's tokens are DrawWith's for the uniform
// draws a sampler of the same seed hands out (Uniform), on vocabularies
// of several blocks with banned (-Inf) and NaN logits, and DrawWith of no
// token with weight is the first largest; Plain is false for every cut,
// bias and penalty.
func TestDrawWith(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for trial := range 40 {
		n := 1 + rng.IntN(3000)
		logits := make([]float32, n)
		for i := range logits {
			logits[i] = float32(rng.NormFloat64() * 4)
			if rng.IntN(50) == 0 {
				logits[i] = float32(math.Inf(-1))
			}
		}
		logits[rng.IntN(n)] = float32(math.NaN())
		p := Params{Temperature: 0.3 + rng.Float64()*2, Seed: uint64(trial)}
		a, b := New(p), New(p)
		if !a.Plain() {
			t.Fatalf("%+v is not plain", p)
		}
		for range 20 {
			if x, y := a.Sample(logits, nil), b.DrawWith(logits, b.Uniform()); x != y {
				t.Fatalf("trial %d: Sample %d, DrawWith %d", trial, x, y)
			}
		}
	}
	inf := float32(math.Inf(-1))
	if got := New(Params{Temperature: 1}).DrawWith([]float32{inf, float32(math.NaN()), inf}, 0.5); got != 0 {
		t.Errorf("no weight: %d, want the first largest", got)
	}
	for _, p := range []Params{{Temperature: 1, TopK: 3}, {Temperature: 1, TopP: 0.9}, {Temperature: 1, MinP: 0.1},
		{Temperature: 1, RepeatPenalty: 1.1}, {Temperature: 1, LogitBias: map[int32]float64{1: 1}}, {}} {
		if New(p).Plain() {
			t.Errorf("%+v is plain", p)
		}
	}
}
