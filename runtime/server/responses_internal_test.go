package server

import (
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/runtime/chat"
	"github.com/zrtdev/zrt/runtime/decode"
	"github.com/zrtdev/zrt/runtime/engine"
)

// TestResponseEvents streams a Qwen3-style reply (reasoning, content, two
// tool calls) through responseOut in small pieces: the events come in the
// Responses API's order (an item added, its part added, deltas, done,
// item done; sequence numbers counting up), their deltas add up to the
// items, and the streamed response equals the one built without a
// stream.
func TestResponseEvents(t *testing.T) {
	text := weatherReply + "\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}}\n</tool_call>"
	last := engine.Event{Finish: engine.Finish(decode.EOG), PromptTokens: 10, CompletionTokens: 40}
	whole := testResponseOut()
	whole.event(engine.Event{Text: text})
	want := whole.finish(last)

	type event struct {
		typ string
		ev  map[string]any
	}
	var events []event
	streamed := testResponseOut()
	streamed.emit = func(typ string, ev map[string]any) {
		ev["sequence_number"] = len(events)
		events = append(events, event{typ, ev})
	}
	for i := 0; i < len(text); i += 3 {
		streamed.event(engine.Event{Text: text[i:min(i+3, len(text))]})
	}
	got := streamed.finish(last)
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if string(gb) != string(wb) {
		t.Fatalf("streamed response\n%s\nnot streamed\n%s", gb, wb)
	}
	items := want["output"].([]map[string]any)
	var types []string
	for _, it := range items {
		types = append(types, it["type"].(string))
	}
	if !slices.Equal(types, []string{"reasoning", "message", "function_call", "function_call"}) {
		t.Fatalf("output items %v", types)
	}
	if items[2]["name"] != "get_weather" || items[2]["arguments"] != `{"city": "Paris"}` || items[3]["name"] != "add" || items[2]["call_id"] == items[3]["call_id"] || items[2]["call_id"] == "" {
		t.Errorf("calls %v %v", items[2], items[3])
	}
	if u := want["usage"].(map[string]any); u["output_tokens"] != 40 || u["output_tokens_details"].(map[string]any)["reasoning_tokens"] != 4 {
		t.Errorf("usage %v", u)
	}

	// Per item, the events in order, and the deltas adding up.
	deltas := map[string]*strings.Builder{}
	var order []string
	for _, e := range events {
		id, _ := e.ev["item_id"].(string)
		if item, ok := e.ev["item"].(map[string]any); ok {
			id = item["id"].(string)
		}
		order = append(order, e.typ)
		if d, ok := e.ev["delta"].(string); ok {
			if deltas[id] == nil {
				deltas[id] = &strings.Builder{}
			}
			deltas[id].WriteString(d)
		}
	}
	wantOrder := []string{"response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
		"response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done"}
	if !slices.Equal(slices.Compact(order), wantOrder) {
		t.Errorf("events\n%v\nwant (repeated deltas aside)\n%v", slices.Compact(order), wantOrder)
	}
	for _, it := range items {
		var full string
		switch it["type"] {
		case "function_call":
			full = it["arguments"].(string)
		default:
			full = it["content"].([]any)[0].(map[string]any)["text"].(string)
		}
		if d := deltas[it["id"].(string)]; d == nil || d.String() != full {
			t.Errorf("item %s: deltas %v, text %q", it["id"], d, full)
		}
	}

	// A reply with no text still has a message, with output_text "".
	empty := testResponseOut()
	res := empty.finish(engine.Event{Finish: engine.Finish(decode.Length)})
	if items := res["output"].([]map[string]any); len(items) != 1 || items[0]["type"] != "message" || res["status"] != "incomplete" {
		t.Errorf("an empty reply cut by max_output_tokens: %v", res)
	}
}

// TestResponsesInput: input items become the chat turn's messages:
// instructions first as system, a reasoning item's text on the next
// assistant turn, an assistant message and the function calls after it
// one assistant message with tool_calls, each output a tool message
// naming its call's function, and parts joined with "\n".
func TestResponsesInput(t *testing.T) {
	instructions := "Be brief."
	raw := `[{"role": "user", "content": [{"type": "input_text", "text": "weather"}, {"type": "input_text", "text": "and sum"}]},
		{"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "two calls"}]},
		{"type": "message", "role": "assistant", "id": "msg_1", "status": "completed", "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
		{"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
		{"type": "function_call", "call_id": "c2", "name": "add", "arguments": "{\"a\": 2, \"b\": 3}"},
		{"type": "function_call_output", "call_id": "c1", "output": "sunny"},
		{"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "5"}]},
		{"role": "assistant", "content": "Sunny; 5."},
		{"role": "user", "content": "thanks"}]`
	msgs, aerr := responsesInput(json.RawMessage(raw), &instructions)
	if aerr != nil {
		t.Fatal(aerr)
	}
	want := []chat.Message{
		{Role: "system", Content: "Be brief."},
		{Role: "user", Content: "weather\nand sum"},
		{Role: "assistant", Content: "Checking.", ReasoningContent: "two calls", ToolCalls: []chat.ToolCall{
			{ID: "c1", Name: "get_weather", Arguments: `{"city": "Paris"}`}, {ID: "c2", Name: "add", Arguments: `{"a": 2, "b": 3}`}}},
		{Role: "tool", Content: "sunny", ToolCallID: "c1", Name: "get_weather"},
		{Role: "tool", Content: "5", ToolCallID: "c2", Name: "add"},
		{Role: "assistant", Content: "Sunny; 5."},
		{Role: "user", Content: "thanks"},
	}
	if !reflect.DeepEqual(msgs, want) {
		t.Errorf("messages\n%+v\nwant\n%+v", msgs, want)
	}
	if msgs, aerr := responsesInput(json.RawMessage(`"hi"`), nil); aerr != nil || !reflect.DeepEqual(msgs, []chat.Message{{Role: "user", Content: "hi"}}) {
		t.Errorf("a string input: %+v %v", msgs, aerr)
	}
}

// testResponseOut is a responseOut of a streamingReply that counts a
// text's tokens as its words.
func testResponseOut() *responseOut {
	return &responseOut{id: "resp_1", reply: streamingReply(), fields: map[string]any{}, countTokens: func(s string) int { return len(strings.Fields(s)) }}
}

// TestResponseLogprobs: with logprobs asked for, a token's logprob goes
// with the output_text delta that shows its text — none with reasoning or
// calls — and the deltas' logprobs add up to the done event's and the
// part's.
func TestResponseLogprobs(t *testing.T) {
	text := "<think>\nThe user wants weather.\n</think>\n\nLet me check the forecast for you.\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}}\n</tool_call>"
	o := testResponseOut()
	o.logprobs = func(lps []decode.Logprobs) []chatLogprob {
		out := []chatLogprob{}
		for _, l := range lps {
			out = append(out, chatLogprob{Token: strconv.Itoa(int(l.Token)), Logprob: l.Logprob})
		}
		return out
	}
	var deltas, done []chatLogprob
	o.emit = func(typ string, ev map[string]any) {
		switch typ {
		case "response.output_text.delta":
			deltas = append(deltas, ev["logprobs"].([]chatLogprob)...)
		case "response.output_text.done":
			done = ev["logprobs"].([]chatLogprob)
		}
	}
	// Token i is the text's bytes 3i … 3i+2.
	for i := 0; 3*i < len(text); i++ {
		o.event(engine.Event{Token: int32(i), Text: text[3*i : min(3*i+3, len(text))], Logprobs: &decode.Logprobs{Token: int32(i), Logprob: -float64(i)}})
	}
	res := o.finish(engine.Event{Finish: engine.Finish(decode.EOG), CompletionTokens: len(text) / 3})
	var part []chatLogprob
	for _, it := range res["output"].([]map[string]any) {
		if it["type"] == "message" {
			part = it["content"].([]any)[0].(map[string]any)["logprobs"].([]chatLogprob)
		}
	}
	if len(done) == 0 || !reflect.DeepEqual(deltas, done) || !reflect.DeepEqual(part, done) {
		t.Fatalf("deltas' logprobs %v, done's %v, the part's %v", deltas, done, part)
	}
	thinkEnd := strings.Index(text, "</think>")
	callStart := strings.Index(text, "<tool_call>")
	prev := -1
	for _, l := range done {
		i, _ := strconv.Atoi(l.Token)
		if i <= prev || 3*i+3 <= thinkEnd || 3*i >= callStart+len("<tool_call>") {
			t.Fatalf("token %d (bytes %d-%d) in the message's logprobs %v: reasoning ends at %d, the call starts at %d", i, 3*i, 3*i+2, done, thinkEnd, callStart)
		}
		prev = i
	}
}
