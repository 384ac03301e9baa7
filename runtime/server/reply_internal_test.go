package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/runtime/chat/reply"
)

// qwen3Format is the reply format of a Qwen3-style chat template: Hermes
// tool calls, reasoning between <think> and </think>.
var qwen3Format = reply.Format{Kind: reply.Hermes, ThinkStart: "<think>", ThinkEnd: "</think>"}

// weatherReply is a reply in qwen3Format: reasoning, content, a call.
const weatherReply = "<think>\nThe user wants weather.\n</think>\n\nLet me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"

// streamingReply is a chatReply of qwen3Format (call ids from seed 7)
// with its stream started.
func streamingReply() *chatReply {
	c := &chatReply{f: qwen3Format.WithIDs(7)}
	c.s = c.f.NewStream()
	return c
}

// TestChatReplyDeltas streams a Qwen3-style reply (reasoning, content, a
// tool call) through chatReply in small pieces: the deltas carry
// reasoning_content and content apart, the call arrives as delta.tool_calls
// with its index, id, type and name first, and they add up to the
// non-streamed message, which has the call and finish tool_calls.
func TestChatReplyDeltas(t *testing.T) {
	f, text := qwen3Format, weatherReply
	c := streamingReply()
	var deltas []map[string]any
	for i := 0; i < len(text); i += 3 {
		deltas = append(deltas, chatDeltas(c.add(text[i:min(i+3, len(text))]))...)
	}
	rest, calls := c.end()
	deltas = append(deltas, chatDeltas(rest)...)
	if !calls {
		t.Fatal("the stream saw no call")
	}
	var reasoning, content strings.Builder
	var args strings.Builder
	var id, name string
	for _, d := range deltas {
		if s, ok := d["reasoning_content"].(string); ok {
			reasoning.WriteString(s)
		}
		if s, ok := d["content"].(string); ok {
			content.WriteString(s)
		}
		if tc, ok := d["tool_calls"].([]any); ok {
			call := tc[0].(map[string]any)
			if call["index"] != 0 {
				t.Errorf("call index %v", call["index"])
			}
			fn := call["function"].(map[string]any)
			if call["id"] != nil {
				id, name = call["id"].(string), fn["name"].(string)
				if call["type"] != "function" {
					t.Errorf("call type %v", call["type"])
				}
			} else if id == "" {
				t.Errorf("a call's first delta has no id: %v", call)
			}
			args.WriteString(fn["arguments"].(string))
		}
	}
	msg, isCalls := chatMessage((&chatReply{f: f.WithIDs(7)}).parse(text))
	if !isCalls {
		t.Fatalf("the message is not calls: %v", msg)
	}
	tc := msg["tool_calls"].([]map[string]any)[0]
	fn := tc["function"].(map[string]any)
	if got := reasoning.String(); got != msg["reasoning_content"] || !strings.Contains(got, "The user wants weather.") {
		t.Errorf("reasoning %q, message %q", got, msg["reasoning_content"])
	}
	if got := content.String(); got != msg["content"] || !strings.Contains(got, "Let me check.") {
		t.Errorf("content %q, message %q", got, msg["content"])
	}
	var a map[string]any
	if id != tc["id"] || name != "get_weather" || name != fn["name"] || args.String() != fn["arguments"] || json.Unmarshal([]byte(args.String()), &a) != nil || a["city"] != "Paris" {
		t.Errorf("streamed call %s %s %s, message %v", id, name, args.String(), tc)
	}

	// A reply that does not parse as a call stays content.
	msg, isCalls = chatMessage((&chatReply{f: f}).parse("<tool_call>\n{\"name\": broken"))
	if isCalls || !strings.Contains(msg["content"].(string), "broken") {
		t.Errorf("a broken call: %v (calls %v)", msg, isCalls)
	}
}
