package chat

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/format/gguf"
)

func TestLlamaCppCases(t *testing.T) {
	for _, c := range llamaCppCases {
		t.Run(c.name, func(t *testing.T) {
			got, fb, err := Apply(c.template, llamaCppConversation, Options{AddGenerationPrompt: true, BOSToken: c.bos, EOSToken: c.eos})
			if err != nil {
				t.Fatal(err)
			}
			if fb {
				t.Error("fallback reported for a template")
			}
			if got != c.want {
				t.Errorf("got\n%q\nwant\n%q", got, c.want)
			}
		})
	}
}

func TestJinjaSemantics(t *testing.T) {
	for _, c := range jinjaCases {
		tm, err := Parse(c.src)
		if err != nil {
			t.Errorf("%q: %v", c.src, err)
			continue
		}
		got, err := tm.Render(nil, Options{})
		if err != nil {
			t.Errorf("%q: %v", c.src, err)
			continue
		}
		if got != c.want {
			t.Errorf("%q:\ngot  %q\nwant %q", c.src, got, c.want)
		}
	}
}

// TestSelfContainingJSON: tojson of a container that holds itself is an
// error naming it (json.dumps: circular reference), not a stack overflow.
func TestSelfContainingJSON(t *testing.T) {
	for _, src := range []string{
		"{% set a = [1] %}{% set _ = a.append(a) %}{{ a | tojson }}",
		"{% set ns = namespace(n=0) %}{% set ns.n = [ns] %}{{ ns | tojson }}",
	} {
		if _, err := mustParse(src).Render(nil, Options{}); err == nil || !strings.Contains(err.Error(), "holds itself") {
			t.Errorf("%q: %v", src, err)
		}
	}
}

// TestModelTemplates renders the real templates. Expected outputs come from
// llama.cpp's test-chat-template.cpp where it covers the template (Llama 3
// and Phi-3-mini are its "Llama-3" and "Phi-3-mini" cases), otherwise from
// Python Jinja2 3.1.6 configured as HF transformers (Qwen3, Llama 2), with
// llama.cpp's BOS/EOS stripping applied by hand for the Apply column.
func TestModelTemplates(t *testing.T) {
	conv := llamaCppConversation
	thinking := []Message{
		{Role: "user", Content: "What is 2+2?"},
		{Role: "assistant", Content: "<think>\nAdd them.\n</think>\n\n4"},
		{Role: "user", Content: "And 3+3?"},
		{Role: "assistant", Content: "<think>\nAgain.\n</think>\n\n6"},
	}
	cases := []struct {
		name, tmpl string
		msgs       []Message
		opt        Options
		render     string // Template.Render
		apply      string // Apply; "" means same as render
	}{
		{
			name: "qwen3", tmpl: qwen3Template, msgs: conv,
			opt:    Options{AddGenerationPrompt: true, EOSToken: "<|im_end|>"},
			render: "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n",
		},
		{
			name: "qwen3 no system, enable_thinking=false", tmpl: qwen3Template, msgs: conv[1:4],
			opt:    Options{AddGenerationPrompt: true, Vars: map[string]any{"enable_thinking": false}},
			render: "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
		},
		{
			name: "qwen3 reasoning kept only after the last query", tmpl: qwen3Template, msgs: thinking,
			render: "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n<think>\nAgain.\n</think>\n\n6<|im_end|>\n",
		},
		{
			name: "llama3", tmpl: llama3Template, msgs: conv,
			opt:    Options{AddGenerationPrompt: true, BOSToken: "<|begin_of_text|>", EOSToken: "<|eot_id|>"},
			render: "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
			apply:  "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
		},
		{
			// Phi-3-mini's template ignores system messages; Render drops it,
			// Apply merges it into the first user turn as llama.cpp does.
			name: "phi3", tmpl: phi3Template, msgs: conv,
			opt:    Options{AddGenerationPrompt: true, BOSToken: "<s>", EOSToken: "<|endoftext|>"},
			render: "<s><|user|>\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother question<|end|>\n<|assistant|>\n",
			apply:  "<|user|>\nYou are a helpful assistant\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother question<|end|>\n<|assistant|>\n",
		},
		{
			name: "llama2 with system", tmpl: llama2Template, msgs: conv,
			opt:    Options{AddGenerationPrompt: true, BOSToken: "<s>", EOSToken: "</s>"},
			render: "<s>[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST] Hi there </s><s>[INST] Who are you [/INST] I am an assistant </s><s>[INST] Another question [/INST]",
			apply:  "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST] Hi there </s><s>[INST] Who are you [/INST] I am an assistant </s><s>[INST] Another question [/INST]",
		},
		{
			name: "llama2 without system", tmpl: llama2Template, msgs: conv[1:],
			opt:    Options{AddGenerationPrompt: true, BOSToken: "<s>", EOSToken: "</s>"},
			render: "<s>[INST] Hello [/INST] Hi there </s><s>[INST] Who are you [/INST] I am an assistant </s><s>[INST] Another question [/INST]",
			apply:  "[INST] Hello [/INST] Hi there </s><s>[INST] Who are you [/INST] I am an assistant </s><s>[INST] Another question [/INST]",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tm, err := Parse(c.tmpl)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tm.Render(c.msgs, c.opt)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.render {
				t.Errorf("Render got\n%q\nwant\n%q", got, c.render)
			}
			want := c.apply
			if want == "" {
				want = c.render
			}
			got, fb, err := Apply(c.tmpl, c.msgs, c.opt)
			if err != nil || fb {
				t.Fatalf("Apply: fallback=%v err=%v", fb, err)
			}
			if got != want {
				t.Errorf("Apply got\n%q\nwant\n%q", got, want)
			}
		})
	}
}

// ggufTemplate is the chat template a model file carries, read with the
// project's GGUF reader; the test is skipped where the file is missing.
func ggufTemplate(t *testing.T, path string) string {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s not available: %v", path, err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	src, err := f.String("tokenizer.chat_template")
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// TestGGUFTemplates checks the template constants against the model files
// they were taken from, read with the project's GGUF reader.
func TestGGUFTemplates(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "shared", "models", "vocab")
	for file, want := range map[string]string{
		"ggml-vocab-qwen2.gguf":     qwen3Template,
		"ggml-vocab-llama-bpe.gguf": llama3Template,
		"ggml-vocab-phi-3.gguf":     phi3Template,
	} {
		got := ggufTemplate(t, filepath.Join(dir, file))
		if got != want {
			t.Errorf("%s: chat template differs from the test's constant", file)
		}
		if _, err := Parse(got); err != nil {
			t.Errorf("%s: %v", file, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct{ src, where, msg string }{
		{"{% if x %}a", "1:1", "unterminated {% if %}"},
		{"line1\n  {{ 1 + }}", "2:10", `unexpected "}}"`},
		{"{% for x in y %}\n{% endif %}", "2:4", "endif"},
		{"{{ 'abc }}", "1:4", "unterminated string"},
		{"a\nb {% frobnicate %}", "2:6", "frobnicate"},
		{"{{ x ", "1:1", "unterminated tag"},
		{"{# open", "1:1", "unterminated comment"},
		{"{% endfor %}", "1:1", "unexpected {% endfor %}"},
		{"{{ a[] }}", "1:5", "empty subscript"},
		{"{{ $ }}", "1:4", "unexpected character"},
	}
	for _, c := range cases {
		_, err := Parse(c.src)
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%q: want *Error, got %v", c.src, err)
			continue
		}
		if where := fmt.Sprintf("%d:%d", e.Line, e.Col); where != c.where || !strings.Contains(e.Error(), c.msg) || !strings.Contains(e.Error(), where) {
			t.Errorf("%q: got %q, want position %s and %q", c.src, e.Error(), c.where, c.msg)
		}
	}
}

func TestRaiseException(t *testing.T) {
	// Gemma's template rejects a system message.
	var gemma string
	for _, c := range llamaCppCases {
		if c.name == "google/gemma-7b-it" {
			gemma = c.template
		}
	}
	tm, err := Parse(gemma)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tm.Render(llamaCppConversation, Options{AddGenerationPrompt: true})
	var e *Error
	if !errors.As(err, &e) || !e.Raised || !strings.Contains(e.Msg, "System role not supported") || e.Line != 1 {
		t.Fatalf("want a raised *Error, got %v", err)
	}
	// Alternation is enforced too, and Apply surfaces it.
	_, _, err = Apply(gemma, []Message{{Role: "user", Content: "a"}, {Role: "user", Content: "b"}}, Options{})
	if !errors.As(err, &e) || !e.Raised || !strings.Contains(e.Msg, "must alternate") {
		t.Fatalf("want alternation error, got %v", err)
	}
}

func TestFallback(t *testing.T) {
	msgs := []Message{{Role: "system", Content: "S"}, {Role: "user", Content: "Hi"}}
	got, fb, err := Apply("", msgs, Options{AddGenerationPrompt: true, BOSToken: "<s>"})
	if err != nil || !fb {
		t.Fatalf("fallback=%v err=%v", fb, err)
	}
	want := "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
	if got != want {
		t.Errorf("got %q want %q", got, want)
	}
	if _, fb, _ := Apply(llama3Template, msgs, Options{}); fb {
		t.Error("fallback reported for a real template")
	}
	if _, _, err := Apply("{% if %}", msgs, Options{}); err == nil {
		t.Error("broken template: want error")
	}
}

// TestLimits: hostile or buggy templates end with an error, quickly.
func TestLimits(t *testing.T) {
	// Smaller budgets keep the test fast; the mechanism is the same.
	defer func(s, o int) { maxSteps, maxOutputBytes = s, o }(maxSteps, maxOutputBytes)
	maxSteps, maxOutputBytes = 1_000_000, 8<<20
	cases := []struct{ src, msg string }{
		{"{% for i in range(1000000000000) %}x{% endfor %}", "evaluation budget"},
		{"{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", "evaluation steps"},
		{"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "call depth"},
		{"{% set s = 'x' * 1000000 %}{% for i in range(1000) %}{{ s }}{% endfor %}", "output exceeded"},
		{"{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", "exceeded"},
		{"{{ 'x' * 10000000000 }}", "too large"},
		{"{{ 2 ** 100 }}", "too large"},
		{"{{ 1 ** 1000000000000 }}", ""}, // found by FuzzParse: once a 10^12-step loop
		{"{% set l = [1] %}{% for x in l %}{% do l.append(x) %}{% endfor %}", ""},
	}
	for _, c := range cases {
		tm, err := Parse(c.src)
		if err != nil {
			t.Fatalf("%q: %v", c.src, err)
		}
		_, err = tm.Render(nil, Options{})
		if c.msg == "" {
			continue // must simply terminate
		}
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%q: got %v, want error containing %q", c.src, err, c.msg)
		}
	}
	deep := strings.Repeat("(", 10000) + "1" + strings.Repeat(")", 10000)
	if _, err := Parse("{{ " + deep + " }}"); err == nil || !strings.Contains(err.Error(), "nested too deeply") {
		t.Errorf("deep nesting: got %v", err)
	}
}

func FuzzParse(f *testing.F) {
	for _, c := range llamaCppCases {
		f.Add(c.template)
	}
	for _, s := range []string{qwen3Template, llama3Template, phi3Template, llama2Template, ChatMLTemplate} {
		f.Add(s)
	}
	for _, c := range jinjaCases {
		f.Add(c.src)
	}
	// Keep each input cheap: the limits are what is under test, not speed.
	defer func(s, o int) { maxSteps, maxOutputBytes = s, o }(maxSteps, maxOutputBytes)
	maxSteps, maxOutputBytes = 100_000, 1<<20
	f.Fuzz(func(t *testing.T, src string) {
		tm, err := Parse(src)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Line < 1 || e.Col < 1 {
				t.Fatalf("parse error without position: %v", err)
			}
			return
		}
		out, err := tm.Render(llamaCppConversation, Options{AddGenerationPrompt: true, BOSToken: "<s>", EOSToken: "</s>"})
		if err == nil && len(out) > maxOutputBytes {
			t.Fatalf("output of %d bytes passed the limit", len(out))
		}
	})
}
