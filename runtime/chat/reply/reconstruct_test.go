package reply

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/runtime/chat"
)

// llamaCppTools are tests/test-chat.cpp's special_function_tool and
// special_function_tool_with_optional_param.
var llamaCppTools = []chat.Tool{
	{Name: "special_function", Description: "I'm special", Parameters: json.RawMessage(`{
        "type": "object",
        "properties": {
            "arg1": {
                "type": "integer",
                "description": "The arg."
            }
        },
        "required": ["arg1"]
    }`)},
	{Name: "special_function_with_opt", Description: "I'm special but have optional stuff", Parameters: json.RawMessage(`{
        "type": "object",
        "properties": {
            "arg1": {
                "type": "integer",
                "description": "The arg."
            },
            "arg2": {
                "type": "integer",
                "description": "The optional arg."
            }
        },
        "required": ["arg1"]
    }`)},
}

// TestReconstruction is llama.cpp's expect_reconstruction check (in
// tests/test-chat.cpp's test_peg_parser, commit 2369b110), on the cases
// that ask for it with templates we carry: render the user's turn with a
// generation prompt, append a reply, parse the reply, and render the
// conversation again with the parsed message as the assistant's turn:
// it must start with the prompt and the reply. That ties rendering tool
// calls (and reasoning, ids, objects as arguments) to parsing them.
func TestReconstruction(t *testing.T) {
	tm := familyTemplates(t)
	cases := []struct {
		file, reply string
		tools       bool
	}{
		{"Qwen-Qwen2.5-7B-Instruct.jinja", msgAssist, false},
		{"Qwen-Qwen2.5-7B-Instruct.jinja", "<tool_call>\n{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}\n</tool_call>", true},
		{"Mistral-Small-3.2-24B-Instruct-2506.jinja", msgAssist, false},
		{"Mistral-Small-3.2-24B-Instruct-2506.jinja", "[TOOL_CALLS]special_function[CALL_ID]123456789[ARGS]{\"arg1\": 1}", true},
		{"Mistral-Small-3.2-24B-Instruct-2506.jinja", "[TOOL_CALLS]special_function[CALL_ID]000000001[ARGS]{\"arg1\": 1}[TOOL_CALLS]special_function_with_opt[CALL_ID]000000002[ARGS]{\"arg1\": 1, \"arg2\": 2}", true},
		{"mistralai-Ministral-3-14B-Reasoning-2512.jinja", msgAssist, false},
		{"mistralai-Ministral-3-14B-Reasoning-2512.jinja", "[THINK]I'm\nthinking[/THINK]Hello, world!\nWhat's up?", false},
		{"mistralai-Ministral-3-14B-Reasoning-2512.jinja", `[TOOL_CALLS]special_function[ARGS]{"arg1": 1}[TOOL_CALLS]special_function_with_opt[ARGS]{"arg1": 1, "arg2": 2}`, true},
		{"mistralai-Ministral-3-14B-Reasoning-2512.jinja", "[THINK]Let me think about [TOOL_CALLS]special_function[ARGS]{\"arg1\":1} and more[/THINK][TOOL_CALLS]special_function[ARGS]{\"arg1\": 1}", true},
		{"meta-llama-Llama-3.1-8B-Instruct.jinja", msgAssist, true},
		{"google-gemma-2-2b-it.jinja", "Hello, world!", false},
		{"google-gemma-2-2b-it.jinja", "Line 1\nLine 2\nLine 3", false},
	}
	for _, c := range cases {
		src := tm[c.file]
		if src == "" {
			t.Fatalf("%s not in families.json", c.file)
		}
		user := []chat.Message{{Role: "user", Content: "Hey there!"}}
		opt := chat.Options{AddGenerationPrompt: true}
		if c.tools {
			opt.Tools = llamaCppTools
		}
		prompt, _, err := chat.Apply(src, user, opt)
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		p := Detect(src).AfterPrompt(prompt).Parse(c.reply)
		msg := chat.Message{Role: "assistant", Content: p.Content, ReasoningContent: p.Reasoning, ToolCalls: p.ToolCalls}
		if !Detect(src).CallIDs {
			// The template never saw generated ids; llama.cpp's parsed
			// message has none either.
			for i := range msg.ToolCalls {
				msg.ToolCalls[i].ID = ""
			}
		}
		opt.AddGenerationPrompt = false
		full, _, err := chat.Apply(src, append(user, msg), opt)
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		if want := prompt + c.reply; !strings.HasPrefix(full, want) {
			t.Errorf("%s: reply %q parsed as %+v renders back as\n%q\nwant a prefix\n%q", c.file, c.reply, p, full, want)
		}
	}
}
