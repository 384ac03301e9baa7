package grammar

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// ruleSet is a parsed grammar: rule bodies by index, their names, and the
// entry rule.
type ruleSet struct {
	names  []string
	bodies []*expr
	index  map[string]int
	root   int
}

// gbnfParser reads llama.cpp's GBNF (grammars/README.md in llama.cpp):
// rules "name ::= alternatives", literals, character classes, ".",
// groups, "|", and the quantifiers * + ? {m} {m,} {m,n}, with "#"
// comments. A newline ends a rule's body except inside parentheses and
// after "|".
type gbnfParser struct {
	src      string
	pos      int
	lim      Limits
	rs       *ruleSet
	defined  []bool
	firstUse []int // offset of a rule's first reference, for undefined-rule errors
	b        *budget
}

func (p *gbnfParser) errf(format string, args ...any) error {
	return &SyntaxError{Lang: "gbnf", Offset: p.pos, Msg: fmt.Sprintf(format, args...)}
}

// parseGBNF parses src into rules whose entry is the rule named root.
func parseGBNF(src, root string, lim Limits, b *budget) (*ruleSet, error) {
	if len(src) > lim.SpecBytes {
		return nil, &LimitError{Limit: "SpecBytes", Bound: int64(lim.SpecBytes), What: "grammar text of " + strconv.Itoa(len(src)) + " bytes"}
	}
	if !utf8.ValidString(src) {
		return nil, &SyntaxError{Lang: "gbnf", Offset: -1, Msg: "grammar text is not valid UTF-8"}
	}
	p := &gbnfParser{src: src, lim: lim, rs: &ruleSet{index: map[string]int{}}, b: b}
	p.space(true)
	for p.pos < len(p.src) {
		start := p.pos
		name := p.name()
		if name == "" {
			return nil, p.errf("expected a rule name")
		}
		p.space(false)
		if !p.eat("::=") {
			return nil, p.errf("expected ::= after rule name %q", name)
		}
		p.space(true)
		body, err := p.alternates(false, 0)
		if err != nil {
			return nil, err
		}
		id := p.ruleID(name, start)
		if p.defined[id] {
			return nil, &SyntaxError{Lang: "gbnf", Offset: start, Msg: fmt.Sprintf("rule %q is defined twice", name)}
		}
		p.defined[id] = true
		p.rs.bodies[id] = body
		p.space(true)
	}
	for i, ok := range p.defined {
		if !ok {
			return nil, &SyntaxError{Lang: "gbnf", Offset: p.firstUse[i], Msg: fmt.Sprintf("rule %q is used but not defined", p.rs.names[i])}
		}
	}
	r, ok := p.rs.index[root]
	if !ok {
		return nil, &SyntaxError{Lang: "gbnf", Offset: -1, Msg: fmt.Sprintf("no rule %q", root)}
	}
	p.rs.root = r
	return p.rs, nil
}

func (p *gbnfParser) ruleID(name string, at int) int {
	if id, ok := p.rs.index[name]; ok {
		return id
	}
	id := len(p.rs.names)
	p.rs.index[name] = id
	p.rs.names = append(p.rs.names, name)
	p.rs.bodies = append(p.rs.bodies, nil)
	p.defined = append(p.defined, false)
	p.firstUse = append(p.firstUse, at)
	return id
}

func (p *gbnfParser) eat(s string) bool {
	if len(p.src)-p.pos >= len(s) && p.src[p.pos:p.pos+len(s)] == s {
		p.pos += len(s)
		return true
	}
	return false
}

// space skips blanks and comments, and newlines when newlines is set.
func (p *gbnfParser) space(newlines bool) {
	for p.pos < len(p.src) {
		switch c := p.src[p.pos]; {
		case c == ' ' || c == '\t':
			p.pos++
		case c == '#':
			for p.pos < len(p.src) && p.src[p.pos] != '\n' && p.src[p.pos] != '\r' {
				p.pos++
			}
		case newlines && (c == '\n' || c == '\r'):
			p.pos++
		default:
			return
		}
	}
}

func isWordChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

func (p *gbnfParser) name() string {
	start := p.pos
	for p.pos < len(p.src) && isWordChar(p.src[p.pos]) {
		p.pos++
	}
	return p.src[start:p.pos]
}

const maxNesting = 256 // parenthesis nesting, so that parsing cannot exhaust the stack

func (p *gbnfParser) alternates(nested bool, depth int) (*expr, error) {
	if depth > maxNesting {
		return nil, &LimitError{Limit: "nesting", Bound: maxNesting, What: "parenthesis nesting"}
	}
	var alts []*expr
	for {
		s, err := p.sequence(nested, depth)
		if err != nil {
			return nil, err
		}
		alts = append(alts, s)
		if p.pos < len(p.src) && p.src[p.pos] == '|' {
			p.pos++
			p.space(true)
			continue
		}
		break
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return altOf(alts...), nil
}

func (p *gbnfParser) sequence(nested bool, depth int) (*expr, error) {
	var items []*expr
	for {
		if err := p.b.check(); err != nil {
			return nil, err
		}
		p.space(nested)
		if p.pos >= len(p.src) {
			break
		}
		c := p.src[p.pos]
		switch {
		case c == '"':
			p.pos++
			var lit []byte
			if err := p.until('"', "literal", func(r rune) error { lit = utf8.AppendRune(lit, r); return nil }); err != nil {
				return nil, err
			}
			items = append(items, &expr{kind: eLit, lit: lit})
		case c == '[':
			e, err := p.class()
			if err != nil {
				return nil, err
			}
			items = append(items, e)
		case c == '.':
			p.pos++
			items = append(items, classOf([]runeRange{{0, utf8.MaxRune}}, false))
		case c == '(':
			p.pos++
			p.space(true)
			e, err := p.alternates(true, depth+1)
			if err != nil {
				return nil, err
			}
			p.space(true)
			if !p.eat(")") {
				return nil, p.errf("expected )")
			}
			items = append(items, e)
		case isWordChar(c):
			at := p.pos
			name := p.name()
			// A name followed by ::= starts the next rule (a rule body
			// that ended at a newline inside no group).
			save := p.pos
			p.space(false)
			if p.eat("::=") {
				p.pos = at
				return seqOf(items...), nil
			}
			p.pos = save
			items = append(items, &expr{kind: eRef, rule: p.ruleID(name, at)})
		case c == '*' || c == '+' || c == '?' || c == '{':
			if len(items) == 0 {
				return nil, p.errf("quantifier %q follows nothing", c)
			}
			lo, hi, err := p.quantifier()
			if err != nil {
				return nil, err
			}
			last := items[len(items)-1]
			items[len(items)-1] = &expr{kind: eRepeat, subs: []*expr{last}, min: lo, max: hi}
		case c == '<':
			return nil, p.errf("token references <...> are not supported")
		default:
			return seqOf(items...), nil
		}
	}
	return seqOf(items...), nil
}

// quantifier reads * + ? {m} {m,} {m,n}; max < 0 is unbounded.
func (p *gbnfParser) quantifier() (int, int, error) {
	c := p.src[p.pos]
	p.pos++
	switch c {
	case '*':
		return 0, -1, nil
	case '+':
		return 1, -1, nil
	case '?':
		return 0, 1, nil
	}
	p.space(false)
	lo, ok := p.int()
	if !ok {
		return 0, 0, p.errf("expected a repetition count")
	}
	hi := lo
	p.space(false)
	if p.eat(",") {
		p.space(false)
		if v, ok := p.int(); ok {
			hi = v
		} else {
			hi = -1
		}
		p.space(false)
	}
	if !p.eat("}") {
		return 0, 0, p.errf("expected } after repetition count")
	}
	if lo > p.lim.Repeat || hi > p.lim.Repeat {
		return 0, 0, &LimitError{Limit: "Repeat", Bound: int64(p.lim.Repeat), What: "repetition count"}
	}
	if hi >= 0 && hi < lo {
		return 0, 0, p.errf("repetition {%d,%d} has max below min", lo, hi)
	}
	return lo, hi, nil
}

func (p *gbnfParser) int() (int, bool) {
	start := p.pos
	v := 0
	for p.pos < len(p.src) && p.src[p.pos] >= '0' && p.src[p.pos] <= '9' {
		if v < 1<<30 {
			v = v*10 + int(p.src[p.pos]-'0')
		}
		p.pos++
	}
	return v, p.pos > start
}

func (p *gbnfParser) class() (*expr, error) {
	p.pos++ // [
	negate := false
	if p.pos < len(p.src) && p.src[p.pos] == '^' {
		negate = true
		p.pos++
	}
	var rs []runeRange
	err := p.until(']', "character class", func(lo rune) error {
		hi := lo
		if p.pos+1 < len(p.src) && p.src[p.pos] == '-' && p.src[p.pos+1] != ']' {
			p.pos++
			var err error
			if hi, err = p.char(); err != nil {
				return err
			}
			if hi < lo {
				return p.errf("class range %q-%q is reversed", lo, hi)
			}
		}
		rs = append(rs, runeRange{lo, hi})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return classOf(rs, negate), nil
}

// until reads the code points of a literal or class up to its closing
// byte end, which it takes, handing each to add; text that ends first is
// an error naming what was left open.
func (p *gbnfParser) until(end byte, what string, add func(r rune) error) error {
	for {
		if p.pos >= len(p.src) {
			return p.errf("unterminated %s", what)
		}
		if p.src[p.pos] == end {
			p.pos++
			return nil
		}
		r, err := p.char()
		if err != nil {
			return err
		}
		if err := add(r); err != nil {
			return err
		}
	}
}

// char reads one code point of a literal or class, with llama.cpp's
// escapes.
func (p *gbnfParser) char() (rune, error) {
	if p.src[p.pos] != '\\' {
		r, n := utf8.DecodeRuneInString(p.src[p.pos:])
		p.pos += n
		return r, nil
	}
	p.pos++
	if p.pos >= len(p.src) {
		return 0, p.errf("escape at end of text")
	}
	c := p.src[p.pos]
	p.pos++
	switch c {
	case 'x':
		return p.hex(2)
	case 'u':
		return p.hex(4)
	case 'U':
		return p.hex(8)
	case 't':
		return '\t', nil
	case 'r':
		return '\r', nil
	case 'n':
		return '\n', nil
	case '\\', '"', '[', ']', '-', '^', '\'', '/', '.':
		return rune(c), nil
	}
	return 0, p.errf("unknown escape \\%c", c)
}

func (p *gbnfParser) hex(n int) (rune, error) {
	if len(p.src)-p.pos < n {
		return 0, p.errf("expected %d hex digits", n)
	}
	v, err := strconv.ParseUint(p.src[p.pos:p.pos+n], 16, 32)
	if err != nil {
		return 0, p.errf("expected %d hex digits", n)
	}
	p.pos += n
	if v > utf8.MaxRune {
		return 0, p.errf("code point %#x is out of range", v)
	}
	return rune(v), nil
}
