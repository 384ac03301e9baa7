package chat

import (
	"errors"
	"math"
	"strings"
	"unicode/utf8"
)

// Resource bounds. A chat template comes from a model file, i.e. from
// whoever published the model, so rendering must terminate and stay small
// whatever the template says. The numbers are far above what a real
// template needs for a long conversation (one step per node executed or
// item iterated; a million-message prompt is still far below them).
var (
	maxOutputBytes = 64 << 20
	maxSteps       = 10_000_000
	maxCallDepth   = 64
)

// loop control is signalled by these sentinels, never surfaced to callers:
// the parser only accepts break/continue inside templates, and a stray one
// outside a loop is reported by execFor's caller below.
var (
	errBreak    = errors.New("break")
	errContinue = errors.New("continue")
)

type renderer struct {
	src    string
	out    *strings.Builder
	scopes []map[string]any
	steps  int
	depth  int
	// watch and touched serve Template.objectArguments: whether the
	// template reads the content of the dict watch.
	watch   *dict
	touched bool
}

func (r *renderer) errf(pos int, format string, args ...any) *Error {
	return errAt(r.src, pos, format, args...)
}

// step counts work and fails once the budget is spent.
func (r *renderer) step(pos int, n int) error {
	r.steps += n
	if r.steps > maxSteps {
		return r.errf(pos, "template exceeded %d evaluation steps (runaway loop?)", maxSteps)
	}
	return nil
}

func (r *renderer) write(pos int, s string) error {
	if r.out.Len()+len(s) > maxOutputBytes {
		return r.errf(pos, "template output exceeded %d bytes", maxOutputBytes)
	}
	r.out.WriteString(s)
	return nil
}

func (r *renderer) lookup(name string) any {
	for i := len(r.scopes) - 1; i >= 0; i-- {
		if v, ok := r.scopes[i][name]; ok {
			return v
		}
	}
	return undefined{name: name}
}

func (r *renderer) push(m map[string]any) { r.scopes = append(r.scopes, m) }
func (r *renderer) pop()                  { r.scopes = r.scopes[:len(r.scopes)-1] }

// setVar assigns in the innermost scope. As in Jinja2, a for-loop body is a
// scope of its own, renewed every iteration: a plain set inside a loop is
// not seen after it (nor by the next iteration), which is why templates use
// namespace() to carry state out of loops.
func (r *renderer) setVar(name string, v any) { r.scopes[len(r.scopes)-1][name] = v }

func (r *renderer) execBody(nodes []node) error {
	for _, n := range nodes {
		if err := r.exec(n); err != nil {
			return err
		}
	}
	return nil
}

func (r *renderer) exec(n node) error {
	if err := r.step(n.position(), 1); err != nil {
		return err
	}
	switch n := n.(type) {
	case *textNode:
		return r.write(n.pos, n.text)
	case *outputNode:
		v, err := r.eval(n.e)
		if err != nil {
			return err
		}
		return r.write(n.pos, toStr(v))
	case *ifNode:
		for i, c := range n.conds {
			v, err := r.eval(c)
			if err != nil {
				return err
			}
			if truthy(v) {
				return r.execBody(n.bodies[i])
			}
		}
		return r.execBody(n.els)
	case *forNode:
		return r.execFor(n)
	case *setNode:
		return r.execSet(n)
	case *macroNode:
		r.setVar(n.name, r.makeMacro(n))
		return nil
	case *doNode:
		_, err := r.eval(n.e)
		return err
	case *breakNode:
		return errBreak
	case *continueNode:
		return errContinue
	}
	return r.errf(n.position(), "internal error: unknown node %T", n)
}

func (r *renderer) execSet(n *setNode) error {
	var v any
	if n.body != nil || n.value == nil {
		// {% set x %}...{% endset %} captures rendered text.
		saved := r.out
		r.out = &strings.Builder{}
		err := r.execBody(n.body)
		v = r.out.String()
		r.out = saved
		if err != nil {
			return err
		}
		if r.out.Len()+len(v.(string)) > maxOutputBytes {
			return r.errf(n.pos, "template output exceeded %d bytes", maxOutputBytes)
		}
	} else {
		var err error
		if v, err = r.eval(n.value); err != nil {
			return err
		}
	}
	if n.attr != "" {
		d, ok := r.lookup(n.names[0]).(*dict)
		if !ok || !d.ns {
			return r.errf(n.pos, "cannot set %s.%s: %s is not a namespace", n.names[0], n.attr, n.names[0])
		}
		d.set(n.attr, v)
		return nil
	}
	if len(n.names) == 1 {
		r.setVar(n.names[0], v)
		return nil
	}
	items, err := r.unpack(n.pos, v, len(n.names))
	if err != nil {
		return err
	}
	for i, name := range n.names {
		r.setVar(name, items[i])
	}
	return nil
}

func (r *renderer) unpack(pos int, v any, n int) ([]any, error) {
	items, ok := iterate(v)
	if !ok || len(items) != n {
		return nil, r.errf(pos, "cannot unpack %s into %d names", typeName(v), n)
	}
	return items, nil
}

func (r *renderer) execFor(n *forNode) error {
	seq, err := r.eval(n.iter)
	if err != nil {
		return err
	}
	r.touch(seq, false)
	all, ok := iterate(seq)
	if !ok {
		return r.errf(n.iter.position(), "%s is not iterable", typeName(seq))
	}
	if err := r.step(n.pos, len(all)); err != nil {
		return err
	}
	bind := func(frame map[string]any, item any) error {
		if len(n.vars) == 1 {
			frame[n.vars[0]] = item
			return nil
		}
		parts, err := r.unpack(n.pos, item, len(n.vars))
		if err != nil {
			return err
		}
		for i, name := range n.vars {
			frame[name] = parts[i]
		}
		return nil
	}
	// "for x in y if cond" filters first, so loop.length and loop.last
	// count only the items that pass, as in Jinja2.
	items := all
	if n.cond != nil {
		items = nil
		for _, it := range all {
			frame := map[string]any{}
			if err := bind(frame, it); err != nil {
				return err
			}
			r.push(frame)
			c, err := r.eval(n.cond)
			r.pop()
			if err != nil {
				return err
			}
			if truthy(c) {
				items = append(items, it)
			}
		}
	}
	if len(items) == 0 {
		return r.execBody(n.els)
	}
	// One loop dict per loop, updated in place each iteration: building a
	// fresh one per item dominated the cost of long loops.
	cur := 0
	loop := newLoop(items, &cur)
	for i, it := range items {
		frame := map[string]any{}
		if err := bind(frame, it); err != nil {
			return err
		}
		cur = i
		updateLoop(loop, items, i)
		frame["loop"] = loop
		r.push(frame)
		err := r.execBody(n.body)
		r.pop()
		if err == errBreak {
			break
		}
		if err != nil && err != errContinue {
			return err
		}
	}
	return nil
}

// newLoop builds Jinja's loop variable; *cur is the current index, read by
// loop.cycle.
func newLoop(items []any, cur *int) *dict {
	d := newDict()
	for _, k := range []string{"index0", "index", "revindex0", "revindex", "first", "last",
		"length", "depth", "depth0", "previtem", "nextitem"} {
		d.set(k, nil)
	}
	d.m["length"] = int64(len(items))
	d.m["depth"] = int64(1)
	d.m["depth0"] = int64(0)
	d.set("cycle", &function{name: "loop.cycle", fn: func(_ *renderer, a *args) (any, error) {
		if len(a.pos) == 0 {
			return nil, errors.New("loop.cycle needs at least one argument")
		}
		return a.pos[*cur%len(a.pos)], nil
	}})
	return d
}

// updateLoop sets the per-iteration fields of loop for iteration i.
func updateLoop(d *dict, items []any, i int) {
	n := len(items)
	d.m["index0"] = int64(i)
	d.m["index"] = int64(i + 1)
	d.m["revindex0"] = int64(n - 1 - i)
	d.m["revindex"] = int64(n - i)
	d.m["first"] = i == 0
	d.m["last"] = i == n-1
	if i > 0 {
		d.m["previtem"] = items[i-1]
	} else {
		d.m["previtem"] = undefined{name: "previtem"}
	}
	if i < n-1 {
		d.m["nextitem"] = items[i+1]
	} else {
		d.m["nextitem"] = undefined{name: "nextitem"}
	}
}

// makeMacro turns a macro definition into a callable. Macros see the
// template's top-level variables at call time plus their parameters, and
// return their rendered body.
func (r *renderer) makeMacro(n *macroNode) *function {
	return &function{name: n.name, fn: func(r *renderer, a *args) (any, error) {
		if r.depth >= maxCallDepth {
			return nil, r.errf(n.pos, "macro %s: call depth exceeds %d (runaway recursion?)", n.name, maxCallDepth)
		}
		if len(a.pos) > len(n.params) {
			return nil, r.errf(n.pos, "macro %s takes %d arguments, got %d", n.name, len(n.params), len(a.pos))
		}
		frame := map[string]any{}
		saved := r.scopes
		r.scopes = []map[string]any{saved[0], frame}
		defer func() { r.scopes = saved }()
		for i, p := range n.params {
			var v any
			switch kv, byName := a.kwValue(p); {
			case i < len(a.pos):
				v = a.pos[i]
			case byName:
				v = kv
			case n.defaults[i] != nil:
				d, err := r.eval(n.defaults[i])
				if err != nil {
					return nil, err
				}
				v = d
			default:
				v = undefined{name: p}
			}
			frame[p] = v
		}
		r.depth++
		defer func() { r.depth-- }()
		prev := r.out
		r.out = &strings.Builder{}
		err := r.execBody(n.body)
		s := r.out.String()
		r.out = prev
		if err == errBreak || err == errContinue {
			err = r.errf(n.pos, "break or continue outside a loop")
		}
		return s, err
	}}
}

func (r *renderer) eval(e expr) (any, error) {
	if err := r.step(e.position(), 1); err != nil {
		return nil, err
	}
	switch e := e.(type) {
	case *literal:
		return e.v, nil
	case *nameExpr:
		return r.lookup(e.name), nil
	case *listExpr:
		l := &list{items: make([]any, 0, len(e.items))}
		for _, it := range e.items {
			v, err := r.eval(it)
			if err != nil {
				return nil, err
			}
			l.items = append(l.items, v)
		}
		return l, nil
	case *dictExpr:
		d := newDict()
		for i := range e.keys {
			k, err := r.eval(e.keys[i])
			if err != nil {
				return nil, err
			}
			v, err := r.eval(e.vals[i])
			if err != nil {
				return nil, err
			}
			d.set(toStr(k), v)
		}
		return d, nil
	case *attrExpr:
		obj, err := r.eval(e.obj)
		if err != nil {
			return nil, err
		}
		r.touch(obj, false)
		return getAttr(obj, e.name), nil
	case *indexExpr:
		obj, err := r.eval(e.obj)
		if err != nil {
			return nil, err
		}
		idx, err := r.eval(e.idx)
		if err != nil {
			return nil, err
		}
		r.touch(obj, false)
		return getItem(obj, idx), nil
	case *sliceExpr:
		return r.evalSlice(e)
	case *callExpr:
		fn, a, err := r.evalApplied(e.fn, e.args)
		if err != nil {
			return nil, err
		}
		return r.call(e.pos, fn, a)
	case *filterExpr:
		return r.evalFilter(e)
	case *testExpr:
		return r.evalTest(e)
	case *unaryExpr:
		x, err := r.eval(e.x)
		if err != nil {
			return nil, err
		}
		switch e.op {
		case "not":
			return !truthy(x), nil
		case "-":
			switch v := x.(type) {
			case int64:
				return -v, nil
			case float64:
				return -v, nil
			}
			return nil, r.errf(e.pos, "bad operand for unary -: %s", typeName(x))
		case "+":
			if _, ok := toFloat(x); ok {
				return x, nil
			}
			return nil, r.errf(e.pos, "bad operand for unary +: %s", typeName(x))
		}
	case *binaryExpr:
		return r.evalBinary(e)
	case *condExpr:
		c, err := r.eval(e.cond)
		if err != nil {
			return nil, err
		}
		if truthy(c) {
			return r.eval(e.then)
		}
		if e.els == nil {
			return undefined{}, nil
		}
		return r.eval(e.els)
	}
	return nil, r.errf(e.position(), "internal error: unknown expression %T", e)
}

func (r *renderer) evalArgs(ca callArgs) (*args, error) {
	a := &args{}
	for _, x := range ca.pos {
		v, err := r.eval(x)
		if err != nil {
			return nil, err
		}
		a.pos = append(a.pos, v)
	}
	if len(ca.kwName) > 0 {
		a.kw = newDict()
		for i, name := range ca.kwName {
			v, err := r.eval(ca.kwVal[i])
			if err != nil {
				return nil, err
			}
			a.kw.set(name, v)
		}
	}
	return a, nil
}

func (r *renderer) call(pos int, fn any, a *args) (any, error) {
	f, ok := fn.(*function)
	if !ok {
		if u, isU := fn.(undefined); isU && u.name != "" {
			return nil, r.errf(pos, "%s is undefined and cannot be called", u.name)
		}
		return nil, r.errf(pos, "%s is not callable", typeName(fn))
	}
	v, err := f.fn(r, a)
	if err != nil {
		var re raisedError
		if errors.As(err, &re) {
			e := r.errf(pos, "raise_exception: %s", re.msg)
			e.Raised = true
			return nil, e
		}
		var te *Error
		if errors.As(err, &te) {
			return nil, err
		}
		return nil, r.errf(pos, "%s: %v", f.name, err)
	}
	return v, nil
}

// getAttr is Jinja's obj.name: a dict key first, then a method of the
// value's type. A miss is Undefined, never an error; unlike Jinja2, an
// attribute of Undefined is Undefined too, so probes such as
// "message.tool_calls.x is defined" do not fail on messages without them.
func getAttr(obj any, name string) any {
	if d, ok := obj.(*dict); ok {
		if v, ok := d.m[name]; ok {
			return v
		}
	}
	if m := method(obj, name); m != nil {
		return m
	}
	return undefined{name: name}
}

// getItem is Jinja's obj[idx]: index lists and strings, key dicts.
func getItem(obj, idx any) any {
	switch x := obj.(type) {
	case *dict:
		if k, ok := idx.(string); ok {
			if v, ok := x.m[k]; ok {
				return v
			}
			if m := method(obj, k); m != nil {
				return m
			}
		}
	case *list:
		if i, ok := idx.(int64); ok {
			if i < 0 {
				i += int64(len(x.items))
			}
			if i >= 0 && i < int64(len(x.items)) {
				return x.items[i]
			}
		}
	case string:
		if i, ok := idx.(int64); ok {
			rs := []rune(x)
			if i < 0 {
				i += int64(len(rs))
			}
			if i >= 0 && i < int64(len(rs)) {
				return string(rs[i])
			}
		}
	}
	if s, ok := idx.(string); ok {
		return undefined{name: s}
	}
	return undefined{}
}

func (r *renderer) evalSlice(e *sliceExpr) (any, error) {
	obj, err := r.eval(e.obj)
	if err != nil {
		return nil, err
	}
	var bounds [3]*int64
	for i, b := range []expr{e.lo, e.hi, e.step} {
		if b == nil {
			continue
		}
		v, err := r.eval(b)
		if err != nil {
			return nil, err
		}
		if v == nil {
			continue
		}
		n, ok := v.(int64)
		if !ok {
			return nil, r.errf(b.position(), "slice indices must be integers, not %s", typeName(v))
		}
		bounds[i] = &n
	}
	step := int64(1)
	if bounds[2] != nil {
		step = *bounds[2]
	}
	if step == 0 {
		return nil, r.errf(e.pos, "slice step cannot be zero")
	}
	var n int
	var pick func(idx []int) any
	switch x := obj.(type) {
	case *list:
		n = len(x.items)
		pick = func(idx []int) any {
			l := &list{items: make([]any, 0, len(idx))}
			for _, i := range idx {
				l.items = append(l.items, x.items[i])
			}
			return l
		}
	case string:
		rs := []rune(x)
		n = len(rs)
		pick = func(idx []int) any {
			out := make([]rune, 0, len(idx))
			for _, i := range idx {
				out = append(out, rs[i])
			}
			return string(out)
		}
	case undefined:
		return x, nil
	default:
		return nil, r.errf(e.pos, "cannot slice %s", typeName(obj))
	}
	idx := sliceIndices(n, bounds[0], bounds[1], step)
	if err := r.step(e.pos, len(idx)); err != nil {
		return nil, err
	}
	return pick(idx), nil
}

// sliceIndices follows Python's slice.indices.
func sliceIndices(n int, lo, hi *int64, step int64) []int {
	clamp := func(p *int64, def int64, low, high int64) int64 {
		if p == nil {
			return def
		}
		v := *p
		if v < 0 {
			v += int64(n)
			if v < low {
				v = low
			}
		} else if v > high {
			v = high
		}
		return v
	}
	var start, stop int64
	if step > 0 {
		start = clamp(lo, 0, 0, int64(n))
		stop = clamp(hi, int64(n), 0, int64(n))
	} else {
		start = clamp(lo, int64(n)-1, -1, int64(n)-1)
		stop = clamp(hi, -1, -1, int64(n)-1)
	}
	var out []int
	for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
		out = append(out, int(i))
	}
	return out
}

func (r *renderer) evalBinary(e *binaryExpr) (any, error) {
	l, err := r.eval(e.l)
	if err != nil {
		return nil, err
	}
	// and/or short-circuit and return an operand, as in Python.
	switch e.op {
	case "and":
		if !truthy(l) {
			return l, nil
		}
		return r.eval(e.r)
	case "or":
		if truthy(l) {
			return l, nil
		}
		return r.eval(e.r)
	}
	rv, err := r.eval(e.r)
	if err != nil {
		return nil, err
	}
	v, err := binaryOp(e.op, l, rv)
	if err != nil {
		return nil, r.errf(e.pos, "%v", err)
	}
	if s, ok := v.(string); ok && len(s) > maxOutputBytes {
		return nil, r.errf(e.pos, "string exceeded %d bytes", maxOutputBytes)
	}
	return v, nil
}

func binaryOp(op string, l, r any) (any, error) {
	switch op {
	case "==":
		return equal(l, r), nil
	case "!=":
		return !equal(l, r), nil
	case "<", "<=", ">", ">=":
		c, ok := compare(l, r)
		if !ok {
			return nil, errors.New("cannot compare " + typeName(l) + " " + op + " " + typeName(r))
		}
		switch op {
		case "<":
			return c < 0, nil
		case "<=":
			return c <= 0, nil
		case ">":
			return c > 0, nil
		}
		return c >= 0, nil
	case "in", "not in":
		in, err := contains(r, l)
		if err != nil {
			return nil, err
		}
		return in == (op == "in"), nil
	case "~":
		return toStr(l) + toStr(r), nil
	case "+":
		switch x := l.(type) {
		case string:
			if y, ok := r.(string); ok {
				return x + y, nil
			}
		case *list:
			if y, ok := r.(*list); ok {
				items := make([]any, 0, len(x.items)+len(y.items))
				return &list{items: append(append(items, x.items...), y.items...)}, nil
			}
		}
	case "*":
		if s, n, ok := strTimes(l, r); ok {
			if n <= 0 {
				return "", nil
			}
			if int64(len(s))*n > int64(maxOutputBytes) {
				return nil, errors.New("string repetition too large")
			}
			return strings.Repeat(s, int(n)), nil
		}
	}
	return arith(op, l, r)
}

func strTimes(l, r any) (string, int64, bool) {
	if s, ok := l.(string); ok {
		n, ok := r.(int64)
		return s, n, ok
	}
	if s, ok := r.(string); ok {
		n, ok := l.(int64)
		return s, n, ok
	}
	return "", 0, false
}

// arith does number arithmetic with Python's int/float rules.
func arith(op string, l, r any) (any, error) {
	li, lInt := l.(int64)
	ri, rInt := r.(int64)
	lf, ok1 := toFloat(l)
	rf, ok2 := toFloat(r)
	_, lb := l.(bool)
	_, rb := r.(bool)
	if !ok1 || !ok2 || lb || rb {
		return nil, errors.New("unsupported operand types for " + op + ": " + typeName(l) + " and " + typeName(r))
	}
	if lInt && rInt {
		switch op {
		case "+":
			return li + ri, nil
		case "-":
			return li - ri, nil
		case "*":
			return li * ri, nil
		case "//", "%":
			if ri == 0 {
				return nil, errors.New("integer division or modulo by zero")
			}
			q, m := li/ri, li%ri
			if m != 0 && (m < 0) != (ri < 0) { // Python floors
				q--
				m += ri
			}
			if op == "//" {
				return q, nil
			}
			return m, nil
		case "**":
			if ri >= 0 {
				return intPow(li, ri)
			}
		}
	}
	switch op {
	case "+":
		return lf + rf, nil
	case "-":
		return lf - rf, nil
	case "*":
		return lf * rf, nil
	case "/":
		if rf == 0 {
			return nil, errors.New("division by zero")
		}
		return lf / rf, nil
	case "//":
		if rf == 0 {
			return nil, errors.New("division by zero")
		}
		return math.Floor(lf / rf), nil
	case "%":
		if rf == 0 {
			return nil, errors.New("modulo by zero")
		}
		m := math.Mod(lf, rf)
		if m != 0 && (m < 0) != (rf < 0) {
			m += rf
		}
		return m, nil
	case "**":
		return math.Pow(lf, rf), nil
	}
	return nil, errors.New("unsupported operator " + op)
}

// intPow is exact integer power by squaring; it refuses results beyond
// int64 (Python has big ints, templates never need them).
func intPow(base, exp int64) (any, error) {
	res := int64(1)
	for exp > 0 {
		var ok bool
		if exp&1 == 1 {
			if res, ok = mulCheck(res, base); !ok {
				return nil, errors.New("integer power too large")
			}
		}
		exp >>= 1
		if exp > 0 {
			if base, ok = mulCheck(base, base); !ok {
				return nil, errors.New("integer power too large")
			}
		}
	}
	return res, nil
}

// mulCheck multiplies with overflow detection.
func mulCheck(a, b int64) (int64, bool) {
	if a == 0 || b == 0 {
		return 0, true
	}
	c := a * b
	if c/b != a || (a == -1 && b == math.MinInt64) || (b == -1 && a == math.MinInt64) {
		return 0, false
	}
	return c, true
}

// contains is Python's "needle in haystack".
func contains(haystack, needle any) (bool, error) {
	switch h := haystack.(type) {
	case string:
		s, ok := needle.(string)
		if !ok {
			return false, errors.New("'in <string>' requires string as left operand, not " + typeName(needle))
		}
		return strings.Contains(h, s), nil
	case *list:
		for _, it := range h.items {
			if equal(it, needle) {
				return true, nil
			}
		}
		return false, nil
	case *dict:
		s, ok := needle.(string)
		if !ok {
			return false, nil
		}
		_, in := h.m[s]
		return in, nil
	case undefined, nil:
		return false, nil
	}
	return false, errors.New("argument of type " + typeName(haystack) + " is not iterable")
}

// runeLen is len() of a string in characters, as Python counts.
func runeLen(s string) int { return utf8.RuneCountInString(s) }
