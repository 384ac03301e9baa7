package chat_test

import (
	"strings"
	"testing"

	"github.com/zrtdev/zrt/internal/testmodel"
	"github.com/zrtdev/zrt/runtime/chat"
)

var twoTurns = []chat.Message{
	{Role: "system", Content: "You are a helpful assistant."},
	{Role: "user", Content: "Hello!"},
	{Role: "assistant", Content: "Hi there, how can I help?"},
	{Role: "user", Content: "Tell me a story."},
}

// TestChatPromptTokens checks the prompt ids of a two-turn conversation:
// exactly llama.cpp's formatting (the rendered text it produces for these
// templates, tokenized with special tokens parsed), spelled out here as the
// sequence of special-token ids and plain-text pieces it must consist of.
func TestChatPromptTokens(t *testing.T) {
	type piece struct {
		special string // a special token's text, or
		text    string // plain text encoded without specials
	}
	cases := []struct {
		vocab string
		bos   bool
		want  []piece
	}{
		{"ggml-vocab-qwen2.gguf", false, []piece{
			{special: "<|im_start|>"}, {text: "system\nYou are a helpful assistant."}, {special: "<|im_end|>"}, {text: "\n"},
			{special: "<|im_start|>"}, {text: "user\nHello!"}, {special: "<|im_end|>"}, {text: "\n"},
			{special: "<|im_start|>"}, {text: "assistant\nHi there, how can I help?"}, {special: "<|im_end|>"}, {text: "\n"},
			{special: "<|im_start|>"}, {text: "user\nTell me a story."}, {special: "<|im_end|>"}, {text: "\n"},
			{special: "<|im_start|>"}, {text: "assistant\n"},
		}},
		{"ggml-vocab-llama-bpe.gguf", true, []piece{
			{special: "<|start_header_id|>"}, {text: "system"}, {special: "<|end_header_id|>"}, {text: "\n\nYou are a helpful assistant."}, {special: "<|eot_id|>"},
			{special: "<|start_header_id|>"}, {text: "user"}, {special: "<|end_header_id|>"}, {text: "\n\nHello!"}, {special: "<|eot_id|>"},
			{special: "<|start_header_id|>"}, {text: "assistant"}, {special: "<|end_header_id|>"}, {text: "\n\nHi there, how can I help?"}, {special: "<|eot_id|>"},
			{special: "<|start_header_id|>"}, {text: "user"}, {special: "<|end_header_id|>"}, {text: "\n\nTell me a story."}, {special: "<|eot_id|>"},
			{special: "<|start_header_id|>"}, {text: "assistant"}, {special: "<|end_header_id|>"}, {text: "\n\n"},
		}},
	}
	for _, c := range cases {
		tok := testmodel.Tokenizer(t, "vocab/"+c.vocab)
		got, fallback, err := chat.Prompt(tok, twoTurns)
		if err != nil || fallback {
			t.Fatalf("%s: fallback=%v err=%v", c.vocab, fallback, err)
		}
		var want []int32
		if c.bos {
			want = append(want, tok.Vocab().BOS)
		}
		for _, p := range c.want {
			if p.special != "" {
				id, ok := tok.TokenID(p.special)
				if !ok {
					t.Fatalf("%s: no token %q", c.vocab, p.special)
				}
				want = append(want, id)
				continue
			}
			want = append(want, tok.Encode(p.text, false, false)...)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d ids, want %d\n got %v\nwant %v", c.vocab, len(got), len(want), got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s: id %d is %d, want %d\n got %v\nwant %v", c.vocab, i, got[i], want[i], got, want)
			}
		}
		// The end-of-turn token stops generation.
		eot, _ := tok.TokenID(map[bool]string{false: "<|im_end|>", true: "<|eot_id|>"}[c.bos])
		if !tok.IsEOG(eot) {
			t.Errorf("%s: end-of-turn token %d is not end-of-generation", c.vocab, eot)
		}
	}
}

// TestPromptWithTools renders a tool conversation through the Qwen3
// vocabulary's template and checks that the text PromptWith returns is
// what Apply renders and what its ids encode, and that the tool call and
// the tool result reach the prompt.
func TestPromptWithTools(t *testing.T) {
	tok := testmodel.Tokenizer(t, "vocab/ggml-vocab-qwen2.gguf")
	tools, err := chat.ParseTools([]byte(`[{"type": "function", "function": {"name": "get_time", "description": "Time in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]`))
	if err != nil {
		t.Fatal(err)
	}
	msgs := []chat.Message{
		{Role: "user", Content: "Time in Paris?"},
		{Role: "assistant", ToolCalls: []chat.ToolCall{{ID: "call_1", Name: "get_time", Arguments: `{"city":"Paris"}`}}},
		{Role: "tool", ToolCallID: "call_1", Name: "get_time", Content: "14:05"},
	}
	opt := chat.Options{AddGenerationPrompt: true, Tools: tools, Vars: map[string]any{"enable_thinking": false}}
	text, ids, fallback, err := chat.PromptWith(tok, msgs, opt)
	if err != nil || fallback {
		t.Fatalf("fallback=%v err=%v", fallback, err)
	}
	v := tok.Vocab()
	want, _, err := chat.Apply(v.ChatTemplate, msgs, chat.Options{AddGenerationPrompt: true, Tools: tools, Vars: opt.Vars,
		BOSToken: tok.TokenText(v.BOS), EOSToken: tok.TokenText(v.EOS), KeepBOS: !v.AddBOS, KeepEOS: !v.AddEOS})
	if err != nil || text != want {
		t.Fatalf("PromptWith text differs from Apply (%v):\n%q\n%q", err, text, want)
	}
	for _, s := range []string{`"name": "get_time"`, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", "<tool_response>\n14:05\n</tool_response>", "<think>\n\n</think>\n\n"} {
		if !strings.Contains(text, s) {
			t.Errorf("prompt lacks %q:\n%s", s, text)
		}
	}
	if got := tok.Encode(text, true, true); len(got) != len(ids) {
		t.Fatalf("ids are not the text's: %d vs %d", len(ids), len(got))
	}
}
