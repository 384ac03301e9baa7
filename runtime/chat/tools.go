package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// ToolCall is one function call an assistant message made, as OpenAI's
// tool_calls carry it. Arguments is JSON text (an object, as the model
// wrote it or the client sent it).
type ToolCall struct {
	ID, Name, Arguments string
}

// Tool is one function a request offers the model (an OpenAI tools entry
// of type "function"). Parameters is its JSON Schema; nil means {}.
type Tool struct {
	Name, Description string
	Parameters        json.RawMessage
}

// ParseTools reads an OpenAI tools array the way llama.cpp does
// (common_chat_tools_parse_oaicompat): every entry must be of type
// "function" with a function object that has a name; description defaults
// to "" and parameters to {}. JSON null or an empty input is no tools.
func ParseTools(raw []byte) ([]Tool, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var entries []json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("tools: expected an array: %w", err)
	}
	out := make([]Tool, 0, len(entries))
	for i, e := range entries {
		var t struct {
			Type     *string `json:"type"`
			Function *struct {
				Name        *string         `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			} `json:"function"`
		}
		if err := json.Unmarshal(e, &t); err != nil {
			return nil, fmt.Errorf("tools[%d]: %w", i, err)
		}
		switch {
		case t.Type == nil:
			return nil, fmt.Errorf("tools[%d]: missing tool type", i)
		case *t.Type != "function":
			return nil, fmt.Errorf("tools[%d]: unsupported tool type %q", i, *t.Type)
		case t.Function == nil:
			return nil, fmt.Errorf("tools[%d]: missing tool function", i)
		case t.Function.Name == nil:
			return nil, fmt.Errorf("tools[%d]: missing function name", i)
		}
		p := bytes.TrimSpace(t.Function.Parameters)
		if len(p) == 0 || string(p) == "null" {
			p = nil
		}
		out = append(out, Tool{Name: *t.Function.Name, Description: t.Function.Description, Parameters: p})
	}
	return out, nil
}

// toolsValue is llama.cpp's common_chat_tools_to_json_oaicompat: each tool
// rebuilt as {"type": "function", "function": {"name", "description",
// "parameters"}} in that key order, the schema's own key order kept (the
// templates print it with tojson).
func toolsValue(tools []Tool) (*list, error) {
	l := &list{items: make([]any, 0, len(tools))}
	for i, t := range tools {
		var params any = newDict()
		if len(t.Parameters) > 0 {
			v, err := jsonValue(t.Parameters)
			if err != nil {
				return nil, fmt.Errorf("tool %d (%s): parameters: %w", i, t.Name, err)
			}
			params = v
		}
		fn := dictOf("name", t.Name, "description", t.Description, "parameters", params)
		l.items = append(l.items, dictOf("type", "function", "function", fn))
	}
	return l, nil
}

// messageValue is llama.cpp's common_chat_msg::to_json_oaicompat for a
// string-content message: role and content (always present, "" for none),
// then reasoning_content, name and tool_call_id where set, then
// tool_calls as {"type", "function": {"name", "arguments"}, "id"}.
// With objectArgs the arguments are given as the parsed object, as
// llama.cpp does for templates that read them as one
// (workaround::func_args_not_string).
func messageValue(m Message, objectArgs bool) (*dict, error) {
	d := dictOf("role", m.Role, "content", m.Content)
	if m.ReasoningContent != "" {
		d.set("reasoning_content", m.ReasoningContent)
	}
	if m.Name != "" {
		d.set("name", m.Name)
	}
	if m.ToolCallID != "" {
		d.set("tool_call_id", m.ToolCallID)
	}
	if len(m.ToolCalls) > 0 {
		l := &list{}
		for i, tc := range m.ToolCalls {
			var args any = tc.Arguments
			if objectArgs {
				v, err := jsonValue([]byte(tc.Arguments))
				if err != nil {
					return nil, fmt.Errorf("tool call %d (%s): arguments are not JSON: %w", i, tc.Name, err)
				}
				args = v
			}
			c := dictOf("type", "function", "function", dictOf("name", tc.Name, "arguments", args))
			if tc.ID != "" {
				c.set("id", tc.ID)
			}
			l.items = append(l.items, c)
		}
		d.set("tool_calls", l)
	}
	return d, nil
}

// harmonyMessages is what llama.cpp does to messages for gpt-oss's
// template (common_chat_params_init_gpt_oss): reasoning_content is also
// given as "thinking", which that template reads, and an assistant turn
// that has both reasoning and tool calls loses its content.
func harmonyMessage(d *dict) *dict {
	r, ok := d.m["reasoning_content"]
	if !ok {
		return d
	}
	out := newDict()
	_, calls := d.m["tool_calls"]
	for _, k := range d.keys {
		if k == "content" && calls {
			continue
		}
		out.set(k, d.m[k])
	}
	out.set("thinking", r)
	return out
}

// isMinistral3 is llama.cpp's test for Ministral 3 / Magistral templates
// (common_chat_try_specialized_template): Mistral Small 3.2 has [CALL_ID],
// they do not.
func isMinistral3(src string) bool {
	return strings.Contains(src, "[SYSTEM_PROMPT]") && strings.Contains(src, "[TOOL_CALLS]") &&
		strings.Contains(src, "[ARGS]") && !strings.Contains(src, "[CALL_ID]")
}

// ministralMessage is what llama.cpp does to system and assistant
// messages for Ministral 3's template (common_chat_params_init_ministral_3):
// the content becomes blocks, a {"type": "thinking"} block with the
// reasoning first where there is any, then a {"type": "text"} block, as
// that template renders reasoning only from blocks.
func ministralMessage(d *dict) *dict {
	role, _ := d.m["role"].(string)
	if role != "system" && role != "assistant" {
		return d
	}
	blocks := &list{}
	if r, ok := d.m["reasoning_content"]; ok {
		blocks.items = append(blocks.items, dictOf("type", "thinking", "thinking", r))
	}
	blocks.items = append(blocks.items, dictOf("type", "text", "text", d.m["content"]))
	out := newDict()
	for _, k := range d.keys {
		switch k {
		case "reasoning_content":
		case "content":
			out.set(k, blocks)
		default:
			out.set(k, d.m[k])
		}
	}
	return out
}

// gemma4ToolResponses is llama.cpp's rewrite of messages for the first
// Gemma 4 templates, which read tool results from the assistant turn
// instead of from tool messages (workaround::convert_tool_responses_gemma4
// in common/chat.cpp): an assistant turn with tool calls absorbs the tool
// messages after it as "tool_responses" ({"name", "response"}, the
// response parsed as JSON where it is JSON, named after the call in the
// same position, else the tool_call_id) and the assistant turn after
// those when it has content and no calls.
func gemma4ToolResponses(msgs *list) *list {
	str := func(d *dict, k string) string { s, _ := d.m[k].(string); return s }
	hasCalls := func(d *dict) bool {
		l, ok := d.m["tool_calls"].(*list)
		return ok && len(l.items) > 0
	}
	out := &list{}
	for i := 0; i < len(msgs.items); {
		d, ok := msgs.items[i].(*dict)
		if !ok || str(d, "role") != "assistant" || !hasCalls(d) {
			out.items = append(out.items, msgs.items[i])
			i++
			continue
		}
		calls := d.m["tool_calls"].(*list)
		reasoning, hasReasoning := d.m["reasoning_content"]
		responses := &list{}
		for i++; i < len(msgs.items); i++ {
			r, ok := msgs.items[i].(*dict)
			if !ok || str(r, "role") != "tool" {
				break
			}
			var resp any = r.m["content"]
			if s, ok := resp.(string); ok {
				if v, err := jsonValue([]byte(s)); err == nil {
					resp = v
				}
			}
			name := ""
			if n := len(responses.items); n < len(calls.items) {
				if c, ok := calls.items[n].(*dict); ok {
					if fn, ok := c.m["function"].(*dict); ok {
						name = str(fn, "name")
					}
				}
			}
			if name == "" {
				name = str(r, "tool_call_id")
			}
			responses.items = append(responses.items, dictOf("name", name, "response", resp))
		}
		var content any
		if i < len(msgs.items) {
			if next, ok := msgs.items[i].(*dict); ok && str(next, "role") == "assistant" && !hasCalls(next) {
				if c, ok := next.m["content"]; ok && truthy(c) {
					content = c
					i++
				}
			}
		}
		m := newDict()
		m.set("role", "assistant")
		m.set("tool_calls", calls)
		if len(responses.items) > 0 {
			m.set("tool_responses", responses)
		}
		if content != nil {
			m.set("content", content)
		}
		if hasReasoning {
			m.set("reasoning_content", reasoning)
		}
		out.items = append(out.items, m)
	}
	return out
}

// jsonValue parses JSON text into template values, keeping object key
// order (nlohmann's ordered_json, which llama.cpp renders with, does).
// Integers stay integers; other numbers are floats.
func jsonValue(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after JSON value")
	}
	return v, nil
}

// maxJSONDepth bounds nesting so hostile input cannot exhaust the stack.
const maxJSONDepth = 512

func decodeValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("JSON nested deeper than %d", maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			d := newDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, ok := kt.(string)
				if !ok {
					return nil, fmt.Errorf("object key %v is not a string", kt)
				}
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				d.set(k, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return d, nil
		case '[':
			l := &list{}
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return l, nil
		}
		return nil, fmt.Errorf("unexpected %v", t)
	case json.Number:
		s := t.String()
		if !strings.ContainsAny(s, ".eE") {
			if i, err := strconv.ParseInt(s, 10, 64); err == nil {
				return i, nil
			}
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("number %s: %w", s, err)
		}
		return f, nil
	case string, bool, nil:
		return t, nil
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok)
}

// objectArguments is llama.cpp's supports_object_arguments capability
// (jinja::caps_get): render a conversation whose tool call has arguments
// as the object {"arg": "value"} and report whether the template read
// that object's content (by key, by iterating it, or through tojson). An
// error counts as "no".
func (t *Template) objectArguments() bool {
	args := dictOf("arg", "value")
	call := dictOf("id", "call00001", "type", "function", "function", dictOf("name", "tool1", "arguments", args))
	msg := func(role, content string) *dict { return dictOf("role", role, "content", content) }
	asst := msg("assistant", "")
	asst.set("tool_calls", &list{items: []any{call}})
	tool := msg("tool", "Tool response")
	tool.set("tool_call_id", "call00001")
	msgs := &list{items: []any{
		msg("user", "User message"), asst, tool,
		msg("assistant", "The tool response was 'tool response'"),
		msg("user", "User message"),
	}}
	params, err := jsonValue([]byte(`{"type": "object", "properties": {"arg": {"type": "string", "description": "Arg description"}}, "required": ["arg"]}`))
	if err != nil {
		panic(err) // a constant
	}
	td := dictOf("name", "tool", "type", "function",
		"function", dictOf("name", "tool1", "description", "Tool description", "parameters", params))
	root := globals(now)
	root["messages"] = msgs
	root["tools"] = &list{items: []any{td}}
	root["bos_token"] = ""
	root["eos_token"] = ""
	root["add_generation_prompt"] = true
	r := &renderer{src: t.src, out: &strings.Builder{}, watch: args}
	r.push(root)
	if err := r.execBody(t.nodes); err != nil {
		return false
	}
	return r.touched
}

// touch notes a read of v for objectArguments' probe: deep says the whole
// value was read (tojson, string), not only v itself.
func (r *renderer) touch(v any, deep bool) {
	if r.watch == nil || r.touched {
		return
	}
	if deep {
		r.touched = reaches(v, r.watch, 0)
		return
	}
	if d, ok := v.(*dict); ok && d == r.watch {
		r.touched = true
	}
}

func reaches(v any, target *dict, depth int) bool {
	if depth > maxJSONDepth {
		return false
	}
	switch x := v.(type) {
	case *dict:
		if x == target {
			return true
		}
		for _, k := range x.keys {
			if reaches(x.m[k], target, depth+1) {
				return true
			}
		}
	case *list:
		for _, e := range x.items {
			if reaches(e, target, depth+1) {
				return true
			}
		}
	}
	return false
}

// Roles are the message roles OpenAI defines, the ones ParseMessages
// accepts: a template renders a role it does not know in ways no model was
// trained on, so an unknown role is the client's error, not a prompt.
var Roles = []string{"system", "developer", "user", "assistant", "tool"}

// MessageError is what ParseMessages found wrong, with the request
// parameter it is about as OpenAI's errors name one ("messages[2].content").
type MessageError struct {
	Param string
	Err   error
}

func (e *MessageError) Error() string { return e.Param + ": " + e.Err.Error() }

func (e *MessageError) Unwrap() error { return e.Err }

// msgErr is a *MessageError about param.
func msgErr(param, format string, args ...any) error {
	return &MessageError{Param: param, Err: fmt.Errorf(format, args...)}
}

// ParseMessages reads an OpenAI messages array the way llama.cpp's server
// does (common_chat_msgs_parse_oaicompat after oaicompat_chat_params_parse):
// content is a string, or an array of {"type": "text", "text": ...}
// parts joined with "\n" (as llama.cpp joins them for templates that take
// string content, which are all the templates this package renders); tool
// call arguments may be a JSON string or a JSON value (kept as its JSON
// text). It is stricter than llama.cpp where a request would otherwise
// render a prompt no model expects: the role must be one of Roles, only an
// assistant message with tool_calls may leave content out or null, only
// assistant messages carry tool_calls, and a tool message needs the
// tool_call_id of the call it answers. Errors are *MessageError.
func ParseMessages(raw []byte) ([]Message, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil || items == nil {
		return nil, msgErr("messages", "expected an array of messages")
	}
	out := make([]Message, 0, len(items))
	for i, it := range items {
		param := fmt.Sprintf("messages[%d]", i)
		var m struct {
			Role      *string         `json:"role"`
			Content   json.RawMessage `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function *struct {
					Name      *string         `json:"name"`
					Arguments json.RawMessage `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
			ReasoningContent string `json:"reasoning_content"`
			Name             string `json:"name"`
			ToolCallID       string `json:"tool_call_id"`
		}
		if err := json.Unmarshal(it, &m); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) && te.Field != "" {
				return nil, msgErr(param+"."+te.Field, "expected %s, not %s", jsonKind(te.Type.Kind()), te.Value)
			}
			return nil, msgErr(param, "expected a message object: %v", err)
		}
		switch {
		case m.Role == nil || *m.Role == "":
			return nil, msgErr(param+".role", "a message needs a role (roles: %s)", strings.Join(Roles, ", "))
		case !slices.Contains(Roles, *m.Role):
			return nil, msgErr(param+".role", "role %q is not a message role (roles: %s)", *m.Role, strings.Join(Roles, ", "))
		case len(m.ToolCalls) > 0 && *m.Role != "assistant":
			return nil, msgErr(param+".tool_calls", "only assistant messages carry tool_calls")
		case *m.Role == "tool" && m.ToolCallID == "":
			return nil, msgErr(param+".tool_call_id", "a tool message needs the tool_call_id of the call it answers")
		}
		if isNull(m.Content) && len(m.ToolCalls) == 0 {
			return nil, msgErr(param+".content", "no content (only an assistant message with tool_calls may have null content)")
		}
		msg := Message{Role: *m.Role, ReasoningContent: m.ReasoningContent, Name: m.Name, ToolCallID: m.ToolCallID}
		text, err := contentText(m.Content, param+".content")
		if err != nil {
			return nil, err
		}
		msg.Content = text
		for j, tc := range m.ToolCalls {
			cp := fmt.Sprintf("%s.tool_calls[%d]", param, j)
			switch {
			case tc.Type != "function":
				return nil, msgErr(cp+".type", "tool call type %q: want function", tc.Type)
			case tc.Function == nil:
				return nil, msgErr(cp+".function", "missing function")
			case tc.Function.Name == nil || *tc.Function.Name == "":
				return nil, msgErr(cp+".function.name", "missing function name")
			case isNull(tc.Function.Arguments):
				return nil, msgErr(cp+".function.arguments", "missing function arguments")
			}
			args := string(bytes.TrimSpace(tc.Function.Arguments))
			var s string
			if json.Unmarshal(tc.Function.Arguments, &s) == nil {
				args = s
			}
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: tc.ID, Name: *tc.Function.Name, Arguments: args})
		}
		out = append(out, msg)
	}
	return out, nil
}

// isNull reports whether raw is absent or JSON null.
func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// contentText reads a message's content (param names it in errors): a
// string, null (empty), or text parts joined with "\n".
func contentText(raw json.RawMessage, param string) (string, error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", msgErr(param, "%v", err)
		}
		return s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if raw[0] != '[' || json.Unmarshal(raw, &parts) != nil {
		return "", msgErr(param, "content must be a string or an array of text parts")
	}
	var b strings.Builder
	for k, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return "", msgErr(fmt.Sprintf("%s[%d]", param, k), "content part of type %q: only text parts are supported", p.Type)
		}
		if b.Len() > 0 { // llama.cpp: no separator after empty text
			b.WriteByte('\n')
		}
		b.WriteString(*p.Text)
	}
	return b.String(), nil
}

// jsonKind names the JSON value a Go kind reads, for errors in the
// request's terms.
func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "an array"
	case reflect.Bool:
		return "true or false"
	case reflect.Pointer, reflect.Struct, reflect.Map:
		return "an object"
	}
	return "a number"
}
