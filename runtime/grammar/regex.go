package grammar

import (
	"errors"
	"fmt"
	"regexp/syntax"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// parseRegex compiles a regular expression (Go RE2 syntax) that the whole
// output must match into rules. Anchors at the ends are implicit.
func parseRegex(src string, lim Limits, b *budget) (*ruleSet, error) {
	body, err := regexGBNF(src, false, lim)
	if err != nil {
		return nil, err
	}
	return parseGBNF("root ::= "+body+"\n", "root", lim, b)
}

// regexGBNF returns a GBNF expression for the strings that regular
// expression src matches as a whole. With jsonContent, it matches those
// strings as they are written inside a JSON string (quotes, backslashes
// and control characters escaped), for a schema's "pattern".
func regexGBNF(src string, jsonContent bool, lim Limits) (string, error) {
	if len(src) > lim.SpecBytes {
		return "", &LimitError{Limit: "SpecBytes", Bound: int64(lim.SpecBytes), What: "regular expression of " + strconv.Itoa(len(src)) + " bytes"}
	}
	re, err := syntax.Parse(src, syntax.Perl)
	if err != nil {
		var se *syntax.Error
		if errors.As(err, &se) && (se.Code == syntax.ErrInvalidRepeatSize || se.Code == syntax.ErrLarge || se.Code == syntax.ErrNestingDepth) {
			return "", &LimitError{Limit: "Repeat", Bound: int64(lim.Repeat), What: "regular expression " + string(se.Code)}
		}
		return "", &SyntaxError{Lang: "regex", Offset: -1, Msg: err.Error()}
	}
	re = re.Simplify()
	// Anchors are allowed only at the ends, where they are implied.
	if re.Op == syntax.OpConcat {
		subs := re.Sub
		for len(subs) > 0 && isBeginAnchor(subs[0].Op) {
			subs = subs[1:]
		}
		for len(subs) > 0 && isEndAnchor(subs[len(subs)-1].Op) {
			subs = subs[:len(subs)-1]
		}
		re = &syntax.Regexp{Op: syntax.OpConcat, Sub: subs}
	} else if isBeginAnchor(re.Op) || isEndAnchor(re.Op) {
		re = &syntax.Regexp{Op: syntax.OpEmptyMatch}
	}
	w := &regexWriter{json: jsonContent, lim: lim}
	if err := w.write(re); err != nil {
		return "", err
	}
	return w.sb.String(), nil
}

func isBeginAnchor(op syntax.Op) bool { return op == syntax.OpBeginText || op == syntax.OpBeginLine }
func isEndAnchor(op syntax.Op) bool   { return op == syntax.OpEndText || op == syntax.OpEndLine }

type regexWriter struct {
	sb   strings.Builder
	json bool
	lim  Limits
}

func (w *regexWriter) write(re *syntax.Regexp) error {
	if w.sb.Len() > w.lim.SpecBytes*4+1<<16 {
		return &LimitError{Limit: "GrammarSize", Bound: int64(w.lim.GrammarSize), What: "regular expression expansion"}
	}
	switch re.Op {
	case syntax.OpNoMatch:
		w.sb.WriteString("[^\\x00-\\U0010FFFF]")
	case syntax.OpEmptyMatch:
		w.sb.WriteString(`""`)
	case syntax.OpLiteral:
		w.sb.WriteString("(")
		for _, r := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 {
				var rs []rune
				for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
					rs = append(rs, f, f)
				}
				rs = append(rs, r, r)
				w.class(rs)
			} else {
				w.class([]rune{r, r})
			}
			w.sb.WriteString(" ")
		}
		w.sb.WriteString(")")
	case syntax.OpCharClass:
		w.class(re.Rune)
	case syntax.OpAnyCharNotNL:
		w.class([]rune{0, '\n' - 1, '\n' + 1, utf8.MaxRune})
	case syntax.OpAnyChar:
		w.class([]rune{0, utf8.MaxRune})
	case syntax.OpCapture:
		return w.write(re.Sub[0])
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		w.sb.WriteString("(")
		if err := w.write(re.Sub[0]); err != nil {
			return err
		}
		w.sb.WriteString(")")
		switch re.Op {
		case syntax.OpStar:
			w.sb.WriteString("*")
		case syntax.OpPlus:
			w.sb.WriteString("+")
		case syntax.OpQuest:
			w.sb.WriteString("?")
		default:
			if re.Min > w.lim.Repeat || re.Max > w.lim.Repeat {
				return &LimitError{Limit: "Repeat", Bound: int64(w.lim.Repeat), What: "repetition count"}
			}
			if re.Max < 0 {
				fmt.Fprintf(&w.sb, "{%d,}", re.Min)
			} else {
				fmt.Fprintf(&w.sb, "{%d,%d}", re.Min, re.Max)
			}
		}
	case syntax.OpConcat:
		w.sb.WriteString("(")
		for _, s := range re.Sub {
			if err := w.write(s); err != nil {
				return err
			}
			w.sb.WriteString(" ")
		}
		w.sb.WriteString(`"")`)
	case syntax.OpAlternate:
		w.sb.WriteString("(")
		for i, s := range re.Sub {
			if i > 0 {
				w.sb.WriteString(" | ")
			}
			if err := w.write(s); err != nil {
				return err
			}
		}
		w.sb.WriteString(")")
	default:
		return &SyntaxError{Lang: "regex", Offset: -1, Msg: "unsupported " + opName(re.Op) + " (anchors only at the ends, no word boundaries)"}
	}
	return nil
}

func opName(op syntax.Op) string {
	switch op {
	case syntax.OpBeginLine, syntax.OpBeginText:
		return "start anchor inside the expression"
	case syntax.OpEndLine, syntax.OpEndText:
		return "end anchor inside the expression"
	case syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return "word boundary"
	}
	return "operator " + strconv.Itoa(int(op))
}

// class writes a class of code point pairs (lo, hi, lo, hi...). In JSON
// content, the characters a JSON string must escape are written escaped.
func (w *regexWriter) class(pairs []rune) {
	var rs []runeRange
	for i := 0; i+1 < len(pairs); i += 2 {
		rs = append(rs, runeRange{pairs[i], pairs[i+1]})
	}
	rs = normRanges(rs)
	var alts []string
	if w.json {
		var plain []runeRange
		for _, r := range rs {
			for c := r.lo; c <= r.hi && c < 0x20; c++ {
				alts = append(alts, gbnfLit(jsonEscapeRune(c)))
			}
			if r.lo <= '"' && '"' <= r.hi {
				alts = append(alts, gbnfLit(`\"`))
			}
			if r.lo <= '\\' && '\\' <= r.hi {
				alts = append(alts, gbnfLit(`\\`))
			}
			plain = append(plain, r)
		}
		rs = subtractRanges(plain, []runeRange{{0, 0x1f}, {'"', '"'}, {'\\', '\\'}})
	}
	if len(rs) > 0 || len(alts) == 0 {
		alts = append(alts, gbnfClass(rs))
	}
	if len(alts) == 1 {
		w.sb.WriteString(alts[0])
		return
	}
	w.sb.WriteString("(" + strings.Join(alts, " | ") + ")")
}

func subtractRanges(rs, minus []runeRange) []runeRange {
	return complementRanges(normRanges(append(complementRanges(rs), minus...)))
}

// jsonEscapeRune is how encoding/json writes a control character.
func jsonEscapeRune(c rune) string {
	switch c {
	case '\n':
		return `\n`
	case '\r':
		return `\r`
	case '\t':
		return `\t`
	}
	return fmt.Sprintf(`\u%04x`, c)
}

// gbnfLit writes s as a GBNF literal.
func gbnfLit(s string) string {
	var sb strings.Builder
	sb.WriteByte('"')
	for _, r := range s {
		writeGBNFChar(&sb, r, `"\`)
	}
	sb.WriteByte('"')
	return sb.String()
}

// gbnfClass writes code point ranges as a GBNF class; no ranges is a
// class that matches nothing.
func gbnfClass(rs []runeRange) string {
	if len(rs) == 0 {
		return `[^\x00-\U0010FFFF]`
	}
	var sb strings.Builder
	sb.WriteByte('[')
	for _, r := range rs {
		writeGBNFChar(&sb, r.lo, `]\^-[`)
		if r.hi != r.lo {
			sb.WriteByte('-')
			writeGBNFChar(&sb, r.hi, `]\^-[`)
		}
	}
	sb.WriteByte(']')
	return sb.String()
}

func writeGBNFChar(sb *strings.Builder, r rune, special string) {
	switch {
	case r < 0x20 || r == 0x7f:
		fmt.Fprintf(sb, `\x%02x`, r)
	case r < 0x80 && strings.ContainsRune(special, r):
		fmt.Fprintf(sb, `\x%02x`, r)
	case r >= 0x80 && r <= 0xFFFF:
		fmt.Fprintf(sb, `\u%04x`, r)
	case r > 0xFFFF:
		fmt.Fprintf(sb, `\U%08x`, r)
	default:
		sb.WriteRune(r)
	}
}

// Literal returns s as a GBNF string literal, escaped so that the
// grammar matches exactly s (for composing grammars, e.g. a tool's name).
func Literal(s string) string { return gbnfLit(s) }
