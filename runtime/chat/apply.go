package chat

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"
)

// Message is one chat turn. Role is "system", "user", "assistant" or
// "tool". Templates see it as llama.cpp gives it to them
// (common_chat_msg::to_json_oaicompat): a dict with "role" and "content"
// ("" for none, so a null content reads as empty), then
// "reasoning_content", "name" and "tool_call_id" where set, and
// "tool_calls" where the assistant made calls.
type Message struct {
	Role, Content string
	// ReasoningContent is an assistant turn's reasoning (Qwen3's template
	// renders it in a <think> block; gpt-oss's sees it as "thinking").
	ReasoningContent string
	// ToolCalls are the calls an assistant turn made.
	ToolCalls []ToolCall
	// ToolCallID and Name say which call a tool message answers.
	ToolCallID, Name string
}

// Options are the variables a chat template is rendered with besides the
// messages.
type Options struct {
	// AddGenerationPrompt asks the template to end with the opening of an
	// assistant turn, so the model continues as the assistant.
	AddGenerationPrompt bool
	// BOSToken and EOSToken are the text of the vocabulary's BOS and EOS
	// tokens, seen by templates as bos_token and eos_token.
	BOSToken, EOSToken string
	// KeepBOS and KeepEOS keep a leading BOSToken and a trailing EOSToken
	// in Apply's prompt. llama.cpp strips each only when the vocabulary's
	// tokenizer adds that token itself (tokenizer.ggml.add_bos_token,
	// add_eos_token), so a caller that knows the vocabulary passes
	// KeepBOS: !AddBOS and KeepEOS: !AddEOS, as Prompt does. The zero value
	// strips both, as llama.cpp did before it asked the vocabulary.
	KeepBOS, KeepEOS bool
	// Vars are extra template variables, such as "enable_thinking": false
	// for Qwen3 (llama.cpp's chat_template_kwargs). Values may be nil,
	// bool, int, int64, float64, string, []string, []any, map[string]any or
	// map[string]string; they override the built-in variables of the same
	// name, and the ones Apply adds (see llamaCppVars).
	Vars map[string]any
	// Tools are the functions the request offers; templates see them as
	// "tools" (see toolsValue), which is left undefined when there are
	// none, as in llama.cpp.
	Tools []Tool
}

// Template is a parsed chat template. It is immutable and safe for
// concurrent use.
type Template struct {
	src   string
	nodes []node
}

// Parse parses a Jinja chat template. Syntax errors are *Error values that
// carry the line and column of the offending token.
func Parse(src string) (*Template, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	nodes, err := parseTemplate(src, toks)
	if err != nil {
		return nil, err
	}
	return &Template{src: src, nodes: nodes}, nil
}

// Source returns the template text.
func (t *Template) Source() string { return t.src }

// now is the clock behind strftime_now; tests replace it.
var now = time.Now

// Render renders the template exactly as written: no message rewriting and
// no BOS/EOS stripping (see Apply for llama.cpp's behaviour). Errors,
// including raise_exception from the template, are *Error values.
//
// Tool call arguments reach the template as the JSON text they are; Apply
// gives them as objects to templates that read them that way.
func (t *Template) Render(msgs []Message, opt Options) (string, error) {
	return t.render(msgs, opt, false)
}

func (t *Template) render(msgs []Message, opt Options, objectArgs bool) (string, error) {
	r := &renderer{src: t.src, out: &strings.Builder{}}
	root := globals(now)
	ml := &list{items: make([]any, len(msgs))}
	harmony := strings.Contains(t.src, "<|channel|>")
	ministral := isMinistral3(t.src)
	for i, m := range msgs {
		d, err := messageValue(m, objectArgs)
		if err != nil {
			return "", fmt.Errorf("message %d: %w", i, err)
		}
		switch {
		case harmony:
			d = harmonyMessage(d)
		case ministral:
			d = ministralMessage(d)
		}
		ml.items[i] = d
	}
	if strings.Contains(t.src, "'<|tool_call>call:'") && !strings.Contains(t.src, "{#- OpenAI Chat Completions:") {
		ml = gemma4ToolResponses(ml)
	}
	root["messages"] = ml
	if len(opt.Tools) > 0 {
		tl, err := toolsValue(opt.Tools)
		if err != nil {
			return "", err
		}
		root["tools"] = tl
	}
	root["add_generation_prompt"] = opt.AddGenerationPrompt
	root["bos_token"] = opt.BOSToken
	root["eos_token"] = opt.EOSToken
	for k, v := range opt.Vars {
		root[k] = fromGo(v)
	}
	// One frame for inputs and top-level sets alike: Jinja lets a
	// top-level set replace an input, and macros see both through it.
	r.push(root)
	err := r.execBody(t.nodes)
	if errors.Is(err, errBreak) || errors.Is(err, errContinue) {
		err = errAt(t.src, 0, "break or continue outside a loop")
	}
	if err != nil {
		return "", err
	}
	return r.out.String(), nil
}

// ChatMLTemplate is the template Apply uses when a model has none. It is
// llama.cpp's own fallback (CHATML_TEMPLATE_SRC in common/chat.cpp), so a
// model without a template is prompted the same way in both.
const ChatMLTemplate = "{%- for message in messages -%}\n" +
	"  {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}\n" +
	"{%- endfor -%}\n" +
	"{%- if add_generation_prompt -%}\n" +
	"  {{- '<|im_start|>assistant\n' -}}\n" +
	"{%- endif -%}"

var chatML = mustParse(ChatMLTemplate)

func mustParse(src string) *Template {
	t, err := Parse(src)
	if err != nil {
		panic(err)
	}
	return t
}

// Apply renders msgs into a prompt the way llama.cpp does with --jinja
// (common_chat_templates_apply): with the model's template src, or, when
// src is empty, with ChatMLTemplate and fallback reported as true so the
// caller can say the prompt format was guessed.
//
// Like llama.cpp, and unlike a plain Render:
//
//   - a "developer" message (OpenAI's newer name for system) is a system
//     message, except for gpt-oss, whose template knows the role;
//   - if the template drops or rejects system messages (probed by rendering
//     a system message and looking for it in the output), a leading system
//     message is merged into the next message (mergeSystem);
//   - enable_thinking (true), datetime and date_string are defined unless
//     opt.Vars sets them (llamaCppVars);
//   - a leading BOSToken and a trailing EOSToken are removed from the
//     result unless opt.KeepBOS or opt.KeepEOS says the tokenizer does not
//     add that token itself: a BOS the tokenizer also adds would be doubled.
//   - tool call arguments are given as parsed objects to templates that
//     read them as objects (objectArguments), as JSON text otherwise;
//   - gpt-oss's template (one with "<|channel|>") sees reasoning_content
//     as "thinking" too (harmonyMessage), and Gemma 4's prompt gets its
//     model turn opened when the template left it closed.
func Apply(src string, msgs []Message, opt Options) (text string, fallback bool, err error) {
	t := chatML
	if src == "" {
		fallback = true
	} else if t, err = Parse(src); err != nil {
		return "", false, err
	}
	if !strings.Contains(t.src, "<|channel|>") {
		msgs = developerToSystem(msgs)
	}
	if len(msgs) > 0 && msgs[0].Role == "system" && !t.supportsSystemRole(opt) {
		msgs = mergeSystem(msgs)
	}
	ro := opt
	ro.Vars = llamaCppVars(opt.Vars)
	objectArgs := false
	for _, m := range msgs {
		if len(m.ToolCalls) > 0 {
			objectArgs = t.objectArguments()
			break
		}
	}
	out, err := t.render(msgs, ro, objectArgs)
	if err != nil {
		return "", fallback, err
	}
	if opt.BOSToken != "" && !opt.KeepBOS {
		out = strings.TrimPrefix(out, opt.BOSToken)
	}
	if opt.EOSToken != "" && !opt.KeepEOS {
		out = strings.TrimSuffix(out, opt.EOSToken)
	}
	// gpt-oss's template ends a finished conversation with <|return|>;
	// llama.cpp turns the last one into <|end|> (common/chat.cpp,
	// common_chat_params_init_gpt_oss), as the model sees it when the
	// conversation goes on.
	if !opt.AddGenerationPrompt && strings.Contains(t.src, "<|channel|>") {
		if i := strings.LastIndex(out, "<|return|>"); i >= 0 {
			out = out[:i] + "<|end|>" + out[i+len("<|return|>"):]
		}
	}
	// Gemma 4's template does not open the model's turn after an
	// assistant turn that ended in tool calls; llama.cpp opens it
	// (common_chat_params_init_gemma4), else the model skips its
	// reasoning tokens.
	if opt.AddGenerationPrompt && strings.Contains(t.src, "'<|tool_call>call:'") && strings.HasSuffix(out, "<turn|>\n") {
		out += "<|turn>model\n"
	}
	return out, fallback, nil
}

// llamaCppVars returns vars with the variables llama.cpp gives every
// render (common_chat_template_direct_apply_impl and
// common_chat_extra_context in common/chat.cpp) added underneath:
// enable_thinking, true unless the caller says otherwise (Gemma 4 then
// opens its system turn with <|think|>), and today's date as datetime
// ("Jul 04 2025") and date_string ("04 Jul 2025"; Llama 3.1 prints it
// instead of its built-in "26 Jul 2024"). The caller's vars win, as
// chat_template_kwargs do in llama.cpp.
func llamaCppVars(vars map[string]any) map[string]any {
	t := now()
	out := map[string]any{
		"enable_thinking": true,
		"datetime":        strftime(t, "%b %d %Y"),
		"date_string":     strftime(t, "%d %b %Y"),
	}
	maps.Copy(out, vars)
	return out
}

// supportsSystemRole renders a system and a user message with marker
// contents and reports whether the system marker reaches the output (an
// error counts as "no"). That is how minja probed the capability; llama.cpp
// now asks whether rendering read the system content at all
// (jinja::caps_get), which agrees for templates that render what they read.
func (t *Template) supportsSystemRole(opt Options) bool {
	const sysNeedle = "<System Needle>"
	probe := []Message{{Role: "system", Content: sysNeedle}, {Role: "user", Content: "<User Needle>"}}
	o := opt
	o.AddGenerationPrompt = false
	out, err := t.Render(probe, o)
	return err == nil && strings.Contains(out, sysNeedle)
}

// mergeSystem is llama.cpp's polyfill for templates without a system
// role (system_message_not_supported in common/chat.cpp): a leading system
// message is folded into the message after it, whatever that one's role,
// joined by "\n", or dropped when it is the only message. A system message
// further on is left to the template, which may render, skip or reject it.
func mergeSystem(msgs []Message) []Message {
	if len(msgs) == 0 || msgs[0].Role != "system" {
		return msgs
	}
	out := append([]Message(nil), msgs[1:]...)
	if len(out) > 0 {
		out[0].Content = msgs[0].Content + "\n" + out[0].Content
	}
	return out
}

// developerToSystem is llama.cpp's workaround::map_developer_role_to_system.
func developerToSystem(msgs []Message) []Message {
	for i, m := range msgs {
		if m.Role == "developer" {
			out := append([]Message(nil), msgs...)
			for j := i; j < len(out); j++ {
				if out[j].Role == "developer" {
					out[j].Role = "system"
				}
			}
			return out
		}
	}
	return msgs
}
