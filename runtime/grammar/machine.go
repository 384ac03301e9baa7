package grammar

import (
	"slices"
	"unsafe"
)

// A frame is one stack, hash-consed: the position on top and the stack
// beneath it (-1: none). Beneath the top lie the positions to return to
// when the rules entered end.
type frame struct {
	pos, parent, depth int32
}

// A dstate is a set of stacks reached by the same bytes, with a flag for
// "every rule has ended" (the whole grammar matched, or, in a
// context-free simulation, the rule of the start position returned).
// States are interned so that the transitions between them are memoized
// like a lazily built DFA.
type dstate struct {
	stacks   []int32
	complete bool
	next     []int32 // by byte: -2 unknown, -1 dead, else a state
}

const (
	unknown = -2
	dead    = -1
)

// machine runs a grammar's pushdown automaton over an arena of stacks.
type machine struct {
	g      *Grammar
	frames []frame
	ids    map[frame]int32 // (pos, parent) -> stack; depth is derived
	mark   []uint32
	stamp  uint32

	states []dstate
	byKey  map[string]int32
	key    []byte
	out    []int32
	work   []int32
}

func newMachine(g *Grammar) *machine {
	return &machine{g: g, ids: map[frame]int32{}, byKey: map[string]int32{}}
}

// stack returns the stack with pos on top of parent.
func (m *machine) stack(pos, parent int32) int32 {
	k := frame{pos: pos, parent: parent}
	if id, ok := m.ids[k]; ok {
		return id
	}
	d := int32(1)
	if parent >= 0 {
		d = m.frames[parent].depth + 1
	}
	id := int32(len(m.frames))
	m.frames = append(m.frames, frame{pos, parent, d})
	m.ids[k] = id
	return id
}

// closure adds to m.out every stack reachable from s without consuming a
// byte whose top can consume one, and reports whether all rules can end.
// The caller bumps m.stamp once per set it builds.
func (m *machine) closure(s int32) (complete bool) {
	m.work = append(m.work[:0], s)
	for len(m.work) > 0 {
		s := m.work[len(m.work)-1]
		m.work = m.work[:len(m.work)-1]
		for int(s) >= len(m.mark) {
			m.mark = append(m.mark, 0)
		}
		if m.mark[s] == m.stamp {
			continue
		}
		m.mark[s] = m.stamp
		f := m.frames[s]
		p := &m.g.pos[f.pos]
		if len(p.bytes) > 0 {
			m.out = append(m.out, s)
		}
		if len(p.refs) > 0 && f.depth+1 < int32(m.g.lim.StackDepth) {
			for _, r := range p.refs {
				// A reference at the end of a rule returns straight to the
				// rule's caller (a tail call), so right recursion such as
				// llama.cpp's `chars ::= char chars | ""` does not grow
				// the stack.
				ret := f.parent
				if !m.g.pos[r.ret].isEnd() {
					ret = m.stack(r.ret, f.parent)
				}
				m.work = append(m.work, m.stack(m.g.starts[r.rule], ret))
			}
		}
		if p.final {
			if f.parent < 0 {
				complete = true
			} else {
				m.work = append(m.work, f.parent)
			}
		}
	}
	return complete
}

// intern returns the state of the stacks in m.out.
func (m *machine) intern(complete bool) int32 {
	if len(m.out) == 0 && !complete {
		return dead
	}
	slices.Sort(m.out)
	m.out = slices.Compact(m.out)
	m.key = m.key[:0]
	if complete {
		m.key = append(m.key, 1)
	} else {
		m.key = append(m.key, 0)
	}
	for _, s := range m.out {
		m.key = append(m.key, byte(s), byte(s>>8), byte(s>>16), byte(s>>24))
	}
	if id, ok := m.byKey[unsafe.String(unsafe.SliceData(m.key), len(m.key))]; ok {
		return id
	}
	id := int32(len(m.states))
	m.states = append(m.states, dstate{stacks: slices.Clone(m.out), complete: complete})
	m.byKey[string(m.key)] = id
	return id
}

// start returns the state of the grammar's entry rule, fully expanded.
func (m *machine) start() int32 {
	m.stamp++
	m.out = m.out[:0]
	c := m.closure(m.stack(m.g.root, -1))
	return m.intern(c)
}

// single returns the state of one stack as it is, unexpanded: for a
// context-free simulation from a position that can consume a byte.
func (m *machine) single(pos int32) int32 {
	m.out = append(m.out[:0], m.stack(pos, -1))
	return m.intern(false)
}

// step returns the state after byte c, memoized.
func (m *machine) step(st int32, c byte) int32 {
	ds := &m.states[st]
	if ds.next == nil {
		ds.next = make([]int32, 256)
		for i := range ds.next {
			ds.next[i] = unknown
		}
	}
	if n := ds.next[c]; n != unknown {
		return n
	}
	m.stamp++
	m.out = m.out[:0]
	complete := false
	for _, s := range m.states[st].stacks {
		f := m.frames[s]
		for _, e := range m.g.pos[f.pos].bytes {
			if e.lo <= c && c <= e.hi {
				if m.closure(m.stack(e.to, f.parent)) {
					complete = true
				}
			}
		}
	}
	n := m.intern(complete)
	m.states[st].next[c] = n
	return n
}

// walk returns the state after bytes b, or dead.
func (m *machine) walk(st int32, b []byte) int32 {
	for _, c := range b {
		if st = m.step(st, c); st == dead {
			return dead
		}
	}
	return st
}

// live says whether state st has stacks that can consume more bytes.
func (m *machine) live(st int32) bool { return st >= 0 && len(m.states[st].stacks) > 0 }

// reset forgets every stack and state but keep the memory.
func (m *machine) reset() {
	m.frames = m.frames[:0]
	clear(m.ids)
	m.states = m.states[:0]
	clear(m.byKey)
}

// keepStates bounds the states (and so the memoized transitions, 1 KB a
// state) a matcher's machine keeps between tokens: below it the states a
// request walked stay, so that the next tokens' walks, which mostly
// retrace them (the same string loop, the same object's keys), hit the
// memo instead of recomputing closures; past it compact forgets them.
const keepStates = 256

// compact rebases st when the machine holds more than keepStates states
// or 16 times as many stacks; otherwise it keeps everything and returns
// st.
func (m *machine) compact(st int32) int32 {
	if len(m.states) <= keepStates && len(m.frames) <= 16*keepStates {
		return st
	}
	return m.rebase(st)
}

// rebase makes state st the only state kept: its stacks are copied into
// a fresh arena and everything else is forgotten. It returns st's new id.
func (m *machine) rebase(st int32) int32 {
	old := m.frames
	stacks := m.states[st].stacks
	complete := m.states[st].complete
	remap := map[int32]int32{}
	var fr []frame
	var cp func(s int32) int32
	cp = func(s int32) int32 {
		if s < 0 {
			return -1
		}
		if n, ok := remap[s]; ok {
			return n
		}
		// Copy iteratively down to a copied ancestor to avoid deep
		// recursion on deep stacks.
		var chain []int32
		for t := s; t >= 0; t = old[t].parent {
			if _, ok := remap[t]; ok {
				break
			}
			chain = append(chain, t)
		}
		for i := len(chain) - 1; i >= 0; i-- {
			t := chain[i]
			p := int32(-1)
			if old[t].parent >= 0 {
				p = remap[old[t].parent]
			}
			remap[t] = int32(len(fr))
			fr = append(fr, frame{old[t].pos, p, old[t].depth})
		}
		return remap[s]
	}
	ns := make([]int32, len(stacks))
	for i, s := range stacks {
		ns[i] = cp(s)
	}
	m.reset()
	m.frames = fr
	for i, f := range fr {
		m.ids[frame{pos: f.pos, parent: f.parent}] = int32(i)
	}
	m.out = append(m.out[:0], ns...)
	return m.intern(complete)
}
