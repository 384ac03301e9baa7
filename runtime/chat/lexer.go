// Package chat renders chat messages into a prompt with a model's own
// Hugging Face chat template (a Jinja2 template stored as the GGUF key
// tokenizer.chat_template), the way llama.cpp does with --jinja.
//
// The package holds a small Jinja interpreter: lexer.go splits the source
// into text and tag tokens and applies Jinja's whitespace rules, parser.go
// builds an AST, eval.go walks it, filters.go holds filters, tests and
// methods, value.go the value model, apply.go the llama.cpp-compatible
// entry point. Only the subset real chat templates use is implemented;
// anything else is a parse or render error, never a silent difference.
package chat

import (
	"fmt"
	"strings"
)

// Error is a template syntax or render error. Line and Col are 1-based and
// point into the template source, so a broken template from a model file
// can be located without a Jinja toolchain.
type Error struct {
	Line, Col int
	Msg       string
	// Raised is set when the template itself failed through
	// raise_exception(...): the template rejected the conversation (for
	// example a system message it does not support), as opposed to a bug
	// in the template or in this interpreter.
	Raised bool
}

// Error formats the error as "chat template:LINE:COL: message".
func (e *Error) Error() string {
	return fmt.Sprintf("chat template:%d:%d: %s", e.Line, e.Col, e.Msg)
}

// errAt builds an *Error for byte offset pos of src.
func errAt(src string, pos int, format string, args ...any) *Error {
	line, col := lineCol(src, pos)
	return &Error{Line: line, Col: col, Msg: fmt.Sprintf(format, args...)}
}

// lineCol converts a byte offset into a 1-based line and column (in bytes).
func lineCol(src string, pos int) (int, int) {
	if pos > len(src) {
		pos = len(src)
	}
	if pos < 0 {
		pos = 0
	}
	line := 1 + strings.Count(src[:pos], "\n")
	col := pos - strings.LastIndexByte(src[:pos], '\n')
	return line, col
}

type tokKind int

const (
	tEOF        tokKind = iota
	tText               // literal template text
	tVarBegin           // {{
	tVarEnd             // }}
	tBlockBegin         // {%
	tBlockEnd           // %}
	tComment            // {# ... #}, removed after whitespace handling
	tName               // identifier or keyword
	tString             // string literal, val is the decoded value
	tInt                // integer literal
	tFloat              // float literal
	tOp                 // operator or punctuation
)

type token struct {
	kind tokKind
	val  string
	pos  int // byte offset in the source
	// strip records whitespace control: on a begin tag ({{- {%- {#-) it asks
	// to strip the whitespace before it, on an end tag (-}} -%} -#}) the
	// whitespace after it. A comment token carries both in stripL/strip.
	strip  bool
	stripL bool
}

// Operators, longest first so that "//" wins over "/".
var operators = []string{
	"==", "!=", "<=", ">=", "//", "**",
	"<", ">", "+", "-", "*", "/", "%", "~", "|", ".", ",", ":",
	"(", ")", "[", "]", "{", "}", "=",
}

// lex splits src into tokens and applies the whitespace rules. HF renders
// chat templates with trim_blocks and lstrip_blocks on, and so does llama.cpp;
// the rules below follow llama.cpp's minja, which is what this project must
// match (see trimText for the one place it differs from Python Jinja2).
func lex(src string) ([]token, error) {
	var toks []token
	i := 0
	for i < len(src) {
		j := nextTag(src, i)
		if j > i {
			toks = append(toks, token{kind: tText, val: src[i:j], pos: i})
		}
		if j == len(src) {
			break
		}
		i = j
		switch src[i+1] {
		case '#':
			end := strings.Index(src[i+2:], "#}")
			if end < 0 {
				return nil, errAt(src, i, "unterminated comment")
			}
			body := src[i+2 : i+2+end]
			toks = append(toks, token{kind: tComment, pos: i,
				stripL: strings.HasPrefix(body, "-"),
				strip:  strings.HasSuffix(body, "-")})
			i += 2 + end + 2
		case '{', '%':
			begin, end, closer := tVarBegin, tVarEnd, "}}"
			if src[i+1] == '%' {
				begin, end, closer = tBlockBegin, tBlockEnd, "%}"
			}
			bt := token{kind: begin, pos: i}
			i += 2
			if i < len(src) && src[i] == '-' {
				bt.strip = true
				i++
			} else if i < len(src) && src[i] == '+' && begin == tBlockBegin {
				i++ // {%+ disables lstrip_blocks; we accept and ignore it
			}
			toks = append(toks, bt)
			var err error
			if toks, i, err = lexTag(src, i, toks, end, closer); err != nil {
				return nil, err
			}
		}
	}
	return trimText(toks), nil
}

// nextTag returns the offset of the next "{{", "{%" or "{#" at or after i,
// or len(src).
func nextTag(src string, i int) int {
	for {
		k := strings.IndexByte(src[i:], '{')
		if k < 0 || i+k+1 >= len(src) {
			return len(src)
		}
		i += k
		if c := src[i+1]; c == '{' || c == '%' || c == '#' {
			return i
		}
		i++
	}
}

// lexTag lexes expression tokens from i up to the closing delimiter. Braces
// are balanced so that a dict literal's "}" followed by "}" is not taken for
// the end of a {{ }} tag.
func lexTag(src string, i int, toks []token, end tokKind, closer string) ([]token, int, error) {
	start := i
	depth := 0
	for {
		for i < len(src) && isSpace(src[i]) {
			i++
		}
		if i >= len(src) {
			return nil, i, errAt(src, start-2, "unterminated tag, missing %q", closer)
		}
		if depth == 0 {
			if strings.HasPrefix(src[i:], "-"+closer) {
				return append(toks, token{kind: end, pos: i, strip: true}), i + 3, nil
			}
			if strings.HasPrefix(src[i:], closer) {
				return append(toks, token{kind: end, pos: i}), i + 2, nil
			}
		}
		c := src[i]
		switch {
		case c == '"' || c == '\'':
			s, n, err := lexString(src, i)
			if err != nil {
				return nil, i, err
			}
			toks = append(toks, token{kind: tString, val: s, pos: i})
			i = n
		case isDigit(c):
			j := i
			for j < len(src) && (isDigit(src[j]) || src[j] == '_') {
				j++
			}
			kind := tInt
			if j+1 < len(src) && src[j] == '.' && isDigit(src[j+1]) {
				kind = tFloat
				j++
				for j < len(src) && isDigit(src[j]) {
					j++
				}
			}
			if j < len(src) && (src[j] == 'e' || src[j] == 'E') {
				k := j + 1
				if k < len(src) && (src[k] == '+' || src[k] == '-') {
					k++
				}
				if k < len(src) && isDigit(src[k]) {
					kind = tFloat
					for j = k; j < len(src) && isDigit(src[j]); j++ {
					}
				}
			}
			toks = append(toks, token{kind: kind, val: strings.ReplaceAll(src[i:j], "_", ""), pos: i})
			i = j
		case isNameStart(c):
			j := i + 1
			for j < len(src) && (isNameStart(src[j]) || isDigit(src[j])) {
				j++
			}
			toks = append(toks, token{kind: tName, val: src[i:j], pos: i})
			i = j
		default:
			op := ""
			for _, o := range operators {
				if strings.HasPrefix(src[i:], o) {
					op = o
					break
				}
			}
			if op == "" {
				return nil, i, errAt(src, i, "unexpected character %q", c)
			}
			switch op {
			case "(", "[", "{":
				depth++
			case ")", "]", "}":
				if depth > 0 {
					depth--
				}
			}
			toks = append(toks, token{kind: tOp, val: op, pos: i})
			i += len(op)
		}
	}
}

// lexString decodes a Python-style quoted string starting at src[i].
func lexString(src string, i int) (string, int, error) {
	q := src[i]
	var b strings.Builder
	j := i + 1
	for j < len(src) {
		c := src[j]
		switch {
		case c == q:
			return b.String(), j + 1, nil
		case c == '\\' && j+1 < len(src):
			j++
			switch e := src[j]; e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case '\\', '\'', '"':
				b.WriteByte(e)
			case '\n': // line continuation
			default:
				// Python keeps unknown escapes verbatim.
				b.WriteByte('\\')
				b.WriteByte(e)
			}
			j++
		default:
			b.WriteByte(c)
			j++
		}
	}
	return "", j, errAt(src, i, "unterminated string")
}

// trimText applies whitespace control to text tokens and drops comments.
//
//   - "-" on the neighbouring tag strips all whitespace on that side;
//   - lstrip_blocks: spaces and tabs between a line start and the next tag
//     are removed. minja (llama.cpp) does this before any tag, {{ included,
//     while Python Jinja2 only does it before {% and {#; we follow llama.cpp;
//   - trim_blocks: one newline right after a {% %} or {# #} tag is removed;
//   - a single trailing newline at the end of the template is removed.
func trimText(toks []token) []token {
	out := toks[:0:0]
	for i, t := range toks {
		if t.kind == tComment {
			out = append(out, t) // kept for neighbours; dropped below
			continue
		}
		if t.kind != tText {
			out = append(out, t)
			continue
		}
		s := t.val
		var next, prev *token
		if i+1 < len(toks) {
			next = &toks[i+1]
		}
		if i > 0 {
			prev = &toks[i-1]
		}
		switch {
		case next != nil && (next.strip && next.kind != tComment || next.kind == tComment && next.stripL):
			s = strings.TrimRight(s, " \t\n\r\f\v")
		case next != nil:
			k := len(s)
			for k > 0 && (s[k-1] == ' ' || s[k-1] == '\t') {
				k--
			}
			if (k == 0 && i == 0) || (k > 0 && s[k-1] == '\n') {
				s = s[:k]
			}
		}
		switch {
		case prev != nil && prev.strip:
			s = strings.TrimLeft(s, " \t\n\r\f\v")
		case prev != nil && (prev.kind == tBlockEnd || prev.kind == tComment):
			if strings.HasPrefix(s, "\n") {
				s = s[1:]
			} else if strings.HasPrefix(s, "\r\n") {
				s = s[2:]
			}
		}
		if next == nil {
			if strings.HasSuffix(s, "\r\n") {
				s = s[:len(s)-2]
			} else if strings.HasSuffix(s, "\n") {
				s = s[:len(s)-1]
			}
		}
		if s != "" {
			t.val = s
			out = append(out, t)
		}
	}
	// Comments have done their job as neighbours; remove them.
	res := out[:0]
	for _, t := range out {
		if t.kind != tComment {
			res = append(res, t)
		}
	}
	return res
}

func isSpace(c byte) bool     { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
func isDigit(c byte) bool     { return c >= '0' && c <= '9' }
func isNameStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
