package chat

import "testing"

// FuzzParseRequest checks that ParseMessages and ParseTools never panic,
// and that whatever they accept renders through a template that reads
// every field without failing on the values (only on the template).
func FuzzParseRequest(f *testing.F) {
	f.Add([]byte(`[{"role": "user", "content": "hi"}, {"role": "assistant", "content": null, "reasoning_content": "r", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{\"a\": [1, 2.5, null, true]}"}}]}, {"role": "tool", "tool_call_id": "c", "name": "f", "content": [{"type": "text", "text": "x"}]}]`),
		[]byte(`[{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {"a": {"type": "array"}}}}}]`))
	f.Add([]byte(`[{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"x": {"y": []}}}}]}]`), []byte(`null`))
	f.Add([]byte(`[]`), []byte(`[{"type": "function", "function": {"name": "f", "parameters": 3}}]`))
	tm := mustParse(`{% for m in messages %}{{ m.role }}{{ m.content }}{{ m.reasoning_content }}{% for tc in m.tool_calls or [] %}{{ tc.function.name }}{{ tc.function.arguments | tojson }}{% endfor %}{% endfor %}{{ tools | tojson }}`)
	f.Fuzz(func(t *testing.T, msgsJSON, toolsJSON []byte) {
		msgs, err := ParseMessages(msgsJSON)
		if err != nil {
			return
		}
		tools, err := ParseTools(toolsJSON)
		if err != nil {
			return
		}
		// Arguments or parameters that are not JSON are the caller's
		// error, reported, never a panic.
		_, _ = tm.Render(msgs, Options{Tools: tools})
		_, _, _ = Apply(tm.Source(), msgs, Options{Tools: tools})
	})
}
