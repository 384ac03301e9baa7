// Package sched is the serving engine's policy for one step (seed 000
// §18.4): given the requests and the free slots and pages, it decides who
// is admitted and which query rows the step computes, and returns that as
// a plain value the engine executes, logs and tests print. It has no clock,
// no tier and no side effects.
package sched

import (
	"fmt"
	"sort"
	"strings"
)

// QoS is a request's class (seed 000 §18.5).
type QoS uint8

// The classes, most urgent first.
const (
	Interactive QoS = iota
	Standard
	Batch
)

func (q QoS) String() string {
	switch q {
	case Interactive:
		return "interactive"
	case Standard:
		return "standard"
	case Batch:
		return "batch"
	}
	return fmt.Sprintf("qos(%d)", uint8(q))
}

// ParseQoS reads a class name.
func ParseQoS(s string) (QoS, error) {
	for q := Interactive; q <= Batch; q++ {
		if q.String() == s {
			return q, nil
		}
	}
	return 0, fmt.Errorf("unknown QoS class %q (interactive, standard, batch)", s)
}

// Limits are a tenant's scheduling limits (0: no limit). Over a hard limit
// (slots, pages) a request waits in the queue. The token rates are soft:
// a tenant's smoothed rate over its limit raises its dominant share past
// 1, so its requests wait while any tenant within its limits has one of
// the same class waiting, and run when the engine would otherwise have
// room to spare.
type Limits struct {
	MaxSlots int // concurrent sequences
	MaxPages int // KV pages held at once
	// DecodeTokensPerSecond and PrefillTokensPerSecond are soft limits
	// on the tenant's generated and prompt tokens a second.
	DecodeTokensPerSecond  int `json:",omitempty"`
	PrefillTokensPerSecond int `json:",omitempty"`
}

// Rates are a tenant's recent token rates, smoothed (tokens a second).
type Rates struct {
	Decode, Prefill float64
}

// Seq is the scheduler's view of one request.
type Seq struct {
	ID      uint64
	Tenant  string
	QoS     QoS
	Arrival uint64 // order of submission: ties go to the earlier
	Prompt  int    // prompt tokens
	Done    int    // tokens already in the KV cache
	// Pages is what the request needs to run to its end (prompt plus the
	// most tokens it may generate), taken whole at admission so a running
	// request never waits for a page.
	Pages   int
	Running bool // admitted: holds a slot and its pages
	// Paged is set for a request that holds its pages without a slot:
	// preempted, it resumes where it stopped without asking for pages.
	Paged bool
}

// Prefilling reports whether the request still has prompt rows to compute.
func (s *Seq) Prefilling() bool { return s.Done < s.Prompt }

// Input is everything one decision depends on.
type Input struct {
	// Seqs are the running and the waiting requests, in any order.
	Seqs      []Seq
	FreeSlots int
	// FreePages are the pool's free pages; Reserved, per tenant, the part
	// of its reservation it does not use yet, which no other tenant may
	// take.
	FreePages int
	Reserved  map[string]int
	Limits    func(tenant string) Limits
	// Slots and Pages are the engine's totals: the quota of a tenant
	// without a limit of its own, in its dominant share.
	Slots, Pages int
	// Rates are each tenant's recent token rates, for its dominant share.
	Rates map[string]Rates
	// Budget is the query rows one step may compute (chunk_cap).
	Budget int
	// LatencyRows, when > 0, is the most prefill rows of standard and
	// batch requests a step may carry while an interactive request
	// decodes (seed 000 §18.4's latency budget: the engine sizes it so
	// such a step takes little longer than one without prefill).
	// Interactive prefill is not limited.
	LatencyRows int
}

// Chunk is one request's rows of a step: positions From … From+N-1.
// Logits is set when the last of them is the request's newest token, so
// the step's logits for its slot are the next token's.
type Chunk struct {
	ID      uint64
	From, N int
	Logits  bool
}

// Plan is one step's decision.
type Plan struct {
	// Preempt lose their slots before the step (keeping their pages), to
	// admit requests of a more urgent class; never an interactive one.
	Preempt []uint64
	Admit   []uint64 // newly admitted or resumed, in admission order
	Rows    []Chunk  // decode rows first, then prefill chunks
	NRows   int      // sum of Rows' N
}

func (p Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "preempt %v admit %v rows %d:", p.Preempt, p.Admit, p.NRows)
	for _, c := range p.Rows {
		fmt.Fprintf(&b, " %d@%d+%d", c.ID, c.From, c.N)
		if c.Logits {
			b.WriteString("*")
		}
	}
	return b.String()
}

// Schedule decides one step (seed 000 §18.5). Waiting requests are
// admitted by class, then their tenant's dominant share (DRF: the largest
// of the tenant's slots, KV pages and smoothed decode and prefill rates,
// each over its quota), then arrival, while a slot is free, their tenant
// is under its hard limits and the pages they need are available (a
// preempted request already holds its own). Each admission raises its
// tenant's share before the next choice. When only a slot is missing, a
// running request of a less urgent class is preempted for it: batch
// before standard, then the tenant with the highest dominant share, then
// the latest arrival; never an interactive one. Every running request
// that is decoding then gets its row (decode first, so a long prompt
// delays no running decode by more than one chunk), and prefill chunks
// fill the rest of the budget, running requests before newly admitted
// ones; while an interactive request decodes, other classes' prefill
// takes at most LatencyRows of it.
func Schedule(in Input) Plan {
	var p Plan
	seqs := make([]*Seq, len(in.Seqs))
	for i := range in.Seqs {
		seqs[i] = &in.Seqs[i]
	}
	sort.SliceStable(seqs, func(a, b int) bool {
		x, y := seqs[a], seqs[b]
		if x.Running != y.Running {
			return x.Running
		}
		if x.QoS != y.QoS {
			return x.QoS < y.QoS
		}
		return x.Arrival < y.Arrival
	})
	u := newUsage(in, seqs)
	reserved := map[string]int{}
	heldBack := 0
	for t, n := range in.Reserved {
		reserved[t] = n
		heldBack += n
	}
	freePages := in.FreePages
	free := in.FreeSlots
	// victims are the running requests that may be preempted.
	var victims []*Seq
	var waiting []*Seq
	for _, s := range seqs {
		switch {
		case !s.Running:
			waiting = append(waiting, s)
		case s.QoS != Interactive:
			victims = append(victims, s)
		}
	}
	// Each waiting request is considered once: admitting others only
	// takes slots and pages, so one that cannot run now cannot later in
	// the same step.
	for len(waiting) > 0 {
		i := u.first(waiting)
		s := waiting[i]
		waiting = append(waiting[:i], waiting[i+1:]...)
		need := s.Pages
		if s.Paged {
			need = 0
		}
		lim := in.Limits(s.Tenant)
		switch {
		case lim.MaxSlots > 0 && u.slots[s.Tenant] >= lim.MaxSlots:
			continue
		case !s.Paged && lim.MaxPages > 0 && u.pages[s.Tenant]+s.Pages > lim.MaxPages:
			continue
		case freePages-(heldBack-reserved[s.Tenant]) < need:
			continue // the floating pool and its own reservation cannot cover it
		}
		if free == 0 {
			v := u.victim(victims, s.QoS)
			if v < 0 {
				continue
			}
			vs := victims[v]
			victims = append(victims[:v], victims[v+1:]...)
			vs.Running, vs.Paged = false, true
			u.slots[vs.Tenant]--
			free++
			p.Preempt = append(p.Preempt, vs.ID)
		}
		fromReserve := min(need, reserved[s.Tenant])
		reserved[s.Tenant] -= fromReserve
		heldBack -= fromReserve
		freePages -= need
		free--
		u.slots[s.Tenant]++
		if !s.Paged {
			u.pages[s.Tenant] += s.Pages
		}
		s.Running = true
		p.Admit = append(p.Admit, s.ID)
	}
	budget := in.Budget
	latency := -1 // prefill rows of other classes left under the latency budget; -1: no limit
	for _, s := range seqs {
		if s.Running && !s.Prefilling() && budget > 0 {
			p.Rows = append(p.Rows, Chunk{ID: s.ID, From: s.Done, N: 1, Logits: true})
			budget--
			if s.QoS == Interactive && in.LatencyRows > 0 {
				latency = in.LatencyRows
			}
		}
	}
	for _, s := range seqs {
		if s.Running && s.Prefilling() && budget > 0 {
			n := min(s.Prompt-s.Done, budget)
			if latency >= 0 && s.QoS != Interactive {
				if n = min(n, latency); n == 0 {
					continue
				}
				latency -= n
			}
			p.Rows = append(p.Rows, Chunk{ID: s.ID, From: s.Done, N: n, Logits: s.Done+n == s.Prompt})
			budget -= n
		}
	}
	p.NRows = in.Budget - budget
	return p
}

// usage is what each tenant holds while a step is planned, and its
// dominant share.
type usage struct {
	in           *Input
	slots, pages map[string]int
}

func newUsage(in Input, seqs []*Seq) *usage {
	u := &usage{in: &in, slots: map[string]int{}, pages: map[string]int{}}
	for _, s := range seqs {
		if s.Running {
			u.slots[s.Tenant]++
		}
		if s.Running || s.Paged {
			u.pages[s.Tenant] += s.Pages // a preempted request holds its pages while it waits
		}
	}
	return u
}

// share is tenant's dominant share: the largest fraction of a quota it
// uses. A tenant without a limit has the engine's totals as its quota,
// and no rate quota.
func (u *usage) share(tenant string) float64 {
	lim := u.in.Limits(tenant)
	quota := func(limit, total int) float64 {
		if limit > 0 {
			return float64(limit)
		}
		return float64(max(total, 1))
	}
	sh := max(float64(u.slots[tenant])/quota(lim.MaxSlots, u.in.Slots),
		float64(u.pages[tenant])/quota(lim.MaxPages, u.in.Pages))
	r := u.in.Rates[tenant]
	if lim.DecodeTokensPerSecond > 0 {
		sh = max(sh, r.Decode/float64(lim.DecodeTokensPerSecond))
	}
	if lim.PrefillTokensPerSecond > 0 {
		sh = max(sh, r.Prefill/float64(lim.PrefillTokensPerSecond))
	}
	return sh
}

// first is the index of the waiting request to consider next: the most
// urgent class, then the lowest dominant share, then the earliest arrival.
func (u *usage) first(waiting []*Seq) int {
	best, bestShare := 0, u.share(waiting[0].Tenant)
	for i, s := range waiting[1:] {
		b := waiting[best]
		if s.QoS > b.QoS {
			continue
		}
		sh := u.share(s.Tenant)
		if s.QoS < b.QoS || sh < bestShare || sh == bestShare && s.Arrival < b.Arrival {
			best, bestShare = i+1, sh
		}
	}
	return best
}

// victim is the index of the running request to preempt for one of class
// q, or -1: the least urgent class (less urgent than q), then the highest
// dominant share, then the latest arrival.
func (u *usage) victim(victims []*Seq, q QoS) int {
	best, bestShare := -1, 0.0
	for i, s := range victims {
		if s.QoS <= q {
			continue
		}
		sh := u.share(s.Tenant)
		if best < 0 {
			best, bestShare = i, sh
			continue
		}
		b := victims[best]
		if s.QoS > b.QoS || s.QoS == b.QoS && (sh > bestShare || sh == bestShare && s.Arrival > b.Arrival) {
			best, bestShare = i, sh
		}
	}
	return best
}
