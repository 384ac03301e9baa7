package ir

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/ggml"
)

// SyntaxError is a parse error at a line and column (both from 1; the
// column counts bytes).
type SyntaxError struct {
	Line, Col int
	Msg       string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("%d:%d: %s", e.Line, e.Col, e.Msg) }

// Parse reads graphs in the text form Print writes (see text.go). Names
// must be declared before instructions use them.
func Parse(src []byte) ([]*Graph, error) {
	p := &parser{}
	for n, line := range strings.Split(string(src), "\n") {
		p.line = n + 1
		toks, err := p.scan(strings.TrimSuffix(line, "\r"))
		if err != nil {
			return nil, err
		}
		if len(toks) == 0 {
			continue
		}
		p.toks, p.pos, p.eol = toks, 0, len(line)+1
		if err := p.parseLine(); err != nil {
			return nil, err
		}
	}
	p.finish()
	return p.graphs, nil
}

type tokKind uint8

const (
	tWord  tokKind = iota + 1 // bare name or number
	tStr                      // Go-quoted string, unquoted in text
	tPunct                    // % @ # = { } -> =>
)

type token struct {
	kind tokKind
	text string
	col  int
}

type parser struct {
	graphs []*Graph
	g      *Graph
	regs   map[string][]int // name → indices, to tell unique from shared
	bufs   map[string][]int

	line, pos, eol int
	toks           []token
}

func (p *parser) errAt(col int, format string, args ...any) error {
	return &SyntaxError{Line: p.line, Col: col, Msg: fmt.Sprintf(format, args...)}
}

// scan splits one line into tokens, dropping a ";" comment.
func (p *parser) scan(line string) ([]token, error) {
	var toks []token
	for i := 0; i < len(line); {
		c := line[i]
		switch {
		case c == ' ' || c == '\t':
			i++
		case c == ';':
			return toks, nil
		case c == '"':
			q, err := strconv.QuotedPrefix(line[i:])
			if err != nil {
				return nil, p.errAt(i+1, "bad quoted name")
			}
			s, _ := strconv.Unquote(q)
			toks = append(toks, token{tStr, s, i + 1})
			i += len(q)
		case strings.HasPrefix(line[i:], "->") || strings.HasPrefix(line[i:], "=>"):
			toks = append(toks, token{tPunct, line[i : i+2], i + 1})
			i += 2
		case strings.IndexByte("%@#={}", c) >= 0:
			toks = append(toks, token{tPunct, line[i : i+1], i + 1})
			i++
		case nameByte(c):
			j := i
			for j < len(line) && nameByte(line[j]) {
				j++
			}
			toks = append(toks, token{tWord, line[i:j], i + 1})
			i = j
		default:
			return nil, p.errAt(i+1, "unexpected character %q", c)
		}
	}
	return toks, nil
}

// peek returns the next token, or an empty one at the end of the line.
func (p *parser) peek() token {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return token{col: p.eol}
}

func (p *parser) next() token { t := p.peek(); p.pos = min(p.pos+1, len(p.toks)); return t }

func (p *parser) isPunct(s string) bool { t := p.peek(); return t.kind == tPunct && t.text == s }

func (p *parser) expect(s string) error {
	if t := p.next(); t.kind != tPunct || t.text != s {
		return p.errAt(t.col, "expected %q, found %s", s, describe(t))
	}
	return nil
}

func describe(t token) string {
	switch t.kind {
	case tWord:
		return strconv.Quote(t.text)
	case tStr:
		return "quoted " + strconv.Quote(t.text)
	case tPunct:
		return "'" + t.text + "'"
	}
	return "end of line"
}

// word reads a bare word.
// parseWord reads a word (what names what it should be) and parses it
// with parse; a word parse refuses is an error at its column, bad
// formatted with the word.
func parseWord[T any](p *parser, what string, parse func(string) (T, bool), bad string) (T, error) {
	t, err := p.word(what)
	if err != nil {
		var zero T
		return zero, err
	}
	v, ok := parse(t.text)
	if !ok {
		return v, p.errAt(t.col, bad, t.text)
	}
	return v, nil
}

func (p *parser) word(what string) (token, error) {
	t := p.next()
	if t.kind != tWord {
		return t, p.errAt(t.col, "expected %s, found %s", what, describe(t))
	}
	return t, nil
}

// name reads a bare or quoted name.
func (p *parser) name(what string) (string, error) {
	t := p.next()
	if t.kind != tWord && t.kind != tStr {
		return "", p.errAt(t.col, "expected %s, found %s", what, describe(t))
	}
	return t.text, nil
}

func (p *parser) end() error {
	if t := p.peek(); t.kind != 0 {
		return p.errAt(t.col, "unexpected %s", describe(t))
	}
	return nil
}

func (p *parser) parseLine() error {
	first := p.peek()
	if first.kind == tWord {
		switch first.text {
		case "graph":
			p.next()
			return p.parseGraph()
		case "buffer":
			p.next()
			if p.g == nil {
				return p.errAt(first.col, "buffer before any graph line")
			}
			return p.parseBuffer()
		case "reg":
			p.next()
			if p.g == nil {
				return p.errAt(first.col, "reg before any graph line")
			}
			return p.parseReg()
		}
	}
	if p.g == nil {
		return p.errAt(first.col, "expected a graph line, found %s", describe(first))
	}
	return p.parseInst()
}

// finish completes the graph being read: Graph.Buffer needs its index.
func (p *parser) finish() {
	if p.g != nil {
		p.g.bufIndex = map[string]int{}
		for i := len(p.g.Buffers) - 1; i >= 0; i-- {
			p.g.bufIndex[p.g.Buffers[i].Name] = i // the first of shared names wins, as in Graph.Buffer
		}
	}
}

func (p *parser) parseGraph() error {
	k, err := parseWord(p, "shape key (stage.sN.rN)", parseKey, "bad shape key %q, want prefill|decode.sSLOTS.rROWS")
	if err != nil {
		return err
	}
	if err := p.end(); err != nil {
		return err
	}
	p.finish()
	p.g = NewGraph(k)
	p.graphs = append(p.graphs, p.g)
	p.regs, p.bufs = map[string][]int{}, map[string][]int{}
	return nil
}

func parseKey(s string) (ShapeKey, bool) {
	parts := strings.Split(s, ".")
	if len(parts) != 3 || !strings.HasPrefix(parts[1], "s") || !strings.HasPrefix(parts[2], "r") {
		return ShapeKey{}, false
	}
	var k ShapeKey
	st, ok := bundle.ParseStage(parts[0])
	if !ok {
		return k, false
	}
	k.Stage = st
	var err1, err2 error
	k.Slots, err1 = strconv.Atoi(parts[1][1:])
	k.Rows, err2 = strconv.Atoi(parts[2][1:])
	return k, err1 == nil && err2 == nil
}

func (p *parser) parseBuffer() error {
	if err := p.expect("@"); err != nil {
		return err
	}
	var b Buffer
	var err error
	if b.Name, err = p.name("buffer name"); err != nil {
		return err
	}
	ct, err := p.word("buffer class")
	if err != nil {
		return err
	}
	for c, s := range bufClassNames {
		if s == ct.text {
			b.Class = c
		}
	}
	if b.Class == 0 {
		return p.errAt(ct.col, "unknown buffer class %q (weight, kv, io, out, recurrent)", ct.text)
	}
	seen := map[string]bool{}
	for p.peek().kind != 0 {
		kt, err := p.word("field")
		if err != nil {
			return err
		}
		if seen[kt.text] && kt.text != "source" {
			return p.errAt(kt.col, "field %s given twice", kt.text)
		}
		seen[kt.text] = true
		if err := p.expect("="); err != nil {
			return err
		}
		switch kt.text {
		case "tensor":
			b.Tensor, err = p.name("tensor name")
		case "source":
			var src string
			if src, err = p.name("source tensor name"); err == nil {
				b.Sources = append(b.Sources, src)
			}
		case "layerclass":
			b.LayerClass, err = p.name("layer class")
		case "type":
			var t token
			if t, err = p.word("type"); err == nil {
				ty, ok := ggml.ParseType(t.text)
				if !ok {
					n, perr := strconv.ParseUint(t.text, 10, 32)
					if perr != nil {
						return p.errAt(t.col, "unknown tensor type %q", t.text)
					}
					ty = ggml.Type(n)
				}
				b.Type = ty
			}
		case "dims":
			b.Dims, err = parseWord(p, "dims", func(s string) ([]int64, bool) { return splitInts(s, 0) }, "bad dims %q, want AxB…")
		case "bytes":
			b.Bytes, err = parseWord(p, "byte count", func(s string) (int64, bool) {
				n, err := strconv.ParseInt(s, 10, 64)
				return n, err == nil
			}, "bad byte count %q")
		default:
			return p.errAt(kt.col, "unknown buffer field %q (tensor, source, type, dims, layerclass, bytes)", kt.text)
		}
		if err != nil {
			return err
		}
	}
	p.bufs[b.Name] = append(p.bufs[b.Name], len(p.g.Buffers))
	p.g.Buffers = append(p.g.Buffers, b)
	return nil
}

func (p *parser) parseReg() error {
	if err := p.expect("%"); err != nil {
		return err
	}
	name, err := p.name("register name")
	if err != nil {
		return err
	}
	s, err := parseWord(p, "register shape RxCxE", func(s string) ([]int64, bool) { return splitInts(s, 3) },
		"bad register shape %q, want ROWSxCOLSxELEMBYTES")
	if err != nil {
		return err
	}
	if err := p.end(); err != nil {
		return err
	}
	p.regs[name] = append(p.regs[name], len(p.g.Regs))
	p.g.Regs = append(p.g.Regs, Reg{Name: name, Rows: int(s[0]), Cols: int(s[1]), Elem: int(s[2])})
	return nil
}

func (p *parser) parseInst() error {
	t := p.peek()
	if t.kind == tWord && t.text != "" && strings.Trim(t.text, "0123456789") == "" {
		p.next() // the instruction number: a reading aid only
	}
	op, err := parseWord(p, "opcode", ParseOp, "unknown opcode %q")
	if err != nil {
		return err
	}
	in := Inst{Op: op}
	list := &in.Reads
	for {
		t := p.peek()
		if t.kind == 0 || t.kind == tPunct && (t.text == "{" || t.text == "=>") {
			break
		}
		if t.kind == tPunct && t.text == "->" {
			if list == &in.Writes {
				return p.errAt(t.col, "second '->'")
			}
			p.next()
			list = &in.Writes
			continue
		}
		o, err := p.operand()
		if err != nil {
			return err
		}
		*list = append(*list, o)
	}
	if list != &in.Writes {
		return p.errAt(p.peek().col, "expected '->' between reads and writes")
	}
	if p.isPunct("{") {
		p.next()
		in.Attrs = Attrs{}
		for !p.isPunct("}") {
			kt := p.peek()
			k, err := p.name("attribute name or '}'")
			if err != nil {
				return err
			}
			if _, dup := in.Attrs[k]; dup {
				return p.errAt(kt.col, "attribute %s given twice", k)
			}
			if err := p.expect("="); err != nil {
				return err
			}
			vt, err := p.word("attribute value")
			if err != nil {
				return err
			}
			v, err := strconv.ParseFloat(vt.text, 64)
			if err != nil {
				return p.errAt(vt.col, "bad number %q", vt.text)
			}
			in.Attrs[k] = v
		}
		p.next()
	}
	if p.isPunct("=>") {
		p.next()
		if in.Kernel, err = p.name("kernel name"); err != nil {
			return err
		}
	}
	if err := p.end(); err != nil {
		return err
	}
	p.g.Insts = append(p.g.Insts, in)
	return nil
}

// operand reads role=%reg or role=@buf.
func (p *parser) operand() (Operand, error) {
	role, err := p.name("role")
	if err != nil {
		return Operand{}, err
	}
	if err := p.expect("="); err != nil {
		return Operand{}, err
	}
	st := p.next()
	o := Operand{Role: role}
	var names map[string][]int
	var n int
	switch {
	case st.kind == tPunct && st.text == "%":
		o.Kind, names, n = RegOperand, p.regs, len(p.g.Regs)
	case st.kind == tPunct && st.text == "@":
		o.Kind, names, n = BufOperand, p.bufs, len(p.g.Buffers)
	default:
		return o, p.errAt(st.col, "expected %%register or @buffer, found %s", describe(st))
	}
	what := map[OperandKind]string{RegOperand: "register", BufOperand: "buffer"}[o.Kind]
	if p.isPunct("#") {
		p.next()
		t, err := p.word(what + " index")
		if err != nil {
			return o, err
		}
		id, err := strconv.Atoi(t.text)
		if err != nil || id < 0 || id >= n {
			return o, p.errAt(t.col, "%s index %q out of range (%d declared)", what, t.text, n)
		}
		o.ID = id
		return o, nil
	}
	nt := p.peek()
	name, err := p.name(what + " name")
	if err != nil {
		return o, err
	}
	ids := names[name]
	switch len(ids) {
	case 0:
		return o, p.errAt(nt.col, "undeclared %s %s", what, strconv.Quote(name))
	case 1:
		o.ID = ids[0]
		return o, nil
	}
	return o, p.errAt(nt.col, "%s name %s is shared by %d entries; refer to it by index (#N)", what, strconv.Quote(name), len(ids))
}

// splitInts parses "AxBxC"; n > 0 requires exactly n parts.
func splitInts(s string, n int) ([]int64, bool) {
	parts := strings.Split(s, "x")
	if n > 0 && len(parts) != n {
		return nil, false
	}
	out := make([]int64, len(parts))
	for i, part := range parts {
		v, err := strconv.ParseInt(part, 10, 64)
		if err != nil {
			return nil, false
		}
		out[i] = v
	}
	return out, true
}
