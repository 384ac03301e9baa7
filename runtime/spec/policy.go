package spec

import "time"

// Policy chooses each step's draft length from what the steps so far
// measured: the draft tokens' acceptance rate α and a step's time by its
// rows. A draft of k tokens yields 1 + α + … + α^k tokens in expectation
// (each accepted only after those before it) for a step of k+1 rows; the
// policy takes the k that yields the most tokens per unit of time, and 0
// — a plain decode step — when no draft pays for its rows. So where
// drafts are rarely accepted, or extra rows cost nearly a step each (a
// compute-bound CPU), speculation turns itself off instead of slowing
// generation down.
type Policy struct {
	// tried and accepted count draft tokens the target judged, decayed
	// so that the estimate follows the text.
	tried, accepted float64
	// recent[r] are the times of the last steps of r rows, the newest
	// at next[r] (a ring of costWindow); a step's cost is the least of
	// them. Other work on the machine only ever adds to a step's time,
	// so the least of a few is the step's own cost, and steady where
	// a mean follows every preemption.
	recent [][]float64
	next   []int
	// idle counts steps since a draft was last verified.
	idle int
	// probeAt is how many draftless steps pass before the next probe
	// (0: probeEvery); probing says the step Choose returned is one.
	probeAt int
	probing bool
	// budget holds the probes within ProbeShare of the time: what they
	// cost beyond plain steps is their drafts and their verify steps'
	// time past a plain step's.
	budget ProbeBudget
	// draft is the time to draft one token (a moving average; 0 for a
	// draft that costs nothing next to a step, or until measured).
	draft float64
}

// Tuning of the policy's estimates.
const (
	policyDecay = 0.9 // weight of the past in α's counts, per step
	costWindow  = 8   // the recent steps of a row count whose least time is its cost
	costWeight  = 0.2 // weight of a new measurement in a draft token's cost
	// policyMargin is how many more tokens per unit of time than plain
	// steps a draft must promise: the estimates are noisy, and a draft
	// that only breaks even is not worth the risk of a loss.
	policyMargin = 1.05
	// probeEvery is how many draftless steps, in a row, pass before
	// one draft token is verified anyway, so that α follows text that
	// turns repetitive. Each probe whose token is rejected doubles the
	// wait, up to probeMax steps, and an accepted one, or a draft the
	// policy chose, brings it back, so that where drafts never agree
	// probes are rare.
	probeEvery = 16
	probeMax   = 512
)

// Alpha is the estimated acceptance rate of a draft token: accepted over
// judged, with one of each as a prior (0.5 before any).
func (p *Policy) Alpha() float64 { return (p.accepted + 1) / (p.tried + 2) }

// Choose returns how many of the m draft tokens on offer to verify.
func (p *Policy) Choose(m int) int {
	if m == 0 {
		return 0
	}
	c1 := p.costOf(1)
	if c1 == 0 {
		return 0 // measure a plain step first
	}
	a := p.Alpha()
	best, bestRate := 0, policyMargin // tokens per plain step's time
	yield, term := 1.0, 1.0
	for k := 1; k <= m; k++ {
		term *= a
		yield += term
		c := p.costOf(k + 1)
		if c == 0 {
			c = c1 // unmeasured: try it
		}
		c += float64(k) * p.draft
		if rate := yield * c1 / c; rate > bestRate {
			best, bestRate = k, rate
		}
	}
	p.probing = best == 0 && p.idle >= max(p.probeAt, probeEvery) && p.budget.Allows()
	if p.probing {
		best = 1
	} else if best > 0 {
		p.probeAt = probeEvery
	}
	return best
}

// costOf is a step's cost by its rows: the least recent time, 0 when
// none was measured.
func (p *Policy) costOf(rows int) float64 {
	if rows >= len(p.recent) || len(p.recent[rows]) == 0 {
		return 0
	}
	c := p.recent[rows][0]
	for _, t := range p.recent[rows][1:] {
		c = min(c, t)
	}
	return c
}

// ObserveDraft records the time a draft of n tokens took, for a drafter
// whose tokens cost model steps.
func (p *Policy) ObserveDraft(n int, took time.Duration) {
	if n <= 0 {
		return
	}
	extra := time.Duration(0)
	if p.probing {
		extra = took
	}
	p.budget.Spend(took, extra)
	per := took.Seconds() / float64(n)
	if p.draft == 0 {
		p.draft = per
	} else {
		p.draft += costWeight * (per - p.draft)
	}
}

// Observe records a step: its rows, how many of its draft tokens were
// accepted, and its time.
func (p *Policy) Observe(rows, accepted int, took time.Duration) {
	extra := time.Duration(0)
	if p.probing {
		extra = took - time.Duration(p.costOf(1)*float64(time.Second)) // past a plain step's
	}
	p.budget.Spend(took, extra)
	for len(p.recent) <= rows {
		p.recent, p.next = append(p.recent, nil), append(p.next, 0)
	}
	if r := p.recent[rows]; len(r) < costWindow {
		p.recent[rows] = append(r, took.Seconds())
	} else {
		r[p.next[rows]] = took.Seconds()
		p.next[rows] = (p.next[rows] + 1) % costWindow
	}
	if rows == 1 {
		p.idle++
		return
	}
	p.idle = 0
	if p.probing {
		p.probing = false
		if accepted == 0 {
			p.probeAt = min(2*max(p.probeAt, probeEvery), probeMax)
		} else {
			p.probeAt = probeEvery
		}
	}
	// The draft tokens judged: those accepted, and the first rejected
	// unless all were accepted.
	judged := accepted
	if accepted < rows-1 {
		judged++
	}
	p.tried = policyDecay*p.tried + float64(judged)
	p.accepted = policyDecay*p.accepted + float64(accepted)
}
