package chat

import (
	"errors"
	"strings"
	"time"
)

// Message is one chat turn. Role is "system", "user", "assistant" or
// "tool"; templates see it as a dict with keys "role" and "content".
type Message struct {
	Role, Content string
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
	// Vars are extra template variables, such as "enable_thinking": false
	// for Qwen3. Values may be nil, bool, int, int64, float64, string,
	// []string, []any, map[string]any or map[string]string; they override
	// the built-in variables of the same name.
	Vars map[string]any
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
func (t *Template) Render(msgs []Message, opt Options) (string, error) {
	r := &renderer{src: t.src, out: &strings.Builder{}}
	root := globals(now)
	ml := &list{items: make([]any, len(msgs))}
	for i, m := range msgs {
		d := newDict()
		d.set("role", m.Role)
		d.set("content", m.Content)
		ml.items[i] = d
	}
	root["messages"] = ml
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
//   - if the template drops or rejects system messages (probed by rendering
//     a system message and looking for it in the output), system contents
//     are merged into the next user message, joined by "\n";
//   - a leading BOSToken and a trailing EOSToken are removed from the
//     result, because the tokenizer adds BOS itself and a trailing EOS would
//     end the turn before the model speaks.
func Apply(src string, msgs []Message, opt Options) (text string, fallback bool, err error) {
	t := chatML
	if src == "" {
		fallback = true
	} else if t, err = Parse(src); err != nil {
		return "", false, err
	}
	if hasSystem(msgs) && !t.supportsSystemRole(opt) {
		msgs = mergeSystem(msgs)
	}
	out, err := t.Render(msgs, opt)
	if err != nil {
		return "", fallback, err
	}
	if opt.BOSToken != "" {
		out = strings.TrimPrefix(out, opt.BOSToken)
	}
	if opt.EOSToken != "" {
		out = strings.TrimSuffix(out, opt.EOSToken)
	}
	return out, fallback, nil
}

func hasSystem(msgs []Message) bool {
	for _, m := range msgs {
		if m.Role == "system" {
			return true
		}
	}
	return false
}

// supportsSystemRole renders a system and a user message with marker
// contents and reports whether the system marker reaches the output, as
// llama.cpp's minja probes its capability (an error counts as "no").
func (t *Template) supportsSystemRole(opt Options) bool {
	const sysNeedle = "<System Needle>"
	probe := []Message{{Role: "system", Content: sysNeedle}, {Role: "user", Content: "<User Needle>"}}
	o := opt
	o.AddGenerationPrompt = false
	out, err := t.Render(probe, o)
	return err == nil && strings.Contains(out, sysNeedle)
}

// mergeSystem folds system messages into the following user message (or a
// user message of their own before a non-user turn or at the end), which is
// llama.cpp's polyfill for templates without a system role.
func mergeSystem(msgs []Message) []Message {
	var out []Message
	pending := ""
	flush := func() {
		if pending != "" {
			out = append(out, Message{Role: "user", Content: pending})
			pending = ""
		}
	}
	for _, m := range msgs {
		switch {
		case m.Role == "system":
			if pending != "" {
				pending += "\n"
			}
			pending += m.Content
			continue
		case m.Role == "user" && pending != "":
			if m.Content != "" {
				m.Content = pending + "\n" + m.Content
			} else {
				m.Content = pending
			}
			pending = ""
		case m.Role != "user":
			flush()
		}
		out = append(out, m)
	}
	flush()
	return out
}
