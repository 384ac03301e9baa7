// Package reply splits a model's generated text into reasoning, content
// and tool calls, in the syntax its chat template taught it, and builds
// the grammar that makes a model call tools in that syntax.
//
// The formats and how a template is recognised follow llama.cpp (commit
// 2369b110d057cda00732e679ba661afd8973adea, common/chat.cpp and its tests):
// a Format is picked from marker strings in the template text, as
// common_chat_try_specialized_template does.
package reply

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/zrtdev/zrt/runtime/chat"
)

// Kind names a family's reply syntax.
type Kind int

const (
	// Plain has no tool-call syntax: the reply is content, after an
	// optional reasoning block when the template has one.
	Plain Kind = iota
	// Hermes is <tool_call>{"name": ..., "arguments": {...}}</tool_call>,
	// one block per call (Qwen 2.5, Qwen 3, Hermes 2 Pro and 3). Qwen 3.5
	// writes the same block with <function=NAME><parameter=P>V</parameter>
	// inside, which is read too.
	Hermes
	// Llama3 is a bare {"name": ..., "parameters": {...}} object, or a call
	// after <|python_tag|> (Llama 3.1, 3.2, 3.3).
	Llama3
	// MistralNemo is [TOOL_CALLS][{"name", "arguments", "id"}, ...]
	// (Mistral 7B v0.3, Nemo).
	MistralNemo
	// MistralArgs is [TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}, or without
	// [CALL_ID] (Mistral Small 3.2, Devstral, Ministral 3).
	MistralArgs
	// Harmony is gpt-oss's channels: analysis is reasoning, final and
	// commentary are content, and a message addressed
	// " to=functions.NAME" is a call whose body is the arguments.
	Harmony
	// Gemma4 is <|tool_call>call:NAME{key:value,...}<tool_call|> with
	// strings quoted by <|"|>, and reasoning in <|channel>thought ...
	// <channel|>.
	Gemma4
)

var kindNames = [...]string{"plain", "hermes", "llama3", "mistral-nemo", "mistral-args", "harmony", "gemma4"}

// String is the kind's name, as tests and logs print it.
func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Format is how one template's replies are written: the Kind, the
// reasoning tags, and the per-request settings (where generation starts,
// tool-call id seed, the tools offered). It is a small value; the With
// methods return changed copies.
type Format struct {
	// Kind is the tool-call syntax.
	Kind Kind
	// ThinkStart and ThinkEnd delimit reasoning ("" when the template has
	// none); Harmony marks reasoning by channel instead.
	ThinkStart, ThinkEnd string
	// CallIDs says the model writes each call's id ([CALL_ID] in
	// MistralArgs, "id" in MistralNemo); other calls get generated ids.
	CallIDs bool
	// XMLCalls says calls are written <function=NAME><parameter=P>V
	// </parameter></function> inside <tool_call> (Qwen 3.5), not JSON.
	XMLCalls bool

	inReasoning bool
	seed        uint64
	tools       []chat.Tool
}

// Detect picks the reply format of a chat template from its text, with
// the markers llama.cpp looks for. A template with none of them (or none
// at all) is Plain.
func Detect(template string) Format {
	has := func(s string) bool { return strings.Contains(template, s) }
	var f Format
	switch {
	case has("<|channel|>"):
		f.Kind = Harmony
	case has("'<|tool_call>call:'"):
		f.Kind = Gemma4
		f.ThinkStart, f.ThinkEnd = "<|channel>thought", "<channel|>"
		return f
	case has("[TOOL_CALLS]") && has("[ARGS]"):
		f.Kind = MistralArgs
		f.CallIDs = has("[CALL_ID]")
	case has("[TOOL_CALLS]"):
		f.Kind = MistralNemo
		f.CallIDs = true
	case has("<tool_call>"):
		f.Kind = Hermes
		f.XMLCalls = has("<function=")
	case has("<|start_header_id|>") && (has("<|python_tag|>") || has(`"parameters": `)):
		f.Kind = Llama3
	}
	switch {
	case f.Kind == Harmony:
	case has("[THINK]") && has("[/THINK]"):
		f.ThinkStart, f.ThinkEnd = "[THINK]", "[/THINK]"
	case has("<think>") || has("</think>"):
		f.ThinkStart, f.ThinkEnd = "<think>", "</think>"
	}
	return f
}

// AfterPrompt returns f set for a generation that continues prompt: when
// the prompt ends (but for whitespace) inside an open reasoning block —
// templates that force thinking open, such as QwQ, DeepSeek R1 or Qwen3's
// thinking-only models, end the prompt with "<think>\n" — the reply
// starts as reasoning and needs no opening tag, as llama.cpp's "thinking
// forced open". A prompt that ends with a closed block (Qwen3 with
// enable_thinking=false writes "<think>\n\n</think>\n\n") starts as
// content, and one that ends elsewhere lets the reply open a block.
func (f Format) AfterPrompt(prompt string) Format {
	f.inReasoning = false
	if f.ThinkStart == "" || f.Kind == Harmony {
		return f
	}
	p := strings.TrimRight(prompt, " \t\r\n")
	f.inReasoning = strings.HasSuffix(p, f.ThinkStart)
	return f
}

// StartsInReasoning reports whether replies start inside reasoning (see
// AfterPrompt).
func (f Format) StartsInReasoning() bool { return f.inReasoning }

// WithIDs returns f with seed for the ids of calls the model does not
// name itself: call n of a reply gets CallID(seed, n). Give each request
// (or each choice) its own seed to keep ids distinct; the same seed
// gives the same ids, which keeps replays reproducible.
func (f Format) WithIDs(seed uint64) Format {
	f.seed = seed
	return f
}

// WithTools returns f knowing the request's tools. Only Qwen 3.5's
// parameter syntax needs them: a parameter whose schema type is "string"
// keeps its text as a string, others are read as JSON where they parse.
func (f Format) WithTools(tools []chat.Tool) Format {
	f.tools = tools
	return f
}

// CallID is the id of call n of a reply under seed: for Mistral formats
// nine letters and digits (their templates reject anything else), for
// the others "call_" and 24 letters and digits, as OpenAI writes them.
func (f Format) CallID(n int) string {
	if f.Kind == MistralNemo || f.Kind == MistralArgs {
		return idChars(f.seed, n, 9)
	}
	return "call_" + idChars(f.seed, n, 24)
}

const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

func idChars(seed uint64, n, size int) string {
	x := seed ^ (uint64(n)+1)*0x9e3779b97f4a7c15
	b := make([]byte, size)
	for i := range b {
		x = splitmix(x)
		b[i] = alnum[x%uint64(len(alnum))]
	}
	return string(b)
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// ReasoningVars are the template variables that carry a request's
// reasoning controls, for chat.Options.Vars: enable (OpenAI-compatible
// servers take it as chat_template_kwargs.enable_thinking) becomes
// enable_thinking, which Qwen 3, Gemma 4 and others read; effort
// (reasoning_effort) becomes gpt-oss's reasoning_effort, one of "low",
// "medium" or "high". For formats without an effort variable, effort
// "none" turns thinking off unless enable says otherwise, and other
// efforts are ignored. A nil enable and an empty effort leave the
// template's defaults (llama.cpp's enable_thinking=true, gpt-oss's
// "medium").
func ReasoningVars(f Format, enable *bool, effort string) (map[string]any, error) {
	vars := map[string]any{}
	if enable != nil {
		vars["enable_thinking"] = *enable
	}
	if effort == "" {
		return vars, nil
	}
	if f.Kind == Harmony {
		switch effort {
		case "low", "medium", "high":
			vars["reasoning_effort"] = effort
			return vars, nil
		}
		return nil, fmt.Errorf("reasoning_effort %q: gpt-oss takes low, medium or high", effort)
	}
	switch effort {
	case "none":
		if enable == nil {
			vars["enable_thinking"] = false
		}
	case "minimal", "low", "medium", "high", "xhigh":
	default:
		return nil, fmt.Errorf("reasoning_effort %q: want none, minimal, low, medium, high or xhigh", effort)
	}
	return vars, nil
}

// paramIsString reports whether tool name's schema types parameter p as a
// string (see WithTools).
func (f Format) paramIsString(name, p string) bool {
	for _, t := range f.tools {
		if t.Name != name {
			continue
		}
		var s struct {
			Properties map[string]struct {
				Type any `json:"type"`
			} `json:"properties"`
		}
		if json.Unmarshal(t.Parameters, &s) != nil {
			return false
		}
		typ, ok := s.Properties[p]
		if !ok {
			return false
		}
		switch x := typ.Type.(type) {
		case string:
			return x == "string"
		case []any:
			return len(x) > 0 && x[0] == "string"
		}
	}
	return false
}

// Markers are the strings f's parser looks for that tokenizers usually
// hold as special tokens (llama.cpp's preserved_tokens): the server must
// detokenize a reply with these tokens written out as their text, or
// Parse cannot see them.
func (f Format) Markers() []string {
	var m []string
	if f.ThinkStart != "" {
		m = append(m, f.ThinkStart, f.ThinkEnd)
	}
	switch f.Kind {
	case Hermes:
		m = append(m, "<tool_call>", "</tool_call>")
	case Llama3:
		m = append(m, "<|python_tag|>")
	case MistralNemo:
		m = append(m, "[TOOL_CALLS]")
	case MistralArgs:
		m = append(m, "[TOOL_CALLS]", "[ARGS]")
		if f.CallIDs {
			m = append(m, "[CALL_ID]")
		}
	case Harmony:
		m = append(m, "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>", "<|call|>", "<|return|>")
	case Gemma4:
		m = append(m, gemmaChannel, gemmaChannelEnd, "<|tool_call>", "<tool_call|>", gemmaQuote)
	}
	return m
}
