package sample

import "testing"

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
