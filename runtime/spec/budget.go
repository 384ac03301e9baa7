package spec

import "time"

// ProbeShare bounds the share of the time that speculation's probes —
// drafts verified where the policy expects none to pay — may cost beyond
// plain steps: a draft model's probe catches it up over every token since
// its last one, nearly a step a token on a CPU, which no back-off of the
// probes' rate bounds.
const ProbeShare = 0.02

// ProbeBudget keeps the probes within ProbeShare of the time: it adds up
// the time of the steps and drafts a policy observes, and of that what
// the probes cost beyond plain steps. The zero value is ready; times of
// zero (a clock that stands still within a step) count nothing.
type ProbeBudget struct{ elapsed, probes float64 }

// Spend records time d, extra of it a probe's cost beyond a plain step's
// (0 where d is no probe's).
func (b *ProbeBudget) Spend(d, extra time.Duration) {
	b.elapsed += max(d, 0).Seconds()
	b.probes += max(extra, 0).Seconds()
}

// Allows says whether a probe may run: the probes so far cost at most
// ProbeShare of the time.
func (b *ProbeBudget) Allows() bool { return b.probes <= ProbeShare*b.elapsed }

// Share is the probes' share of the time so far (0 before any time).
func (b *ProbeBudget) Share() float64 {
	if b.elapsed == 0 {
		return 0
	}
	return b.probes / b.elapsed
}
