package chat

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Values are plain Go values, with Python's semantics given to them here:
//
//	nil        None
//	undefined  Jinja's Undefined (a missing variable, key or attribute)
//	bool, int64, float64, string
//	*list      a Python list (reference semantics, so append is visible)
//	*dict      an insertion-ordered dict with string keys; also namespace()
//	*function  a callable: macro, raise_exception, range, namespace, ...
//
// Keeping the set closed lets every operation switch on it exhaustively.

type undefined struct{ name string }

type list struct{ items []any }

type dict struct {
	keys []string
	m    map[string]any
	ns   bool // created by namespace(): allows {% set ns.attr = ... %}
}

type function struct {
	name string
	fn   func(r *renderer, a *args) (any, error)
}

// args are evaluated call arguments.
type args struct {
	pos []any
	kw  *dict
}

// get returns positional argument i, else keyword name, else def.
func (a *args) get(i int, name string, def any) any {
	if i >= 0 && i < len(a.pos) {
		return a.pos[i]
	}
	if a.kw != nil {
		if v, ok := a.kw.m[name]; ok {
			return v
		}
	}
	return def
}

// kwValue returns keyword argument name, if given.
func (a *args) kwValue(name string) (any, bool) {
	if a.kw == nil {
		return nil, false
	}
	v, ok := a.kw.m[name]
	return v, ok
}

func newDict() *dict { return &dict{m: map[string]any{}} }

func (d *dict) set(k string, v any) {
	if _, ok := d.m[k]; !ok {
		d.keys = append(d.keys, k)
	}
	d.m[k] = v
}

// dictOf is a dict of the keys and values in kv, alternating, in order.
func dictOf(kv ...any) *dict {
	d := newDict()
	for i := 0; i+1 < len(kv); i += 2 {
		d.set(kv[i].(string), kv[i+1])
	}
	return d
}

// update sets every key of src (none when src is nil) in src's order,
// as Python's dict.update does.
func (d *dict) update(src *dict) {
	if src == nil {
		return
	}
	for _, k := range src.keys {
		d.set(k, src.m[k])
	}
}

func (d *dict) get(k string) (any, bool) {
	v, ok := d.m[k]
	return v, ok
}

// fromGo converts a caller's Go value (Options.Vars) into a template value.
func fromGo(v any) any {
	switch x := v.(type) {
	case nil, bool, int64, float64, string, *list, *dict, *function, undefined:
		return x
	case int:
		return int64(x)
	case int32:
		return int64(x)
	case uint32:
		return int64(x)
	case float32:
		return float64(x)
	case []string:
		l := &list{}
		for _, s := range x {
			l.items = append(l.items, s)
		}
		return l
	case []any:
		l := &list{}
		for _, e := range x {
			l.items = append(l.items, fromGo(e))
		}
		return l
	case map[string]any:
		// Go maps are unordered; sort keys so rendering is deterministic.
		d := newDict()
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			d.set(k, fromGo(x[k]))
		}
		return d
	case map[string]string:
		m := make(map[string]any, len(x))
		for k, s := range x {
			m[k] = s
		}
		return fromGo(m)
	}
	return fmt.Sprint(v)
}

func isUndef(v any) bool { _, ok := v.(undefined); return ok }

// truthy is Python's bool().
func truthy(v any) bool {
	switch x := v.(type) {
	case nil, undefined:
		return false
	case bool:
		return x
	case int64:
		return x != 0
	case float64:
		return x != 0
	case string:
		return x != ""
	case *list:
		return len(x.items) > 0
	case *dict:
		return len(x.keys) > 0
	}
	return true
}

// toStr is Python's str() as Jinja prints values; Undefined prints empty.
func toStr(v any) string {
	switch x := v.(type) {
	case undefined:
		return ""
	case string:
		return x
	}
	return repr(v)
}

// repr is Python's repr(), used for str() of containers.
func repr(v any) string { return reprIn(v, nil) }

// reprIn is repr of v inside the containers on path, so that a container
// that holds itself (`{% set ns.n = ns %}`) comes out as Python writes
// it, [...] or {...}, instead of recursing without end.
func reprIn(v any, path []any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case undefined:
		return ""
	case bool:
		if x {
			return "True"
		}
		return "False"
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return formatFloat(x)
	case string:
		return pyQuote(x)
	case *list:
		if slices.Contains(path, any(x)) {
			return "[...]"
		}
		path = append(path, x)
		return reprItems("[", "]", len(x.items), func(i int) string { return reprIn(x.items[i], path) })
	case *dict:
		if slices.Contains(path, any(x)) {
			return "{...}"
		}
		path = append(path, x)
		return reprItems("{", "}", len(x.keys), func(i int) string { return pyQuote(x.keys[i]) + ": " + reprIn(x.m[x.keys[i]], path) })
	case *function:
		return "<function " + x.name + ">"
	}
	return fmt.Sprint(v)
}

// pyQuote quotes like Python's repr of str: single quotes unless the
// string contains a single quote and no double quote.
func pyQuote(s string) string {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case WriteEscape(&b, r, rune(q)):
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
	return b.String()
}

// formatFloat is Python's repr(float): shortest round-trip digits, always
// with a decimal point or exponent.
func formatFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	if a := math.Abs(f); a != 0 && (a < 1e-4 || a >= 1e16) {
		s := strconv.FormatFloat(f, 'e', -1, 64)
		// Go writes e+16, Python e+16 too, but Go's e-05 matches Python's.
		return s
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

// toJSON writes v like Python's json.dumps(v, ensure_ascii=False) as HF's
// tojson filter does: ", " and ": " separators, or "," and ": " with an
// indent, keys in insertion order. path is the containers v is inside: a
// container that holds itself is an error, as json.dumps's "circular
// reference detected".
func toJSON(b *strings.Builder, v any, indent int, path []any) error {
	level := len(path)
	nl := func(l int) {
		if indent > 0 {
			b.WriteByte('\n')
			b.WriteString(strings.Repeat(" ", indent*l))
		}
	}
	sep := ", "
	if indent > 0 {
		sep = ","
	}
	// container writes n items between open and close, each on its own
	// line when indenting; an empty one is open and close alone.
	container := func(open, close string, n int, item func(i int) error) error {
		if n == 0 {
			b.WriteString(open + close)
			return nil
		}
		b.WriteString(open)
		for i := range n {
			if i > 0 {
				b.WriteString(sep)
			}
			nl(level + 1)
			if err := item(i); err != nil {
				return err
			}
		}
		nl(level)
		b.WriteString(close)
		return nil
	}
	switch x := v.(type) {
	case nil, undefined:
		b.WriteString("null")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case float64:
		switch {
		case math.IsNaN(x):
			b.WriteString("NaN")
		case math.IsInf(x, 1):
			b.WriteString("Infinity")
		case math.IsInf(x, -1):
			b.WriteString("-Infinity")
		default:
			b.WriteString(formatFloat(x))
		}
	case string:
		jsonQuote(b, x)
	case *list:
		path, err := jsonWithin(path, x)
		if err != nil {
			return err
		}
		return container("[", "]", len(x.items), func(i int) error { return toJSON(b, x.items[i], indent, path) })
	case *dict:
		path, err := jsonWithin(path, x)
		if err != nil {
			return err
		}
		return container("{", "}", len(x.keys), func(i int) error {
			jsonQuote(b, x.keys[i])
			b.WriteString(": ")
			return toJSON(b, x.m[x.keys[i]], indent, path)
		})
	default:
		return fmt.Errorf("cannot convert %s to JSON", typeName(v))
	}
	return nil
}

// jsonWithin is path with container c appended, for toJSON's items; c
// already on it holds itself.
func jsonWithin(path []any, c any) ([]any, error) {
	if slices.Contains(path, c) {
		return nil, fmt.Errorf("cannot convert a %s that holds itself to JSON", typeName(c))
	}
	return append(path, c), nil
}

// reprItems is Python's repr of a container of n items: item(i) of each
// between open and close, separated by ", ".
func reprItems(open, close string, n int, item func(i int) string) string {
	var b strings.Builder
	b.WriteString(open)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(item(i))
	}
	b.WriteString(close)
	return b.String()
}

// WriteEscape writes the escape of r that Python's repr, JSON and GBNF
// string literals share — the quote q and the backslash behind a
// backslash, \n, \r and \t — and reports whether r was one of them; the
// caller writes any other rune its own way.
func WriteEscape(b *strings.Builder, r, q rune) bool {
	switch r {
	case q, '\\':
		b.WriteByte('\\')
		b.WriteRune(r)
	case '\n':
		b.WriteString(`\n`)
	case '\r':
		b.WriteString(`\r`)
	case '\t':
		b.WriteString(`\t`)
	default:
		return false
	}
	return true
}

func jsonQuote(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case WriteEscape(b, r, '"'):
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20:
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	b.WriteByte('"')
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "none"
	case undefined:
		return "undefined"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "string"
	case *list:
		return "list"
	case *dict:
		return "dict"
	case *function:
		return "function"
	}
	return fmt.Sprintf("%T", v)
}

// equal is Python ==. Ints and floats compare by value.
func equal(a, b any) bool { return equalIn(a, b, 0) }

// maxEqualDepth bounds equalIn's nesting: two distinct containers that
// hold themselves compare without end, where Python raises RecursionError
// (here: not equal).
const maxEqualDepth = 1000

// equalIn is equal at depth containers deep. A container is equal to
// itself, as Python's container comparisons take an item identical to
// the other's as equal (so a list that holds itself equals itself).
func equalIn(a, b any, depth int) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case undefined:
		return isUndef(b)
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case int64, float64:
		fa, ok1 := toFloat(a)
		fb, ok2 := toFloat(b)
		_, isBool := b.(bool)
		return ok1 && ok2 && !isBool && fa == fb
	case string:
		y, ok := b.(string)
		return ok && x == y
	case *list:
		y, ok := b.(*list)
		if !ok || len(x.items) != len(y.items) || depth > maxEqualDepth {
			return false
		}
		if x == y {
			return true
		}
		for i := range x.items {
			if !equalIn(x.items[i], y.items[i], depth+1) {
				return false
			}
		}
		return true
	case *dict:
		y, ok := b.(*dict)
		if !ok || len(x.keys) != len(y.keys) || depth > maxEqualDepth {
			return false
		}
		if x == y {
			return true
		}
		for _, k := range x.keys {
			yv, ok := y.m[k]
			if !ok || !equalIn(x.m[k], yv, depth+1) {
				return false
			}
		}
		return true
	}
	return a == b
}

// toFloat converts numbers (and bools, as Python does in arithmetic).
func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		return x, true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

// compare orders numbers or strings; ok is false for other pairs, which
// Python would reject with TypeError.
func compare(a, b any) (int, bool) {
	if sa, ok := a.(string); ok {
		if sb, ok := b.(string); ok {
			return strings.Compare(sa, sb), true
		}
		return 0, false
	}
	fa, ok1 := toFloat(a)
	fb, ok2 := toFloat(b)
	if !ok1 || !ok2 {
		return 0, false
	}
	switch {
	case fa < fb:
		return -1, true
	case fa > fb:
		return 1, true
	}
	return 0, true
}

// length is Python's len(); ok is false for values without a length.
func length(v any) (int, bool) {
	switch x := v.(type) {
	case string:
		return utf8.RuneCountInString(x), true
	case *list:
		return len(x.items), true
	case *dict:
		return len(x.keys), true
	case undefined:
		return 0, true
	}
	return 0, false
}

// iterate returns the items a for loop visits: list items, dict keys,
// string characters; Undefined and none iterate as empty (Jinja's default
// Undefined is iterable; none is not in Python, but llama.cpp's minja and
// permissive rendering treat it so, and templates test "x is not none" anyway).
func iterate(v any) ([]any, bool) {
	switch x := v.(type) {
	case *list:
		return x.items, true
	case *dict:
		out := make([]any, len(x.keys))
		for i, k := range x.keys {
			out[i] = k
		}
		return out, true
	case string:
		var out []any
		for _, r := range x {
			out = append(out, string(r))
		}
		return out, true
	case undefined, nil:
		return nil, true
	}
	return nil, false
}
