package reply

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/zrtdev/zrt/runtime/chat"
)

type status int

const (
	complete status = iota
	needMore
	invalid
)

// readCall reads the call(s) that marker opened from s, the text after
// the marker. It reports needMore while the text so far could still
// become a call, and invalid once no continuation could (or, when final,
// when it is not one): a decision never depends on where the text was
// cut, which is what keeps Stream and Parse in agreement.
func (f Format) readCall(marker, s string, final bool) ([]chat.ToolCall, int, status) {
	switch f.Kind {
	case Hermes:
		if strings.HasPrefix(strings.TrimLeft(s, spaces), "{") {
			return readHermesJSON(s, final)
		}
		return f.readTagged(s, "</tool_call>", final, f.hermesBody)
	case Gemma4:
		return f.readTagged(s, "<tool_call|>", final, gemmaBody)
	case Llama3:
		if marker == "" {
			return readJSON(s, final, llamaCall)
		}
		return readPythonTag(s, final)
	case MistralNemo:
		return readJSON(s, final, nemoCalls)
	case MistralArgs:
		return f.readMistralArgs(s, final)
	}
	return nil, 0, invalid
}

// readTagged reads a call body up to its closing tag; at the end of the
// reply a body without one counts if it parses.
func (f Format) readTagged(s, closer string, final bool, body func(string) ([]chat.ToolCall, bool)) ([]chat.ToolCall, int, status) {
	i := strings.Index(s, closer)
	n := i + len(closer)
	if i < 0 {
		if !final {
			return nil, 0, needMore
		}
		i, n = len(s), len(s)
	}
	calls, ok := body(s[:i])
	if !ok {
		return nil, 0, invalid
	}
	return calls, n, complete
}

// readHermesJSON reads {"name": ..., "arguments": ...} and the closing
// </tool_call> after it, so that a closing tag inside an argument string
// does not end the call. At the end of the reply the tag may be missing.
func readHermesJSON(s string, final bool) ([]chat.ToolCall, int, status) {
	const closer = "</tool_call>"
	calls, n, st := readJSON(s, final, func(b []byte) ([]chat.ToolCall, bool) {
		c, _, ok := callObject(b, "arguments")
		return []chat.ToolCall{c}, ok
	})
	if st != complete {
		return nil, 0, st
	}
	rest := strings.TrimLeft(s[n:], spaces)
	n = len(s) - len(rest)
	switch {
	case strings.HasPrefix(rest, closer):
		return calls, n + len(closer), complete
	case final && rest == "":
		return calls, n, complete
	case !final && strings.HasPrefix(closer, rest):
		return nil, 0, needMore
	}
	return nil, 0, invalid
}

// readJSON reads one JSON object or array at the start of s.
func readJSON(s string, final bool, conv func([]byte) ([]chat.ToolCall, bool)) ([]chat.ToolCall, int, status) {
	n := jsonSpan(s)
	switch {
	case n < 0:
		return nil, 0, invalid
	case n == 0:
		if final {
			return nil, 0, invalid
		}
		return nil, 0, needMore
	}
	calls, ok := conv([]byte(s[:n]))
	if !ok {
		return nil, 0, invalid
	}
	return calls, n, complete
}

// maxDepth bounds JSON nesting in jsonScan.
const maxDepth = 512

// jsonSpan finds the JSON object or array that starts s (after
// whitespace): its end when complete, 0 while it may go on, -1 when s
// cannot start one. Only brackets and strings are checked here; the
// caller validates the span.
func jsonSpan(s string) int {
	i := len(s) - len(strings.TrimLeft(s, spaces))
	switch {
	case i == len(s):
		return 0
	case s[i] != '{' && s[i] != '[':
		return -1
	}
	end, bad := jsonScan(s[i:])
	switch {
	case end > 0:
		return i + end
	case bad >= 0:
		return -1
	}
	return 0
}

// callObject reads {"name": ..., argsKey: {...}} (other keys ignored):
// the name must be a non-empty string; the arguments an object, or a
// string holding one, or absent ({}).
func callObject(b []byte, argsKeys ...string) (chat.ToolCall, map[string]json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil || m == nil {
		return chat.ToolCall{}, nil, false
	}
	var name string
	if json.Unmarshal(m["name"], &name) != nil || name == "" {
		return chat.ToolCall{}, nil, false
	}
	args := "{}"
	for _, k := range argsKeys {
		raw, ok := m[k]
		if !ok {
			continue
		}
		a, ok := argsText(raw)
		if !ok {
			return chat.ToolCall{}, nil, false
		}
		args = a
		break
	}
	return chat.ToolCall{Name: name, Arguments: args}, m, true
}

// argsText is the arguments as JSON text: an object as written, or the
// object a string holds.
func argsText(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '{' {
		return string(raw), true
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		t := strings.TrimSpace(s)
		if strings.HasPrefix(t, "{") && json.Valid([]byte(t)) {
			return t, true
		}
	}
	return "", false
}

func (f Format) hermesBody(body string) ([]chat.ToolCall, bool) {
	t := strings.TrimSpace(body)
	if strings.HasPrefix(t, "<function=") {
		return f.xmlCall(t)
	}
	if jsonSpan(t) != len(t) {
		return nil, false
	}
	c, _, ok := callObject([]byte(t), "arguments")
	if !ok {
		return nil, false
	}
	return []chat.ToolCall{c}, true
}

// xmlCall reads Qwen 3.5's <function=NAME><parameter=P>V</parameter>...
// </function>; each value is the text between the tags less one leading
// and one trailing newline, given as a JSON string where the tool's
// schema says string (or the text is not JSON), else as the JSON it is.
func (f Format) xmlCall(t string) ([]chat.ToolCall, bool) {
	rest := strings.TrimPrefix(t, "<function=")
	i := strings.Index(rest, ">")
	if i <= 0 || strings.ContainsAny(rest[:i], spaces+"<") {
		return nil, false
	}
	name := rest[:i]
	rest = strings.TrimLeft(rest[i+1:], spaces)
	var b strings.Builder
	b.WriteByte('{')
	for n := 0; ; n++ {
		if strings.HasPrefix(rest, "</function>") {
			if strings.TrimSpace(rest[len("</function>"):]) != "" {
				return nil, false
			}
			break
		}
		if !strings.HasPrefix(rest, "<parameter=") {
			return nil, false
		}
		rest = rest[len("<parameter="):]
		j := strings.Index(rest, ">")
		if j <= 0 {
			return nil, false
		}
		p := rest[:j]
		rest = rest[j+1:]
		k := strings.Index(rest, "</parameter>")
		if k < 0 {
			return nil, false
		}
		v := strings.TrimPrefix(rest[:k], "\n")
		v = strings.TrimSuffix(v, "\n")
		rest = strings.TrimLeft(rest[k+len("</parameter>"):], spaces)
		if n > 0 {
			b.WriteString(", ")
		}
		key, _ := json.Marshal(p)
		b.Write(key)
		b.WriteString(": ")
		if !f.paramIsString(name, p) && json.Valid([]byte(v)) && strings.TrimSpace(v) == v {
			b.WriteString(v)
		} else {
			q, _ := json.Marshal(v)
			b.Write(q)
		}
	}
	b.WriteByte('}')
	return []chat.ToolCall{{Name: name, Arguments: b.String()}}, true
}

func llamaCall(b []byte) ([]chat.ToolCall, bool) {
	c, _, ok := callObject(b, "parameters", "arguments")
	if !ok {
		return nil, false
	}
	return []chat.ToolCall{c}, true
}

// readPythonTag reads what follows <|python_tag|>: a JSON call, or a
// built-in call NAME.call(key="value", ...), or else code for the
// "python" tool, as Llama 3.1 writes them. Code runs to the end of the
// reply (the model ends it with <|eom_id|>).
func readPythonTag(s string, final bool) ([]chat.ToolCall, int, status) {
	t := strings.TrimLeft(s, spaces)
	if strings.HasPrefix(t, "{") {
		calls, n, st := readJSON(s, final, llamaCall)
		if st != invalid {
			return calls, n, st
		}
	}
	if !final {
		return nil, 0, needMore
	}
	code := strings.TrimSpace(s)
	if code == "" {
		return nil, 0, invalid
	}
	if c, ok := builtinCall(code); ok {
		return []chat.ToolCall{c}, len(s), complete
	}
	args, _ := json.Marshal(map[string]string{"code": code})
	return []chat.ToolCall{{Name: "python", Arguments: string(args)}}, len(s), complete
}

// builtinCall reads NAME.call(key=value, ...) with JSON-like values
// (Python string literals in double or single quotes, numbers, True,
// False, None).
func builtinCall(code string) (chat.ToolCall, bool) {
	i := strings.Index(code, ".call(")
	if i <= 0 || !strings.HasSuffix(code, ")") || !isName(code[:i]) {
		return chat.ToolCall{}, false
	}
	rest := strings.TrimSpace(code[i+len(".call(") : len(code)-1])
	var b strings.Builder
	b.WriteByte('{')
	for n := 0; rest != ""; n++ {
		eq := strings.Index(rest, "=")
		if eq <= 0 || !isName(strings.TrimSpace(rest[:eq])) {
			return chat.ToolCall{}, false
		}
		key := strings.TrimSpace(rest[:eq])
		rest = strings.TrimLeft(rest[eq+1:], spaces)
		val, m, ok := pyLiteral(rest)
		if !ok {
			return chat.ToolCall{}, false
		}
		rest = strings.TrimLeft(rest[m:], spaces)
		if rest != "" {
			if rest[0] != ',' {
				return chat.ToolCall{}, false
			}
			rest = strings.TrimLeft(rest[1:], spaces)
		}
		if n > 0 {
			b.WriteString(", ")
		}
		k, _ := json.Marshal(key)
		b.Write(k)
		b.WriteString(": ")
		b.WriteString(val)
	}
	b.WriteByte('}')
	return chat.ToolCall{Name: code[:i], Arguments: b.String()}, true
}

func isName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// pyLiteral reads one Python literal at the start of s as JSON text and
// the bytes it took.
func pyLiteral(s string) (string, int, bool) {
	if s == "" {
		return "", 0, false
	}
	if q := s[0]; q == '"' || q == '\'' {
		var sb strings.Builder
		for i := 1; i < len(s); i++ {
			switch c := s[i]; {
			case c == '\\' && i+1 < len(s):
				i++
				switch s[i] {
				case 'n':
					sb.WriteByte('\n')
				case 't':
					sb.WriteByte('\t')
				default:
					sb.WriteByte(s[i])
				}
			case c == q:
				out, _ := json.Marshal(sb.String())
				return string(out), i + 1, true
			default:
				sb.WriteByte(c)
			}
		}
		return "", 0, false
	}
	end := strings.IndexAny(s, ", \t\r\n")
	if end < 0 {
		end = len(s)
	}
	w := s[:end]
	switch w {
	case "True":
		return "true", end, true
	case "False":
		return "false", end, true
	case "None":
		return "null", end, true
	}
	if _, err := strconv.ParseFloat(w, 64); err == nil && json.Valid([]byte(w)) {
		return w, end, true
	}
	return "", 0, false
}

// nemoCalls reads Mistral Nemo's [{"name", "arguments", "id"}, ...].
func nemoCalls(b []byte) ([]chat.ToolCall, bool) {
	var items []json.RawMessage
	if json.Unmarshal(b, &items) != nil || len(items) == 0 {
		return nil, false
	}
	calls := make([]chat.ToolCall, 0, len(items))
	for _, it := range items {
		c, m, ok := callObject(it, "arguments")
		if !ok {
			return nil, false
		}
		if raw, ok := m["id"]; ok {
			var id string
			if json.Unmarshal(raw, &id) != nil {
				return nil, false
			}
			c.ID = id
		}
		calls = append(calls, c)
	}
	return calls, true
}

// readMistralArgs reads NAME[CALL_ID]ID[ARGS]{...} or NAME[ARGS]{...}.
func (f Format) readMistralArgs(s string, final bool) ([]chat.ToolCall, int, status) {
	name, n, st := readUntilTag(s, final, isNameByte, "[CALL_ID]", "[ARGS]")
	if st != complete {
		return nil, 0, st
	}
	tag := "[ARGS]"
	if strings.HasPrefix(s[n:], "[CALL_ID]") {
		tag = "[CALL_ID]"
	}
	pos := n + len(tag)
	var id string
	if tag == "[CALL_ID]" {
		var m int
		id, m, st = readUntilTag(s[pos:], final, isAlnum, "[ARGS]")
		if st != complete {
			return nil, 0, st
		}
		pos += m + len("[ARGS]")
	}
	calls, m, st := readJSON(s[pos:], final, func(b []byte) ([]chat.ToolCall, bool) {
		if !json.Valid(b) || bytes.TrimSpace(b)[0] != '{' {
			return nil, false
		}
		return []chat.ToolCall{{ID: id, Name: name, Arguments: strings.TrimSpace(string(b))}}, true
	})
	if st != complete {
		return nil, 0, st
	}
	return calls, pos + m, complete
}

// readUntilTag reads a non-empty run of bytes ok accepts that ends at one
// of tags.
func readUntilTag(s string, final bool, ok func(byte) bool, tags ...string) (string, int, status) {
	i := 0
	for i < len(s) && ok(s[i]) {
		i++
	}
	if i == len(s) {
		if final {
			return "", 0, invalid
		}
		return "", 0, needMore
	}
	for _, t := range tags {
		if strings.HasPrefix(s[i:], t) {
			if i == 0 {
				return "", 0, invalid
			}
			return s[:i], i, complete
		}
		if !final && strings.HasPrefix(t, s[i:]) {
			return "", 0, needMore
		}
	}
	return "", 0, invalid
}

func isNameByte(c byte) bool {
	return c == '_' || c == '-' || c == '.' || isAlnum(c)
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// gemmaBody reads Gemma 4's call:NAME{key:value,...} into a JSON call
// (llama.cpp's gemma4_to_json): strings are quoted with <|"|>, keys are
// bare, and numbers, true, false and null are as in JSON.
func gemmaBody(body string) ([]chat.ToolCall, bool) {
	t := strings.TrimSpace(body)
	if !strings.HasPrefix(t, "call:") {
		return nil, false
	}
	t = t[len("call:"):]
	i := strings.Index(t, "{")
	if i <= 0 || strings.ContainsAny(t[:i], spaces) {
		return nil, false
	}
	var b strings.Builder
	g := gemmaReader{s: t[i:]}
	if !g.value(&b, 0) || strings.TrimSpace(g.s) != "" {
		return nil, false
	}
	return []chat.ToolCall{{Name: t[:i], Arguments: b.String()}}, true
}

type gemmaReader struct{ s string }

const gemmaQuote = `<|"|>`

func (g *gemmaReader) ws() { g.s = strings.TrimLeft(g.s, spaces) }

// seq reads an object or array from its opener open (at g.s) to its
// closer end, writing it to b: items, each read and written by item,
// separated by commas (written ", ").
func (g *gemmaReader) seq(b *strings.Builder, open, end byte, item func() bool) bool {
	g.s = g.s[1:]
	b.WriteByte(open)
	g.ws()
	for n := 0; !strings.HasPrefix(g.s, string(end)); n++ {
		if n > 0 {
			if !strings.HasPrefix(g.s, ",") {
				return false
			}
			g.s = g.s[1:]
			b.WriteString(", ")
		}
		if !item() {
			return false
		}
		g.ws()
	}
	g.s = g.s[1:]
	b.WriteByte(end)
	return true
}

func (g *gemmaReader) value(b *strings.Builder, depth int) bool {
	if depth > maxDepth {
		return false
	}
	g.ws()
	switch {
	case strings.HasPrefix(g.s, gemmaQuote):
		rest := g.s[len(gemmaQuote):]
		j := strings.Index(rest, gemmaQuote)
		if j < 0 {
			return false
		}
		q, _ := json.Marshal(rest[:j])
		b.Write(q)
		g.s = rest[j+len(gemmaQuote):]
		return true
	case strings.HasPrefix(g.s, "{"):
		return g.seq(b, '{', '}', func() bool {
			g.ws()
			k := strings.IndexAny(g.s, ":}")
			if k <= 0 || g.s[k] != ':' {
				return false
			}
			key, _ := json.Marshal(g.s[:k])
			b.Write(key)
			b.WriteString(": ")
			g.s = g.s[k+1:]
			return g.value(b, depth+1)
		})
	case strings.HasPrefix(g.s, "["):
		return g.seq(b, '[', ']', func() bool { return g.value(b, depth+1) })
	}
	end := strings.IndexAny(g.s, ",}] \t\r\n")
	if end < 0 {
		end = len(g.s)
	}
	w := g.s[:end]
	if w == "" || !json.Valid([]byte(w)) || strings.ContainsAny(w[:1], `"{[`) {
		return false
	}
	b.WriteString(w)
	g.s = g.s[end:]
	return true
}
