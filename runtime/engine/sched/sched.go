// Package sched is the serving engine's policy for one step (seed 000
// §18.4): given the requests and the free slots and pages, it decides who
// is admitted and which query rows the step computes, and returns that as
// a plain value the engine executes, logs and tests print. It has no clock,
// no tier and no side effects.
package sched

import (
	"fmt"
	"math"
	"slices"
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

// Seq is the scheduler's view of one request. A request holds the KV
// pages its tokens fill and takes more a step at a time, as its rows
// reach them; nothing is set aside for the tokens it may generate later,
// except that interactive requests, which are never preempted, are
// admitted only while the pool could still grow every one of them to its
// end (see Schedule).
type Seq struct {
	ID      uint64
	Tenant  string
	QoS     QoS
	Arrival uint64 // order of submission: ties go to the earlier
	// Prompt is what it computes before it decodes: its prompt, or, when
	// it resumes after giving up its pages, every token it has.
	Prompt int
	Done   int // tokens in the KV cache (waiting: that it maps on admission)
	// Pages is the most it can need: pages for its prompt plus the most
	// tokens it may generate.
	Pages int
	// Held is the pages its page table holds, which cover its Done
	// tokens (waiting: the cached pages it maps on admission); Shared of
	// them are mapped from the prefix cache or its group's first choice
	// and not charged to it.
	Held, Shared int
	// Frees is how many pages, charged to its tenant or to one without a
	// reservation, giving up its pages returns to the pool (a page left
	// only in the prefix cache counts: the pool takes such pages back on
	// demand).
	Frees int
	// Idle, for a waiting request, is how many of the cached pages it
	// would map only the prefix cache holds now: Input.FreePages counts
	// them, and admitting it takes them out.
	Idle int
	// From, for a waiting request, are the requests that map pages it
	// would map on admission (its group's first choice, or requests on
	// the same cached prefix): it is not admitted in a step in which one
	// of them gives up its pages, so Frees may count those pages.
	From    []uint64
	Running bool // admitted: holds a slot and its pages
	// Paged is set for a request that holds its pages without a slot:
	// preempted for a slot, it resumes where it stopped.
	Paged bool
	// Draft, for a running request that decodes, is how many draft
	// tokens the engine proposes to verify after its pending token this
	// step (speculative decoding, seed 000 §20): each is a row of its
	// own, in a slot no request holds, and may take a page that the
	// engine gives back after the step if the draft is rejected.
	Draft int `json:",omitempty"`
	// Host, for a waiting request, is how many of the pages covering its
	// Done tokens the prefix cache's host tier holds (not counted in
	// Held): admission takes them fresh from the pool, like the pages of
	// its prompt's rest, and the engine copies their bytes in before the
	// step, which then computes from Done on.
	Host int `json:",omitempty"`
	// Hold, for a running request that still has prompt rows, says that
	// they wait this step (the engine holds prompts back until enough of
	// them fill a step): it keeps its slot and pages and gets no rows.
	Hold bool `json:",omitempty"`
}

// Prefilling reports whether the request still has prompt rows to compute.
func (s *Seq) Prefilling() bool { return s.Done < s.Prompt }

// Input is everything one decision depends on.
type Input struct {
	// Seqs are the running and the waiting requests, in any order.
	Seqs      []Seq
	FreeSlots int
	// FreePages are the pages the pool can hand out now: its free pages
	// and those only the prefix cache holds. Reservations are the pages
	// set aside per tenant, and Used, per tenant with a reservation, the
	// pages charged to it but those only the prefix cache holds: the
	// part of a reservation its tenant does not use no other tenant may
	// take.
	FreePages    int
	Reservations map[string]int
	Used         map[string]int
	// PageTokens is the tokens a KV page holds.
	PageTokens int
	Limits     func(tenant string) Limits
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
	// VerifySlots is the slots the model has for a step's rows (its
	// slots, running requests' and free): a draft row takes one no
	// request holds after the step's admissions. 0: no draft rows.
	VerifySlots int `json:",omitempty"`
}

// Chunk is one request's rows of a step: positions From … From+N-1.
// Logits is set when the last of them is the request's newest token, so
// the step's logits for its slot are the next token's.
type Chunk struct {
	ID      uint64
	From, N int
	Logits  bool
	// Draft is how many of the last of the N rows are draft tokens to
	// verify (speculative decoding): every row of such a chunk wants
	// logits, each in a slot of its own, and the request's pages for the
	// positions of the rows it rejects go back to the pool after the
	// step.
	Draft int `json:",omitempty"`
}

// SwapIn is an admitted request's pages that come from the host tier.
type SwapIn struct {
	ID    uint64
	Pages int
}

// Plan is one step's decision. The engine gives each chunk's request
// the pages its rows reach before the step runs.
type Plan struct {
	// Preempt lose their slots before the step (keeping their pages), to
	// admit requests of a more urgent class; never an interactive one.
	Preempt []uint64
	// Release give up their pages, and their slots if they run, because
	// the pool ran dry; each resumes later by computing its tokens again
	// (its stream goes on where it stopped). Never an interactive one.
	Release []uint64 `json:",omitempty"`
	Admit   []uint64 // newly admitted or resumed, in admission order
	Rows    []Chunk  // decode rows first, then prefill chunks
	NRows   int      // sum of Rows' N
	// SwapIn are the admitted requests that start with pages from the
	// host tier (Seq.Host), for the engine to copy in before the step.
	// A copy is not a query row: it takes none of the budget (a page's
	// bytes move in a memcpy, or one DMA, in far less time than its 16
	// rows take to compute).
	SwapIn []SwapIn `json:",omitempty"`
}

func (p Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "preempt %v ", p.Preempt)
	if len(p.Release) > 0 {
		fmt.Fprintf(&b, "release %v ", p.Release)
	}
	fmt.Fprintf(&b, "admit %v ", p.Admit)
	for _, sw := range p.SwapIn {
		fmt.Fprintf(&b, "swap-in %d:%d ", sw.ID, sw.Pages)
	}
	fmt.Fprintf(&b, "rows %d:", p.NRows)
	for _, c := range p.Rows {
		fmt.Fprintf(&b, " %d@%d+%d", c.ID, c.From, c.N)
		if c.Draft > 0 {
			fmt.Fprintf(&b, "~%d", c.Draft)
		}
		if c.Logits {
			b.WriteString("*")
		}
	}
	return b.String()
}

// Schedule decides one step (seed 000 §18.5).
//
// Every running request that decodes gets its row first (so a long
// prompt delays no running decode by more than one chunk), most urgent
// class first, then by arrival. Waiting requests are then admitted by
// class, then their tenant's dominant share (DRF: the largest of the
// tenant's slots, KV pages and smoothed decode and prefill rates, each
// over its quota), then arrival, while a slot is free, their tenant is
// under its hard limits and the pages their prompt and first generated
// token fill are available (not their longest sequence's); each admission raises its tenant's share before the next
// choice. When only a slot is missing, a running request of a less
// urgent class is preempted for it: batch before standard, then the
// tenant with the highest dominant share, then the latest arrival; never
// an interactive one. Prefill chunks fill the rest of the budget,
// running requests before newly admitted ones (but those whose prompt
// rows the engine holds back, Seq.Hold); while an interactive
// request decodes, other classes' prefill takes at most LatencyRows of
// it.
//
// Draft rows (Seq.Draft) come last, from what is left of the budget, most
// urgent first: a step that carries prefill is bound by its compute
// already, and a draft row is worth less than a prompt row. Each takes a
// slot no request holds (VerifySlots) and pages only as far as the pool
// has them free: a draft never makes anyone give up pages, and other
// classes' drafts count under the latency budget like their prefill.
//
// Pages are taken as rows reach them. When a row finds the pool (or its
// tenant's page limit) dry, requests that rank below it give up their
// pages: preempted ones without a slot first, then the least urgent
// class, the highest dominant share, the latest arrival; a request
// ranks below another of a more urgent class, or of its own class that
// arrived earlier (for admission, only a more urgent class). A running
// request that finds nobody below it gives up its own pages, so the
// earliest of the most urgent class always advances. Interactive
// requests are never made to give up pages; instead one is admitted only
// while the pages every admitted interactive request may still need —
// its prompt plus its most tokens, beyond its tenant's reservation —
// fit the pool's unreserved pages, so the others' pages can always make
// room for them.
func Schedule(in Input) Plan {
	own := slices.Clone(in.Seqs) // planning marks them; the caller's stay as they are
	seqs := make([]*Seq, len(own))
	for i := range own {
		seqs[i] = &own[i]
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
	pl := newPlanner(in, seqs)
	for _, s := range seqs {
		if s.Running && !s.Prefilling() {
			pl.decode(s)
		}
	}
	pl.admit()
	for _, s := range seqs {
		if s.Running && !s.Prefilling() && pl.admitted[s] && pl.chunk[s] < 0 {
			pl.decode(s) // resumed
		}
	}
	for _, s := range seqs {
		if s.Running && s.Prefilling() && !s.Hold {
			pl.prefill(s)
		}
	}
	pl.drafts()
	return pl.plan()
}

// drafts extends the decode rows of running requests that propose draft
// tokens by as many as the budget, the free slots and the free pages
// allow (see Schedule).
func (pl *planner) drafts() {
	spare := pl.in.VerifySlots
	for _, s := range pl.seqs {
		if s.Running {
			spare--
		}
	}
	for _, s := range pl.seqs {
		i := pl.chunk[s]
		if s.Draft <= 0 || !s.Running || s.Prefilling() || i < 0 || pl.p.Rows[i].N != 1 {
			continue
		}
		// Within its longest sequence, so an interactive request stays
		// within the pages it was admitted for.
		d := min(s.Draft, pl.budget, spare, s.Pages*pl.in.PageTokens-s.Done-1)
		limited := pl.latency >= 0 && s.QoS != Interactive
		if limited {
			d = min(d, pl.latency)
		}
		d = min(d, (pl.holds(s)+pl.avail(s))*pl.in.PageTokens-s.Done-1)
		if d <= 0 {
			continue
		}
		if k := pl.pagesFor(s.Done+1+d) - pl.holds(s); k > 0 {
			pl.take(s, k)
		}
		pl.p.Rows[i].N += d
		pl.p.Rows[i].Draft = d
		pl.budget -= d
		spare -= d
		if limited {
			pl.latency -= d
			pl.latencyRows[s] += d
		}
	}
}

// planner is one step's decision while it is made.
type planner struct {
	in   *Input
	u    *usage
	p    Plan
	seqs []*Seq // in Schedule's order
	// The pool as planned so far: pages to hand out, and the pages
	// charged to each tenant with a reservation.
	free    int
	used    map[string]int
	slots   int    // free slots
	victims []*Seq // running requests a slot may be taken from
	// commit is the pages each tenant's interactive requests may come to
	// map (their cached pages too, which stay in the pool while mapped);
	// over, the sum of what of it exceeds each reservation; floating, the
	// unreserved pages that must cover over.
	commit         map[string]int
	over, floating int
	budget         int
	latency        int // prefill rows of other classes left under the latency budget; -1: no limit
	grant          map[*Seq]int
	chunk          map[*Seq]int // index in p.Rows, -1: none
	latencyRows    map[*Seq]int // of its chunk's rows, those counted under the latency budget
	admitted       map[*Seq]bool
	released       map[*Seq]bool
	was            map[*Seq]bool // held pages before the step (running or paged)
}

func newPlanner(in Input, seqs []*Seq) *planner {
	pl := &planner{in: &in, u: newUsage(in, seqs), seqs: seqs, free: in.FreePages, used: map[string]int{}, slots: in.FreeSlots,
		commit: map[string]int{}, floating: in.Pages, budget: in.Budget, latency: -1,
		grant: map[*Seq]int{}, chunk: map[*Seq]int{}, latencyRows: map[*Seq]int{}, admitted: map[*Seq]bool{}, released: map[*Seq]bool{}, was: map[*Seq]bool{}}
	for t, n := range in.Used {
		pl.used[t] = n
	}
	for _, n := range in.Reservations {
		pl.floating -= n
	}
	for _, s := range seqs {
		pl.chunk[s] = -1
		pl.was[s] = s.Running || s.Paged
		if s.Running && s.QoS != Interactive {
			pl.victims = append(pl.victims, s)
		}
		if s.QoS == Interactive && pl.was[s] {
			pl.commit[s.Tenant] += s.Pages
		}
	}
	for t, n := range pl.commit {
		pl.over += max(0, n-in.Reservations[t])
	}
	return pl
}

// pagesFor is the pages that hold n tokens.
func (pl *planner) pagesFor(n int) int { return (n + pl.in.PageTokens - 1) / pl.in.PageTokens }

// holds is the pages s's table will cover: what it held and what the
// step gave it.
func (pl *planner) holds(s *Seq) int { return s.Held + pl.grant[s] }

// poolAvail is how many pages s's tenant may take from the pool: the
// floating pages and its own unused reservation.
func (pl *planner) poolAvail(s *Seq) int {
	n := pl.free
	for t, r := range pl.in.Reservations {
		if t != s.Tenant && r > 0 {
			n -= max(0, r-pl.used[t]) // held back for t
		}
	}
	return max(0, n)
}

// limitAvail is how many more pages s may take under its tenant's page
// limit (an interactive request was counted whole at admission).
func (pl *planner) limitAvail(s *Seq) int {
	lim := pl.in.Limits(s.Tenant).MaxPages
	if lim <= 0 || s.QoS == Interactive {
		return math.MaxInt
	}
	return max(0, lim-pl.u.pages[s.Tenant])
}

func (pl *planner) avail(s *Seq) int { return min(pl.poolAvail(s), pl.limitAvail(s)) }

// take gives s k pages, from its tenant's reservation first.
func (pl *planner) take(s *Seq, k int) {
	pl.used[s.Tenant] += k
	pl.free -= k
	pl.grant[s] += k
	if s.QoS != Interactive {
		pl.u.pages[s.Tenant] += k
	}
}

// own is the pages charged to s that giving up its pages would uncharge.
func (pl *planner) own(s *Seq) int { return s.Held - s.Shared + pl.grant[s] }

// gain is the pages the pool gets back when s gives up its pages (or,
// admitted this step, is not admitted after all).
func (pl *planner) gain(s *Seq) int {
	if !pl.was[s] {
		return pl.grant[s] + s.Idle
	}
	return s.Frees + pl.grant[s]
}

// below reports whether v may be made to give up its pages for s: it is
// not interactive, holds pages, and ranks below s.
func (pl *planner) below(v, s *Seq, strict bool) bool {
	if v == s || v.QoS == Interactive || pl.released[v] || !(v.Running || v.Paged) || slices.Contains(s.From, v.ID) {
		return false // (s would map pages of those in From)
	}
	return v.QoS > s.QoS || !strict && v.QoS == s.QoS && v.Arrival > s.Arrival
}

// pageVictim is the request to give up its pages for s, or nil: one
// without a slot first, then the least urgent class, the highest
// dominant share, the latest arrival. For a tenant's page limit
// (tenant set) only the tenant's own requests help.
func (pl *planner) pageVictim(s *Seq, strict, tenant bool) *Seq {
	var best *Seq
	bestShare := 0.0
	for _, v := range pl.seqs {
		if !pl.below(v, s, strict) || tenant && (v.Tenant != s.Tenant || pl.own(v) == 0) || !tenant && pl.gain(v) == 0 {
			continue
		}
		sh := pl.u.share(v.Tenant)
		if best == nil {
			best, bestShare = v, sh
			continue
		}
		switch {
		case v.Running != best.Running:
			if !v.Running {
				best, bestShare = v, sh
			}
		case v.QoS != best.QoS:
			if v.QoS > best.QoS {
				best, bestShare = v, sh
			}
		case sh != bestShare:
			if sh > bestShare {
				best, bestShare = v, sh
			}
		case v.Arrival > best.Arrival:
			best, bestShare = v, sh
		}
	}
	return best
}

// room makes k more pages available to s, by making requests below it
// give up theirs; it reports whether it could. It first checks that
// those requests hold enough between them, so it releases nobody in
// vain (the reservations of their tenants aside).
func (pl *planner) room(s *Seq, k int, strict bool) bool {
	if pl.avail(s) >= k {
		return true
	}
	poolGain, limitGain := 0, 0
	for _, v := range pl.seqs {
		if pl.below(v, s, strict) {
			poolGain += pl.gain(v)
			if v.Tenant == s.Tenant {
				limitGain += pl.own(v)
			}
		}
	}
	if pl.poolAvail(s)+poolGain < k || pl.limitAvail(s) < k && pl.limitAvail(s)+limitGain < k {
		return false
	}
	for pl.avail(s) < k {
		v := pl.pageVictim(s, strict, pl.limitAvail(s) < k)
		if v == nil {
			return false
		}
		pl.release(v)
	}
	return true
}

// release makes v give up its pages (and its slot): it resumes in a
// later step. A request admitted this step without pages of its own is
// simply not admitted.
func (pl *planner) release(v *Seq) {
	owned := pl.gain(v) // its tenant's pages
	if !pl.was[v] {
		owned = pl.grant[v] // the cached ones were not charged: only the prefix cache held them
	}
	pl.giveBack(v, pl.gain(v), owned)
	if v.QoS != Interactive {
		pl.u.pages[v.Tenant] -= pl.own(v)
	}
	pl.grant[v] = 0
	pl.unplan(v)
	if v.Running {
		pl.u.slots[v.Tenant]--
		pl.slots++
		pl.victims = slices.DeleteFunc(pl.victims, func(x *Seq) bool { return x == v })
	}
	pl.p.Admit = slices.DeleteFunc(pl.p.Admit, func(id uint64) bool { return id == v.ID })
	pl.p.SwapIn = slices.DeleteFunc(pl.p.SwapIn, func(sw SwapIn) bool { return sw.ID == v.ID })
	pl.p.Preempt = slices.DeleteFunc(pl.p.Preempt, func(id uint64) bool { return id == v.ID })
	if pl.was[v] {
		pl.p.Release = append(pl.p.Release, v.ID)
	}
	v.Running, v.Paged = false, false
	pl.admitted[v] = false
	pl.released[v] = true
	for _, s := range pl.seqs {
		if pl.admitted[s] && slices.Contains(s.From, v.ID) {
			pl.release(s) // it was to map v's pages
		}
	}
}

// releasedID reports whether the request of id gave up its pages this
// step.
func (pl *planner) releasedID(id uint64) bool {
	return slices.Contains(pl.p.Release, id)
}

// giveBack returns g pages to the pool, owned of them charged to v's
// tenant.
func (pl *planner) giveBack(v *Seq, g, owned int) {
	pl.free += g
	pl.used[v.Tenant] -= owned
}

// unplan drops v's chunk from the step (plan removes it).
func (pl *planner) unplan(v *Seq) {
	if i := pl.chunk[v]; i >= 0 {
		pl.budget += pl.p.Rows[i].N
		if pl.latency >= 0 {
			pl.latency += pl.latencyRows[v]
		}
		pl.p.Rows[i].N = 0
		pl.chunk[v] = -1
	}
}

// grow gives running s the pages for its rows up to n tokens, making room
// if it must; failing that, a request that is not interactive gives up
// its own pages, one that is waits (it will find room: see Schedule).
func (pl *planner) grow(s *Seq, n int) bool {
	k := pl.pagesFor(n) - pl.holds(s)
	if k <= 0 {
		return true
	}
	if !pl.room(s, k, false) {
		if s.QoS != Interactive {
			pl.release(s)
		}
		return false
	}
	pl.take(s, k)
	return true
}

// addChunk plans n rows of s.
func (pl *planner) addChunk(s *Seq, n, latencyRows int) {
	pl.chunk[s] = len(pl.p.Rows)
	pl.latencyRows[s] = latencyRows
	pl.p.Rows = append(pl.p.Rows, Chunk{ID: s.ID, From: s.Done, N: n, Logits: s.Done+n == s.Prompt || !s.Prefilling()})
	pl.budget -= n
}

// decode plans running s's decode row.
func (pl *planner) decode(s *Seq) {
	if pl.budget == 0 || !pl.grow(s, s.Done+1) {
		return
	}
	pl.addChunk(s, 1, 0)
	if s.QoS == Interactive && pl.in.LatencyRows > 0 {
		pl.latency = pl.in.LatencyRows
	}
}

// prefill plans running s's next prompt chunk: as much as the budget, the
// latency budget and the pages it can have allow.
func (pl *planner) prefill(s *Seq) {
	n := min(s.Prompt-s.Done, pl.budget)
	limited := pl.latency >= 0 && s.QoS != Interactive
	if limited {
		n = min(n, pl.latency)
	}
	if n <= 0 {
		return
	}
	// Fewer rows rather than taking pages from others: only a chunk that
	// could not compute a row makes room.
	if cover := (pl.holds(s)+pl.avail(s))*pl.in.PageTokens - s.Done; cover > 0 {
		n = min(n, cover)
	} else if !pl.grow(s, s.Done+1) {
		return
	} else {
		n = min(n, pl.holds(s)*pl.in.PageTokens-s.Done)
	}
	if !pl.grow(s, s.Done+n) {
		return
	}
	lat := 0
	if limited {
		pl.latency -= n
		lat = n
	}
	pl.addChunk(s, n, lat)
}

// admit admits waiting requests (see Schedule).
func (pl *planner) admit() {
	var waiting []*Seq
	for _, s := range pl.seqs {
		if !s.Running && !pl.released[s] {
			waiting = append(waiting, s)
		}
	}
	// Each waiting request is considered once: admitting others only
	// takes slots and pages, so one that cannot run now cannot later in
	// the same step.
	for len(waiting) > 0 {
		i := pl.u.first(waiting)
		s := waiting[i]
		waiting = append(waiting[:i], waiting[i+1:]...)
		if pl.released[s] || slices.ContainsFunc(s.From, pl.releasedID) {
			continue
		}
		lim := pl.in.Limits(s.Tenant)
		// The pages its prompt (resuming, its tokens) and its first
		// generated token fill: a request admitted with less would give
		// its pages up again before it decodes, as soon as the pool runs
		// dry.
		first := max(0, pl.pagesFor(max(s.Done, s.Prompt)+1)-s.Held)
		others := 0 // pages other tenants reserve
		for t, n := range pl.in.Reservations {
			if t != s.Tenant {
				others += n
			}
		}
		whole := s.Pages - s.Shared // an interactive request's pages of its own, at most
		switch {
		case lim.MaxSlots > 0 && pl.u.slots[s.Tenant] >= lim.MaxSlots:
			continue
		case s.Pages > pl.in.Pages-others:
			continue // it could never hold all it may need
		case s.QoS == Interactive && lim.MaxPages > 0 && pl.u.pages[s.Tenant]+whole > lim.MaxPages:
			continue
		case s.QoS == Interactive && pl.over-max(0, pl.commit[s.Tenant]-pl.in.Reservations[s.Tenant])+
			max(0, pl.commit[s.Tenant]+s.Pages-pl.in.Reservations[s.Tenant]) > pl.floating:
			continue // the pool could not grow every interactive request to its end
		case pl.slots == 0 && pl.u.victim(pl.victims, s.QoS) < 0:
			continue
		}
		// Its cached pages are no longer free once it maps them.
		pl.free -= s.Idle
		if s.QoS == Interactive {
			pl.u.pages[s.Tenant] += whole // committed before its pages are checked, so the limit does not bind it
		}
		if !pl.room(s, first, true) {
			pl.free += s.Idle
			if s.QoS == Interactive {
				pl.u.pages[s.Tenant] -= whole
			}
			continue
		}
		if pl.slots == 0 {
			v := pl.u.victim(pl.victims, s.QoS)
			vs := pl.victims[v]
			pl.victims = append(pl.victims[:v], pl.victims[v+1:]...)
			vs.Running, vs.Paged = false, true
			pl.u.slots[vs.Tenant]--
			pl.slots++
			// It keeps its pages, but not those planned for its row.
			pl.unplan(vs)
			pl.giveBack(vs, pl.grant[vs], pl.grant[vs])
			pl.u.pages[vs.Tenant] -= pl.grant[vs]
			pl.grant[vs] = 0
			pl.p.Preempt = append(pl.p.Preempt, vs.ID)
		}
		pl.slots--
		pl.u.slots[s.Tenant]++
		if s.QoS == Interactive {
			pl.over += max(0, pl.commit[s.Tenant]+s.Pages-pl.in.Reservations[s.Tenant]) - max(0, pl.commit[s.Tenant]-pl.in.Reservations[s.Tenant])
			pl.commit[s.Tenant] += s.Pages
		}
		pl.take(s, first) // its host pages among them: Held leaves them out
		s.Running = true
		pl.admitted[s] = true
		pl.p.Admit = append(pl.p.Admit, s.ID)
		if s.Host > 0 && !pl.was[s] {
			pl.p.SwapIn = append(pl.p.SwapIn, SwapIn{ID: s.ID, Pages: s.Host})
		}
	}
}

// plan is the decision, dropping chunks of requests that gave up their
// pages after they were planned.
func (pl *planner) plan() Plan {
	p := pl.p
	p.Rows = slices.DeleteFunc(p.Rows, func(c Chunk) bool { return c.N == 0 })
	p.NRows = 0
	for _, c := range p.Rows {
		p.NRows += c.N
	}
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
		switch {
		case !s.Running && !s.Paged:
		case s.QoS == Interactive:
			u.pages[s.Tenant] += s.Pages - s.Shared // what it may come to hold: it is never preempted
		default:
			u.pages[s.Tenant] += s.Held - s.Shared // a preempted request holds its pages while it waits
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
