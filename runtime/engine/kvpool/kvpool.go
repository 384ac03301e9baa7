// Package kvpool is the serving engine's KV page pool (seed 000 §19): one
// pool of 16-token pages with stable ids, sized on its own (kv_pages), a
// reference count per page so a page can be mapped by more than one
// sequence, and per-tenant accounting with reservations: pages a tenant
// reserved are kept out of the floating pool that everyone else draws on.
package kvpool

import (
	"fmt"
	"sort"
)

// Pool hands out pages. It is not safe for concurrent use: the engine's
// step loop owns it.
type Pool struct {
	refs     []int32  // per page; 0 = free
	owner    []string // tenant charged for each page in use
	free     []uint32 // free pages, the next to hand out last
	used     map[string]int
	reserved map[string]int
}

// New returns a pool of n pages, all free.
func New(n int) *Pool {
	p := &Pool{refs: make([]int32, n), owner: make([]string, n), used: map[string]int{}, reserved: map[string]int{}}
	for pg := n - 1; pg >= 0; pg-- {
		p.free = append(p.free, uint32(pg))
	}
	return p
}

// Pages is the pool's size.
func (p *Pool) Pages() int { return len(p.refs) }

// Free is the number of pages not in use.
func (p *Pool) Free() int { return len(p.free) }

// Used is the number of pages charged to tenant.
func (p *Pool) Used(tenant string) int { return p.used[tenant] }

// Reserve sets aside n pages for tenant: they count against the floating
// pool whether or not the tenant uses them. It fails when the pool cannot
// cover every reservation.
func (p *Pool) Reserve(tenant string, n int) error {
	total := n
	for t, r := range p.reserved {
		if t != tenant {
			total += r
		}
	}
	if n < 0 || total > len(p.refs) {
		return fmt.Errorf("kvpool: reserving %d pages for %s would reserve %d of %d", n, tenant, total, len(p.refs))
	}
	p.reserved[tenant] = n
	return nil
}

// Reservations returns each tenant's reservation.
func (p *Pool) Reservations() map[string]int {
	out := make(map[string]int, len(p.reserved))
	for t, n := range p.reserved {
		out[t] = n
	}
	return out
}

// Owner is the tenant charged for a page in use ("" for a free page).
func (p *Pool) Owner(pg uint32) string { return p.owner[pg] }

// Available is how many pages tenant may still take: its unused
// reservation plus the floating pages nobody has reserved.
func (p *Pool) Available(tenant string) int {
	heldBack := 0
	for t, n := range p.Unreserved() {
		if t != tenant {
			heldBack += n
		}
	}
	return max(0, len(p.free)-heldBack)
}

// Unreserved returns, per tenant with a reservation, the reserved pages it
// does not use yet.
func (p *Pool) Unreserved() map[string]int {
	out := map[string]int{}
	for t, r := range p.reserved {
		if n := r - p.used[t]; n > 0 {
			out[t] = n
		}
	}
	return out
}

// Alloc takes a page for tenant, or reports false when none is available
// to it.
func (p *Pool) Alloc(tenant string) (uint32, bool) {
	if p.Available(tenant) == 0 {
		return 0, false
	}
	pg := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	p.refs[pg], p.owner[pg] = 1, tenant
	p.used[tenant]++
	return pg, true
}

// Ref adds a reference to a page in use (another sequence maps it).
func (p *Pool) Ref(pg uint32) {
	if p.refs[pg] <= 0 {
		panic(fmt.Sprintf("kvpool: Ref of free page %d", pg))
	}
	p.refs[pg]++
}

// Refs is a page's reference count.
func (p *Pool) Refs(pg uint32) int { return int(p.refs[pg]) }

// Release drops a reference; the last one returns the page to the pool.
func (p *Pool) Release(pg uint32) {
	if p.refs[pg] <= 0 {
		panic(fmt.Sprintf("kvpool: Release of free page %d", pg))
	}
	if p.refs[pg]--; p.refs[pg] == 0 {
		p.used[p.owner[pg]]--
		p.owner[pg] = ""
		p.free = append(p.free, pg)
	}
}

// Check verifies the pool's invariants against the engine's view of who
// maps what (holders: page → number of mappings): every page is free xor
// referenced exactly as often as it is mapped, no page is free twice, and
// the per-tenant counts add up. The simulation tests call it after every
// step.
func (p *Pool) Check(holders map[uint32]int) error {
	isFree := make([]bool, len(p.refs))
	for _, pg := range p.free {
		if isFree[pg] {
			return fmt.Errorf("kvpool: page %d is free twice", pg)
		}
		isFree[pg] = true
	}
	used := map[string]int{}
	for pg := range p.refs {
		r, h := int(p.refs[pg]), holders[uint32(pg)]
		switch {
		case isFree[pg] && (r != 0 || h != 0):
			return fmt.Errorf("kvpool: free page %d has %d refs and %d holders", pg, r, h)
		case !isFree[pg] && r != h:
			return fmt.Errorf("kvpool: page %d has %d refs but %d holders (leaked or double-owned)", pg, r, h)
		case !isFree[pg]:
			used[p.owner[pg]]++
		}
	}
	var tenants []string
	for t := range p.used {
		tenants = append(tenants, t)
	}
	sort.Strings(tenants)
	for _, t := range tenants {
		if p.used[t] != used[t] {
			return fmt.Errorf("kvpool: tenant %s is charged %d pages, holds %d", t, p.used[t], used[t])
		}
	}
	return nil
}
