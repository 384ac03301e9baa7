package chat

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zrtdev/zrt/format/gguf"
)

// toolCase is one entry of testdata/tools.json: a conversation with tools,
// tool calls, tool results and reasoning, in OpenAI's JSON, rendered by
// llama.cpp with a family's template (taken from families.json by file
// name).
type toolCase struct {
	Name           string          `json:"name"`
	TemplateFile   string          `json:"template_file"`
	Template       string          `json:"template"` // instead of TemplateFile
	BOS            string          `json:"bos"`
	EOS            string          `json:"eos"`
	Messages       json.RawMessage `json:"messages"`
	Tools          json.RawMessage `json:"tools"`
	EnableThinking bool            `json:"enable_thinking"`
	Want           string          `json:"want"`
}

// parse reads the case's messages and tools as the server would.
func (c toolCase) parse(t *testing.T) ([]Message, []Tool) {
	t.Helper()
	msgs, err := ParseMessages(c.Messages)
	if err != nil {
		t.Fatal(err)
	}
	tools, err := ParseTools(c.Tools)
	if err != nil {
		t.Fatal(err)
	}
	return msgs, tools
}

type toolData struct {
	Commit string     `json:"llama_cpp_commit"`
	Now    time.Time  `json:"now"`
	Cases  []toolCase `json:"cases"`
}

func loadToolData(t *testing.T) toolData {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "tools.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d toolData
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Cases) == 0 {
		t.Fatal("no cases")
	}
	return d
}

func familyTemplate(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "families.json"))
	if err != nil {
		t.Fatal(err)
	}
	var data struct {
		Cases []familyCase `json:"cases"`
	}
	if err := json.Unmarshal(b, &data); err != nil {
		t.Fatal(err)
	}
	for _, c := range data.Cases {
		if c.TemplateFile == file {
			return c.Template
		}
	}
	t.Fatalf("%s not in families.json", file)
	return ""
}

// TestToolFamilies renders conversations with tools offered, parallel and
// single tool calls, tool results and reasoning through the templates of
// the families that have a tools section (Qwen 2.5, 3 and 3.5, Llama
// 3.1, Mistral Small 3.2, Ministral 3, gpt-oss, Gemma 4), and requires
// Apply's prompt to equal llama.cpp's byte for byte. Cases named probe/
// carry small templates of ours (not a model's) that print what a
// template is given (messages as JSON, arguments as text, tools) under
// the markers llama.cpp keys its rewrites on: gpt-oss's thinking,
// Ministral 3's content blocks, the first Gemma 4 templates'
// tool_responses.
//
// The wants in testdata/tools.json came from llama.cpp at commit
// 2369b110d057cda00732e679ba661afd8973adea through a small program
// linked against its common library (not in this repository):
// common_chat_msgs_parse_oaicompat and common_chat_tools_parse_oaicompat
// on the case's JSON, then common_chat_templates_apply with
// common_chat_templates_init(no model, the template, BOS, EOS),
// use_jinja, add_generation_prompt, parallel_tool_calls, the case's
// enable_thinking and the clock fixed at "now" (so BOS and EOS stay, as
// KeepBOS and KeepEOS ask).
func TestToolFamilies(t *testing.T) {
	d := loadToolData(t)
	defer func(f func() time.Time) { now = f }(now)
	now = func() time.Time { return d.Now }
	for _, c := range d.Cases {
		t.Run(c.Name, func(t *testing.T) {
			src := c.Template
			if src == "" {
				src = familyTemplate(t, c.TemplateFile)
			}
			msgs, tools := c.parse(t)
			opt := Options{AddGenerationPrompt: true, BOSToken: c.BOS, EOSToken: c.EOS, KeepBOS: true, KeepEOS: true,
				Tools: tools, Vars: map[string]any{"enable_thinking": c.EnableThinking}}
			got, _, err := Apply(src, msgs, opt)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.Want {
				t.Errorf("%s: Apply differs from llama.cpp %.10s\n%s", c.Name, d.Commit, textDiff(got, c.Want))
			}
		})
	}
}

// TestToolFixture renders a tool conversation with the chat template of
// the synthetic Qwen3 fixture (read from its GGUF metadata, as the server
// does) and requires llama.cpp's prompt for the same conversation with
// Qwen3-0.6B's template, which the fixture carries.
func TestToolFixture(t *testing.T) {
	path := filepath.Join("..", "..", "..", "shared", "models", "synthetic", "syn-qwen3-chat-q8_0.gguf")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s not available: %v", path, err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	src, err := f.String("tokenizer.chat_template")
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if src != familyTemplate(t, "Qwen-Qwen3-0.6B.jinja") {
		t.Fatal("the fixture's template is no longer Qwen3-0.6B's")
	}
	d := loadToolData(t)
	defer func(f func() time.Time) { now = f }(now)
	now = func() time.Time { return d.Now }
	n := 0
	for _, c := range d.Cases {
		if c.TemplateFile != "Qwen-Qwen3-0.6B.jinja" {
			continue
		}
		n++
		msgs, tools := c.parse(t)
		got, _, err := Apply(src, msgs, Options{AddGenerationPrompt: true, Tools: tools, Vars: map[string]any{"enable_thinking": c.EnableThinking}})
		if err != nil {
			t.Fatal(err)
		}
		if got != c.Want {
			t.Errorf("%s: %s", c.Name, textDiff(got, c.Want))
		}
	}
	if n == 0 {
		t.Fatal("no Qwen3 cases")
	}
}

// TestToolsUndefinedWithoutTools checks that messages with no tool fields render as
// before tools existed: the same dict a {role, content} message gave.
func TestToolsUndefinedWithoutTools(t *testing.T) {
	out, err := mustParse(`{{ tools is defined }}|{{ messages[0] | tojson }}`).Render([]Message{{Role: "user", Content: "hi"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want := `False|{"role": "user", "content": "hi"}`; out != want {
		t.Fatalf("got %q, want %q", out, want)
	}
}

func TestObjectArguments(t *testing.T) {
	for src, want := range map[string]bool{
		`{% for m in messages %}{% for tc in m.tool_calls or [] %}{{ tc.function.arguments | tojson }}{% endfor %}{% endfor %}`:                                       true,
		`{% for m in messages %}{% for tc in m.tool_calls or [] %}{{ tc.function.arguments }}{% endfor %}{% endfor %}`:                                                false,
		`{% for m in messages %}{% for tc in m.tool_calls or [] %}{% for k, v in tc.function.arguments | items %}{{ k }}={{ v }}{% endfor %}{% endfor %}{% endfor %}`: true,
		`{% for m in messages %}{% for tc in m.tool_calls or [] %}{{ tc.function.arguments.arg }}{% endfor %}{% endfor %}`:                                            true,
		`{{ messages | length }}`:     false,
		`{{ raise_exception("no") }}`: false,
	} {
		if got := mustParse(src).objectArguments(); got != want {
			t.Errorf("%s: objectArguments = %v, want %v", src, got, want)
		}
	}
	// Apply gives arguments as objects only to templates that read them so.
	msgs := []Message{{Role: "assistant", ToolCalls: []ToolCall{{Name: "f", Arguments: `{"a":1}`}}}}
	for src, want := range map[string]string{
		`{% for m in messages %}{% if m.tool_calls %}{{ m.tool_calls[0].function.arguments | tojson }}{% endif %}{% endfor %}`: `{"a": 1}`,
		`{% for m in messages %}{% if m.tool_calls %}{{ m.tool_calls[0].function.arguments }}{% endif %}{% endfor %}`:          `{"a":1}`,
	} {
		got, _, err := Apply(src, msgs, Options{})
		if err != nil || got != want {
			t.Errorf("%s: %q %v, want %q", src, got, err, want)
		}
	}
	bad := []Message{{Role: "assistant", ToolCalls: []ToolCall{{Name: "f", Arguments: `{"a":`}}}}
	if _, _, err := Apply(`{% for m in messages %}{% if m.tool_calls %}{{ m.tool_calls[0].function.arguments | tojson }}{% endif %}{% endfor %}`, bad, Options{}); err == nil || !strings.Contains(err.Error(), "not JSON") {
		t.Errorf("bad arguments: %v", err)
	}
}

func TestParseToolsErrors(t *testing.T) {
	for _, raw := range []string{
		`{}`, `[{"function": {"name": "f"}}]`, `[{"type": "code", "function": {"name": "f"}}]`,
		`[{"type": "function"}]`, `[{"type": "function", "function": {"description": "x"}}]`,
	} {
		if _, err := ParseTools([]byte(raw)); err == nil {
			t.Errorf("ParseTools(%s): no error", raw)
		}
	}
	tools, err := ParseTools([]byte(`[{"type": "function", "function": {"name": "f"}}]`))
	if err != nil || len(tools) != 1 || tools[0].Name != "f" || tools[0].Parameters != nil {
		t.Fatalf("%+v %v", tools, err)
	}
	// A tool without parameters is given {} as llama.cpp gives it.
	out, err := mustParse(`{{ tools | tojson }}`).Render(nil, Options{Tools: tools})
	if err != nil || out != `[{"type": "function", "function": {"name": "f", "description": "", "parameters": {}}}]` {
		t.Fatalf("%q %v", out, err)
	}
	if _, err := ParseTools(nil); err != nil {
		t.Fatal(err)
	}
}

func TestParseMessagesErrors(t *testing.T) {
	for raw, param := range map[string]string{
		`{}`:                                   "messages",
		`null`:                                 "messages",
		`[{"content": "x"}]`:                   "messages[0].role",
		`[{"role": "user"}]`:                   "messages[0].content",
		`[{"role": "wizard", "content": "x"}]`: "messages[0].role",
		`[{"role": "user", "content": 3}]`:     "messages[0].content",
		`[{"role": 3, "content": "x"}]`:        "messages[0].role",
		`[{"role": "user", "content": "x"}, {"role": "user", "content": [{"type": "image_url"}]}]`:                               "messages[1].content[0]",
		`[{"role": "user", "content": null}]`:                                                                                    "messages[0].content",
		`[{"role": "tool", "content": "x"}]`:                                                                                     "messages[0].tool_call_id",
		`[{"role": "user", "content": "x", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}]`: "messages[0].tool_calls",
		`[{"role": "assistant", "tool_calls": [{"type": "function"}]}]`:                                                          "messages[0].tool_calls[0].function",
		`[{"role": "assistant", "tool_calls": [{"type": "x", "function": {"name": "f"}}]}]`:                                      "messages[0].tool_calls[0].type",
		`[{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f"}}]}]`:                               "messages[0].tool_calls[0].function.arguments",
		`[{"role": "assistant", "tool_calls": [{"type": "function", "function": {"arguments": "{}"}}]}]`:                         "messages[0].tool_calls[0].function.name",
	} {
		_, err := ParseMessages([]byte(raw))
		var me *MessageError
		if !errors.As(err, &me) || me.Param != param {
			t.Errorf("ParseMessages(%s): %v, want an error about %s", raw, err, param)
		}
	}
	// Text parts join with "\n", as llama.cpp joins them for a template
	// that takes string content (common_chat_msg::to_json_oaicompat), with
	// no separator after empty text.
	msgs, err := ParseMessages([]byte(`[{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
		{"role": "user", "content": [{"type": "text", "text": ""}, {"type": "text", "text": "c"}, {"type": "text", "text": ""}]},
		{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]},
		{"role": "tool", "tool_call_id": "c1", "content": "ok"}]`))
	if err != nil || msgs[0].Content != "a\nb" || msgs[1].Content != "c\n" || msgs[2].ToolCalls[0].Arguments != `{"x": 1}` || msgs[2].ToolCalls[0].ID != "c1" || msgs[3].ToolCallID != "c1" {
		t.Fatalf("%+v %v", msgs, err)
	}
}

// TestDeveloperRole: the wants are what llama.cpp (2369b110, through the
// program that made tools.json) renders for these two templates.
func TestDeveloperRole(t *testing.T) {
	msgs := []Message{{Role: "developer", Content: "be brief"}, {Role: "user", Content: "hi"}}
	roles := `{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}`
	for src, want := range map[string]string{
		roles:                       "system:be brief;user:hi;",
		"{# <|channel|> #}" + roles: "developer:be brief;user:hi;",
	} {
		got, _, err := Apply(src, msgs, Options{})
		if err != nil || got != want {
			t.Errorf("%q: %q %v, want %q", src, got, err, want)
		}
	}
	if msgs[0].Role != "developer" {
		t.Error("Apply changed the caller's messages")
	}
}
