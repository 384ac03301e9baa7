package grammar

// inlineRules substitutes small rules that are not recursive into the
// rules that use them. A position's cached tokens are those that stay in
// its rule, so a string's characters kept in a rule of their own would
// make nearly every token depend on the stack; inlined, they are a loop
// inside the string's rule (xgrammar inlines for the same reason).
func inlineRules(rs *ruleSet, b *budget) error {
	n := len(rs.bodies)
	recursive := recursiveRules(rs)
	const (
		todo = iota
		busy
		done
	)
	state := make([]uint8, n)
	size := make([]int, n)
	expanded := make([]*expr, n)
	var expand func(r int) (*expr, int, error)
	var subst func(e *expr) (*expr, int, error)
	subst = func(e *expr) (*expr, int, error) {
		if err := b.check(); err != nil {
			return nil, 0, err
		}
		switch e.kind {
		case eRef:
			if recursive[e.rule] || e.rule == rs.root {
				return e, 1, nil
			}
			x, sz, err := expand(e.rule)
			if err != nil {
				return nil, 0, err
			}
			if sz > maxInline {
				return e, 1, nil
			}
			return x, sz, nil
		case eSeq, eAlt, eRepeat:
			out := *e
			out.subs = make([]*expr, len(e.subs))
			total := 1
			for i, s := range e.subs {
				x, sz, err := subst(s)
				if err != nil {
					return nil, 0, err
				}
				out.subs[i] = x
				total += sz
			}
			if e.kind == eRepeat {
				total *= max(e.min, e.max, 1)
			}
			return &out, min(total, 1<<30), nil
		case eLit:
			return e, len(e.lit) + 1, nil
		case eClass:
			return e, 4*len(e.ranges) + 1, nil
		}
		return e, 1, nil
	}
	expand = func(r int) (*expr, int, error) {
		switch state[r] {
		case done:
			return expanded[r], size[r], nil
		case busy: // cannot happen for a rule that is not recursive
			return &expr{kind: eRef, rule: r}, 1, nil
		}
		state[r] = busy
		x, sz, err := subst(rs.bodies[r])
		if err != nil {
			return nil, 0, err
		}
		expanded[r], size[r], state[r] = x, sz, done
		return x, sz, nil
	}
	for r := 0; r < n; r++ {
		x, _, err := expand(r)
		if err != nil {
			return err
		}
		_ = x
	}
	copy(rs.bodies, expanded)
	return nil
}

// maxInline bounds the size of a rule that is inlined.
const maxInline = 400

// recursiveRules marks the rules that can reach themselves (Tarjan's
// strongly connected components over rule references).
func recursiveRules(rs *ruleSet) []bool {
	n := len(rs.bodies)
	edges := make([][]int, n)
	for r, body := range rs.bodies {
		var walk func(e *expr)
		walk = func(e *expr) {
			if e.kind == eRef {
				edges[r] = append(edges[r], e.rule)
			}
			for _, s := range e.subs {
				walk(s)
			}
		}
		walk(body)
	}
	index := make([]int, n)
	low := make([]int, n)
	on := make([]bool, n)
	for i := range index {
		index[i] = -1
	}
	var stack []int
	next := 0
	rec := make([]bool, n)
	var strong func(v int)
	strong = func(v int) {
		index[v], low[v] = next, next
		next++
		stack = append(stack, v)
		on[v] = true
		for _, w := range edges[v] {
			if w == v {
				rec[v] = true
			}
			if index[w] < 0 {
				strong(w)
				low[v] = min(low[v], low[w])
			} else if on[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			var comp []int
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				on[w] = false
				comp = append(comp, w)
				if w == v {
					break
				}
			}
			if len(comp) > 1 {
				for _, w := range comp {
					rec[w] = true
				}
			}
		}
	}
	for v := 0; v < n; v++ {
		if index[v] < 0 {
			strong(v)
		}
	}
	return rec
}
