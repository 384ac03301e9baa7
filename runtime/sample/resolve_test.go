package sample

import (
	"github.com/zrtdev/zrt/internal/chisq"
	"math"
	"math/rand/v2"
	"testing"
)

// TestResolveFollowsTarget: tokens that Resolve returns for drafts drawn
// from a draft's distribution follow the target's distribution (χ² over
// 200 000 draws), for several sampling settings, while the draft is kept
// about Σ min(p, q) of the time; a verifier that keeps every draft is
// rejected by the same statistic.
func TestResolveFollowsTarget(t *testing.T) {
	const vocab, n = 12, 200_000
	rng := rand.New(rand.NewPCG(7, 8))
	settings := []Params{
		{Temperature: 1},
		{Temperature: 0.7, TopK: 6},
		{Temperature: 1.3, TopP: 0.9},
		{Temperature: 1, MinP: 0.05, RepeatPenalty: 1.3, FrequencyPenalty: 0.2},
		{}, // greedy target, sampled draft
	}
	history := []int32{1, 2, 2, 5}
	for i, sp := range settings {
		target, draft := make([]float32, vocab), make([]float32, vocab)
		for v := range target {
			target[v] = float32(rng.NormFloat64() * 1.5)
			draft[v] = target[v] + float32(rng.NormFloat64()) // a draft that roughly agrees
		}
		tp, dp := sp, sp
		if dp.Temperature <= 0 {
			dp.Temperature = 1
		}
		tp.Seed, dp.Seed = uint64(10+i), uint64(100+i)
		ts, ds := New(tp), New(dp)
		p := New(tp).dist0(target, history)
		counts, bad := make([]int, vocab), make([]int, vocab)
		kept := 0
		wantKept := 0.0
		var q Dist
		for range n {
			x, qd := ds.SampleDist(append([]float32(nil), draft...), history)
			q = qd
			tok, ok := ts.Resolve(append([]float32(nil), target...), history, x, qd)
			counts[tok]++
			bad[x]++
			if ok {
				kept++
				if tok != x {
					t.Fatalf("setting %d: kept draft %d but returned %d", i, x, tok)
				}
			}
		}
		for v := range p {
			wantKept += math.Min(p[v], q[v])
		}
		x2, df := chisq.Statistic(counts, p, n)
		if df > 0 && x2 > chisq.Critical(df) {
			t.Errorf("setting %+v: χ² %.1f over %d degrees of freedom, critical %.1f: the tokens do not follow the target", sp, x2, df, chisq.Critical(df))
		}
		if got := float64(kept) / n; math.Abs(got-wantKept) > 0.01 {
			t.Errorf("setting %+v: kept %.4f of the drafts, want Σ min(p, q) = %.4f", sp, got, wantKept)
		}
		if cx2, _ := chisq.Statistic(bad, p, n); cx2 <= chisq.Critical(max(df, 1)) {
			t.Errorf("setting %+v: keeping every draft scored χ² %.1f ≤ %.1f: the test cannot tell the draft from the target", sp, cx2, chisq.Critical(max(df, 1)))
		}
		t.Logf("setting %+v: χ² %.1f (df %d, critical %.1f), kept %.3f (Σ min(p,q) %.3f)", sp, x2, df, chisq.Critical(max(df, 1)), float64(kept)/n, wantKept)
	}
}

// dist0 is the sampler's distribution over logits after history.
func (s *Sampler) dist0(logits []float32, history []int32) Dist {
	s.adjust(logits, history)
	return s.dist(len(logits))
}

// TestResolvePointDraft: a draft of probability one (q nil) is kept with
// probability p(draft), and a rejected row never returns the draft.
func TestResolvePointDraft(t *testing.T) {
	logits := []float32{0, 1, 2, 0.5}
	s := New(Params{Temperature: 1, Seed: 3})
	p := New(Params{Temperature: 1}).dist0(logits, nil)
	const n = 100_000
	counts := make([]int, len(logits))
	kept := 0
	for range n {
		tok, ok := s.Resolve(append([]float32(nil), logits...), nil, 2, nil)
		counts[tok]++
		if ok {
			kept++
		} else if tok == 2 {
			t.Fatal("a rejected draft came back")
		}
	}
	if x2, df := chisq.Statistic(counts, p, n); x2 > chisq.Critical(df) {
		t.Errorf("χ² %.1f over %d degrees of freedom: not the target's distribution", x2, df)
	}
	if got := float64(kept) / n; math.Abs(got-p[2]) > 0.01 {
		t.Errorf("kept %.4f, want p(draft) = %.4f", got, p[2])
	}
}

// TestSampleDistKeepsSample: SampleDist draws the same tokens as Sample
// at temperature ≤ 0, and a token of positive probability otherwise.
func TestSampleDistKeepsSample(t *testing.T) {
	logits := []float32{0.1, 3, 2, -1}
	tok, d := New(Params{}).SampleDist(append([]float32(nil), logits...), nil)
	if tok != 1 || d[1] != 1 {
		t.Fatalf("greedy SampleDist = %d, %v", tok, d)
	}
	s := New(Params{Temperature: 1, TopK: 2, Seed: 1})
	for range 100 {
		tok, d := s.SampleDist(append([]float32(nil), logits...), nil)
		if d[tok] <= 0 || d[0] != 0 || d[3] != 0 || math.Abs(d[1]+d[2]-1) > 1e-12 {
			t.Fatalf("SampleDist = %d, %v", tok, d)
		}
	}
}
