package spec

import (
	"slices"
	"testing"
	"time"
)

// TestPolicy: the policy measures a plain step first, then drafts as
// long as the draft's expected tokens pay for its rows; it stops
// drafting when drafts are rejected or rows cost a step each, and probes
// again later.
func TestPolicy(t *testing.T) {
	var p Policy
	if k := p.Choose(4); k != 0 {
		t.Fatalf("before any measurement: k = %d, want 0 (a plain step first)", k)
	}
	p.Observe(1, 0, 10*time.Millisecond)
	if k := p.Choose(4); k != 4 {
		t.Fatalf("rows of unmeasured cost, α 0.5: k = %d, want 4", k)
	}
	// Cheap rows and every draft accepted: the whole draft.
	for range 20 {
		p.Observe(5, 4, 11*time.Millisecond)
	}
	if a := p.Alpha(); a < 0.8 {
		t.Errorf("α = %.2f after drafts all accepted", a)
	}
	if k := p.Choose(4); k != 4 {
		t.Errorf("cheap rows, α %.2f: k = %d, want 4", p.Alpha(), k)
	}
	if k := p.Choose(2); k != 2 {
		t.Errorf("2 tokens on offer: k = %d, want 2", k)
	}
	// Drafts rejected at once: α falls and drafting stops.
	for range 30 {
		p.Observe(5, 0, 13*time.Millisecond)
	}
	for r := 2; r <= 4; r++ {
		for range 30 {
			p.Observe(r, 0, 13*time.Millisecond)
		}
	}
	if k := p.Choose(4); k != 0 {
		t.Errorf("α %.2f, extra rows 30%% of a step: k = %d, want 0", p.Alpha(), k)
	}
	// After probeEvery plain steps it probes one token.
	for range probeEvery {
		p.Observe(1, 0, 10*time.Millisecond)
	}
	if k := p.Choose(4); k != 1 {
		t.Errorf("after %d plain steps: k = %d, want a probe of 1", probeEvery, k)
	}
	// Each rejected probe doubles the wait for the next, up to probeMax;
	// an accepted one brings it back to probeEvery.
	probes := func() []int {
		var gaps []int
		for gap := 0; len(gaps) < 7; {
			k := p.Choose(4)
			if k == 0 {
				p.Observe(1, 0, 10*time.Millisecond)
				gap++
				continue
			}
			p.Observe(1+k, 0, 13*time.Millisecond)
			gaps, gap = append(gaps, gap), 0
		}
		return gaps
	}
	p.Observe(2, 0, 13*time.Millisecond) // the probe above, rejected
	want := []int{32, 64, 128, 256, 512, 512, 512}
	if got := probes(); !slices.Equal(got, want) {
		t.Errorf("plain steps between rejected probes %v, want %v", got, want)
	}
	for p.Choose(4) == 0 {
		p.Observe(1, 0, 10*time.Millisecond)
	}
	p.Observe(2, 1, 13*time.Millisecond) // a probe accepted
	for range probeEvery {
		p.Observe(1, 0, 10*time.Millisecond)
	}
	if k := p.Choose(4); k == 0 {
		t.Errorf("%d plain steps after an accepted probe: no probe", probeEvery)
	}

	// Rows that cost a whole step each never pay, whatever α.
	var q Policy
	q.Observe(1, 0, 10*time.Millisecond)
	for r := 2; r <= 5; r++ {
		for range 10 {
			q.Observe(r, r-1, time.Duration(r)*10*time.Millisecond)
		}
	}
	if k := q.Choose(4); k != 0 {
		t.Errorf("rows at a step each, α %.2f: k = %d, want 0", q.Alpha(), k)
	}
}

// TestPolicyProbeBudget: probes stop while what they cost beyond plain
// steps is over ProbeShare of the time — a draft model's probe, whose
// catch-up over the tokens since its last one costs many steps, comes
// back only once the plain steps have made it a small share again.
func TestPolicyProbeBudget(t *testing.T) {
	var p Policy
	p.Observe(1, 0, 10*time.Millisecond)
	for range 10 {
		p.Observe(2, 0, 13*time.Millisecond) // α falls, rows measured
	}
	plain := 0
	probe := func() bool { // (one token on offer: a probe's length)
		for range probeMax + 1 {
			if p.Choose(1) > 0 {
				return true
			}
			p.Observe(1, 0, 10*time.Millisecond)
			plain++
		}
		return false
	}
	if !probe() {
		t.Fatal("no probe at all")
	}
	p.ObserveDraft(1, 500*time.Millisecond) // a catch-up of fifty steps
	p.Observe(2, 0, 13*time.Millisecond)
	plain = 0
	for !probe() {
	}
	// 503 ms of probes within 2% of the time: about 25 s of it, some
	// 2 400 plain steps of 10 ms after the probe.
	if plain < 2000 {
		t.Errorf("the next probe after %d plain steps, want it held until the probes are %.0f%% of the time", plain, 100*ProbeShare)
	}
}

// TestPolicyPreempted: a step slowed down by other work on the machine
// (a preemption) does not change a step's cost: it is the least of the
// recent times, not their mean.
func TestPolicyPreempted(t *testing.T) {
	var p Policy
	for range costWindow {
		p.Observe(1, 0, 10*time.Millisecond)
		p.Observe(3, 2, 12*time.Millisecond)
	}
	p.Observe(1, 0, time.Second)
	if c := p.costOf(1); c != 0.010 {
		t.Errorf("a plain step costs %v after one preempted, want 10ms", c)
	}
	if k := p.Choose(2); k != 2 {
		t.Errorf("α %.2f, 3 rows at 1.2 steps: k = %d, want 2", p.Alpha(), k)
	}
	// A cheaper time only lowers the cost; a window of dearer ones
	// raises it.
	for range costWindow {
		p.Observe(3, 2, 40*time.Millisecond)
		p.Observe(2, 1, 25*time.Millisecond)
	}
	if c := p.costOf(3); c != 0.040 {
		t.Errorf("3 rows cost %v after a window of 40ms steps", c)
	}
	if k := p.Choose(2); k != 0 {
		t.Errorf("2 rows at 2.5 steps, 3 at 4: k = %d, want 0", k)
	}
}
