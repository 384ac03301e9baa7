package reply

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/runtime/chat"
)

// familyTemplates returns the real templates of runtime/chat's
// testdata/families.json by llama.cpp file name.
func familyTemplates(t testing.TB) map[string]string {
	t.Helper()
	var data struct {
		Cases []struct {
			File     string `json:"template_file"`
			Template string `json:"template"`
		} `json:"cases"`
	}
	loadTestData(t, filepath.Join("..", "testdata", "families.json"), &data)
	out := map[string]string{}
	for _, c := range data.Cases {
		out[c.File] = c.Template
	}
	return out
}

// loadTestData decodes the JSON test data file at path into v.
func loadTestData(t testing.TB, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

func TestDetect(t *testing.T) {
	tm := familyTemplates(t)
	cases := []struct {
		file       string
		kind       Kind
		think      string
		callIDs    bool
		promptEnds string // a generation prompt; "" for none
		open       bool   // reply starts inside reasoning after it
	}{
		{"Qwen-Qwen2.5-7B-Instruct.jinja", Hermes, "", false, "", false},
		{"Qwen-Qwen3-0.6B.jinja", Hermes, "<think>", false, "<|im_start|>assistant\n", false},
		{"Qwen-Qwen3-0.6B.jinja", Hermes, "<think>", false, "<|im_start|>assistant\n<think>\n\n</think>\n\n", false},
		{"Qwen3.5-4B.jinja", Hermes, "<think>", false, "<|im_start|>assistant\n<think>\n", true},
		{"meta-llama-Llama-3.1-8B-Instruct.jinja", Llama3, "", false, "", false},
		{"Mistral-Small-3.2-24B-Instruct-2506.jinja", MistralArgs, "", true, "", false},
		{"mistralai-Ministral-3-14B-Reasoning-2512.jinja", MistralArgs, "[THINK]", false, "", false},
		{"openai-gpt-oss-120b.jinja", Harmony, "", false, "<|start|>assistant", false},
		{"google-gemma-4-31B-it.jinja", Gemma4, "<|channel>thought", false, "", false},
		{"google-gemma-2-2b-it.jinja", Plain, "", false, "", false},
		{"microsoft-Phi-3.5-mini-instruct.jinja", Plain, "", false, "", false},
	}
	for _, c := range cases {
		src, ok := tm[c.file]
		if !ok {
			t.Fatalf("%s not in families.json", c.file)
		}
		f := Detect(src).AfterPrompt(c.promptEnds)
		if f.Kind != c.kind || f.ThinkStart != c.think || f.CallIDs != c.callIDs || f.StartsInReasoning() != c.open {
			t.Errorf("%s: got %v think %q ids %v open %v; want %v %q %v %v", c.file, f.Kind, f.ThinkStart, f.CallIDs, f.StartsInReasoning(), c.kind, c.think, c.callIDs, c.open)
		}
	}
	// Templates not in families.json, by the markers llama.cpp keys on.
	for src, kind := range map[string]Kind{
		`{{- '[TOOL_CALLS][' }}`: MistralNemo, // Mistral Nemo, v0.3
		`{{- "<|start_header_id|>" }}{{ '{"name": function name, "parameters": ' }}`: Llama3, // Llama 3.2
		`<tool_call>\n{"name": <function-name>, "arguments": <args-dict>}`:           Hermes, // Hermes 2 Pro
		``: Plain,
	} {
		if got := Detect(src).Kind; got != kind {
			t.Errorf("Detect(%q) = %v, want %v", src, got, kind)
		}
	}
}

// call is a tool call in a test table; ID "" matches any id.
type call struct{ Name, Args, ID string }

// parseCase is a reply in some family's syntax and how llama.cpp splits
// it. Unless noted, input and expectation are llama.cpp's own, from
// tests/test-chat.cpp at 2369b110d057cda00732e679ba661afd8973adea
// (test_template_output_peg_parsers), with reasoning_format auto.
type parseCase struct {
	name      string
	f         Format
	in        string
	reasoning string
	content   string
	calls     []call
}

const (
	msgAssist = "Hello, world!\nWhat's up?"
	thoughts  = "I'm\nthinking"
)

func parseCases(t testing.TB) []parseCase {
	tm := familyTemplates(t)
	qwen25 := Detect(tm["Qwen-Qwen2.5-7B-Instruct.jinja"])
	qwen3 := Detect(tm["Qwen-Qwen3-0.6B.jinja"])
	qwen35 := Detect(tm["Qwen3.5-4B.jinja"])
	hermes := Format{Kind: Hermes}
	qwq := Format{Kind: Hermes, ThinkStart: "<think>", ThinkEnd: "</think>"}.AfterPrompt("<|im_start|>assistant\n<think>\n")
	nemo := Detect(`[TOOL_CALLS]`)
	small := Detect(tm["Mistral-Small-3.2-24B-Instruct-2506.jinja"])
	ministral := Detect(tm["mistralai-Ministral-3-14B-Reasoning-2512.jinja"])
	devstral := Format{Kind: MistralArgs}
	llama := Detect(tm["meta-llama-Llama-3.1-8B-Instruct.jinja"])
	oss := Detect(tm["openai-gpt-oss-120b.jinja"])
	gemma := Detect(tm["google-gemma-4-31B-it.jinja"])
	sf := func(args string) []call { return []call{{"special_function", args, ""}} }
	return []parseCase{
		{"qwen2.5/content", qwen25, msgAssist, "", msgAssist, nil},
		{"qwen2.5/call", qwen25, "<tool_call>\n{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}\n</tool_call>", "", "", sf(`{"arg1": 1}`)},
		{"hermes2pro/call", hermes, "<tool_call>\n{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}</tool_call>", "", "", sf(`{"arg1": 1}`)},
		{"hermes2pro/content-call", hermes, "Hello, world!\nWhat's up?<tool_call>\n{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}</tool_call>", "", msgAssist, sf(`{"arg1": 1}`)},
		// Reka Edge's cases, whose format is Hermes with <think>.
		{"hermes/think-content", qwen3, "<think>I'm\nthinking\n</think>\n\nHello, world!\nWhat's up?", thoughts, msgAssist, nil},
		{"hermes/parallel", qwen3, "<tool_call>\n{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": \"special_function_with_opt\", \"arguments\": {\"arg1\": 1, \"arg2\": 2}}\n</tool_call>", "", "",
			[]call{{"special_function", `{"arg1": 1}`, ""}, {"special_function_with_opt", `{"arg1": 1, "arg2": 2}`, ""}}},
		// llama.cpp's test compares content without surrounding
		// whitespace; its parser keeps the newline before the call.
		{"hermes/content-newline-call", qwen3, "Hello, world!\nWhat's up?\n<tool_call>\n{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}\n</tool_call>", "", msgAssist + "\n", sf(`{"arg1": 1}`)},
		{"qwq/forced-open", qwq, "Let me think about this...\n</think>\nThe answer is 42.", "Let me think about this...", "The answer is 42.", nil},
		{"qwq/empty-reasoning", qwq, "</think>Hello, world!", "", "Hello, world!", nil},
		{"qwen3.5/thoughts", qwen35.AfterPrompt("<|im_start|>assistant\n<think>\n"), "I'm\nthinking\n</think>\n\nHello, world!\nWhat's up?", thoughts, msgAssist, nil},
		{"qwen3.5/call", qwen35.AfterPrompt("<think>\n\n</think>\n\n"), "<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>", "", "", sf(`{"arg1": 1}`)},
		{"qwen3.5/thoughts-call", qwen35.AfterPrompt("<think>\n"), "I'm\nthinking\n</think>\n\n<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>", thoughts, "", sf(`{"arg1": 1}`)},
		{"qwen3.5/parallel", qwen35, "<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=special_function_with_opt>\n<parameter=arg1>\n1\n</parameter>\n<parameter=arg2>\n2\n</parameter>\n</function>\n</tool_call>", "", "",
			[]call{{"special_function", `{"arg1": 1}`, ""}, {"special_function_with_opt", `{"arg1": 1, "arg2": 2}`, ""}}},
		{"nemo/content", nemo, msgAssist, "", msgAssist, nil},
		{"nemo/call-id", nemo, "[TOOL_CALLS][{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}, \"id\": \"123456789\"}]", "", "", []call{{"special_function", `{"arg1": 1}`, "123456789"}}},
		{"mistral-small-3.2/call-id", small, "[TOOL_CALLS]special_function[CALL_ID]123456789[ARGS]{\"arg1\": 1}", "", "", []call{{"special_function", `{"arg1": 1}`, "123456789"}}},
		{"mistral-small-3.2/parallel", small, "[TOOL_CALLS]special_function[CALL_ID]000000001[ARGS]{\"arg1\": 1}[TOOL_CALLS]special_function_with_opt[CALL_ID]000000002[ARGS]{\"arg1\": 1, \"arg2\": 2}", "", "",
			[]call{{"special_function", `{"arg1": 1}`, "000000001"}, {"special_function_with_opt", `{"arg1": 1, "arg2": 2}`, "000000002"}}},
		{"devstral/call", devstral, "[TOOL_CALLS]special_function[ARGS]{\"arg1\": 1}", "", "", sf(`{"arg1": 1}`)},
		{"devstral/content-call", devstral, "Hello, world!\nWhat's up?[TOOL_CALLS]special_function[ARGS]{\"arg1\": 1}", "", msgAssist, sf(`{"arg1": 1}`)},
		{"ministral-3/thoughts", ministral, "[THINK]I'm\nthinking[/THINK]Hello, world!\nWhat's up?", thoughts, msgAssist, nil},
		{"ministral-3/call", ministral, `[TOOL_CALLS]special_function[ARGS]{"arg1":1}`, "", "", sf(`{"arg1":1}`)},
		{"ministral-3/thoughts-call", ministral, `[THINK]I'm` + "\n" + `thinking[/THINK][TOOL_CALLS]special_function[ARGS]{"arg1":1}`, thoughts, "", sf(`{"arg1":1}`)},
		{"ministral-3/marker-in-reasoning", ministral, "[THINK]Let me think about [TOOL_CALLS]special_function[ARGS]{\"arg1\":1} and more[/THINK][TOOL_CALLS]special_function[ARGS]{\"arg1\": 1}",
			"Let me think about [TOOL_CALLS]special_function[ARGS]{\"arg1\":1} and more", "", sf(`{"arg1": 1}`)},
		{"llama3.1/content", llama, msgAssist, "", msgAssist, nil},
		{"gpt-oss/final", oss, "<|channel|>final<|message|>Hello, world!\nWhat's up?", "", msgAssist, nil},
		{"gpt-oss/commentary", oss, "<|channel|>commentary<|message|>Hello, world!\nWhat's up?", "", msgAssist, nil},
		{"gpt-oss/analysis-final", oss, "<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>final<|message|>Hello, world!\nWhat's up?", thoughts, msgAssist, nil},
		{"gpt-oss/analysis-partial", oss, "<|channel|>analysis<|message|>I'm\nthinking", thoughts, "", nil},
		{"gpt-oss/recipient-in-role", oss, " to=functions.special_function<|channel|>analysis<|message|>{\"arg1\": 1}", "", "", sf(`{"arg1": 1}`)},
		{"gpt-oss/recipient-in-channel", oss, "<|channel|>analysis to=functions.special_function<|message|>{\"arg1\": 1}", "", "", sf(`{"arg1": 1}`)},
		{"gpt-oss/constrain", oss, " to=functions.special_function<|channel|>analysis <|constrain|>json<|message|>{\"arg1\": 1}", "", "", sf(`{"arg1": 1}`)},
		{"gpt-oss/commentary-call", oss, "<|channel|>commentary to=functions.special_function<|message|>{\"arg1\": 1}", "", "", sf(`{"arg1": 1}`)},
		{"gpt-oss/thoughts-call", oss, "<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant to=functions.special_function<|channel|>analysis<|message|>{\"arg1\": 1}", thoughts, "", sf(`{"arg1": 1}`)},
		{"gpt-oss/edit", oss, "<|channel|>analysis<|message|>Thinking about edit...<|end|><|start|>assistant<|channel|>commentary to=functions.edit <|constrain|>json<|message|>{\"oldString\": \"if (part < railCount - 1) {\", \"newString\": \"if (part < 4) {\", \"replaceAll\": false}",
			"Thinking about edit...", "", []call{{"edit", `{"oldString": "if (part < railCount - 1) {", "newString": "if (part < 4) {", "replaceAll": false}`, ""}}},
		{"gemma4/content", gemma, "Hello, world!", "", "Hello, world!", nil},
		{"gemma4/thoughts", gemma, "<|channel>thought\nI'm\nthinking<channel|>Hello, world!\nWhat's up?", thoughts, msgAssist, nil},
		{"gemma4/empty-thought", gemma, "<|channel>thought<channel|>Hello, world!\nWhat's up?", "", msgAssist, nil},
		{"gemma4/string", gemma, "<|tool_call>call:get_time{city:<|\"|>London<|\"|>}<tool_call|>", "", "", []call{{"get_time", `{"city": "London"}`, ""}}},
		{"gemma4/empty-args", gemma, "<|tool_call>call:empty_args{}<tool_call|>", "", "", []call{{"empty_args", `{}`, ""}}},
		{"gemma4/content-call", gemma, "Hello, world!\nWhat's up?<|tool_call>call:get_time{city:<|\"|>Paris<|\"|>}<tool_call|>", "", msgAssist, []call{{"get_time", `{"city": "Paris"}`, ""}}},
		{"gemma4/parallel", gemma, "<|tool_call>call:get_time{city:<|\"|>London<|\"|>}<tool_call|><|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>", "", "",
			[]call{{"get_time", `{"city": "London"}`, ""}, {"get_weather", `{"city": "Paris"}`, ""}}},
		{"gemma4/int", gemma, "<|tool_call>call:special_function{arg1:42}<tool_call|>", "", "", sf(`{"arg1": 42}`)},
		{"gemma4/negative", gemma, "<|tool_call>call:special_function{arg1:-7}<tool_call|>", "", "", sf(`{"arg1": -7}`)},
		{"gemma4/float", gemma, "<|tool_call>call:amount{orig:3.14}<tool_call|>", "", "", []call{{"amount", `{"orig": 3.14}`, ""}}},
		{"gemma4/bool", gemma, "<|tool_call>call:toggle{enabled:false}<tool_call|>", "", "", []call{{"toggle", `{"enabled": false}`, ""}}},
		{"gemma4/null", gemma, "<|tool_call>call:set_nullable{value:null}<tool_call|>", "", "", []call{{"set_nullable", `{"value": null}`, ""}}},
		{"gemma4/array", gemma, "<|tool_call>call:todo_list{todos:[<|\"|>buy milk<|\"|>,<|\"|>walk dog<|\"|>]}<tool_call|>", "", "", []call{{"todo_list", `{"todos":["buy milk","walk dog"]}`, ""}}},
		{"gemma4/dict", gemma, "<|tool_call>call:set_config{config:{theme:<|\"|>dark<|\"|>,count:3}}<tool_call|>", "", "", []call{{"set_config", `{"config":{"theme":"dark","count":3}}`, ""}}},
		{"gemma4/empty-array", gemma, "<|tool_call>call:todo_list{todos:[]}<tool_call|>", "", "", []call{{"todo_list", `{"todos":[]}`, ""}}},
		{"gemma4/exp", gemma, "<|tool_call>call:amount{orig:1.5e10}<tool_call|>", "", "", []call{{"amount", `{"orig": 1.5e10}`, ""}}},
		{"gemma4/trailing-end", gemma, "<|channel>thought\n<channel|>Hello, world!\nWhat's up?<channel|>", "", msgAssist, nil},
		{"gemma4/trailing-thought", gemma, "<|channel>thought\n<channel|>Hello, world!\nWhat's up?<|channel>thought\n<channel|>", "", msgAssist, nil},
		{"gemma4/trailing-both", gemma, "<|channel>thought\n<channel|>Hello, world!\nWhat's up?<|channel>thought\n<channel|><channel|>", "", msgAssist, nil},
		{"gemma4/empty-channel", gemma, "<|channel><|channel>thought\n<channel|>Hello, world!\nWhat's up?", "", msgAssist, nil},

		// zrt's own cases: formats llama.cpp's tests do not exercise, and
		// replies that must stay content.
		{"llama3/json-call", llama, `{"name": "special_function", "parameters": {"arg1": 1}}`, "", "", sf(`{"arg1": 1}`)},
		{"llama3/typed-json-call", llama, `{"type": "function", "name": "special_function", "parameters": {"arg1": 1}}`, "", "", sf(`{"arg1": 1}`)},
		{"llama3/python-tag-json", llama, `<|python_tag|>{"name": "special_function", "parameters": {"arg1": 1}}`, "", "", sf(`{"arg1": 1}`)},
		{"llama3/builtin", llama, `<|python_tag|>brave_search.call(query="today's weather in Paris")`, "", "", []call{{"brave_search", `{"query": "today's weather in Paris"}`, ""}}},
		{"llama3/code", llama, "<|python_tag|>print('hey')", "", "", []call{{"python", `{"code":"print('hey')"}`, ""}}},
		{"llama3/json-content", llama, `{"answer": 42}`, "", `{"answer": 42}`, nil},
		{"hermes/unclosed-complete", qwen25, "<tool_call>\n{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}", "", "", sf(`{"arg1": 1}`)},
		// Arguments cut off stay a call, as llama.cpp's partial parse
		// gives it (message_assist_call_cutoff_args) and OpenAI sends it.
		{"hermes/cut-off", qwen25, "<tool_call>\n{\"name\": \"special_function\", \"arguments\": {\"arg", "", "", sf(`{"arg`)},
		{"hermes/cut-before-args", qwen25, "<tool_call>\n{\"name\": \"special_function\", \"argu", "", "<tool_call>\n{\"name\": \"special_function\", \"argu", nil},
		{"hermes/args-first", qwen25, "<tool_call>\n{\"arguments\": {\"a\": 1}, \"name\": \"f\"}\n</tool_call>", "", "", []call{{"f", `{"a": 1}`, ""}}},
		{"hermes/content-after", qwen25, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\nDone.", "", "Done.", []call{{"f", `{}`, ""}}},
		{"mistral-args/cut-off", devstral, "[TOOL_CALLS]f[ARGS]{\"a\": [1,", "", "", []call{{"f", `{"a": [1,`, ""}}},
		{"mistral-args/bad-bracket", devstral, "[TOOL_CALLS]f[ARGS]{\"a\": 1] tail", "", "] tail", []call{{"f", `{"a": 1`, ""}}},
		{"hermes/not-a-call", qwen25, "Use <tool_call>like this</tool_call> then.", "", "Use <tool_call>like this</tool_call> then.", nil},
		{"hermes/arguments-string", qwen25, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>", "", "", []call{{"f", `{"a": 1}`, ""}}},
		{"hermes/closer-in-string", qwen25, "<tool_call>\n{\"name\": \"set_text\", \"arguments\": {\"text\": \"a </tool_call> b\"}}\n</tool_call>", "", "", []call{{"set_text", `{"text": "a </tool_call> b"}`, ""}}},
		{"hermes/junk-before-closer", qwen25, "<tool_call>{\"name\": \"f\"} x</tool_call>", "", "<tool_call>{\"name\": \"f\"} x</tool_call>", nil},
		{"qwen3/unclosed-think", qwen3, "<think>still thinking", "still thinking", "", nil},
		{"nemo/bad-json", nemo, "[TOOL_CALLS][{\"name\": 3}]", "", "[TOOL_CALLS][{\"name\": 3}]", nil},
		{"gpt-oss/not-harmony", oss, "just text", "", "just text", nil},
		{"gpt-oss/builtin-dropped", oss, "<|channel|>analysis<|message|>look<|end|><|start|>assistant<|channel|>analysis to=browser.search<|message|>{\"q\": 1}<|call|>", "look", "", nil},
	}
}

func checkParsed(t *testing.T, name string, got Parsed, c parseCase) {
	t.Helper()
	if got.Reasoning != c.reasoning || got.Content != c.content {
		t.Errorf("%s: reasoning %q content %q, want %q %q", name, got.Reasoning, got.Content, c.reasoning, c.content)
	}
	if len(got.ToolCalls) != len(c.calls) {
		t.Fatalf("%s: %d calls %+v, want %d %+v", name, len(got.ToolCalls), got.ToolCalls, len(c.calls), c.calls)
	}
	for i, w := range c.calls {
		g := got.ToolCalls[i]
		same := sameJSON(g.Arguments, w.Args)
		if !json.Valid([]byte(w.Args)) {
			same = g.Arguments == w.Args
		}
		if g.Name != w.Name || !same {
			t.Errorf("%s: call %d = %s(%s), want %s(%s)", name, i, g.Name, g.Arguments, w.Name, w.Args)
		}
		if w.ID != "" && g.ID != w.ID {
			t.Errorf("%s: call %d id %q, want %q", name, i, g.ID, w.ID)
		}
		if g.ID == "" {
			t.Errorf("%s: call %d has no id", name, i)
		}
	}
}

func sameJSON(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func TestParse(t *testing.T) {
	for _, c := range parseCases(t) {
		t.Run(c.name, func(t *testing.T) {
			checkParsed(t, c.name, c.f.Parse(c.in), c)
		})
	}
}

// collect concatenates a stream's deltas into a Parsed, checking that
// each call's first delta names it and that indexes come in order.
func collect(t testing.TB, ds []Delta) Parsed {
	var p Parsed
	for _, d := range ds {
		p.Reasoning += d.Reasoning
		p.Content += d.Content
		for _, c := range d.ToolCalls {
			switch {
			case c.Index == len(p.ToolCalls):
				if c.ID == "" || c.Name == "" {
					t.Errorf("first delta of call %d lacks id or name: %+v", c.Index, c)
				}
				p.ToolCalls = append(p.ToolCalls, chat.ToolCall{ID: c.ID, Name: c.Name})
			case c.Index < len(p.ToolCalls):
			default:
				t.Fatalf("call index %d skips ahead of %d", c.Index, len(p.ToolCalls))
			}
			p.ToolCalls[c.Index].Arguments += c.Arguments
		}
	}
	return p
}

// TestStreamPieces feeds every case byte by byte, in two pieces cut at
// every point, and in three, and requires the deltas to add up to Parse's
// result.
func TestStreamPieces(t *testing.T) {
	for _, c := range parseCases(t) {
		t.Run(c.name, func(t *testing.T) {
			want := c.f.WithIDs(7).Parse(c.in)
			run := func(pieces []string) {
				s := c.f.WithIDs(7).NewStream()
				var ds []Delta
				for _, p := range pieces {
					ds = append(ds, s.Add(p))
				}
				ds = append(ds, s.Flush())
				if got := collect(t, ds); !reflect.DeepEqual(got, want) {
					t.Fatalf("pieces %q:\ngot  %+v\nwant %+v", pieces, got, want)
				}
			}
			var bytewise []string
			for i := range len(c.in) {
				bytewise = append(bytewise, c.in[i:i+1])
			}
			run(bytewise)
			for i := 0; i <= len(c.in); i++ {
				run([]string{c.in[:i], c.in[i:]})
				for j := i; j <= len(c.in); j += 7 {
					run([]string{c.in[:i], c.in[i:j], c.in[j:]})
				}
			}
		})
	}
}

// TestStreamHoldsBack checks that text is released as soon as it is
// decided: content before a possible marker comes out at once, the part
// that may open a call waits.
func TestStreamHoldsBack(t *testing.T) {
	s := Format{Kind: Hermes, ThinkStart: "<think>", ThinkEnd: "</think>"}.NewStream()
	steps := []struct {
		in   string
		want Delta
	}{
		{"<thi", Delta{}},
		{"nk>\nhmm", Delta{Reasoning: "hmm"}},
		{" ok\n</th", Delta{Reasoning: " ok"}},
		{"ink>\n\nSure <tool", Delta{Content: "Sure"}},
		{"box> is", Delta{Content: " <toolbox> is"}},
		{" here.\n<tool_call>\n{\"name\": \"f\", ", Delta{Content: " here."}},
		{"\"arguments\": {}}\n</tool_call>", Delta{Content: "\n", ToolCalls: []CallDelta{{Index: 0, ID: Format{}.CallID(0), Name: "f", Arguments: "{}"}}}},
	}
	for i, st := range steps {
		if got := s.Add(st.in); !reflect.DeepEqual(got, st.want) {
			t.Fatalf("step %d (%q):\ngot  %+v\nwant %+v", i, st.in, got, st.want)
		}
	}
	if got := s.Flush(); !got.Empty() {
		t.Fatalf("flush: %+v", got)
	}
	if got := s.Add("more"); !got.Empty() {
		t.Fatalf("add after flush: %+v", got)
	}
}

func TestCallIDs(t *testing.T) {
	f := Format{Kind: Hermes}.WithIDs(42)
	a, b := f.CallID(0), f.CallID(1)
	if a == b || !strings.HasPrefix(a, "call_") || len(a) != 29 {
		t.Fatalf("ids %q %q", a, b)
	}
	if f.CallID(0) != a || (Format{Kind: Hermes}).WithIDs(43).CallID(0) == a {
		t.Fatal("ids are not a function of seed and index")
	}
	m := Format{Kind: MistralNemo}.WithIDs(42).CallID(3)
	if len(m) != 9 || strings.Trim(m, alnum) != "" {
		t.Fatalf("mistral id %q", m)
	}
	// A call without its own id gets the generated one.
	p := f.Parse("<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"g\"}</tool_call>")
	if len(p.ToolCalls) != 2 || p.ToolCalls[0].ID != a || p.ToolCalls[1].ID != b || p.ToolCalls[1].Arguments != "{}" {
		t.Fatalf("%+v", p.ToolCalls)
	}
}

func TestReasoningVars(t *testing.T) {
	off := false
	oss := Format{Kind: Harmony}
	qwen := Format{Kind: Hermes, ThinkStart: "<think>", ThinkEnd: "</think>"}
	cases := []struct {
		f      Format
		enable *bool
		effort string
		want   map[string]any
		err    bool
	}{
		{qwen, nil, "", map[string]any{}, false},
		{qwen, &off, "", map[string]any{"enable_thinking": false}, false},
		{qwen, nil, "none", map[string]any{"enable_thinking": false}, false},
		{qwen, nil, "high", map[string]any{}, false},
		{qwen, nil, "max", nil, true},
		{oss, nil, "high", map[string]any{"reasoning_effort": "high"}, false},
		{oss, nil, "none", nil, true},
	}
	for i, c := range cases {
		got, err := ReasoningVars(c.f, c.enable, c.effort)
		if (err != nil) != c.err || !c.err && !reflect.DeepEqual(got, c.want) {
			t.Errorf("case %d: %v %v, want %v (error %v)", i, got, err, c.want, c.err)
		}
	}
}

func TestXMLStringParams(t *testing.T) {
	f := Format{Kind: Hermes}.WithTools([]chat.Tool{{Name: "f", Parameters: json.RawMessage(`{"type":"object","properties":{"s":{"type":"string"},"n":{"type":"integer"}}}`)}})
	p := f.Parse("<tool_call>\n<function=f>\n<parameter=s>\n123\n</parameter>\n<parameter=n>\n123\n</parameter>\n<parameter=t>\nhello world\n</parameter>\n</function>\n</tool_call>")
	if len(p.ToolCalls) != 1 || p.ToolCalls[0].Arguments != `{"s": "123", "n": 123, "t": "hello world"}` {
		t.Fatalf("%+v", p)
	}
}

// TestMarkers checks that every marker a format's sample reply uses is
// among Markers, by removing them: what is left has no angle-bracket or
// square-bracket token of the format.
func TestMarkers(t *testing.T) {
	for _, c := range parseCases(t) {
		rest := c.in
		for _, m := range c.f.Markers() {
			rest = strings.ReplaceAll(rest, m, "")
		}
		for _, tok := range []string{"<|", "|>", "<tool_call", "</tool_call", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[THINK]", "<think>", "</think>", "channel|>", "<|channel>"} {
			if strings.Contains(rest, tok) && !strings.Contains(c.content+c.reasoning, tok) {
				t.Errorf("%s: %q left after removing %q: %q", c.name, tok, c.f.Markers(), rest)
			}
		}
	}
}

// TestStreamArgs checks that arguments are sent as they are generated
// where the format puts them last: the call's name and id first, then the
// arguments in the pieces they came in.
func TestStreamArgs(t *testing.T) {
	cases := []struct {
		f      Format
		pieces []string
		args   []string // the argument text each piece releases
	}{
		{Format{Kind: Hermes}, []string{"<tool_call>\n{\"name\": \"f\", \"arguments\": ", "{\"code\": \"print(", "1)\"}", "}\n</tool_call>"}, []string{"", `{"code": "print(`, `1)"}`, ""}},
		{Format{Kind: MistralArgs}, []string{"[TOOL_CALLS]f[ARGS]", "{\"a\": ", "[1, 2]}"}, []string{"", `{"a": `, `[1, 2]}`}},
		{Format{Kind: Harmony}, []string{"<|channel|>commentary to=functions.f <|constrain|>json<|message|>", "{\"a\":", " 1}<|ca", "ll|>"}, []string{"", `{"a":`, ` 1}`, ""}},
	}
	for _, c := range cases {
		s := c.f.NewStream()
		for i, p := range c.pieces {
			d := s.Add(p)
			got := ""
			for _, tc := range d.ToolCalls {
				if tc.Index != 0 {
					t.Fatalf("%v: call index %d", c.f.Kind, tc.Index)
				}
				if tc.Name != "" && (tc.Name != "f" || tc.ID == "") {
					t.Fatalf("%v: head %+v", c.f.Kind, tc)
				}
				got += tc.Arguments
			}
			if got != c.args[i] {
				t.Errorf("%v: piece %d %q released arguments %q, want %q", c.f.Kind, i, p, got, c.args[i])
			}
		}
		if d := s.Flush(); len(d.ToolCalls) != 0 {
			t.Errorf("%v: flush sent %+v", c.f.Kind, d)
		}
	}
}
