package chat

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// raisedError is what raise_exception returns; renderer.call turns it into
// an *Error with Raised set, at the call's position.
type raisedError struct{ msg string }

func (e raisedError) Error() string { return e.msg }

// globals are the functions every template sees (HF's apply_chat_template
// defines raise_exception and strftime_now; range, namespace and dict are
// Jinja builtins).
func globals(now func() time.Time) map[string]any {
	return map[string]any{
		"raise_exception": &function{name: "raise_exception", fn: func(_ *renderer, a *args) (any, error) {
			return nil, raisedError{msg: toStr(a.get(0, "message", "raise_exception called"))}
		}},
		"range": &function{name: "range", fn: fnRange},
		"namespace": &function{name: "namespace", fn: func(_ *renderer, a *args) (any, error) {
			d := newDict()
			d.ns = true
			for _, p := range a.pos { // namespace({'a': 1}) is allowed too
				if src, ok := p.(*dict); ok {
					d.update(src)
				}
			}
			d.update(a.kw)
			return d, nil
		}},
		"dict": &function{name: "dict", fn: func(_ *renderer, a *args) (any, error) {
			d := newDict()
			d.update(a.kw)
			return d, nil
		}},
		"strftime_now": &function{name: "strftime_now", fn: func(_ *renderer, a *args) (any, error) {
			f, ok := a.get(0, "format", nil).(string)
			if !ok {
				return nil, errors.New("strftime_now needs a format string")
			}
			return strftime(now(), f), nil
		}},
	}
}

func fnRange(r *renderer, a *args) (any, error) {
	var ns []int64
	for _, v := range a.pos {
		n, ok := v.(int64)
		if !ok {
			return nil, fmt.Errorf("range() arguments must be integers, not %s", typeName(v))
		}
		ns = append(ns, n)
	}
	start, stop, step := int64(0), int64(0), int64(1)
	switch len(ns) {
	case 1:
		stop = ns[0]
	case 2:
		start, stop = ns[0], ns[1]
	case 3:
		start, stop, step = ns[0], ns[1], ns[2]
	default:
		return nil, errors.New("range() takes 1 to 3 arguments")
	}
	if step == 0 {
		return nil, errors.New("range() step must not be zero")
	}
	count := int64(0)
	if step > 0 && stop > start {
		count = (stop - start + step - 1) / step
	} else if step < 0 && stop < start {
		count = (start - stop - step - 1) / -step
	}
	// Charge the steps before allocating, so range(10**12) fails fast.
	if count > int64(maxSteps) {
		return nil, fmt.Errorf("range() of %d items exceeds the evaluation budget", count)
	}
	if err := r.step(0, int(count)); err != nil {
		return nil, err
	}
	l := &list{items: make([]any, 0, count)}
	for i := int64(0); i < count; i++ {
		l.items = append(l.items, start+i*step)
	}
	return l, nil
}

// strftime formats t with the C directives templates use for dates.
func strftime(t time.Time, f string) string {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 >= len(f) {
			b.WriteByte(f[i])
			continue
		}
		i++
		pad := true
		if f[i] == '-' && i+1 < len(f) { // glibc: %-d drops padding
			pad = false
			i++
		}
		num := func(n, w int) {
			if pad {
				fmt.Fprintf(&b, "%0*d", w, n)
			} else {
				b.WriteString(strconv.Itoa(n))
			}
		}
		switch f[i] {
		case 'Y':
			b.WriteString(strconv.Itoa(t.Year()))
		case 'y':
			num(t.Year()%100, 2)
		case 'm':
			num(int(t.Month()), 2)
		case 'd':
			num(t.Day(), 2)
		case 'e':
			fmt.Fprintf(&b, "%2d", t.Day())
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			num((t.Hour()+11)%12+1, 2)
		case 'M':
			num(t.Minute(), 2)
		case 'S':
			num(t.Second(), 2)
		case 'j':
			num(t.YearDay(), 3)
		case 'p':
			b.WriteString(t.Format("PM"))
		case 'b', 'h':
			b.WriteString(t.Format("Jan"))
		case 'B':
			b.WriteString(t.Format("January"))
		case 'a':
			b.WriteString(t.Format("Mon"))
		case 'A':
			b.WriteString(t.Format("Monday"))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(f[i])
		}
	}
	return b.String()
}

func (r *renderer) evalFilter(e *filterExpr) (any, error) {
	v, a, err := r.evalApplied(e.arg, e.args)
	if err != nil {
		return nil, err
	}
	out, err := r.applyFilter(e.name, v, a)
	if err != nil {
		var te *Error
		if errors.As(err, &te) {
			return nil, err
		}
		return nil, r.errf(e.pos, "filter %s: %v", e.name, err)
	}
	return out, nil
}

func (r *renderer) applyFilter(name string, v any, a *args) (any, error) {
	switch name {
	case "tojson", "string":
		r.touch(v, true)
	case "items", "dictsort", "list", "first", "last", "join", "map", "selectattr", "rejectattr":
		r.touch(v, false)
	}
	switch name {
	case "trim":
		s, err := wantStr(v)
		if err != nil {
			return nil, err
		}
		if chars, ok := a.get(0, "chars", nil).(string); ok {
			return strings.Trim(s, chars), nil
		}
		return strings.TrimFunc(s, unicode.IsSpace), nil
	case "length", "count":
		n, ok := length(v)
		if !ok {
			return nil, fmt.Errorf("%s has no length", typeName(v))
		}
		return int64(n), nil
	case "upper", "lower", "capitalize", "title":
		s, err := wantStr(v)
		if err != nil {
			return nil, err
		}
		return strMethod(s, name, &args{})
	case "string":
		return toStr(v), nil
	case "safe":
		return v, nil
	case "tojson":
		indent, _ := a.get(0, "indent", int64(0)).(int64)
		var b strings.Builder
		if err := toJSON(&b, v, int(indent), nil); err != nil {
			return nil, err
		}
		return b.String(), nil
	case "default", "d":
		def := a.get(0, "default_value", "")
		if isUndef(v) || truthy(a.get(1, "boolean", false)) && !truthy(v) {
			return def, nil
		}
		return v, nil
	case "join":
		items, ok := iterate(v)
		if !ok {
			return nil, fmt.Errorf("cannot join %s", typeName(v))
		}
		sep := toStr(a.get(0, "d", ""))
		attr, hasAttr := a.get(1, "attribute", nil).(string)
		parts := make([]string, len(items))
		for i, it := range items {
			if hasAttr {
				it = getAttr(it, attr)
			}
			parts[i] = toStr(it)
		}
		return strings.Join(parts, sep), nil
	case "replace":
		s, err := wantStr(v)
		if err != nil {
			return nil, err
		}
		return strMethod(s, "replace", a)
	case "first", "last":
		items, ok := iterate(v)
		if !ok {
			return nil, fmt.Errorf("%s of %s", name, typeName(v))
		}
		if len(items) == 0 {
			return undefined{}, nil
		}
		if name == "first" {
			return items[0], nil
		}
		return items[len(items)-1], nil
	case "items":
		d, ok := v.(*dict)
		if !ok {
			if isUndef(v) {
				return &list{}, nil
			}
			return nil, fmt.Errorf("items of %s", typeName(v))
		}
		return dictItems(d), nil
	case "list":
		items, ok := iterate(v)
		if !ok {
			return nil, fmt.Errorf("cannot convert %s to list", typeName(v))
		}
		return &list{items: append([]any(nil), items...)}, nil
	case "reverse":
		if s, ok := v.(string); ok {
			rs := []rune(s)
			for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
				rs[i], rs[j] = rs[j], rs[i]
			}
			return string(rs), nil
		}
		items, ok := iterate(v)
		if !ok {
			return nil, fmt.Errorf("cannot reverse %s", typeName(v))
		}
		out := make([]any, len(items))
		for i, it := range items {
			out[len(items)-1-i] = it
		}
		return &list{items: out}, nil
	case "int":
		switch x := v.(type) {
		case int64:
			return x, nil
		case float64:
			return int64(x), nil
		case bool:
			if x {
				return int64(1), nil
			}
			return int64(0), nil
		case string:
			if n, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64); err == nil {
				return n, nil
			}
		}
		return a.get(0, "default", int64(0)), nil
	case "float":
		if f, ok := toFloat(v); ok {
			return f, nil
		}
		if s, ok := v.(string); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil {
				return f, nil
			}
		}
		return a.get(0, "default", 0.0), nil
	case "abs":
		switch x := v.(type) {
		case int64:
			if x < 0 {
				return -x, nil
			}
			return x, nil
		case float64:
			if x < 0 {
				return -x, nil
			}
			return x, nil
		}
		return nil, fmt.Errorf("abs of %s", typeName(v))
	case "indent":
		s := toStr(v)
		width, _ := a.get(0, "width", int64(4)).(int64)
		first := truthy(a.get(1, "first", false))
		pad := strings.Repeat(" ", int(min(max(width, 0), 256)))
		lines := strings.Split(s, "\n")
		for i := range lines {
			if (i > 0 || first) && lines[i] != "" {
				lines[i] = pad + lines[i]
			}
		}
		return strings.Join(lines, "\n"), nil
	case "unique":
		items, ok := iterate(v)
		if !ok {
			return nil, fmt.Errorf("unique of %s", typeName(v))
		}
		out := &list{}
		for _, it := range items {
			dup := false
			for _, seen := range out.items {
				if equal(seen, it) {
					dup = true
					break
				}
			}
			if !dup {
				out.items = append(out.items, it)
			}
		}
		return out, nil
	case "dictsort":
		d, ok := v.(*dict)
		if !ok {
			return nil, fmt.Errorf("dictsort of %s", typeName(v))
		}
		items := dictItems(d)
		sort.SliceStable(items.items, func(i, j int) bool {
			return items.items[i].(*list).items[0].(string) < items.items[j].(*list).items[0].(string)
		})
		return items, nil
	case "map":
		items, ok := iterate(v)
		if !ok {
			return nil, fmt.Errorf("map over %s", typeName(v))
		}
		out := &list{}
		if attr, ok := a.get(-1, "attribute", nil).(string); ok {
			def, hasDef := a.kwValue("default")
			for _, it := range items {
				x := getAttr(it, attr)
				if isUndef(x) && hasDef {
					x = def
				}
				out.items = append(out.items, x)
			}
			return out, nil
		}
		fname, ok := a.get(0, "", nil).(string)
		if !ok {
			return nil, errors.New("map needs a filter name or attribute=")
		}
		rest := &args{pos: a.pos[1:], kw: a.kw}
		for _, it := range items {
			x, err := r.applyFilter(fname, it, rest)
			if err != nil {
				return nil, err
			}
			out.items = append(out.items, x)
		}
		return out, nil
	case "selectattr", "rejectattr", "select", "reject":
		return r.selectFilter(name, v, a)
	}
	return nil, fmt.Errorf("unknown filter %q", name)
}

// selectFilter implements select/reject (test the item) and
// selectattr/rejectattr (test an attribute of the item).
func (r *renderer) selectFilter(name string, v any, a *args) (any, error) {
	items, ok := iterate(v)
	if !ok {
		return nil, fmt.Errorf("%s over %s", name, typeName(v))
	}
	byAttr := strings.HasSuffix(name, "attr")
	want := strings.HasPrefix(name, "select")
	rest := a.pos
	var attr string
	if byAttr {
		if len(rest) == 0 {
			return nil, fmt.Errorf("%s needs an attribute name", name)
		}
		attr = toStr(rest[0])
		rest = rest[1:]
	}
	test := ""
	if len(rest) > 0 {
		test = toStr(rest[0])
		rest = rest[1:]
	}
	out := &list{}
	for _, it := range items {
		x := it
		if byAttr {
			x = getAttr(it, attr)
		}
		var pass bool
		if test == "" {
			pass = truthy(x)
		} else {
			var err error
			if pass, err = applyTest(test, x, rest); err != nil {
				return nil, err
			}
		}
		if pass == want {
			out.items = append(out.items, it)
		}
	}
	return out, nil
}

func dictItems(d *dict) *list {
	l := &list{items: make([]any, 0, len(d.keys))}
	for _, k := range d.keys {
		l.items = append(l.items, &list{items: []any{k, d.m[k]}})
	}
	return l
}

func wantStr(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case undefined:
		return "", nil
	}
	return toStr(v), nil
}

// evalApplied evaluates what a call, filter or test applies to, then its
// arguments.
func (r *renderer) evalApplied(arg expr, ca callArgs) (any, *args, error) {
	v, err := r.eval(arg)
	if err != nil {
		return nil, nil, err
	}
	a, err := r.evalArgs(ca)
	return v, a, err
}

func (r *renderer) evalTest(e *testExpr) (any, error) {
	v, a, err := r.evalApplied(e.arg, e.args)
	if err != nil {
		return nil, err
	}
	ok, err := applyTest(e.name, v, a.pos)
	if err != nil {
		return nil, r.errf(e.pos, "test %s: %v", e.name, err)
	}
	return ok != e.negate, nil
}

func applyTest(name string, v any, a []any) (bool, error) {
	arg := func() (any, error) {
		if len(a) == 0 {
			return nil, fmt.Errorf("test %s needs an argument", name)
		}
		return a[0], nil
	}
	switch name {
	case "defined":
		return !isUndef(v), nil
	case "undefined":
		return isUndef(v), nil
	case "none":
		return v == nil, nil
	case "string":
		_, ok := v.(string)
		return ok, nil
	case "number":
		switch v.(type) {
		case int64, float64:
			return true, nil
		}
		return false, nil
	case "integer":
		_, ok := v.(int64)
		return ok, nil
	case "float":
		_, ok := v.(float64)
		return ok, nil
	case "boolean":
		_, ok := v.(bool)
		return ok, nil
	case "true", "false":
		b, ok := v.(bool)
		return ok && b == (name == "true"), nil
	case "mapping":
		_, ok := v.(*dict)
		return ok, nil
	case "sequence", "iterable":
		switch v.(type) {
		case string, *list, *dict:
			return true, nil
		}
		return false, nil
	case "callable":
		_, ok := v.(*function)
		return ok, nil
	case "odd", "even":
		n, ok := v.(int64)
		if !ok {
			return false, fmt.Errorf("%s needs an integer, got %s", name, typeName(v))
		}
		return (n%2 != 0) == (name == "odd"), nil
	case "divisibleby":
		x, err := arg()
		if err != nil {
			return false, err
		}
		n, ok1 := v.(int64)
		d, ok2 := x.(int64)
		if !ok1 || !ok2 || d == 0 {
			return false, errors.New("divisibleby needs non-zero integers")
		}
		return n%d == 0, nil
	case "lower", "upper":
		s, ok := v.(string)
		if !ok {
			return false, nil
		}
		if name == "lower" {
			return s == strings.ToLower(s), nil
		}
		return s == strings.ToUpper(s), nil
	case "in":
		x, err := arg()
		if err != nil {
			return false, err
		}
		return contains(x, v)
	case "sameas":
		x, err := arg()
		if err != nil {
			return false, err
		}
		// Python identity: meaningful for none/true/false, which is how
		// templates use it.
		return typeName(v) == typeName(x) && equal(v, x), nil
	case "equalto", "eq", "==", "ne", "!=", "gt", "greaterthan", ">", "ge", ">=", "lt", "lessthan", "<", "le", "<=":
		x, err := arg()
		if err != nil {
			return false, err
		}
		op := map[string]string{"equalto": "==", "eq": "==", "ne": "!=", "gt": ">", "greaterthan": ">",
			"ge": ">=", "lt": "<", "lessthan": "<", "le": "<="}[name]
		if op == "" {
			op = name
		}
		res, err := binaryOp(op, v, x)
		if err != nil {
			return false, err
		}
		return res.(bool), nil
	}
	return false, fmt.Errorf("unknown test %q", name)
}

// method returns obj's bound method name, or nil. These are the Python
// str/list/dict methods chat templates call.
func method(obj any, name string) *function {
	switch x := obj.(type) {
	case string:
		switch name {
		case "strip", "lstrip", "rstrip", "startswith", "endswith", "split", "rsplit",
			"upper", "lower", "replace", "title", "capitalize", "find", "count",
			"join", "splitlines", "isdigit", "isspace", "isalpha":
			return &function{name: "str." + name, fn: func(_ *renderer, a *args) (any, error) {
				return strMethod(x, name, a)
			}}
		}
	case *list:
		switch name {
		case "append":
			return &function{name: "list.append", fn: func(r *renderer, a *args) (any, error) {
				if len(a.pos) != 1 {
					return nil, errors.New("append takes one argument")
				}
				if err := r.step(0, 1); err != nil {
					return nil, err
				}
				x.items = append(x.items, a.pos[0])
				return nil, nil
			}}
		case "pop":
			return &function{name: "list.pop", fn: func(_ *renderer, a *args) (any, error) {
				if len(x.items) == 0 {
					return nil, errors.New("pop from empty list")
				}
				i := int64(len(x.items) - 1)
				if n, ok := a.get(0, "index", nil).(int64); ok {
					i = n
					if i < 0 {
						i += int64(len(x.items))
					}
					if i < 0 || i >= int64(len(x.items)) {
						return nil, errors.New("pop index out of range")
					}
				}
				v := x.items[i]
				x.items = append(x.items[:i], x.items[i+1:]...)
				return v, nil
			}}
		}
	case *dict:
		switch name {
		case "items":
			return &function{name: "dict.items", fn: func(_ *renderer, _ *args) (any, error) { return dictItems(x), nil }}
		case "keys", "values":
			return &function{name: "dict." + name, fn: func(_ *renderer, _ *args) (any, error) {
				l := &list{}
				for _, k := range x.keys {
					if name == "keys" {
						l.items = append(l.items, k)
					} else {
						l.items = append(l.items, x.m[k])
					}
				}
				return l, nil
			}}
		case "get":
			return &function{name: "dict.get", fn: func(_ *renderer, a *args) (any, error) {
				k, _ := a.get(0, "key", nil).(string)
				if v, ok := x.m[k]; ok {
					return v, nil
				}
				return a.get(1, "default", nil), nil
			}}
		case "update":
			return &function{name: "dict.update", fn: func(_ *renderer, a *args) (any, error) {
				if src, ok := a.get(0, "", nil).(*dict); ok {
					x.update(src)
				}
				x.update(a.kw)
				return nil, nil
			}}
		}
	}
	return nil
}

func strMethod(s, name string, a *args) (any, error) {
	switch name {
	case "strip", "lstrip", "rstrip":
		chars, hasChars := a.get(0, "chars", nil).(string)
		trim := func(f func(string, string) string, g func(string, func(rune) bool) string) string {
			if hasChars {
				return f(s, chars)
			}
			return g(s, unicode.IsSpace)
		}
		switch name {
		case "strip":
			return trim(strings.Trim, strings.TrimFunc), nil
		case "lstrip":
			return trim(strings.TrimLeft, strings.TrimLeftFunc), nil
		}
		return trim(strings.TrimRight, strings.TrimRightFunc), nil
	case "startswith", "endswith":
		has := strings.HasPrefix
		if name == "endswith" {
			has = strings.HasSuffix
		}
		switch p := a.get(0, "prefix", nil).(type) {
		case string:
			return has(s, p), nil
		case *list: // a tuple of candidates
			for _, it := range p.items {
				if ps, ok := it.(string); ok && has(s, ps) {
					return true, nil
				}
			}
			return false, nil
		}
		return nil, fmt.Errorf("%s needs a string", name)
	case "split", "rsplit":
		sep := a.get(0, "sep", nil)
		maxSplit, _ := a.get(1, "maxsplit", int64(-1)).(int64)
		var parts []string
		if sep == nil {
			parts = strings.FieldsFunc(s, unicode.IsSpace)
			if maxSplit >= 0 && int64(len(parts)) > maxSplit+1 {
				// Rare in templates; rejoining with one space is close
				// enough only for single-space text, so refuse instead.
				return nil, errors.New("split() with maxsplit and no separator is not supported")
			}
		} else {
			sp, ok := sep.(string)
			if !ok || sp == "" {
				return nil, errors.New("split separator must be a non-empty string")
			}
			switch {
			case maxSplit < 0:
				parts = strings.Split(s, sp)
			case name == "split":
				parts = strings.SplitN(s, sp, int(maxSplit)+1)
			default:
				all := strings.Split(s, sp)
				if k := len(all) - int(maxSplit); k > 1 {
					all = append([]string{strings.Join(all[:k], sp)}, all[k:]...)
				}
				parts = all
			}
		}
		l := &list{items: make([]any, len(parts))}
		for i, p := range parts {
			l.items[i] = p
		}
		return l, nil
	case "splitlines":
		l := &list{}
		for _, p := range strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n") {
			l.items = append(l.items, p)
		}
		if n := len(l.items); n > 0 && l.items[n-1] == "" {
			l.items = l.items[:n-1]
		}
		return l, nil
	case "upper":
		return strings.ToUpper(s), nil
	case "lower":
		return strings.ToLower(s), nil
	case "capitalize":
		if s == "" {
			return s, nil
		}
		r, n := utf8.DecodeRuneInString(s)
		return string(unicode.ToUpper(r)) + strings.ToLower(s[n:]), nil
	case "title":
		var b strings.Builder
		prevLetter := false
		for _, r := range s {
			if prevLetter {
				b.WriteRune(unicode.ToLower(r))
			} else {
				b.WriteRune(unicode.ToUpper(r))
			}
			prevLetter = unicode.IsLetter(r) || unicode.IsDigit(r)
		}
		return b.String(), nil
	case "replace":
		old, ok1 := a.get(0, "old", nil).(string)
		repl, ok2 := a.get(1, "new", nil).(string)
		if !ok1 || !ok2 {
			return nil, errors.New("replace needs two strings")
		}
		n, _ := a.get(2, "count", int64(-1)).(int64)
		if old == "" && n < 0 && len(s) > 0 && len(repl)*(len(s)+1) > maxOutputBytes {
			return nil, errors.New("replace result too large")
		}
		out := strings.Replace(s, old, repl, int(n))
		if len(out) > maxOutputBytes {
			return nil, errors.New("replace result too large")
		}
		return out, nil
	case "find":
		sub, _ := a.get(0, "sub", "").(string)
		i := strings.Index(s, sub)
		if i < 0 {
			return int64(-1), nil
		}
		return int64(runeLen(s[:i])), nil
	case "count":
		sub, _ := a.get(0, "sub", "").(string)
		return int64(strings.Count(s, sub)), nil
	case "join":
		items, ok := iterate(a.get(0, "iterable", nil))
		if !ok {
			return nil, errors.New("join needs an iterable")
		}
		parts := make([]string, len(items))
		for i, it := range items {
			parts[i] = toStr(it)
		}
		return strings.Join(parts, s), nil
	case "isdigit", "isspace", "isalpha":
		if s == "" {
			return false, nil
		}
		f := map[string]func(rune) bool{"isdigit": unicode.IsDigit, "isspace": unicode.IsSpace, "isalpha": unicode.IsLetter}[name]
		for _, r := range s {
			if !f(r) {
				return false, nil
			}
		}
		return true, nil
	}
	return nil, fmt.Errorf("unknown string method %q", name)
}
