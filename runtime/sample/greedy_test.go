package sample

import (
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestGreedyShortcutRule holds Greedy to its promise for every field of
// Params: when it reports true, the graph's ARGMAX of the raw logits
// stands in for the sampler, so the largest logit after the sampler's own
// adjustments (bias, penalties) must be the largest raw one whatever the
// logits and history. Each field is set alone to a value that would matter; a field
// added to Params without a row here fails the test, so a new setting
// that changes a logit cannot silently keep the device shortcut.
func TestGreedyShortcutRule(t *testing.T) {
	set := map[string]func(p *Params){
		"Temperature":      func(p *Params) { p.Temperature = 0.8 },
		"TopK":             func(p *Params) { p.TopK = 2 },
		"TopP":             func(p *Params) { p.TopP = 0.5 },
		"MinP":             func(p *Params) { p.MinP = 0.3 },
		"RepeatPenalty":    func(p *Params) { p.RepeatPenalty = 1.5 },
		"RepeatLastN":      func(p *Params) { p.RepeatLastN = 2 },
		"FrequencyPenalty": func(p *Params) { p.FrequencyPenalty = 2 },
		"PresencePenalty":  func(p *Params) { p.PresencePenalty = 2 },
		"LogitBias":        func(p *Params) { p.LogitBias = map[int32]float64{3: 5} },
		"Seed":             func(p *Params) { p.Seed = 42 },
	}
	typ := reflect.TypeFor[Params]()
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		apply, ok := set[name]
		if !ok {
			t.Errorf("Params.%s has no row in this test: say what value of it would change a choice", name)
			continue
		}
		var p Params
		apply(&p)
		s := New(p)
		if !s.Greedy() {
			continue // the logits leave the device and Sample decides
		}
		rng := rand.New(rand.NewPCG(uint64(i), 7))
		for trial := range 200 {
			logits := make([]float32, 8)
			for j := range logits {
				logits[j] = float32(rng.NormFloat64())
			}
			history := []int32{int32(rng.IntN(8)), int32(rng.IntN(8)), 3}
			raw := Argmax(logits)
			s.adjust(logits, history)
			if got := s.pick(); got != raw {
				t.Errorf("Params.%s set: Greedy() is true, so the device's argmax %d is taken, but the sampler's choice is %d (trial %d)", name, raw, got, trial)
				break
			}
		}
	}
}
