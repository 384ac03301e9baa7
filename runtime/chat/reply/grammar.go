package reply

import (
	"fmt"
	"strings"

	"github.com/zrtdev/zrt/runtime/chat"
)

// ArgGrammar is the GBNF that constrains one tool's arguments: GBNF
// defines rule Rule (and helpers named Rule-...), as
// grammar.SchemaGBNF(parameters, Rule) returns for the tool's parameters
// schema. Name ArgRule(i) for the i-th tool offered keeps the rules of
// different tools and CallGrammar's own apart.
type ArgGrammar struct {
	Tool, Rule, GBNF string
}

// ArgRule is the rule name for the arguments of the i-th tool offered.
func ArgRule(i int) string { return fmt.Sprintf("tool-%d-args", i) }

// CallGrammar is a GBNF grammar, rooted at "root", for a reply that
// consists of tool calls in f's syntax and nothing else, for tool_choice
// "required" (any of tools; choice "required") or a named function
// (choice is its name: that tool only). Each call's arguments follow its
// ArgGrammar. With parallel, one or more calls; else exactly one. A
// reasoning block may come first where f has one (and must, closed,
// when the reply starts inside it; see AfterPrompt). The grammar spans
// the whole generated text; special tokens (<|channel|>, [TOOL_CALLS],
// ...) appear in it as their text.
//
// Gemma 4 writes arguments in a syntax of its own: its grammar forces the
// call and the name and leaves the arguments merely well formed, and
// ignores the ArgGrammars. Qwen 3.5's <parameter=...> calls and Plain
// have no such grammar: that is an error.
func (f Format) CallGrammar(tools []ArgGrammar, choice string, parallel bool) (string, error) {
	if len(tools) == 0 {
		return "", fmt.Errorf("call grammar: no tools")
	}
	switch {
	case choice == "" || choice == "auto" || choice == "none":
		return "", fmt.Errorf("call grammar: tool_choice %q does not force a call", choice)
	case f.Kind == Plain:
		return "", fmt.Errorf("call grammar: the template has no tool-call syntax")
	case f.XMLCalls:
		return "", fmt.Errorf("call grammar: this template's call arguments are <parameter> tags, not JSON")
	}
	var chosen []int
	for i, t := range tools {
		if t.Rule == "" || t.GBNF == "" || t.Tool == "" {
			return "", fmt.Errorf("call grammar: tool %d (%q) lacks its name, rule or GBNF", i, t.Tool)
		}
		if choice == "required" || t.Tool == choice {
			chosen = append(chosen, i)
		}
	}
	if len(chosen) == 0 {
		return "", fmt.Errorf("call grammar: tool_choice names %q, which is not among the tools", choice)
	}
	var b strings.Builder
	root := "root ::= "
	if f.ThinkStart != "" && f.Kind != Harmony {
		writeUntil(&b, "call-think-body", f.ThinkEnd)
		if f.inReasoning {
			root += `call-think-body call-ws `
		} else {
			root += "(" + lit(f.ThinkStart) + ` call-think-body call-ws)? `
		}
	}
	b.WriteString("call-ws ::= [ \\t\\n]*\n")
	var alts []string
	for _, i := range chosen {
		t := tools[i]
		name := lit(t.Tool)
		var rule string
		switch f.Kind {
		case Hermes:
			rule = `"<tool_call>\n{\"name\": " ` + lit(`"`+t.Tool+`"`) + ` ", \"arguments\": " ` + t.Rule + ` "}\n</tool_call>"`
		case Llama3:
			rule = `"{\"name\": " ` + lit(`"`+t.Tool+`"`) + ` ", \"parameters\": " ` + t.Rule + ` "}"`
		case MistralNemo:
			rule = `"{\"name\": " ` + lit(`"`+t.Tool+`"`) + ` ", \"arguments\": " ` + t.Rule + ` ", \"id\": \"" call-id "\"}"`
		case MistralArgs:
			id := ""
			if f.CallIDs {
				id = ` "[CALL_ID]" call-id`
			}
			rule = `"[TOOL_CALLS]" ` + name + id + ` "[ARGS]" ` + t.Rule
		case Harmony:
			rule = `"<|channel|>commentary to=functions." ` + name + ` " <|constrain|>json<|message|>" ` + t.Rule
		case Gemma4:
			// Gemma 4 writes arguments in its own syntax, which a JSON
			// Schema grammar does not describe: the call and the tool's
			// name are forced, the arguments only well formed (as
			// llama.cpp does too).
			rule = `"<|tool_call>call:" ` + name + ` call-gemma-dict "<tool_call|>"`
		}
		fmt.Fprintf(&b, "call-%d ::= %s\n", i, rule)
		alts = append(alts, fmt.Sprintf("call-%d", i))
	}
	fmt.Fprintf(&b, "call-one ::= %s\n", strings.Join(alts, " | "))
	if f.Kind == Gemma4 {
		writeUntil(&b, "call-gemma-string-body", gemmaQuote)
		b.WriteString(`call-gemma-string ::= "<|\"|>" call-gemma-string-body` + "\n")
		b.WriteString(`call-gemma-dict ::= "{" (call-gemma-kv ("," call-gemma-kv)*)? "}"` + "\n")
		b.WriteString(`call-gemma-kv ::= [a-zA-Z0-9_]+ ":" call-gemma-value` + "\n")
		b.WriteString(`call-gemma-array ::= "[" (call-gemma-value ("," call-gemma-value)*)? "]"` + "\n")
		b.WriteString(`call-gemma-value ::= call-gemma-string | call-gemma-dict | call-gemma-array | call-gemma-number | "true" | "false" | "null"` + "\n")
		b.WriteString(`call-gemma-number ::= "-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)?` + "\n")
	}
	if f.Kind == MistralNemo || f.Kind == MistralArgs {
		b.WriteString("call-id ::= " + strings.Repeat("[a-zA-Z0-9] ", 8) + "[a-zA-Z0-9]\n")
	}
	switch {
	case f.Kind == Harmony:
		// A call ends the turn (<|call|> stops generation), so one call;
		// an analysis message may come first.
		writeUntil(&b, "call-analysis-body", "<|end|>")
		root += `("<|channel|>analysis<|message|>" call-analysis-body "<|start|>assistant")? call-one`
	case f.Kind == MistralNemo && parallel:
		root += `"[TOOL_CALLS][" call-one (", " call-one)* "]"`
	case f.Kind == MistralNemo:
		root += `"[TOOL_CALLS][" call-one "]"`
	case (f.Kind == MistralArgs || f.Kind == Gemma4) && parallel:
		root += `call-one+`
	case parallel && f.Kind != Llama3:
		root += `call-one ("\n" call-one)*`
	default:
		root += `call-one`
	}
	var out strings.Builder
	out.WriteString(root + "\n")
	out.WriteString(b.String())
	if f.Kind != Gemma4 {
		for _, i := range chosen {
			out.WriteString(strings.TrimRight(tools[i].GBNF, "\n") + "\n")
		}
	}
	return out.String(), nil
}

// lit is s as a GBNF string literal.
func lit(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case chat.WriteEscape(&b, r, '"'):
		case r < 0x20:
			fmt.Fprintf(&b, `\x%02X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// writeUntil writes rule name for any text up to and including the first
// end: the automaton that looks for end (Knuth-Morris-Pratt), one rule
// per matched length, so the text cannot contain end before its close.
func writeUntil(b *strings.Builder, name, end string) {
	n := len(end)
	var chars []byte
	for i := 0; i < n; i++ {
		if strings.IndexByte(string(chars), end[i]) < 0 {
			chars = append(chars, end[i])
		}
	}
	// next(k, c): the longest prefix of end that ends the text
	// end[:k]+c.
	next := func(k int, c byte) int {
		s := end[:k] + string(c)
		for m := min(len(s), n); m > 0; m-- {
			if strings.HasSuffix(s, end[:m]) {
				return m
			}
		}
		return 0
	}
	var class strings.Builder
	for _, c := range chars {
		if strings.IndexByte(`]\^-[`, c) >= 0 {
			class.WriteByte('\\')
		}
		class.WriteByte(c)
	}
	fmt.Fprintf(b, "%s ::= %s-0\n", name, name)
	for k := 0; k < n; k++ {
		alts := []string{fmt.Sprintf("[^%s] %s-0", class.String(), name)}
		for _, c := range chars {
			j := next(k, c)
			if j == n {
				alts = append(alts, lit(string(c)))
			} else {
				alts = append(alts, fmt.Sprintf("%s %s-%d", lit(string(c)), name, j))
			}
		}
		fmt.Fprintf(b, "%s-%d ::= %s\n", name, k, strings.Join(alts, " | "))
	}
}
