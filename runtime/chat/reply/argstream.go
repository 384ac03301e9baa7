package reply

import (
	"encoding/json"
	"strings"
)

// Arguments are sent as they are generated where the format puts them at
// the end of the call (Hermes JSON with "name" first, Mistral's [ARGS],
// gpt-oss's message body): the call is decided once its name and the
// opening of its arguments are read, and from then on it stays a call,
// however it ends. Arguments cut off by the end of the reply stay cut off,
// as OpenAI sends them when a reply runs out of tokens. Calls in other
// shapes are read whole (readCall).

// prefixReader reads a fixed shape from the start of a text that may still
// be growing: st turns needMore when the text ends first and invalid when
// it departs from the shape.
type prefixReader struct {
	s   string
	pos int
	st  status
}

func (p *prefixReader) ok() bool { return p.st == complete }

func (p *prefixReader) ws() {
	for p.pos < len(p.s) && strings.IndexByte(spaces, p.s[p.pos]) >= 0 {
		p.pos++
	}
}

func (p *prefixReader) lit(l string) {
	if !p.ok() {
		return
	}
	rest := p.s[p.pos:]
	switch {
	case strings.HasPrefix(rest, l):
		p.pos += len(l)
	case strings.HasPrefix(l, rest):
		p.st = needMore
	default:
		p.st = invalid
	}
}

// str reads a JSON string.
func (p *prefixReader) str() string {
	if !p.ok() {
		return ""
	}
	if p.pos == len(p.s) {
		p.st = needMore
		return ""
	}
	if p.s[p.pos] != '"' {
		p.st = invalid
		return ""
	}
	for i := p.pos + 1; i < len(p.s); i++ {
		switch p.s[i] {
		case '\\':
			i++
		case '"':
			var v string
			if json.Unmarshal([]byte(p.s[p.pos:i+1]), &v) != nil {
				p.st = invalid
				return ""
			}
			p.pos = i + 1
			return v
		}
	}
	p.st = needMore
	return ""
}

// callHead reads a streamable call up to its arguments: the name, the id
// the model gave, and where the arguments' "{" is.
func (f Format) callHead(s string, final bool) (name, id string, argAt int, st status) {
	switch {
	case f.Kind == Hermes:
		p := prefixReader{s: s}
		p.ws()
		p.lit("{")
		p.ws()
		p.lit(`"name"`)
		p.ws()
		p.lit(":")
		p.ws()
		name = p.str()
		p.ws()
		p.lit(",")
		p.ws()
		p.lit(`"arguments"`)
		p.ws()
		p.lit(":")
		p.ws()
		p.lit("{")
		if p.ok() && name == "" {
			p.st = invalid
		}
		st, argAt = p.st, p.pos-1
	case f.Kind == MistralArgs:
		var n int
		name, n, st = readUntilTag(s, final, isNameByte, "[CALL_ID]", "[ARGS]")
		if st != complete {
			break
		}
		pos := n
		if strings.HasPrefix(s[n:], "[CALL_ID]") {
			var m int
			id, m, st = readUntilTag(s[n+len("[CALL_ID]"):], final, isAlnum, "[ARGS]")
			if st != complete {
				break
			}
			pos = n + len("[CALL_ID]") + m
		}
		p := prefixReader{s: s, pos: pos}
		p.lit("[ARGS]")
		p.ws()
		p.lit("{")
		st, argAt = p.st, p.pos-1
	default:
		st = invalid
	}
	if st == needMore && final {
		st = invalid
	}
	return name, id, argAt, st
}

// jsonScan reads the JSON object or array that starts s: its length when
// it is closed, or the index of the first byte that cannot belong to it
// (bad), or neither while it goes on. Only brackets and strings are
// checked.
func jsonScan(s string) (end, bad int) {
	var stack []byte
	inStr, esc := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if inStr {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
			continue
		}
		switch c {
		case '"':
			if len(stack) == 0 {
				return 0, i
			}
			inStr = true
		case '{', '[':
			if len(stack) >= maxDepth {
				return 0, i
			}
			stack = append(stack, c)
		case '}', ']':
			open := byte('{')
			if c == ']' {
				open = '['
			}
			if len(stack) == 0 || stack[len(stack)-1] != open {
				return 0, i
			}
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return i + 1, -1
			}
		default:
			if len(stack) == 0 && strings.IndexByte(spaces, c) < 0 {
				return 0, i
			}
		}
	}
	return 0, -1
}

// sendArgs appends argument text to call idx in d, merging with the call's
// entry already there.
func sendArgs(d *Delta, idx int, text string) {
	if text == "" {
		return
	}
	if n := len(d.ToolCalls); n > 0 && d.ToolCalls[n-1].Index == idx {
		d.ToolCalls[n-1].Arguments += text
		return
	}
	d.ToolCalls = append(d.ToolCalls, CallDelta{Index: idx, Arguments: text})
}

// streamArgs sends the arguments of the call being streamed and reports
// whether the call has ended.
func (s *Stream) streamArgs(d *Delta, final bool) bool {
	a := s.pending[s.argAt:]
	end, bad := jsonScan(a)
	upTo := len(a)
	switch {
	case end > 0:
		upTo = end
	case bad >= 0:
		upTo = bad
	}
	sendArgs(d, s.calls, a[s.argSent:upTo])
	s.argSent = upTo
	if end == 0 && bad < 0 && !final {
		return false
	}
	consumed := s.argAt + upTo
	if end > 0 && s.f.Kind == Hermes {
		// The call object's "}" and </tool_call> follow the arguments.
		p := prefixReader{s: s.pending, pos: consumed}
		p.ws()
		p.lit("}")
		p.ws()
		p.lit("</tool_call>")
		switch {
		case p.st == complete:
			consumed = p.pos
		case p.st == needMore && !final:
			return false
		case p.st == needMore && strings.TrimLeft(s.pending[consumed:], spaces+"}") == "":
			consumed = len(s.pending)
		}
	}
	if end == 0 && bad < 0 {
		consumed = len(s.pending)
	}
	s.pending = s.pending[consumed:]
	s.streaming = false
	s.calls++
	return true
}
