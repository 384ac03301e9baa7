package grammar

import (
	"fmt"
	"math/bits"
	"slices"
)

// posCache is what a position accepts regardless of the rules below it:
// the tokens a simulation from the position alone consumes without its
// rule returning (accepted), and the tokens that return from the rule on
// some path and so depend on the stack beneath (uncertain, as indices
// into the byte-ordered vocabulary). Every other token is rejected.
type posCache struct {
	accIDs    []int32  // accepted token ids when few
	accBits   []uint64 // accepted tokens as a bitset when many
	uncertain []int32
}

// denseAbove is the accepted count past which a bitset is smaller and
// faster to merge than a list of ids.
const denseAbove = 2048

// posCache returns the cache of position q, computing it on first use.
func (g *Grammar) posCache(q int32) *posCache {
	g.cacheMu.Lock()
	pc := g.cache[q]
	g.cacheMu.Unlock()
	if pc != nil {
		return pc
	}
	pc = g.computePosCache(q)
	size := 8*len(pc.accBits) + 4*len(pc.accIDs) + 4*len(pc.uncertain) + 64
	g.cacheMu.Lock()
	switch {
	case g.cache[q] != nil:
		pc = g.cache[q]
	case g.cacheBytes+size <= g.lim.PositionCacheBytes:
		g.cache[q] = pc
		g.cacheBytes += size
	}
	g.cacheMu.Unlock()
	return pc
}

// computePosCache walks the whole vocabulary trie from position q alone.
// States are memoized per (state, byte), so a loop such as a string's
// characters costs a table look-up per trie node.
func (g *Grammar) computePosCache(q int32) *posCache {
	vt := g.vt
	m := newMachine(g)
	states := make([]int32, vt.maxDepth+1)
	unc := make([]bool, vt.maxDepth+1)
	states[0] = m.single(q)
	var acc []int32
	pc := &posCache{}
	for i := int32(1); i < int32(len(vt.nbyte)); {
		d := vt.depth[i]
		ns := m.step(states[d-1], vt.nbyte[i])
		u := unc[d-1] || (ns >= 0 && m.states[ns].complete)
		if !m.live(ns) {
			if u {
				for k := vt.tokLo[i]; k < vt.tokLo[vt.end[i]]; k++ {
					pc.uncertain = append(pc.uncertain, k)
				}
			}
			i = vt.end[i]
			continue
		}
		acc = append(acc, vt.toks[vt.tokLo[i]:vt.tokHi[i]]...)
		states[d], unc[d] = ns, u
		i++
	}
	if len(acc) > denseAbove {
		pc.accBits = make([]uint64, (vt.nvocab+63)/64)
		for _, id := range acc {
			pc.accBits[id>>6] |= 1 << (id & 63)
		}
	} else {
		pc.accIDs = acc
	}
	return pc
}

// NewMatcher returns a matcher at the start of the grammar, for one
// request. A Matcher is not safe for concurrent use. It takes the
// machine of a released matcher when there is one: the states and
// transitions earlier requests walked are memoized there (up to
// keepStates), so its walks mostly look them up instead of computing
// them.
func (g *Grammar) NewMatcher() *Matcher {
	m, _ := g.machines.Get().(*machine)
	if m == nil {
		m = newMachine(g)
	}
	mt := &Matcher{g: g, m: m}
	mt.st = mt.m.start()
	mt.eog = g.vt.isEOG
	return mt
}

// Release hands the matcher's machine to the grammar's next matcher.
// The matcher is finished after it (Done; Mask allows nothing, Accept
// fails); it must not be in use by another goroutine.
func (mt *Matcher) Release() {
	if mt.m == nil {
		return
	}
	m := mt.m
	mt.m, mt.st, mt.finished = nil, dead, true
	mt.g.machines.Put(m)
}

// Matcher follows one request's output through a grammar.
type Matcher struct {
	g        *Grammar
	m        *machine
	st       int32  // current state; dead when nothing can follow
	finished bool   // an end-of-generation token was accepted
	eog      []bool // by token id: an end-of-generation token (the vocabulary's, read-only)

	// walked is the machine's size after the last Mask's walk: Accept
	// keeps what it made, and forgets only what it adds past it.
	walked machineSize
	// ends are the tokens the last Mask allowed whose Accept leaves the
	// matcher Done (the end-of-generation tokens aside), valid while
	// endsOK: no Accept since (Ends).
	ends   []int32
	endsOK bool

	tops   []int32
	unc    []int32
	merged []int32
	walkSt []int32
}

// complete says whether the text so far is a whole match.
func (mt *Matcher) complete() bool {
	return !mt.finished && mt.st >= 0 && mt.m.states[mt.st].complete
}

// Mask sets in allowed (bit i of allowed[i/64] is token i; len(allowed) ≥
// (NVocab+63)/64) the tokens that may come next and clears the others.
// End-of-generation tokens are allowed exactly when the text so far is a
// complete match.
func (mt *Matcher) Mask(allowed []uint64) {
	vt := mt.g.vt
	words := (vt.nvocab + 63) / 64
	// A token the positions' caches accept keeps a stack going, so only
	// the uncertain tokens checkUncertain walks can end the match.
	mt.ends, mt.endsOK = mt.ends[:0], true
	if mt.finished || mt.st < 0 {
		clear(allowed[:words])
		return
	}
	complete := mt.m.states[mt.st].complete
	// The last Accept left the states the last walk made for this one
	// to look up (Accept's walk is on the step's path; this is not):
	// forget them now if they are many.
	mt.st, mt.walked = mt.m.compact(mt.st), machineSize{}
	ds := &mt.m.states[mt.st]
	mt.tops = mt.tops[:0]
	for _, s := range ds.stacks {
		mt.tops = append(mt.tops, mt.m.frames[s].pos)
	}
	mt.unc = mt.unc[:0]
	nlists := 0
	// fresh: allowed holds nothing of this mask yet, so the first dense
	// position's tokens are copied in rather than merged into a cleared
	// mask (one pass over the vocabulary's words instead of two).
	fresh := true
	for i, q := range mt.tops {
		dup := false
		for _, p := range mt.tops[:i] {
			if p == q {
				dup = true
				break
			}
		}
		if dup {
			continue
		}
		pc := mt.g.posCache(q)
		switch {
		case pc.accBits != nil && fresh:
			copy(allowed[:words], pc.accBits)
		case pc.accBits != nil:
			for w, b := range pc.accBits {
				allowed[w] |= b
			}
		default:
			if fresh {
				clear(allowed[:words])
			}
			for _, id := range pc.accIDs {
				allowed[id>>6] |= 1 << (id & 63)
			}
		}
		fresh = false
		if len(pc.uncertain) > 0 {
			mt.unc = append(mt.unc, pc.uncertain...)
			nlists++
		}
	}
	if fresh {
		clear(allowed[:words])
	}
	if complete {
		for _, id := range vt.eog {
			allowed[id>>6] |= 1 << (id & 63)
		}
	}
	if len(mt.unc) == 0 {
		return
	}
	if nlists > 1 {
		sortUnique(&mt.unc)
	}
	mt.checkUncertain(allowed)
}

// checkUncertain walks the uncertain tokens (in byte order, so that a
// shared prefix is stepped once) from the real state, then forgets the
// stacks the walk made once they are many (machine.compact).
func (mt *Matcher) checkUncertain(allowed []uint64) {
	vt := mt.g.vt
	m := mt.m
	var prev []byte
	valid := 0 // walkSt[0..valid] hold the states after prev's first bytes
	mt.walkSt = append(mt.walkSt[:0], mt.st)
	for _, k := range mt.unc {
		id := vt.toks[k]
		if allowed[id>>6]&(1<<(id&63)) != 0 {
			continue
		}
		b := vt.sorted[k]
		d := min(commonPrefix(prev, b), valid)
		cur := mt.walkSt[d]
		for d < len(b) {
			cur = m.step(cur, b[d])
			if cur == dead {
				break
			}
			d++
			if d < len(mt.walkSt) {
				mt.walkSt[d] = cur
			} else {
				mt.walkSt = append(mt.walkSt, cur)
			}
		}
		valid = d
		if cur != dead && d == len(b) {
			allowed[id>>6] |= 1 << (id & 63)
			if ds := &m.states[cur]; ds.complete && len(ds.stacks) == 0 {
				mt.ends = append(mt.ends, id)
			}
		}
		prev = b
	}
	mt.walked = machineSize{len(m.states), len(m.frames)}
}

// sortUnique sorts a list of small non-negative ints and drops repeats.
func sortUnique(p *[]int32) {
	s := *p
	if len(s) < 2 {
		return
	}
	mx := int32(0)
	for _, v := range s {
		mx = max(mx, v)
	}
	seen := make([]uint64, mx/64+1)
	for _, v := range s {
		seen[v>>6] |= 1 << (v & 63)
	}
	s = s[:0]
	for w, b := range seen {
		for b != 0 {
			t := bits.TrailingZeros64(b)
			s = append(s, int32(w*64+t))
			b &= b - 1
		}
	}
	*p = s
}

// Accept advances past token tok. It fails, leaving the matcher as it
// was, when tok may not come next; an end-of-generation token is accepted
// exactly when the text so far is a complete match, and ends the match.
func (mt *Matcher) Accept(tok int32) error {
	vt := mt.g.vt
	if tok < 0 || int(tok) >= vt.nvocab {
		return fmt.Errorf("grammar: token %d is outside the vocabulary of %d", tok, vt.nvocab)
	}
	if mt.finished {
		return fmt.Errorf("grammar: token %d after the end of generation", tok)
	}
	if mt.eog[tok] {
		if !mt.complete() {
			return fmt.Errorf("grammar: end-of-generation token %d before the output is complete", tok)
		}
		mt.finished, mt.endsOK = true, false
		return nil
	}
	b := vt.pieces[tok]
	if len(b) == 0 {
		return fmt.Errorf("grammar: token %d has no bytes", tok)
	}
	return mt.AcceptBytes(b)
}

// AcceptBytes advances past output text b that did not come from one
// token (a forced prefix). It fails, leaving the matcher as it was, when
// b cannot come next.
func (mt *Matcher) AcceptBytes(b []byte) error {
	mt.endsOK = false
	if mt.finished || mt.st < 0 {
		return fmt.Errorf("grammar: %q after the end of the match", b)
	}
	ns := mt.m.walk(mt.st, b)
	if ns == dead {
		mt.st = mt.compact(mt.st)
		return fmt.Errorf("grammar: %q does not continue the match", b)
	}
	mt.st = mt.compact(ns)
	return nil
}

// Ends says whether accepting tok would leave the matcher Done, without
// accepting it: for a token the last Mask allowed, with no Accept since,
// it looks the answer up in what that Mask found (so a caller that needs
// only this before it moves on may leave the Accept for later);
// otherwise it walks tok's bytes. A token that may not come next does
// not end the match.
func (mt *Matcher) Ends(tok int32) bool {
	vt := mt.g.vt
	switch {
	case tok < 0 || int(tok) >= vt.nvocab || mt.finished || mt.st < 0:
		return false
	case mt.eog[tok]:
		return mt.complete()
	case mt.endsOK:
		return slices.Contains(mt.ends, tok)
	}
	b := vt.pieces[tok]
	if len(b) == 0 {
		return false
	}
	ns := mt.m.walk(mt.st, b)
	return ns >= 0 && mt.m.states[ns].complete && len(mt.m.states[ns].stacks) == 0
}

// compact is machine.compact for what the matcher added since the last
// Mask's walk: the states that walk made stay, for Accept to look up
// where the token taken is one the walk went through, and for the next
// Mask to forget off the engine's step path (Accept is on it).
func (mt *Matcher) compact(st int32) int32 {
	m := mt.m
	if len(m.states) <= mt.walked.states+keepStates && len(m.frames) <= mt.walked.frames+16*keepStates {
		return st
	}
	mt.walked = machineSize{}
	return m.rebase(st)
}

// machineSize is a machine's states and stacks.
type machineSize struct{ states, frames int }

// Done says whether the output is complete and nothing more can follow
// (or an end-of-generation token was accepted): the request should end.
func (mt *Matcher) Done() bool {
	if mt.finished {
		return true
	}
	return mt.st >= 0 && mt.m.states[mt.st].complete && len(mt.m.states[mt.st].stacks) == 0
}

// Complete says whether the output so far is a whole match, so that an
// end-of-generation token may come next.
func (mt *Matcher) Complete() bool { return mt.complete() }
