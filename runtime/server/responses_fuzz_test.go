package server_test

import (
	"strings"
	"testing"
)

// FuzzResponses sends arbitrary bodies to /v1/responses through the
// server's handler itself (a panic fails the run): every answer is a
// status whose error body, for a 4xx or 5xx, is an OpenAI error object
// with a message, and a streamed success ends with a terminal event.
func FuzzResponses(f *testing.F) {
	for _, s := range []string{
		`{"input":"Once upon a time","max_output_tokens":4}`,
		`{"input":"x","max_output_tokens":3,"stream":true}`,
		`{"instructions":"Be brief.","input":[{"role":"user","content":[{"type":"input_text","text":"Hi"}]}],"max_output_tokens":2,"temperature":0}`,
		`{"input":[{"role":"user","content":"Hi"},{"type":"reasoning","summary":[{"type":"summary_text","text":"r"}]},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"ok"}],"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"max_output_tokens":2}`,
		`{"input":"x","tools":[{"type":"function","name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}}],"tool_choice":"required","max_output_tokens":8}`,
		`{"input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"f"},"max_output_tokens":8,"stream":true}`,
		`{"input":"x","text":{"format":{"type":"json_schema","name":"a","strict":true,"schema":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}}},"max_output_tokens":8}`,
		`{"input":"x","text":{"format":{"type":"json_object"}},"max_output_tokens":3,"reasoning":{"effort":"low"}}`,
		`{"input":"x","previous_response_id":"resp_1"}`, `{"input":[{"type":"item_reference","id":"a"}]}`,
		`{"input":[]}`, `{"input":{}}`, `{`, `null`, `[]`, ``, `{"input":"x","max_output_tokens":1e300}`,
		`{"input":[{"role":"assistant","content":[{"type":"output_text","text":"a"},{"type":"refusal","refusal":"b"}]}],"max_output_tokens":2}`,
	} {
		f.Add(s)
	}
	ts := serveStories(f, serveOptions{slots: 2, chunkCap: 64})
	h := ts.srv.Handler()
	f.Fuzz(func(t *testing.T, body string) {
		rec := serveJSON(h, "/v1/responses", body)
		if rec.Code < 400 {
			out := rec.Body.String()
			if strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream") &&
				!strings.Contains(out, "event: response.completed") && !strings.Contains(out, "event: response.incomplete") && !strings.Contains(out, "event: response.failed") {
				t.Fatalf("a stream without a terminal event: %q", out)
			}
			return
		}
		wantAPIError(t, rec)
	})
}
