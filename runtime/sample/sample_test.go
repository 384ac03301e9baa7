package sample

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestGreedyIsArgmax(t *testing.T) {
	s := New(Params{})
	if got := s.Sample([]float32{0.1, 3, -2, 2.9}, nil); got != 1 {
		t.Errorf("greedy picked %d", got)
	}
}

func TestTopKOneIsArgmax(t *testing.T) {
	s := New(Params{Temperature: 5, TopK: 1, Seed: 9})
	for i := 0; i < 20; i++ {
		if got := s.Sample([]float32{0.1, 3, -2, 2.9}, nil); got != 1 {
			t.Fatalf("top-k 1 picked %d", got)
		}
	}
}

func TestSeedRepeats(t *testing.T) {
	logits := []float32{1, 1.1, 0.9, 1.05, 0.95}
	run := func(seed uint64) []int32 {
		s := New(Params{Temperature: 1, Seed: seed})
		var out []int32
		for i := 0; i < 30; i++ {
			out = append(out, s.Sample(logits, nil))
		}
		return out
	}
	a, b, c := run(7), run(7), run(8)
	same := true
	for i := range a {
		if a[i] != b[i] {
			t.Fatal("same seed, different tokens")
		}
		same = same && a[i] == c[i]
	}
	if same {
		t.Error("different seeds gave identical 30-token runs")
	}
}

func TestTopPAndMinPCut(t *testing.T) {
	// Token 0 holds nearly all the mass; top-p 0.5 and min-p 0.5 leave only it.
	logits := []float32{10, 0, 0, 0}
	for _, p := range []Params{{Temperature: 1, TopP: 0.5, Seed: 1}, {Temperature: 1, MinP: 0.5, Seed: 1}} {
		s := New(p)
		for i := 0; i < 50; i++ {
			if got := s.Sample(logits, nil); got != 0 {
				t.Fatalf("%+v picked %d", p, got)
			}
		}
	}
}

func TestRepeatPenalty(t *testing.T) {
	s := New(Params{RepeatPenalty: 2, RepeatLastN: 4})
	// Token 1 leads, but it was just generated: 3/2 < 2.9 makes token 3 win.
	if got := s.Sample([]float32{0.1, 3, -2, 2.9}, []int32{1}); got != 3 {
		t.Errorf("penalized greedy picked %d", got)
	}
	// Outside the look-back window the penalty does not apply.
	if got := s.Sample([]float32{0.1, 3, -2, 2.9}, []int32{1, 0, 0, 0, 0}); got != 1 {
		t.Errorf("penalty applied beyond repeat-last-n: picked %d", got)
	}
}

// logprobsOf samples once from a fresh sampler, returning the token and
// every token's log-probability: differences of these are differences of
// the logits as the sampler shaped them.
func logprobsOf(t *testing.T, p Params, logits []float32, history []int32) (int32, map[int32]float64) {
	t.Helper()
	tok, _, top := New(p).SampleLogprobs(logits, history, len(logits))
	out := map[int32]float64{}
	for _, l := range top {
		out[l.Token] = l.Logprob
	}
	return tok, out
}

// TestPenaltiesAndBias checks the arithmetic against values worked by
// hand: the bias first, then per token in the window the repetition
// penalty's scaling and n·frequency + presence subtracted.
func TestPenaltiesAndBias(t *testing.T) {
	logits := []float32{1, 2, 3, 0.5, -1}
	// The window is the last 4: token 0 is outside it; 1 occurs twice, 2
	// and 4 once.
	history := []int32{0, 1, 1, 2, 4}
	p := Params{RepeatPenalty: 2, RepeatLastN: 4, FrequencyPenalty: 0.5, PresencePenalty: 0.25, LogitBias: map[int32]float64{3: 1.5, 2: -0.5, 99: 7}}
	want := []float64{
		1,                        // untouched
		2/2.0 - (2*0.5 + 0.25),   // -0.25
		(3-0.5)/2 - (0.5 + 0.25), // 0.5
		0.5 + 1.5,                // 2: biased, not in the window
		-1*2 - (0.5 + 0.25),      // -2.75: a negative logit is multiplied
	}
	tok, lp := logprobsOf(t, p, logits, history)
	if tok != 3 {
		t.Errorf("greedy picked %d, want 3 (the bias made it the largest)", tok)
	}
	sum := 0.0
	for id, w := range want {
		if got := lp[int32(id)] - lp[3]; math.Abs(got-(w-want[3])) > 1e-12 {
			t.Errorf("token %d: adjusted logit %v relative to token 3, want %v", id, got, w-want[3])
		}
		sum += math.Exp(lp[int32(id)])
	}
	if math.Abs(sum-1) > 1e-12 {
		t.Errorf("probabilities sum to %v", sum)
	}
	// Sample agrees with SampleLogprobs.
	if got := New(p).Sample(logits, history); got != 3 {
		t.Errorf("Sample picked %d", got)
	}
}

// TestPenaltyWindow: RepeatLastN ≤ 0 counts the whole history; a
// negative presence penalty favours what already occurred.
func TestPenaltyWindow(t *testing.T) {
	logits := []float32{1, 1.5}
	if tok, _ := logprobsOf(t, Params{FrequencyPenalty: 0.3}, logits, []int32{1, 0, 0, 0}); tok != 1 {
		t.Errorf("whole-history frequency penalty: picked %d", tok)
	}
	if tok, _ := logprobsOf(t, Params{FrequencyPenalty: 1, RepeatLastN: 1}, logits, []int32{1, 0}); tok != 1 {
		t.Errorf("token 1 outside a one-token window was penalized: picked %d", tok)
	}
	if tok, _ := logprobsOf(t, Params{PresencePenalty: -1}, logits, []int32{0}); tok != 0 {
		t.Errorf("a negative presence penalty did not favour token 0: picked %d", tok)
	}
}

// TestGreedyOnlyWhenUntouched: Greedy is what lets the decoder take the
// model's own argmax instead of the logits, so it must be false for every
// setting that changes a logit.
func TestGreedyOnlyWhenUntouched(t *testing.T) {
	for _, c := range []struct {
		p    Params
		want bool
	}{
		{Params{}, true},
		{Params{RepeatPenalty: 1, RepeatLastN: 64}, true},
		{Params{Temperature: 0.7}, false},
		{Params{RepeatPenalty: 1.1}, false},
		{Params{FrequencyPenalty: 0.1}, false},
		{Params{PresencePenalty: -0.1}, false},
		{Params{LogitBias: map[int32]float64{5: 0}}, false},
	} {
		if got := New(c.p).Greedy(); got != c.want {
			t.Errorf("%+v: Greedy() = %v, want %v", c.p, got, c.want)
		}
	}
}

// TestLogprobs: the top list is ordered, ties go to the lower id, a
// banned (-Inf) token is no alternative, and the values are the softmax
// of the logits whatever the temperature.
func TestLogprobs(t *testing.T) {
	inf := float32(math.Inf(-1))
	logits := []float32{0, 2, inf, 2, 1}
	for _, temp := range []float64{0, 0.5, 1.5} {
		_, l, top := New(Params{Temperature: temp, Seed: 3}).SampleLogprobs(logits, nil, 10)
		lse := math.Log(1 + 2*math.Exp(2) + math.E)
		wantIDs := []int32{1, 3, 4, 0}
		if len(top) != len(wantIDs) {
			t.Fatalf("temp %v: top %v", temp, top)
		}
		for i, id := range wantIDs {
			if top[i].Token != id || math.Abs(top[i].Logprob-(float64(logits[id])-lse)) > 1e-12 {
				t.Errorf("temp %v: top[%d] = %+v, want token %d at %v", temp, i, top[i], id, float64(logits[id])-lse)
			}
		}
		if math.IsInf(l, 0) || l > 0 {
			t.Errorf("temp %v: picked token's logprob %v", temp, l)
		}
	}
	if _, _, top := New(Params{}).SampleLogprobs(logits, nil, 2); len(top) != 2 || top[0].Token != 1 || top[1].Token != 3 {
		t.Errorf("top 2: %v", top)
	}
	if _, _, top := New(Params{}).SampleLogprobs(logits, nil, 0); top != nil {
		t.Errorf("top 0: %v", top)
	}
}

// TestLogprobsKeepTheDraws: asking for logprobs never changes the tokens
// of a seeded run.
func TestLogprobsKeepTheDraws(t *testing.T) {
	logits := []float32{1, 1.1, 0.9, 1.05, 0.95}
	p := Params{Temperature: 1, TopK: 4, TopP: 0.9, MinP: 0.05, PresencePenalty: 0.2, Seed: 11}
	a, b := New(p), New(p)
	var history []int32
	for i := 0; i < 40; i++ {
		x := a.Sample(logits, history)
		y, _, _ := b.SampleLogprobs(logits, history, 3)
		if x != y {
			t.Fatalf("draw %d: Sample %d, SampleLogprobs %d", i, x, y)
		}
		history = append(history, x)
	}
}

// TestMaskedArgmax: the greedy pass through the mask picks what masking
// the logits and taking the first largest picks, ties and a partial last
// word included, and -1 when nothing is allowed.
func TestMaskedArgmax(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 500 {
		n := 1 + rng.IntN(300)
		logits := make([]float32, n)
		for i := range logits {
			logits[i] = float32(rng.IntN(8)) // small range: many ties
		}
		allowed := make([]uint64, (n+63)/64)
		for i := range n {
			if rng.IntN(4) == 0 {
				allowed[i/64] |= 1 << (i % 64)
			}
		}
		masked := append([]float32(nil), logits...)
		some := false
		for i := range masked {
			if allowed[i/64]>>(i%64)&1 == 0 {
				masked[i] = float32(math.Inf(-1))
			} else {
				some = true
			}
		}
		want := Argmax(masked)
		if !some {
			want = -1
		}
		if got := MaskedArgmax(logits, allowed); got != want {
			t.Fatalf("trial %d: %d, want %d", trial, got, want)
		}
	}
}
