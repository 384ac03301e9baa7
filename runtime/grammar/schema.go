package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// jobj is a JSON object that keeps its keys' order, since properties are
// generated in the schema's order.
type jobj struct {
	keys []string
	vals map[string]any
}

func (o *jobj) get(k string) (any, bool) {
	v, ok := o.vals[k]
	return v, ok
}

// parseOrdered decodes JSON into jobj, []any, string, json.Number, bool
// and nil.
func parseOrdered(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the schema")
	}
	return v, nil
}

const maxJSONNesting = 512

func decodeValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxJSONNesting {
		return nil, &LimitError{Limit: "SchemaDepth", Bound: maxJSONNesting, What: "JSON nesting of the schema document"}
	}
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := t.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &jobj{vals: map[string]any{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				if _, dup := o.vals[k]; !dup {
					o.keys = append(o.keys, k)
				}
				o.vals[k] = v
			}
			_, err := dec.Token()
			return o, err
		case '[':
			var a []any
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := dec.Token()
			return a, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	default:
		return t, nil
	}
}

// compactJSON writes a decoded value back as compact JSON, objects in
// their order.
func compactJSON(sb *strings.Builder, v any) {
	switch v := v.(type) {
	case *jobj:
		sb.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(jsonString(k))
			sb.WriteByte(':')
			compactJSON(sb, v.vals[k])
		}
		sb.WriteByte('}')
	case []any:
		sb.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				sb.WriteByte(',')
			}
			compactJSON(sb, e)
		}
		sb.WriteByte(']')
	case string:
		sb.WriteString(jsonString(v))
	case json.Number:
		sb.WriteString(v.String())
	case bool:
		sb.WriteString(strconv.FormatBool(v))
	default:
		sb.WriteString("null")
	}
}

// jsonString encodes s as a JSON string without HTML escaping.
func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

// schemaGen writes the GBNF of one schema. Every rule is named
// name-<hint>, and rules with the same body are shared.
type schemaGen struct {
	name   string
	lim    Limits
	b      *budget
	root   any
	order  []string
	bodies map[string]string
	byBody map[string]string
	refs   map[string]string // $ref -> rule name, defined or pending
	size   int
}

// Keywords that constrain values and that the generator does not
// enforce: a schema using one is refused rather than followed loosely.
var unsupportedKeywords = []string{
	"not", "if", "then", "else", "prefixItems", "uniqueItems", "contains", "minContains", "maxContains",
	"minProperties", "maxProperties", "patternProperties", "propertyNames", "dependentRequired",
	"dependentSchemas", "dependencies", "multipleOf", "unevaluatedProperties", "unevaluatedItems",
	"additionalItems", "$dynamicRef", "$recursiveRef",
}

func schemaGBNF(schema []byte, name string, lim Limits, b *budget) (string, error) {
	if len(schema) > lim.SpecBytes {
		return "", &LimitError{Limit: "SpecBytes", Bound: int64(lim.SpecBytes), What: "JSON schema of " + strconv.Itoa(len(schema)) + " bytes"}
	}
	if name == "" {
		name = "root"
	}
	for i := 0; i < len(name); i++ {
		if !isWordChar(name[i]) {
			return "", fmt.Errorf("grammar: rule name %q: only letters, digits, '-' and '_'", name)
		}
	}
	root, err := parseOrdered(schema)
	if err != nil {
		var le *LimitError
		if errors.As(err, &le) {
			return "", le
		}
		return "", &SchemaError{Msg: "not valid JSON: " + err.Error()}
	}
	g := &schemaGen{name: name, lim: lim, b: b, root: root, bodies: map[string]string{}, byBody: map[string]string{}, refs: map[string]string{}}
	body, err := g.gen(root, "", 0)
	if err != nil {
		return "", err
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s ::= %s\n", name, body)
	for _, r := range g.order {
		fmt.Fprintf(&sb, "%s ::= %s\n", r, g.bodies[r])
	}
	return sb.String(), nil
}

// rule names body as a rule and returns its name.
func (g *schemaGen) rule(hint, body string) (string, error) {
	if n, ok := g.byBody[body]; ok {
		return n, nil
	}
	n, err := g.newName(hint)
	if err != nil {
		return "", err
	}
	g.define(n, body)
	return n, nil
}

func (g *schemaGen) newName(hint string) (string, error) {
	if err := g.b.check(); err != nil {
		return "", err
	}
	var sb strings.Builder
	for i := 0; i < len(hint) && sb.Len() < 40; i++ {
		c := hint[i]
		if isWordChar(c) && c != '_' {
			sb.WriteByte(c)
		} else {
			sb.WriteByte('-')
		}
	}
	base := g.name + "-" + strings.Trim(sb.String(), "-")
	if strings.HasSuffix(base, "-") {
		base += "r"
	}
	n := base
	for i := 2; ; i++ {
		if _, taken := g.bodies[n]; !taken && !isPrimName(g.name, n) {
			if _, ref := g.reserved(n); !ref {
				break
			}
		}
		n = base + "-" + strconv.Itoa(i)
	}
	g.bodies[n] = "" // reserve
	return n, nil
}

func isPrimName(name, n string) bool {
	_, ok := primBodies[strings.TrimPrefix(n, name+"-")]
	return ok
}

func (g *schemaGen) reserved(n string) (string, bool) {
	for k, v := range g.refs {
		if v == n {
			return k, true
		}
	}
	return "", false
}

func (g *schemaGen) define(n, body string) {
	g.bodies[n] = body
	g.byBody[body] = n
	g.order = append(g.order, n)
	g.size += len(body)
}

func (g *schemaGen) errf(path, format string, args ...any) error {
	return &SchemaError{Path: path, Msg: fmt.Sprintf(format, args...)}
}

// gen returns a GBNF expression for the values schema s allows.
func (g *schemaGen) gen(s any, path string, depth int) (string, error) {
	if depth > g.lim.SchemaDepth {
		return "", &LimitError{Limit: "SchemaDepth", Bound: int64(g.lim.SchemaDepth), What: "schema nesting at " + path}
	}
	if g.size > g.lim.GrammarSize*8 {
		return "", &LimitError{Limit: "GrammarSize", Bound: int64(g.lim.GrammarSize), What: "grammar text of the schema"}
	}
	if err := g.b.check(); err != nil {
		return "", err
	}
	var o *jobj
	switch s := s.(type) {
	case bool:
		if !s {
			return "", g.errf(path, "the schema false allows no value")
		}
		return g.prim("value")
	case *jobj:
		o = s
	default:
		return "", g.errf(path, "a schema must be an object or a boolean")
	}
	for _, k := range unsupportedKeywords {
		if _, ok := o.get(k); ok {
			return "", g.errf(path, "keyword %q is not supported", k)
		}
	}
	// $ref, anyOf and oneOf are followed alone: a schema that adds other
	// assertions beside them is refused rather than loosened.
	for _, kw := range []string{"$ref", "anyOf", "oneOf", "allOf"} {
		if _, ok := o.get(kw); !ok {
			continue
		}
		for _, k := range o.keys {
			if k != kw && validatingKeywords[k] {
				return "", g.errf(path, "%q beside %q is not supported", k, kw)
			}
		}
	}
	if r, ok := o.get("$ref"); ok {
		rs, ok := r.(string)
		if !ok {
			return "", g.errf(path, "$ref must be a string")
		}
		return g.ref(rs, path, depth)
	}
	if c, ok := o.get("const"); ok {
		var sb strings.Builder
		compactJSON(&sb, c)
		return gbnfLit(sb.String()), nil
	}
	types, err := g.types(o, path)
	if err != nil {
		return "", err
	}
	if e, ok := o.get("enum"); ok {
		vals, ok := e.([]any)
		if !ok {
			return "", g.errf(path+"/enum", "enum must be an array")
		}
		if len(vals) > g.lim.Enum {
			return "", &LimitError{Limit: "Enum", Bound: int64(g.lim.Enum), What: fmt.Sprintf("enum of %d values at %s", len(vals), path)}
		}
		var alts []string
		for _, v := range vals {
			if types != nil && !typeAllows(types, v) {
				continue
			}
			var sb strings.Builder
			compactJSON(&sb, v)
			alts = append(alts, gbnfLit(sb.String()))
		}
		if len(alts) == 0 {
			return "", g.errf(path+"/enum", "no enum value is allowed")
		}
		return g.rule(hintOf(path, "enum"), strings.Join(alts, " | "))
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		if v, ok := o.get(kw); ok {
			subs, ok := v.([]any)
			if !ok || len(subs) == 0 {
				return "", g.errf(path+"/"+kw, "%s must be a non-empty array", kw)
			}
			var alts []string
			for i, sub := range subs {
				e, err := g.gen(sub, fmt.Sprintf("%s/%s/%d", path, kw, i), depth+1)
				if err != nil {
					return "", err
				}
				alts = append(alts, e)
			}
			return g.rule(hintOf(path, kw), strings.Join(alts, " | "))
		}
	}
	if v, ok := o.get("allOf"); ok {
		subs, ok := v.([]any)
		if !ok || len(subs) != 1 {
			return "", g.errf(path+"/allOf", "allOf is supported with one schema only")
		}
		return g.gen(subs[0], path+"/allOf/0", depth+1)
	}
	if types == nil {
		types = inferTypes(o)
	}
	if types == nil {
		return g.prim("value")
	}
	var alts []string
	for _, t := range types {
		e, err := g.genType(t, o, path, depth)
		if err != nil {
			return "", err
		}
		alts = append(alts, e)
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return "( " + strings.Join(alts, " | ") + " )", nil
}

// validatingKeywords are the keywords the generator enforces.
var validatingKeywords = map[string]bool{
	"$ref": true, "anyOf": true, "oneOf": true, "allOf": true, "type": true, "enum": true, "const": true,
	"properties": true, "required": true, "additionalProperties": true, "items": true, "minItems": true,
	"maxItems": true, "minLength": true, "maxLength": true, "pattern": true, "format": true, "minimum": true,
	"maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true, "nullable": true,
}

func hintOf(path, what string) string {
	p := path
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		p = p[i+1:]
	}
	if p == "" {
		return what
	}
	return p + "-" + what
}

var knownTypes = map[string]bool{"object": true, "array": true, "string": true, "number": true, "integer": true, "boolean": true, "null": true}

// types reads "type" (a name or a list) and OpenAPI's "nullable"; nil
// when the schema names no type.
func (g *schemaGen) types(o *jobj, path string) ([]string, error) {
	var ts []string
	if t, ok := o.get("type"); ok {
		switch t := t.(type) {
		case string:
			ts = []string{t}
		case []any:
			for _, e := range t {
				s, ok := e.(string)
				if !ok {
					return nil, g.errf(path+"/type", "type list entries must be strings")
				}
				ts = append(ts, s)
			}
			if len(ts) == 0 {
				return nil, g.errf(path+"/type", "empty type list allows no value")
			}
		default:
			return nil, g.errf(path+"/type", "type must be a string or a list")
		}
		for _, t := range ts {
			if !knownTypes[t] {
				return nil, g.errf(path+"/type", "unknown type %q", t)
			}
		}
	}
	if n, ok := o.get("nullable"); ok && n == true && ts != nil && !typeAllows(ts, nil) {
		ts = append(ts, "null")
	}
	return ts, nil
}

func inferTypes(o *jobj) []string {
	has := func(ks ...string) bool {
		for _, k := range ks {
			if _, ok := o.get(k); ok {
				return true
			}
		}
		return false
	}
	switch {
	case has("properties", "additionalProperties", "required"):
		return []string{"object"}
	case has("items", "minItems", "maxItems"):
		return []string{"array"}
	case has("minLength", "maxLength", "pattern", "format"):
		return []string{"string"}
	case has("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
		return []string{"number"}
	}
	return nil
}

// typeAllows says whether a JSON value has one of the types.
func typeAllows(types []string, v any) bool {
	for _, t := range types {
		switch v := v.(type) {
		case *jobj:
			if t == "object" {
				return true
			}
		case []any:
			if t == "array" {
				return true
			}
		case string:
			if t == "string" {
				return true
			}
		case bool:
			if t == "boolean" {
				return true
			}
		case json.Number:
			if t == "number" {
				return true
			}
			if t == "integer" {
				if r, ok := new(big.Rat).SetString(v.String()); ok && r.IsInt() {
					return true
				}
			}
		case nil:
			if t == "null" {
				return true
			}
		}
	}
	return false
}

// ref returns the rule of a local reference ("#", "#/$defs/x",
// "#/definitions/x", any JSON pointer into the document), generating it
// once; recursion goes through the rule's name.
func (g *schemaGen) ref(r, path string, depth int) (string, error) {
	if n, ok := g.refs[r]; ok {
		return n, nil
	}
	if !strings.HasPrefix(r, "#") {
		return "", g.errf(path+"/$ref", "only local references (#...) are supported, not %q", r)
	}
	target, err := g.resolve(r)
	if err != nil {
		return "", g.errf(path+"/$ref", "%v", err)
	}
	hint := "ref-" + r[strings.LastIndexByte(r, '/')+1:]
	n, err := g.newName(hint)
	if err != nil {
		return "", err
	}
	g.refs[r] = n
	body, err := g.gen(target, strings.TrimPrefix(r, "#"), depth+1)
	if err != nil {
		return "", err
	}
	g.bodies[n] = body
	g.order = append(g.order, n)
	g.size += len(body)
	return n, nil
}

func (g *schemaGen) resolve(r string) (any, error) {
	ptr := strings.TrimPrefix(r, "#")
	if u, err := url.PathUnescape(ptr); err == nil {
		ptr = u
	}
	cur := g.root
	if ptr == "" {
		return cur, nil
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil, fmt.Errorf("reference %q is not a JSON pointer", r)
	}
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case *jobj:
			v, ok := c.get(tok)
			if !ok {
				return nil, fmt.Errorf("reference %q: no %q", r, tok)
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil, fmt.Errorf("reference %q: no index %q", r, tok)
			}
			cur = c[i]
		default:
			return nil, fmt.Errorf("reference %q: %q is not in an object or array", r, tok)
		}
	}
	return cur, nil
}

// The shared rules, by kind. Values are compact, with one optional space
// after ':' and ',' (bounded whitespace, so that generation cannot loop
// on blanks).
var primBodies = map[string]string{
	"value":   `( {object} | {array} | {string} | {number} | "true" | "false" | "null" )`,
	"object":  `"{" ( {string} ":" " "? {value} ( "," " "? {string} ":" " "? {value} )* )? "}"`,
	"array":   `"[" ( {value} ( "," " "? {value} )* )? "]"`,
	"string":  `"\"" {char}* "\""`,
	"char":    `[^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" ( [0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) )`,
	"number":  `"-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?`,
	"integer": `"-"? ( "0" | [1-9] [0-9]* )`,
	"boolean": `( "true" | "false" )`,
	"null":    `"null"`,
	// keychar is a character of a key that is written without escapes,
	// for additional properties, whose keys must not spell a declared
	// one.
	"keychar": `[^"\\\x00-\x1f]`,
}

// prim returns the shared rule of a kind, defining it (and what it uses)
// on first use.
func (g *schemaGen) prim(kind string) (string, error) {
	n := g.name + "-" + kind
	if b, ok := g.bodies[n]; ok && b != "" {
		return n, nil
	}
	if _, ok := g.bodies[n]; ok {
		return n, nil // being defined (recursion)
	}
	g.bodies[n] = ""
	body := primBodies[kind]
	for _, dep := range []string{"object", "array", "string", "number", "value", "char"} {
		if strings.Contains(body, "{"+dep+"}") {
			dn, err := g.prim(dep)
			if err != nil {
				return "", err
			}
			body = strings.ReplaceAll(body, "{"+dep+"}", dn)
		}
	}
	g.define(n, body)
	return n, nil
}

func (g *schemaGen) genType(t string, o *jobj, path string, depth int) (string, error) {
	switch t {
	case "object":
		return g.object(o, path, depth)
	case "array":
		return g.array(o, path, depth)
	case "string":
		return g.str(o, path)
	case "number", "integer":
		return g.number(o, path, t == "integer")
	case "boolean":
		return g.prim("boolean")
	}
	return g.prim("null")
}

func (g *schemaGen) object(o *jobj, path string, depth int) (string, error) {
	var names []string
	var schemas []any
	if p, ok := o.get("properties"); ok {
		props, ok := p.(*jobj)
		if !ok {
			return "", g.errf(path+"/properties", "properties must be an object")
		}
		for _, k := range props.keys {
			names = append(names, k)
			schemas = append(schemas, props.vals[k])
		}
	}
	// additionalProperties: absent means none when properties are listed
	// (as llama.cpp does: the output is valid either way), and any when
	// the schema lists none.
	var extra any
	addl, hasAddl := o.get("additionalProperties")
	if hasAddl {
		if addl != false {
			extra = addl
		}
	} else if len(names) == 0 {
		extra = true
	}
	required := map[string]bool{}
	if r, ok := o.get("required"); ok {
		list, ok := r.([]any)
		if !ok {
			return "", g.errf(path+"/required", "required must be an array")
		}
		for _, e := range list {
			s, ok := e.(string)
			if !ok {
				return "", g.errf(path+"/required", "required entries must be strings")
			}
			if !required[s] && !contains(names, s) {
				// Required but not described: an additional property.
				switch {
				case hasAddl && addl == false:
					return "", g.errf(path+"/required", "%q is required but additionalProperties is false and properties lack it", s)
				case extra != nil:
					schemas = append(schemas, extra)
				default:
					schemas = append(schemas, true)
				}
				names = append(names, s)
			}
			required[s] = true
		}
	}
	if len(names) == 0 && extra == true {
		return g.prim("object")
	}
	kvs := make([]string, len(names))
	for i, n := range names {
		v, err := g.gen(schemas[i], path+"/properties/"+escapePointer(n), depth+1)
		if err != nil {
			return "", err
		}
		kv, err := g.rule(hintOf(path, "kv-"+n), gbnfLit(jsonString(n)+":")+` " "? `+v)
		if err != nil {
			return "", err
		}
		kvs[i] = kv
	}
	sep := `"," " "? `
	anyRequired := false
	for _, n := range names {
		anyRequired = anyRequired || required[n]
	}
	// first(i) is the properties from i on, the first written one without
	// a comma; rest(i) is them each after a comma.
	var rest func(i int) string
	rest = func(i int) string {
		var parts []string
		for j := i; j < len(names); j++ {
			if required[names[j]] {
				parts = append(parts, sep+kvs[j])
			} else {
				parts = append(parts, "( "+sep+kvs[j]+" )?")
			}
		}
		return strings.Join(parts, " ")
	}
	var first string
	if len(names) > 0 {
		// first(i) ::= kv_i rest(i+1) | first(i+1) while kv_i is optional.
		next := ""
		for i := len(names) - 1; i >= 0; i-- {
			alt := kvs[i] + " " + rest(i+1)
			if !required[names[i]] && next != "" {
				alt += " | " + next
			}
			n, err := g.rule(hintOf(path, "props"), alt)
			if err != nil {
				return "", err
			}
			next = n
		}
		first = next
	}
	body := ""
	switch {
	case extra == nil && len(names) == 0:
		body = `"{" "}"`
	case extra == nil && anyRequired:
		body = `"{" ` + first + ` "}"`
	case extra == nil:
		body = `"{" ` + first + `? "}"`
	default:
		ev, err := g.gen(extra, path+"/additionalProperties", depth+1)
		if err != nil {
			return "", err
		}
		key, err := g.extraKey(names, path)
		if err != nil {
			return "", err
		}
		ekv, err := g.rule(hintOf(path, "extra-kv"), key+` ":" " "? `+ev)
		if err != nil {
			return "", err
		}
		more := `( ` + sep + ekv + ` )*`
		switch {
		case len(names) == 0:
			body = `"{" ( ` + ekv + ` ` + more + ` )? "}"`
		case anyRequired:
			body = `"{" ` + first + ` ` + more + ` "}"`
		default:
			body = `"{" ( ` + first + ` ` + more + ` | ` + ekv + ` ` + more + ` )? "}"`
		}
	}
	return g.rule(hintOf(path, "object"), body)
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// extraKey returns a rule for a key, written without escapes, that is not
// one of the declared names: a walk of their trie that may leave it at
// any character no name continues with.
func (g *schemaGen) extraKey(names []string, path string) (string, error) {
	kc, err := g.prim("keychar")
	if err != nil {
		return "", err
	}
	type tnode struct {
		kids map[rune]*tnode
		end  bool
	}
	root := &tnode{kids: map[rune]*tnode{}}
	for _, n := range names {
		t := root
		for _, r := range n {
			k := t.kids[r]
			if k == nil {
				k = &tnode{kids: map[rune]*tnode{}}
				t.kids[r] = k
			}
			t = k
		}
		t.end = true
	}
	var walk func(t *tnode) (string, error)
	walk = func(t *tnode) (string, error) {
		var alts []string
		if !t.end {
			alts = append(alts, `""`)
		}
		excl := []runeRange{{0, 0x1f}, {'"', '"'}, {'\\', '\\'}}
		var rs []rune
		for r := range t.kids {
			rs = append(rs, r)
		}
		sort.Slice(rs, func(i, j int) bool { return rs[i] < rs[j] })
		for _, r := range rs {
			excl = append(excl, runeRange{r, r})
			if r < 0x20 || r == '"' || r == '\\' {
				continue // an escaped name cannot be spelled without escapes
			}
			sub, err := walk(t.kids[r])
			if err != nil {
				return "", err
			}
			alts = append(alts, gbnfLit(string(r))+" "+sub)
		}
		other := classOf(excl, true)
		alts = append(alts, gbnfClass(other.ranges)+" "+kc+"*")
		return g.rule(hintOf(path, "key"), strings.Join(alts, " | "))
	}
	k, err := walk(root)
	if err != nil {
		return "", err
	}
	return g.rule(hintOf(path, "extra-key"), `"\"" `+k+` "\""`)
}

// bounds reads the pair of keywords minKey and maxKey (minItems and
// maxItems, minLength and maxLength): the minimum defaults to 0, the maximum
// to -1 for none, and the maximum may not be below the minimum.
func (g *schemaGen) bounds(o *jobj, path, minKey, maxKey string) (lo, hi int, err error) {
	if lo, err = g.intKeyword(o, path, minKey, 0); err != nil {
		return 0, 0, err
	}
	if hi, err = g.intKeyword(o, path, maxKey, -1); err != nil {
		return 0, 0, err
	}
	if hi >= 0 && hi < lo {
		return 0, 0, g.errf(path, "%s %d is below %s %d", maxKey, hi, minKey, lo)
	}
	return lo, hi, nil
}

func (g *schemaGen) intKeyword(o *jobj, path, k string, def int) (int, error) {
	v, ok := o.get(k)
	if !ok {
		return def, nil
	}
	n, ok := v.(json.Number)
	if !ok {
		return 0, g.errf(path+"/"+k, "%s must be a number", k)
	}
	i, err := strconv.ParseInt(n.String(), 10, 64)
	if err != nil || i < 0 {
		return 0, g.errf(path+"/"+k, "%s must be a non-negative integer", k)
	}
	if i > int64(g.lim.Repeat) {
		return 0, &LimitError{Limit: "Repeat", Bound: int64(g.lim.Repeat), What: fmt.Sprintf("%s %d at %s", k, i, path)}
	}
	return int(i), nil
}

func (g *schemaGen) array(o *jobj, path string, depth int) (string, error) {
	lo, hi, err := g.bounds(o, path, "minItems", "maxItems")
	if err != nil {
		return "", err
	}
	items, ok := o.get("items")
	if !ok {
		items = true
	}
	if items == false {
		if lo > 0 {
			return "", g.errf(path, "items false with minItems %d allows no value", lo)
		}
		hi = 0
	}
	if hi == 0 {
		return gbnfLit("[]"), nil
	}
	item, err := g.gen(items, path+"/items", depth+1)
	if err != nil {
		return "", err
	}
	var q string
	switch {
	case hi < 0:
		q = fmt.Sprintf("{%d,}", max(lo-1, 0))
	default:
		q = fmt.Sprintf("{%d,%d}", max(lo-1, 0), hi-1)
	}
	more := `( "," " "? ` + item + ` )` + q
	body := `"[" ` + item + ` ` + more + ` "]"`
	if lo == 0 {
		body = `"[" ( ` + item + ` ` + more + ` )? "]"`
	}
	return g.rule(hintOf(path, "array"), body)
}

// The string formats enforced; others are annotations and ignored.
var formatBodies = map[string]string{
	"date":      `[0-9]{4} "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) | ( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ) | "02-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) )`,
	"time":      `( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,9} )? ( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )`,
	"uuid":      `[0-9a-f]{8} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{12}`,
	"email":     `[a-zA-Z0-9_+-]{1,20} ( "." [a-zA-Z0-9_+-]{1,20} ){0,2} "@" [a-z0-9]{1,20} ( "." [a-z0-9]{1,20} ){0,2} "." [a-z]{2,10}`,
	"date-time": "", // date "T" time
}

func (g *schemaGen) str(o *jobj, path string) (string, error) {
	lo, hi, err := g.bounds(o, path, "minLength", "maxLength")
	if err != nil {
		return "", err
	}
	_, hasLen := o.get("minLength")
	if _, ok := o.get("maxLength"); ok {
		hasLen = true
	}
	if p, ok := o.get("pattern"); ok {
		ps, ok := p.(string)
		if !ok {
			return "", g.errf(path+"/pattern", "pattern must be a string")
		}
		if hasLen {
			return "", g.errf(path, "pattern together with minLength/maxLength is not supported")
		}
		if f, ok := o.get("format"); ok {
			if fs, _ := f.(string); formatBodies[fs] != "" || fs == "date-time" {
				return "", g.errf(path, "pattern together with format %q is not supported", f)
			}
		}
		re, err := regexGBNF(ps, true, g.lim)
		if err != nil {
			var le *LimitError
			if errors.As(err, &le) {
				return "", err
			}
			return "", g.errf(path+"/pattern", "%v", err)
		}
		return g.rule(hintOf(path, "pattern"), `"\"" `+re+` "\""`)
	}
	if f, ok := o.get("format"); ok {
		fs, _ := f.(string)
		if _, known := formatBodies[fs]; known {
			if hasLen {
				return "", g.errf(path, "format %q together with minLength/maxLength is not supported", fs)
			}
			body := formatBodies[fs]
			if fs == "date-time" {
				body = formatBodies["date"] + ` "T" ` + formatBodies["time"]
			}
			return g.rule("format-"+fs, `"\"" `+body+` "\""`)
		}
	}
	if !hasLen {
		return g.prim("string")
	}
	ch, err := g.prim("char")
	if err != nil {
		return "", err
	}
	q := fmt.Sprintf("{%d,%d}", lo, hi)
	if hi < 0 {
		q = fmt.Sprintf("{%d,}", lo)
	}
	return g.rule(hintOf(path, "string"), `"\"" `+ch+q+` "\""`)
}
