package chat

import (
	"strconv"
)

// AST. Statements render output; expressions compute values. Every node
// keeps the byte offset of its first token for error messages.

type node interface{ position() int }

type (
	textNode struct {
		text string
		pos  int
	}
	outputNode struct {
		e   expr
		pos int
	}
	ifNode struct {
		conds  []expr
		bodies [][]node
		els    []node
		pos    int
	}
	forNode struct {
		vars      []string
		iter      expr
		cond      expr // optional "for x in y if cond" filter
		body, els []node
		pos       int
	}
	// setNode assigns value (or the rendered body, for {% set x %}...{% endset %})
	// to names, or to attr of the namespace names[0] when attr != "".
	setNode struct {
		names []string
		attr  string
		value expr
		body  []node
		pos   int
	}
	macroNode struct {
		name     string
		params   []string
		defaults []expr // aligned with params, nil when no default
		body     []node
		pos      int
	}
	doNode struct {
		e   expr
		pos int
	}
	breakNode    struct{ pos int }
	continueNode struct{ pos int }
)

func (n *textNode) position() int     { return n.pos }
func (n *outputNode) position() int   { return n.pos }
func (n *ifNode) position() int       { return n.pos }
func (n *forNode) position() int      { return n.pos }
func (n *setNode) position() int      { return n.pos }
func (n *macroNode) position() int    { return n.pos }
func (n *doNode) position() int       { return n.pos }
func (n *breakNode) position() int    { return n.pos }
func (n *continueNode) position() int { return n.pos }

type expr interface{ position() int }

// callArgs are positional and keyword arguments of a call, filter or test.
type callArgs struct {
	pos    []expr
	kwName []string
	kwVal  []expr
}

type (
	literal struct {
		v   any
		pos int
	}
	nameExpr struct {
		name string
		pos  int
	}
	listExpr struct {
		items []expr
		pos   int
	}
	dictExpr struct {
		keys, vals []expr
		pos        int
	}
	attrExpr struct {
		obj  expr
		name string
		pos  int
	}
	indexExpr struct {
		obj, idx expr
		pos      int
	}
	sliceExpr struct {
		obj, lo, hi, step expr
		pos               int
	}
	callExpr struct {
		fn   expr
		args callArgs
		pos  int
	}
	filterExpr struct {
		arg  expr
		name string
		args callArgs
		pos  int
	}
	testExpr struct {
		arg    expr
		name   string
		args   callArgs
		negate bool
		pos    int
	}
	unaryExpr struct {
		op  string
		x   expr
		pos int
	}
	binaryExpr struct {
		op   string
		l, r expr
		pos  int
	}
	condExpr struct {
		cond, then, els expr
		pos             int
	}
)

func (e *literal) position() int    { return e.pos }
func (e *nameExpr) position() int   { return e.pos }
func (e *listExpr) position() int   { return e.pos }
func (e *dictExpr) position() int   { return e.pos }
func (e *attrExpr) position() int   { return e.pos }
func (e *indexExpr) position() int  { return e.pos }
func (e *sliceExpr) position() int  { return e.pos }
func (e *callExpr) position() int   { return e.pos }
func (e *filterExpr) position() int { return e.pos }
func (e *testExpr) position() int   { return e.pos }
func (e *unaryExpr) position() int  { return e.pos }
func (e *binaryExpr) position() int { return e.pos }
func (e *condExpr) position() int   { return e.pos }

// maxNesting bounds parser recursion so hostile input (say 100k "(") is an
// error rather than a stack overflow.
const maxNesting = 200

type parser struct {
	src   string
	toks  []token
	i     int
	depth int
}

// bailout carries a parse error through panics inside the parser; parse
// converts it back. Only *Error values are recovered.
type bailout struct{ err *Error }

func (p *parser) fail(pos int, format string, args ...any) {
	panic(bailout{errAt(p.src, pos, format, args...)})
}

func (p *parser) peek() token {
	if p.i < len(p.toks) {
		return p.toks[p.i]
	}
	return token{kind: tEOF, pos: len(p.src)}
}

func (p *parser) next() token {
	t := p.peek()
	if p.i < len(p.toks) {
		p.i++
	}
	return t
}

func (p *parser) isOp(op string) bool {
	t := p.peek()
	return t.kind == tOp && t.val == op
}

func (p *parser) isName(name string) bool {
	t := p.peek()
	return t.kind == tName && t.val == name
}

func (p *parser) acceptOp(op string) bool {
	if p.isOp(op) {
		p.i++
		return true
	}
	return false
}

func (p *parser) acceptName(name string) bool {
	if p.isName(name) {
		p.i++
		return true
	}
	return false
}

func (p *parser) expectOp(op string) token {
	t := p.next()
	if t.kind != tOp || t.val != op {
		p.fail(t.pos, "expected %q, found %s", op, describe(t))
	}
	return t
}

// names reads a comma-separated list of names (a for loop's variables).
func (p *parser) names() []string {
	return p.moreNames([]string{p.expectName().val})
}

// moreNames appends to names those that follow, each after a comma.
func (p *parser) moreNames(names []string) []string {
	for p.acceptOp(",") {
		names = append(names, p.expectName().val)
	}
	return names
}

func (p *parser) expectName() token {
	t := p.next()
	if t.kind != tName {
		p.fail(t.pos, "expected a name, found %s", describe(t))
	}
	return t
}

func (p *parser) expectKind(k tokKind, what string) token {
	t := p.next()
	if t.kind != k {
		p.fail(t.pos, "expected %s, found %s", what, describe(t))
	}
	return t
}

func describe(t token) string {
	switch t.kind {
	case tEOF:
		return "end of template"
	case tText:
		return "text"
	case tVarBegin:
		return `"{{"`
	case tVarEnd:
		return `"}}"`
	case tBlockBegin:
		return `"{%"`
	case tBlockEnd:
		return `"%}"`
	case tString:
		return strconv.Quote(t.val)
	}
	return strconv.Quote(t.val)
}

func (p *parser) enter(pos int) {
	p.depth++
	if p.depth > maxNesting {
		p.fail(pos, "template nested too deeply")
	}
}

func (p *parser) leave() { p.depth-- }

// parseTemplate parses the whole token stream.
func parseTemplate(src string, toks []token) (nodes []node, err error) {
	p := &parser{src: src, toks: toks}
	defer func() {
		if r := recover(); r != nil {
			b, ok := r.(bailout)
			if !ok {
				panic(r)
			}
			err = b.err
		}
	}()
	nodes, end := p.parseBody()
	if end != "" {
		p.fail(p.toks[p.i-2].pos, "unexpected {%% %s %%}", end)
	}
	return nodes, nil
}

// endWords are the block keywords that close or split an enclosing block;
// parseBody stops at them and lets the caller check which one it was.
var endWords = map[string]bool{
	"elif": true, "else": true, "endif": true, "endfor": true,
	"endset": true, "endmacro": true, "endgeneration": true,
}

// parseBody parses nodes until EOF or a {% <endWord> ... (the keyword is
// consumed and returned; its arguments and %} are left to the caller).
func (p *parser) parseBody() ([]node, string) {
	var nodes []node
	for {
		t := p.peek()
		switch t.kind {
		case tEOF:
			return nodes, ""
		case tText:
			p.i++
			nodes = append(nodes, &textNode{text: t.val, pos: t.pos})
		case tVarBegin:
			p.i++
			e := p.parseExpr()
			p.expectKind(tVarEnd, `"}}"`)
			nodes = append(nodes, &outputNode{e: e, pos: t.pos})
		case tBlockBegin:
			p.i++
			kw := p.expectName()
			if endWords[kw.val] {
				return nodes, kw.val
			}
			nodes = append(nodes, p.parseStatement(t.pos, kw))
		default:
			p.fail(t.pos, "unexpected %s", describe(t))
		}
	}
}

func (p *parser) endBlock() { p.expectKind(tBlockEnd, `"%}"`) }

// parseStatement parses the block statement whose keyword kw was just read.
func (p *parser) parseStatement(pos int, kw token) node {
	p.enter(pos)
	defer p.leave()
	switch kw.val {
	case "if":
		n := &ifNode{pos: pos}
		cond := p.parseExpr()
		for {
			p.endBlock()
			body, end := p.parseBody()
			n.conds = append(n.conds, cond)
			n.bodies = append(n.bodies, body)
			switch end {
			case "elif":
				cond = p.parseExpr()
				continue
			case "else":
				p.endBlock()
				var end2 string
				n.els, end2 = p.parseBody()
				if end2 != "endif" {
					p.unterminated(pos, "if", end2)
				}
			case "endif":
			default:
				p.unterminated(pos, "if", end)
			}
			p.endBlock()
			return n
		}
	case "for":
		n := &forNode{pos: pos, vars: p.names()}
		if !p.acceptName("in") {
			p.fail(p.peek().pos, "expected \"in\" in for loop, found %s", describe(p.peek()))
		}
		n.iter = p.parseOr() // not parseExpr: a trailing "if" is the loop filter
		if p.acceptName("if") {
			n.cond = p.parseExpr()
		}
		if p.isName("recursive") {
			p.fail(p.peek().pos, "recursive for loops are not supported")
		}
		p.endBlock()
		body, end := p.parseBody()
		n.body = body
		if end == "else" {
			p.endBlock()
			n.els, end = p.parseBody()
		}
		if end != "endfor" {
			p.unterminated(pos, "for", end)
		}
		p.endBlock()
		return n
	case "set":
		n := &setNode{pos: pos, names: []string{p.expectName().val}}
		if p.acceptOp(".") {
			n.attr = p.expectName().val
		} else {
			n.names = p.moreNames(n.names)
		}
		if p.acceptOp("=") {
			n.value = p.parseTupleOrExpr()
			p.endBlock()
			return n
		}
		if n.attr != "" || len(n.names) != 1 {
			p.fail(pos, "block set needs a single plain name")
		}
		p.endBlock()
		body, end := p.parseBody()
		if end != "endset" {
			p.unterminated(pos, "set", end)
		}
		p.endBlock()
		n.body = body
		return n
	case "macro":
		n := &macroNode{pos: pos, name: p.expectName().val}
		p.expectOp("(")
		for !p.acceptOp(")") {
			if len(n.params) > 0 {
				p.expectOp(",")
				if p.acceptOp(")") {
					break
				}
			}
			n.params = append(n.params, p.expectName().val)
			var def expr
			if p.acceptOp("=") {
				def = p.parseExpr()
			}
			n.defaults = append(n.defaults, def)
		}
		p.endBlock()
		body, end := p.parseBody()
		if end != "endmacro" {
			p.unterminated(pos, "macro", end)
		}
		p.acceptName(n.name)
		p.endBlock()
		n.body = body
		return n
	case "generation":
		// HF marks assistant spans for training masks; it renders its body.
		p.endBlock()
		body, end := p.parseBody()
		if end != "endgeneration" {
			p.unterminated(pos, "generation", end)
		}
		p.endBlock()
		return &ifNode{conds: []expr{&literal{v: true, pos: pos}}, bodies: [][]node{body}, pos: pos}
	case "do":
		n := &doNode{e: p.parseExpr(), pos: pos}
		p.endBlock()
		return n
	case "break":
		p.endBlock()
		return &breakNode{pos: pos}
	case "continue":
		p.endBlock()
		return &continueNode{pos: pos}
	}
	p.fail(kw.pos, "unknown or unsupported statement %q", kw.val)
	return nil
}

func (p *parser) unterminated(pos int, what, found string) {
	if found == "" {
		p.fail(pos, "unterminated {%% %s %%}: reached end of template", what)
	}
	p.fail(p.toks[p.i-1].pos, "unexpected {%% %s %%} inside {%% %s %%} opened at %s", found, what, p.where(pos))
}

func (p *parser) where(pos int) string {
	l, c := lineCol(p.src, pos)
	return strconv.Itoa(l) + ":" + strconv.Itoa(c)
}

// parseTupleOrExpr parses "a, b" (a tuple, as a list) or a single expression;
// used on the right of set.
func (p *parser) parseTupleOrExpr() expr {
	e := p.parseExpr()
	if !p.isOp(",") {
		return e
	}
	l := &listExpr{items: []expr{e}, pos: e.position()}
	for p.acceptOp(",") {
		l.items = append(l.items, p.parseExpr())
	}
	return l
}

// Expression grammar, loosest first, as in Jinja2:
//
//	expr    = or ["if" or ["else" expr]]
//	or      = and {"or" and}
//	and     = not {"and" not}
//	not     = "not" not | compare
//	compare = math1 {("=="|"!="|"<"|"<="|">"|">="|"in"|"not" "in") math1}
//	math1   = concat {("+"|"-") concat}
//	concat  = math2 {"~" math2}
//	math2   = pow {("*"|"/"|"//"|"%") pow}
//	pow     = unary {"**" unary}
//	unary   = ("-"|"+") unary | postfix {filter | test}
func (p *parser) parseExpr() expr {
	t := p.peek()
	p.enter(t.pos)
	defer p.leave()
	e := p.parseOr()
	if p.acceptName("if") {
		c := &condExpr{then: e, pos: t.pos}
		c.cond = p.parseOr()
		if p.acceptName("else") {
			c.els = p.parseExpr()
		}
		return c
	}
	return e
}

// parseItems parses a literal's items up to close, each by item, comma
// separated with an optional trailing comma, the opening bracket already
// taken.
func (p *parser) parseItems(close string, item func()) {
	for n := 0; !p.acceptOp(close); n++ {
		if n > 0 {
			p.expectOp(",")
			if p.acceptOp(close) {
				break
			}
		}
		item()
	}
}

func (p *parser) parseOr() expr { return p.parseWord("or", p.parseAnd) }

func (p *parser) parseAnd() expr { return p.parseWord("and", p.parseNot) }

// parseWord is parseBinary for an operator that is a word (or, and):
// operands of sub joined left to right by op.
func (p *parser) parseWord(op string, sub func() expr) expr {
	e := sub()
	for p.isName(op) {
		t := p.next()
		e = &binaryExpr{op: op, l: e, r: sub(), pos: t.pos}
	}
	return e
}

func (p *parser) parseNot() expr {
	if p.isName("not") {
		t := p.next()
		p.enter(t.pos)
		defer p.leave()
		return &unaryExpr{op: "not", x: p.parseNot(), pos: t.pos}
	}
	return p.parseCompare()
}

func (p *parser) parseCompare() expr {
	e := p.parseMath1()
	for {
		t := p.peek()
		var op string
		switch {
		case t.kind == tOp && (t.val == "==" || t.val == "!=" || t.val == "<" || t.val == "<=" || t.val == ">" || t.val == ">="):
			op = t.val
			p.i++
		case t.kind == tName && t.val == "in":
			op = "in"
			p.i++
		case t.kind == tName && t.val == "not" && p.i+1 < len(p.toks) && p.toks[p.i+1].kind == tName && p.toks[p.i+1].val == "in":
			op = "not in"
			p.i += 2
		default:
			return e
		}
		e = &binaryExpr{op: op, l: e, r: p.parseMath1(), pos: t.pos}
	}
}

func (p *parser) parseBinary(ops []string, sub func() expr) expr {
	e := sub()
	for {
		t := p.peek()
		found := false
		if t.kind == tOp {
			for _, o := range ops {
				if t.val == o {
					found = true
				}
			}
		}
		if !found {
			return e
		}
		p.i++
		e = &binaryExpr{op: t.val, l: e, r: sub(), pos: t.pos}
	}
}

func (p *parser) parseMath1() expr {
	return p.parseBinary([]string{"+", "-"}, p.parseConcat)
}

func (p *parser) parseConcat() expr {
	return p.parseBinary([]string{"~"}, p.parseMath2)
}

func (p *parser) parseMath2() expr {
	return p.parseBinary([]string{"*", "/", "//", "%"}, p.parsePow)
}

func (p *parser) parsePow() expr {
	return p.parseBinary([]string{"**"}, p.parseUnary)
}

func (p *parser) parseUnary() expr {
	t := p.peek()
	if t.kind == tOp && (t.val == "-" || t.val == "+") {
		p.i++
		p.enter(t.pos)
		defer p.leave()
		return p.parseFilters(&unaryExpr{op: t.val, x: p.parseUnary(), pos: t.pos})
	}
	return p.parseFilters(p.parsePostfix(p.parsePrimary()))
}

// parseFilters parses "| name(args)" and "is [not] name args" suffixes,
// which bind tighter than any binary operator: a + b | trim is a + (b|trim).
func (p *parser) parseFilters(e expr) expr {
	for {
		switch {
		case p.isOp("|"):
			t := p.next()
			name := p.dottedName()
			f := &filterExpr{arg: e, name: name, pos: t.pos}
			if p.acceptOp("(") {
				f.args = p.parseArgs()
			}
			e = f
		case p.isName("is"):
			t := p.next()
			neg := p.acceptName("not")
			var name string
			// "is none", "is true", "is false" use keywords as test names.
			nt := p.next()
			if nt.kind != tName {
				p.fail(nt.pos, "expected a test name after \"is\", found %s", describe(nt))
			}
			name = nt.val
			te := &testExpr{arg: e, name: name, negate: neg, pos: t.pos}
			if p.acceptOp("(") {
				te.args = p.parseArgs()
			} else if p.startsBareTestArg() {
				te.args.pos = []expr{p.parsePostfix(p.parsePrimary())}
			}
			e = te
		default:
			return e
		}
	}
}

// startsBareTestArg reports whether a test like "is divisibleby 3" or
// "is sameas false" has an argument without parentheses.
func (p *parser) startsBareTestArg() bool {
	t := p.peek()
	switch t.kind {
	case tString, tInt, tFloat:
		return true
	case tName:
		switch t.val {
		case "else", "or", "and", "if", "in", "not", "is":
			return false
		}
		return true
	case tOp:
		return t.val == "[" || t.val == "{"
	}
	return false
}

func (p *parser) dottedName() string {
	name := p.expectName().val
	for p.isOp(".") && p.i+1 < len(p.toks) && p.toks[p.i+1].kind == tName {
		p.i++
		name += "." + p.next().val
	}
	return name
}

// parseArgs parses call arguments after "(" up to and including ")".
func (p *parser) parseArgs() callArgs {
	var a callArgs
	for !p.acceptOp(")") {
		if len(a.pos)+len(a.kwName) > 0 {
			p.expectOp(",")
			if p.acceptOp(")") {
				break
			}
		}
		t := p.peek()
		if t.kind == tName && p.i+1 < len(p.toks) && p.toks[p.i+1].kind == tOp && p.toks[p.i+1].val == "=" {
			p.i += 2
			a.kwName = append(a.kwName, t.val)
			a.kwVal = append(a.kwVal, p.parseExpr())
			continue
		}
		if len(a.kwName) > 0 {
			p.fail(t.pos, "positional argument after keyword argument")
		}
		a.pos = append(a.pos, p.parseExpr())
	}
	return a
}

func (p *parser) parsePostfix(e expr) expr {
	for {
		t := p.peek()
		switch {
		case t.kind == tOp && t.val == ".":
			p.i++
			nt := p.next()
			switch nt.kind {
			case tName:
				e = &attrExpr{obj: e, name: nt.val, pos: t.pos}
			case tInt: // foo.0 is foo[0] in Jinja
				n, _ := strconv.ParseInt(nt.val, 10, 64)
				e = &indexExpr{obj: e, idx: &literal{v: n, pos: nt.pos}, pos: t.pos}
			default:
				p.fail(nt.pos, "expected attribute name after \".\", found %s", describe(nt))
			}
		case t.kind == tOp && t.val == "[":
			p.i++
			e = p.parseSubscript(e, t.pos)
		case t.kind == tOp && t.val == "(":
			p.i++
			e = &callExpr{fn: e, args: p.parseArgs(), pos: t.pos}
		default:
			return e
		}
	}
}

// parseSubscript parses x[i] or x[lo:hi:step] after "[".
func (p *parser) parseSubscript(obj expr, pos int) expr {
	var parts [3]expr
	n := 0
	for {
		if !p.isOp(":") && !p.isOp("]") {
			parts[n] = p.parseExpr()
		}
		if p.acceptOp("]") {
			break
		}
		t := p.expectOp(":")
		n++
		if n > 2 {
			p.fail(t.pos, "too many \":\" in slice")
		}
	}
	if n == 0 {
		if parts[0] == nil {
			p.fail(pos, "empty subscript")
		}
		return &indexExpr{obj: obj, idx: parts[0], pos: pos}
	}
	return &sliceExpr{obj: obj, lo: parts[0], hi: parts[1], step: parts[2], pos: pos}
}

func (p *parser) parsePrimary() expr {
	t := p.next()
	p.enter(t.pos)
	defer p.leave()
	switch t.kind {
	case tString:
		s := t.val
		for p.peek().kind == tString { // "a" "b" is "ab", as in Python
			s += p.next().val
		}
		return &literal{v: s, pos: t.pos}
	case tInt:
		n, err := strconv.ParseInt(t.val, 10, 64)
		if err != nil {
			p.fail(t.pos, "integer literal out of range")
		}
		return &literal{v: n, pos: t.pos}
	case tFloat:
		f, err := strconv.ParseFloat(t.val, 64)
		if err != nil {
			p.fail(t.pos, "bad float literal")
		}
		return &literal{v: f, pos: t.pos}
	case tName:
		switch t.val {
		case "true", "True":
			return &literal{v: true, pos: t.pos}
		case "false", "False":
			return &literal{v: false, pos: t.pos}
		case "none", "None":
			return &literal{v: nil, pos: t.pos}
		}
		return &nameExpr{name: t.val, pos: t.pos}
	case tOp:
		switch t.val {
		case "(":
			if p.acceptOp(")") {
				return &listExpr{pos: t.pos} // empty tuple
			}
			e := p.parseExpr()
			if p.isOp(",") {
				l := &listExpr{items: []expr{e}, pos: t.pos}
				for p.acceptOp(",") {
					if p.isOp(")") {
						break
					}
					l.items = append(l.items, p.parseExpr())
				}
				e = l
			}
			p.expectOp(")")
			return e
		case "[":
			l := &listExpr{pos: t.pos}
			p.parseItems("]", func() { l.items = append(l.items, p.parseExpr()) })
			return l
		case "{":
			d := &dictExpr{pos: t.pos}
			p.parseItems("}", func() {
				d.keys = append(d.keys, p.parseExpr())
				p.expectOp(":")
				d.vals = append(d.vals, p.parseExpr())
			})
			return d
		}
	}
	p.fail(t.pos, "unexpected %s in expression", describe(t))
	return nil
}
