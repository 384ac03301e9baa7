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

// Limits are a tenant's scheduling limits: over them a request waits in
// the queue (0: no limit).
type Limits struct {
	MaxSlots int // concurrent sequences
	MaxPages int // KV pages held at once
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
	// Budget is the query rows one step may compute (chunk_cap).
	Budget int
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

// Schedule decides one step. Waiting requests are admitted by class, then
// arrival, while a slot is free, their tenant is under its limits and the
// pages they need are available (a preempted request already holds its
// own); when only a slot is missing, a running request of a less urgent
// class — batch before standard, the latest arrival first, never an
// interactive one — is preempted for it. Every running request that is
// decoding then gets its row (decode first, so a long prompt delays no
// running decode by more than one chunk), and prefill chunks fill the rest
// of the budget, running requests before newly admitted ones.
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
	slots := map[string]int{}
	pages := map[string]int{}
	for _, s := range seqs {
		if s.Running {
			slots[s.Tenant]++
			pages[s.Tenant] += s.Pages
		}
	}
	reserved := map[string]int{}
	heldBack := 0
	for t, n := range in.Reserved {
		reserved[t] = n
		heldBack += n
	}
	freePages := in.FreePages
	free := in.FreeSlots
	for _, s := range seqs {
		if s.Paged {
			pages[s.Tenant] += s.Pages // held while it waits to resume
		}
	}
	// victims are the running requests that may be preempted, the first
	// to go last.
	var victims []*Seq
	for _, s := range seqs {
		if s.Running && s.QoS != Interactive {
			victims = append(victims, s)
		}
	}
	sort.SliceStable(victims, func(a, b int) bool {
		x, y := victims[a], victims[b]
		if x.QoS != y.QoS {
			return x.QoS < y.QoS
		}
		return x.Arrival < y.Arrival
	})
	for _, s := range seqs {
		if s.Running {
			continue
		}
		need := s.Pages
		if s.Paged {
			need = 0
		}
		lim := in.Limits(s.Tenant)
		switch {
		case lim.MaxSlots > 0 && slots[s.Tenant] >= lim.MaxSlots:
			continue
		case !s.Paged && lim.MaxPages > 0 && pages[s.Tenant]+s.Pages > lim.MaxPages:
			continue
		case freePages-(heldBack-reserved[s.Tenant]) < need:
			continue // the floating pool and its own reservation cannot cover it
		}
		if free == 0 {
			n := len(victims)
			if n == 0 || victims[n-1].QoS <= s.QoS {
				continue
			}
			v := victims[n-1]
			victims = victims[:n-1]
			v.Running, v.Paged = false, true
			slots[v.Tenant]--
			free++
			p.Preempt = append(p.Preempt, v.ID)
		}
		fromReserve := min(need, reserved[s.Tenant])
		reserved[s.Tenant] -= fromReserve
		heldBack -= fromReserve
		freePages -= need
		free--
		slots[s.Tenant]++
		if !s.Paged {
			pages[s.Tenant] += s.Pages
		}
		s.Running = true
		p.Admit = append(p.Admit, s.ID)
	}
	budget := in.Budget
	for _, s := range seqs {
		if s.Running && !s.Prefilling() && budget > 0 {
			p.Rows = append(p.Rows, Chunk{ID: s.ID, From: s.Done, N: 1, Logits: true})
			budget--
		}
	}
	for _, s := range seqs {
		if s.Running && s.Prefilling() && budget > 0 {
			n := min(s.Prompt-s.Done, budget)
			p.Rows = append(p.Rows, Chunk{ID: s.ID, From: s.Done, N: n, Logits: s.Done+n == s.Prompt})
			budget -= n
		}
	}
	p.NRows = in.Budget - budget
	return p
}
