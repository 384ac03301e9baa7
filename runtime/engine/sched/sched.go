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
	Admit []uint64 // newly admitted, in admission order
	Rows  []Chunk  // decode rows first, then prefill chunks
	NRows int      // sum of Rows' N
}

func (p Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "admit %v rows %d:", p.Admit, p.NRows)
	for _, c := range p.Rows {
		fmt.Fprintf(&b, " %d@%d+%d", c.ID, c.From, c.N)
		if c.Logits {
			b.WriteString("*")
		}
	}
	return b.String()
}

// Schedule decides one step. Every running request that is decoding gets
// its row (decode first, so a long prompt delays no running decode by more
// than one chunk); waiting requests are admitted by class, then arrival,
// while a slot is free, their tenant is under its limits and the pages
// they need are available; prefill chunks then fill the rest of the
// budget, running requests before newly admitted ones.
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
		if s.Running || free == 0 {
			continue
		}
		lim := in.Limits(s.Tenant)
		switch {
		case lim.MaxSlots > 0 && slots[s.Tenant] >= lim.MaxSlots:
			continue
		case lim.MaxPages > 0 && pages[s.Tenant]+s.Pages > lim.MaxPages:
			continue
		case freePages-(heldBack-reserved[s.Tenant]) < s.Pages:
			continue // the floating pool and its own reservation cannot cover it
		}
		fromReserve := min(s.Pages, reserved[s.Tenant])
		reserved[s.Tenant] -= fromReserve
		heldBack -= fromReserve
		freePages -= s.Pages
		free--
		slots[s.Tenant]++
		pages[s.Tenant] += s.Pages
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
