package grammar

import (
	"fmt"
	"strconv"
)

// A position is a point inside a rule between bytes, after epsilon moves
// are folded away: the bytes that may come next, the rules that may be
// entered (with where to continue after them), and whether the rule may
// end here.
type position struct {
	bytes []byteEdge
	refs  []refEdge
	final bool
}

// isEnd says whether the position is only the end of its rule.
func (p *position) isEnd() bool { return p.final && len(p.bytes) == 0 && len(p.refs) == 0 }

type byteEdge struct {
	lo, hi byte
	to     int32
}

type refEdge struct {
	rule int32
	ret  int32
}

// tgraph is the Thompson construction of the rules, with epsilon edges,
// before they are folded into positions.
type tgraph struct {
	nodes []tnode
	lim   Limits
	b     *budget
}

type tnode struct {
	eps   []int32
	bytes []byteEdge
	refs  []refEdge
}

func (g *tgraph) node() (int32, error) {
	if len(g.nodes) >= g.lim.GrammarSize {
		return 0, &LimitError{Limit: "GrammarSize", Bound: int64(g.lim.GrammarSize), What: "grammar positions"}
	}
	if err := g.b.check(); err != nil {
		return 0, err
	}
	g.nodes = append(g.nodes, tnode{})
	return int32(len(g.nodes) - 1), nil
}

// eps adds an epsilon edge from node from to node to.
func (g *tgraph) eps(from, to int32) { g.nodes[from].eps = append(g.nodes[from].eps, to) }

// enter builds e after a fresh node that node from reaches by an epsilon
// edge (so that e's own epsilon edges cannot leak into what came before
// from) and returns that node and the node after e: an alternative's
// branch, a loop's body.
func (g *tgraph) enter(e *expr, from int32) (start, end int32, err error) {
	if start, err = g.node(); err != nil {
		return 0, 0, err
	}
	g.eps(from, start)
	if end, err = g.build(e, start); err != nil {
		return 0, 0, err
	}
	return start, end, nil
}

// build adds e after node in and returns the node after it.
func (g *tgraph) build(e *expr, in int32) (int32, error) {
	switch e.kind {
	case eSeq:
		cur := in
		for _, s := range e.subs {
			var err error
			if cur, err = g.build(s, cur); err != nil {
				return 0, err
			}
		}
		return cur, nil
	case eAlt:
		out, err := g.node()
		if err != nil {
			return 0, err
		}
		for _, s := range e.subs {
			_, end, err := g.enter(s, in)
			if err != nil {
				return 0, err
			}
			g.eps(end, out)
		}
		return out, nil
	case eLit:
		cur := in
		for _, c := range e.lit {
			nxt, err := g.node()
			if err != nil {
				return 0, err
			}
			g.nodes[cur].bytes = append(g.nodes[cur].bytes, byteEdge{c, c, nxt})
			cur = nxt
		}
		return cur, nil
	case eClass:
		out, err := g.node()
		if err != nil {
			return 0, err
		}
		var seqs []byteSeq
		for _, r := range e.ranges {
			seqs = utf8Seqs(r, seqs[:0])
			for _, s := range seqs {
				cur := in
				for i := 0; i < s.n-1; i++ {
					nxt, err := g.node()
					if err != nil {
						return 0, err
					}
					g.nodes[cur].bytes = append(g.nodes[cur].bytes, byteEdge{s.lo[i], s.hi[i], nxt})
					cur = nxt
				}
				g.nodes[cur].bytes = append(g.nodes[cur].bytes, byteEdge{s.lo[s.n-1], s.hi[s.n-1], out})
			}
		}
		return out, nil
	case eRef:
		out, err := g.node()
		if err != nil {
			return 0, err
		}
		g.nodes[in].refs = append(g.nodes[in].refs, refEdge{int32(e.rule), out})
		return out, nil
	case eRepeat:
		sub := e.subs[0]
		cur := in
		for i := 0; i < e.min; i++ {
			var err error
			if cur, err = g.build(sub, cur); err != nil {
				return 0, err
			}
		}
		if e.max < 0 {
			// A loop through a fresh node, so that the body's epsilon
			// edges cannot leak into what came before.
			loop, end, err := g.enter(sub, cur)
			if err != nil {
				return 0, err
			}
			g.eps(end, loop)
			return loop, nil
		}
		if e.max == e.min {
			return cur, nil
		}
		out, err := g.node()
		if err != nil {
			return 0, err
		}
		for i := e.min; i < e.max; i++ {
			g.eps(cur, out)
			if cur, err = g.build(sub, cur); err != nil {
				return 0, err
			}
		}
		g.eps(cur, out)
		return out, nil
	}
	return 0, fmt.Errorf("grammar: unknown expression kind %d", e.kind)
}

// compileRules turns parsed rules into positions, rejecting grammars the
// matcher cannot run (left recursion).
func compileRules(rs *ruleSet, lim Limits, b *budget) (*Grammar, error) {
	if err := inlineRules(rs, b); err != nil {
		return nil, err
	}
	tg := &tgraph{lim: lim, b: b}
	starts := make([]int32, len(rs.bodies))
	ends := make([]int32, len(rs.bodies))
	for i, body := range rs.bodies {
		s, err := tg.node()
		if err != nil {
			return nil, err
		}
		e, err := tg.build(body, s)
		if err != nil {
			return nil, err
		}
		starts[i], ends[i] = s, e
	}
	isEnd := make([]bool, len(tg.nodes))
	for _, e := range ends {
		isEnd[e] = true
	}
	// Positions are the nodes where matching can stand: rule starts and
	// the targets of byte and rule edges.
	posOf := make([]int32, len(tg.nodes))
	for i := range posOf {
		posOf[i] = -1
	}
	var order []int32
	mark := func(n int32) {
		if posOf[n] < 0 {
			posOf[n] = int32(len(order))
			order = append(order, n)
		}
	}
	for _, s := range starts {
		mark(s)
	}
	for i := range tg.nodes {
		for _, e := range tg.nodes[i].bytes {
			mark(e.to)
		}
		for _, r := range tg.nodes[i].refs {
			mark(r.ret)
		}
	}
	g := &Grammar{pos: make([]position, len(order)), names: rs.names, lim: lim}
	g.starts = make([]int32, len(starts))
	for i, s := range starts {
		g.starts[i] = posOf[s]
	}
	g.root = g.starts[rs.root]
	seen := make([]uint32, len(tg.nodes))
	stamp := uint32(0)
	var work []int32
	type bkey struct {
		lo, hi byte
		to     int32
	}
	for pi, n := range order {
		stamp++
		work = append(work[:0], n)
		seen[n] = stamp
		p := &g.pos[pi]
		bset := map[bkey]bool{}
		rset := map[refEdge]bool{}
		for len(work) > 0 {
			if err := b.check(); err != nil {
				return nil, err
			}
			t := work[len(work)-1]
			work = work[:len(work)-1]
			if isEnd[t] {
				p.final = true
			}
			for _, e := range tg.nodes[t].bytes {
				k := bkey{e.lo, e.hi, posOf[e.to]}
				if !bset[k] {
					bset[k] = true
					p.bytes = append(p.bytes, byteEdge{e.lo, e.hi, posOf[e.to]})
				}
			}
			for _, r := range tg.nodes[t].refs {
				k := refEdge{r.rule, posOf[r.ret]}
				if !rset[k] {
					rset[k] = true
					p.refs = append(p.refs, k)
				}
			}
			for _, e := range tg.nodes[t].eps {
				if seen[e] != stamp {
					seen[e] = stamp
					work = append(work, e)
				}
			}
		}
	}
	if err := g.checkLeftRecursion(); err != nil {
		return nil, err
	}
	return g, nil
}

// reachEmpty calls f with every position reachable from rule r's start
// without consuming a byte, given which rules can match nothing.
func (g *Grammar) reachEmpty(r int32, nullable []bool, f func(p int32)) {
	seen := map[int32]bool{g.starts[r]: true}
	work := []int32{g.starts[r]}
	for len(work) > 0 {
		p := work[len(work)-1]
		work = work[:len(work)-1]
		f(p)
		for _, e := range g.pos[p].refs {
			if nullable[e.rule] && !seen[e.ret] {
				seen[e.ret] = true
				work = append(work, e.ret)
			}
		}
	}
}

// checkLeftRecursion rejects a rule that can reach itself without
// consuming a byte: the matcher would expand it forever (llama.cpp
// rejects these grammars too).
func (g *Grammar) checkLeftRecursion() error {
	n := len(g.starts)
	nullable := make([]bool, n)
	for changed := true; changed; {
		changed = false
		for r := 0; r < n; r++ {
			if nullable[r] {
				continue
			}
			g.reachEmpty(int32(r), nullable, func(p int32) {
				if g.pos[p].final {
					nullable[r] = true
				}
			})
			if nullable[r] {
				changed = true
			}
		}
	}
	left := make([][]int32, n)
	for r := 0; r < n; r++ {
		g.reachEmpty(int32(r), nullable, func(p int32) {
			for _, e := range g.pos[p].refs {
				left[r] = append(left[r], e.rule)
			}
		})
	}
	color := make([]uint8, n) // 0 new, 1 on the path, 2 done
	type frame struct{ r, i int }
	for r0 := 0; r0 < n; r0++ {
		if color[r0] != 0 {
			continue
		}
		stack := []frame{{r0, 0}}
		color[r0] = 1
		for len(stack) > 0 {
			f := &stack[len(stack)-1]
			if f.i == len(left[f.r]) {
				color[f.r] = 2
				stack = stack[:len(stack)-1]
				continue
			}
			s := int(left[f.r][f.i])
			f.i++
			switch color[s] {
			case 1:
				return &SyntaxError{Lang: "gbnf", Offset: -1, Msg: "rule " + strconv.Quote(g.names[s]) + " is left-recursive"}
			case 0:
				color[s] = 1
				stack = append(stack, frame{s, 0})
			}
		}
	}
	return nil
}
