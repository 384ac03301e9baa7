package server

import (
	"context"
	"net/http"

	"github.com/zrtdev/zrt/runtime/chat"
	"github.com/zrtdev/zrt/runtime/chat/reply"
	"github.com/zrtdev/zrt/runtime/decode"
	"github.com/zrtdev/zrt/runtime/grammar"
)

// turn is a chat request as both chat endpoints (chat completions and
// responses) read it from their wire formats: the conversation, the tools
// and how the reply may use them, the constraint on its text, and the
// reasoning controls.
type turn struct {
	msgs     []chat.Message
	tools    []chat.Tool
	choice   toolChoice
	parallel bool
	// spec constrains the reply's text when field (the request field
	// that set it, named in errors) is not empty.
	spec  grammar.Spec
	field string
	// kwargs are chat_template_kwargs, effort the reasoning effort.
	kwargs map[string]any
	effort string
}

// prepare renders t's prompt with m's chat template and sets up its
// choices ps for it: the format's markers shown as text, and each
// choice's matcher when the reply is constrained (by t.spec, or by a
// forced tool call). It returns the prompt and the reply format its
// choices' text is parsed with. This is the one place where a chat
// request becomes a generation.
func (s *Server) prepare(ctx context.Context, m *Model, t turn, ps []decode.Params) ([]int32, reply.Format, *apiError) {
	spec, field, constrained := t.spec, t.field, t.field != ""
	forced := t.choice.forced()
	if constrained && forced {
		return nil, reply.Format{}, badRequest(field, "%s and tool_choice %s both constrain the reply: give one", field, t.choice.mode)
	}
	format := reply.Detect(m.Tok.Vocab().ChatTemplate)
	vars, aerr := templateVars(format, t.kwargs, t.effort, constrained || forced)
	if aerr != nil {
		return nil, format, aerr
	}
	offered := t.tools
	if t.choice.mode == "none" {
		offered = nil // the model is not told of tools it may not call
	}
	text, prompt, err := renderChat(m.Tok, t.msgs, offered, vars)
	if err != nil {
		return nil, format, &apiError{status: http.StatusBadRequest, Message: "chat template: " + err.Error(), Type: "invalid_request_error"}
	}
	format = format.AfterPrompt(text).WithTools(offered)
	if len(offered) == 0 {
		format.Kind = reply.Plain // without tools a reply is never calls
	}
	if forced {
		field = "tool_choice"
	}
	if (constrained || forced) && format.StartsInReasoning() {
		return nil, format, badRequest(field, "this model's template opens reasoning in the prompt even with enable_thinking false, and a constrained reply has none: %s cannot be used with it", field)
	}
	if forced {
		gbnf, aerr := callGrammar(format, t.tools, t.choice, t.parallel)
		if aerr != nil {
			return nil, format, aerr
		}
		spec, constrained = grammar.Spec{GBNF: gbnf}, true
	}
	// The format's markers show as text, for the reply parser.
	keep := s.agent(m).keep
	for i := range ps {
		ps[i].Keep = keep
	}
	if constrained {
		if aerr := s.constrain(ctx, m, spec, field, ps); aerr != nil {
			return nil, format, aerr
		}
	}
	return prompt, format, nil
}

// newReplies are the parsers of a request's choices' replies in format
// f, each choice's call ids seeded by its own seed.
func newReplies(f reply.Format, ps []decode.Params) []*chatReply {
	out := make([]*chatReply, len(ps))
	for i := range out {
		out[i] = &chatReply{f: f.WithIDs(ps[i].Sampling.Seed), raw: f.Kind == reply.Plain && f.ThinkStart == ""}
		out[i].s = out[i].f.NewStream()
	}
	return out
}

// chatReply splits one choice's generated text into reasoning, content
// and tool calls, both as it streams and as a whole.
type chatReply struct {
	// raw says the reply has nothing to split (no tools, no reasoning
	// tags): its text is the content as generated, with the spaces the
	// parser would trim.
	raw   bool
	f     reply.Format
	s     *reply.Stream
	calls bool // the stream has sent a call
}

// add returns what the choice's next text t completes.
func (c *chatReply) add(t string) reply.Delta {
	if c.raw {
		return reply.Delta{Content: t}
	}
	return c.seen(c.s.Add(t))
}

// end returns what was held back until the choice ended, and whether its
// reply was tool calls.
func (c *chatReply) end() (reply.Delta, bool) {
	if c.raw {
		return reply.Delta{}, false
	}
	return c.seen(c.s.Flush()), c.calls
}

func (c *chatReply) seen(d reply.Delta) reply.Delta {
	if len(d.ToolCalls) > 0 {
		c.calls = true
	}
	return d
}

// parse splits the whole reply text. A reply that does not parse as
// calls is content.
func (c *chatReply) parse(text string) reply.Parsed {
	if c.raw {
		return reply.Parsed{Content: text}
	}
	return c.f.Parse(text)
}
