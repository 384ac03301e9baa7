package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/zrtdev/zrt/runtime/chat/reply"
	"github.com/zrtdev/zrt/runtime/decode"
	"github.com/zrtdev/zrt/runtime/engine"
)

// responses is POST /v1/responses, OpenAI's Responses API (the Agents
// SDK's default) on the chat machinery: the input items become a chat
// turn (responses_input.go), prepare renders, constrains and submits it
// as chat completions does, and the reply is parsed into output items —
// reasoning, a message, function calls — whole or as the API's typed
// stream events. It keeps no state: every response is store false, and a
// request that refers to a stored one is a 400.
func (s *Server) responses(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model             string          `json:"model"`
		Input             json.RawMessage `json:"input"`
		Instructions      *string         `json:"instructions"`
		Tools             json.RawMessage `json:"tools"`
		ToolChoice        json.RawMessage `json:"tool_choice"`
		ParallelToolCalls *bool           `json:"parallel_tool_calls"`
		Text              *struct {
			Format json.RawMessage `json:"format"`
		} `json:"text"`
		Reasoning *struct {
			Effort *string `json:"effort"`
		} `json:"reasoning"`
		MaxOutputTokens *int `json:"max_output_tokens"`
		samplingFields
		Stream             bool            `json:"stream"`
		PreviousResponseID *string         `json:"previous_response_id"`
		Conversation       json.RawMessage `json:"conversation"`
		Background         bool            `json:"background"`
		Metadata           json.RawMessage `json:"metadata"`
		ChatTemplateKwargs map[string]any  `json:"chat_template_kwargs"`
		Include            []string        `json:"include"`
		TopLogprobs        *int            `json:"top_logprobs"`
	}
	if aerr := decodeBody(w, r, &req); aerr != nil {
		s.reject(w, r, aerr)
		return
	}
	m, aerr := s.model(req.Model)
	if aerr != nil {
		s.reject(w, r, aerr)
		return
	}
	switch {
	case req.PreviousResponseID != nil && *req.PreviousResponseID != "":
		s.reject(w, r, badRequest("previous_response_id", "previous_response_id: this server stores no responses (store is always false): send the whole conversation in input, the earlier output items included"))
		return
	case set(req.Conversation):
		s.reject(w, r, badRequest("conversation", "conversation: this server stores no conversations: send the whole conversation in input"))
		return
	case req.Background:
		s.reject(w, r, badRequest("background", "background: this server stores no responses, so it cannot run one in the background"))
		return
	case req.MaxOutputTokens != nil && (*req.MaxOutputTokens < 1 || *req.MaxOutputTokens > m.ContextLength):
		s.reject(w, r, maxTokensError("max_output_tokens", m))
		return
	}
	logprobs, aerr := responsesInclude(req.Include)
	if aerr != nil {
		s.reject(w, r, aerr)
		return
	}
	msgs, aerr := responsesInput(req.Input, req.Instructions)
	if aerr != nil {
		s.reject(w, r, aerr)
		return
	}
	tools, aerr := responsesTools(req.Tools)
	if aerr != nil {
		s.reject(w, r, aerr)
		return
	}
	choice, aerr := responsesToolChoice(req.ToolChoice, tools)
	if aerr != nil {
		s.reject(w, r, aerr)
		return
	}
	t := turn{msgs: msgs, tools: tools, choice: choice, parallel: req.ParallelToolCalls == nil || *req.ParallelToolCalls, kwargs: req.ChatTemplateKwargs}
	var format json.RawMessage
	if req.Text != nil {
		format = req.Text.Format
	}
	spec, constrained, aerr := textFormat(format)
	if aerr != nil {
		s.reject(w, r, aerr)
		return
	}
	if constrained {
		t.spec, t.field = spec, "text.format"
	}
	if req.Reasoning != nil && req.Reasoning.Effort != nil {
		t.effort = *req.Reasoning.Effort
	}
	// The sampling fields are chat's, validated as chat validates them.
	g := genParams{MaxTokens: req.MaxOutputTokens, samplingFields: req.samplingFields, TopLogprobs: req.TopLogprobs}
	if logprobs || req.TopLogprobs != nil && *req.TopLogprobs > 0 {
		g.Logprobs = json.RawMessage("true") // the message's output_text carries them
	}
	p, aerr := g.decodeParams(m, true)
	if aerr != nil {
		s.reject(w, r, aerr)
		return
	}
	ps := []decode.Params{p}
	prompt, rf, aerr := s.prepare(r.Context(), m, t, ps)
	if aerr != nil {
		s.reject(w, r, aerr)
		return
	}
	if req.MaxOutputTokens == nil {
		ps[0].MaxTokens = contextRest(r, m, len(prompt))
	}
	gen, aerr := s.submit(r.Context(), m, prompt, ps)
	if aerr != nil {
		if aerr.Param != nil && *aerr.Param == "max_tokens" {
			// The engine's refusals speak chat's name for the field.
			param := "max_output_tokens"
			aerr.Param, aerr.Message = &param, strings.ReplaceAll(aerr.Message, "max_tokens", param)
		}
		s.reject(w, r, aerr)
		return
	}
	n := s.requests.Add(1)
	o := &responseOut{
		id: fmt.Sprintf("resp_%d", n), created: time.Now().Unix(), reply: newReplies(rf, ps)[0],
		countTokens: func(text string) int { return len(m.Tok.Encode(text, false, false)) },
	}
	if p.Logprobs {
		o.logprobs = func(lps []decode.Logprobs) []chatLogprob { return chatLogprobs(m.Tok, lps)["content"].([]chatLogprob) }
	}
	effort := any(nil)
	if t.effort != "" {
		effort = t.effort
	}
	textCfg := map[string]any{"format": map[string]any{"type": "text"}}
	if set(format) {
		textCfg["format"] = format
	}
	toolChoiceEcho := any(choice.mode)
	if set(req.ToolChoice) {
		toolChoiceEcho = req.ToolChoice
	}
	toolsEcho := any([]any{})
	if set(req.Tools) {
		toolsEcho = req.Tools
	}
	metadata := any(map[string]any{})
	if set(req.Metadata) {
		metadata = req.Metadata
	}
	o.fields = map[string]any{
		"object": "response", "model": m.Name, "instructions": req.Instructions, "tools": toolsEcho, "tool_choice": toolChoiceEcho,
		"parallel_tool_calls": t.parallel, "temperature": p.Sampling.Temperature, "top_p": p.Sampling.TopP, "max_output_tokens": req.MaxOutputTokens,
		"reasoning": map[string]any{"effort": effort, "summary": nil}, "text": textCfg, "store": false, "previous_response_id": nil,
		"truncation": "disabled", "metadata": metadata, "background": false, "error": nil, "incomplete_details": nil,
	}
	if req.Stream {
		o.stream(w, gen)
		return
	}
	// Fed event by event as the stream is, so each token's logprob goes
	// with the part its text went to.
	var last engine.Event
	for ce := range gen.merged() {
		gen.observe(ce.i, ce.ev)
		o.event(ce.ev)
		last = ce.ev
	}
	if last.Finish.Aborted() {
		s.reject(w, r, &apiError{status: http.StatusInternalServerError, Message: "generation ended: " + failure([]engine.Event{last}), Type: "server_error"})
		return
	}
	writeJSON(w, o.finish(last))
}

// responsesIncludable are the include values a response can carry here:
// the message's token logprobs, and reasoning's encrypted content, which
// the Agents SDK asks for when store is false — this server's reasoning
// items carry their text instead, which comes back as input as it is.
var responsesIncludable = map[string]bool{"message.output_text.logprobs": true, "reasoning.encrypted_content": true}

// responsesInclude reads include: whether the message's output_text
// carries logprobs. A value naming what this server has no items for
// (hosted tools' outputs, input images) is a 400.
func responsesInclude(include []string) (logprobs bool, aerr *apiError) {
	for _, v := range include {
		if !responsesIncludable[v] {
			return false, badRequest("include", "include: %q is not available here (this server has no hosted tools or stored inputs); it can include message.output_text.logprobs and reasoning.encrypted_content", v)
		}
		logprobs = logprobs || v == "message.output_text.logprobs"
	}
	return logprobs, nil
}

// responseOut builds one response's output items from its reply, as the
// stream's events and as the whole object: the same state machine makes
// both, so a stream adds up to the response that is not streamed.
type responseOut struct {
	id      string
	created int64
	fields  map[string]any // the request's settings, echoed
	reply   *chatReply
	// countTokens counts the reasoning's tokens for usage (the engine
	// counts the reply's, not which part they went to).
	countTokens func(string) int
	// emit sends a stream event (nil when not streaming).
	emit func(typ string, ev map[string]any)
	// logprobs formats tokens' logprobs (nil when not asked for); pending
	// are those of the tokens since the last text delta, lps the open
	// message's.
	logprobs func([]decode.Logprobs) []chatLogprob
	pending  []decode.Logprobs
	lps      []decode.Logprobs

	items []map[string]any // output items, the last perhaps open
	open  string           // the open item's type; "" when none
	text  strings.Builder  // the open item's text or arguments
	call  int              // the reply's index of the open call
	calls bool
	think strings.Builder // all the reasoning text
}

// object is the response object with status and output.
func (o *responseOut) object(status string, usage any) map[string]any {
	out := map[string]any{"id": o.id, "created_at": o.created, "status": status, "output": o.items, "usage": usage}
	if o.items == nil {
		out["output"] = []any{}
	}
	for k, v := range o.fields {
		out[k] = v
	}
	return out
}

func (o *responseOut) send(typ string, ev map[string]any) {
	if o.emit != nil {
		o.emit(typ, ev)
	}
}

// event feeds one engine event: its token's logprobs, then its text.
func (o *responseOut) event(ev engine.Event) {
	if ev.Logprobs != nil && o.logprobs != nil {
		o.pending = append(o.pending, *ev.Logprobs)
	}
	if ev.Text != "" {
		o.delta(o.reply.add(ev.Text))
	}
}

// takeLogprobs hands the pending tokens' logprobs to the part a delta
// went to: the message's output_text (kept for its done event), or
// reasoning and calls, which carry none. A token whose text the parser
// held back counts for the part it is shown in.
func (o *responseOut) takeLogprobs(content bool) []chatLogprob {
	if o.logprobs == nil {
		return []chatLogprob{}
	}
	lps := o.pending
	o.pending = nil
	if !content {
		return nil
	}
	o.lps = append(o.lps, lps...)
	return o.logprobs(lps)
}

// delta turns what the reply parser decided into output items and events.
func (o *responseOut) delta(d reply.Delta) {
	if len(d.ToolCalls) > 0 || d.Reasoning != "" && d.Content == "" {
		o.takeLogprobs(false) // held-back text before a call is mostly its marker's
	}
	if d.Reasoning != "" {
		o.think.WriteString(d.Reasoning)
		if o.open != "reasoning" {
			o.openItem("reasoning")
		}
		o.text.WriteString(d.Reasoning)
		o.send("response.reasoning_text.delta", map[string]any{"item_id": o.itemID(), "output_index": len(o.items) - 1, "content_index": 0, "delta": d.Reasoning})
	}
	if d.Content != "" {
		if o.open != "message" {
			o.openItem("message")
		}
		o.text.WriteString(d.Content)
		o.send("response.output_text.delta", map[string]any{"item_id": o.itemID(), "output_index": len(o.items) - 1, "content_index": 0, "delta": d.Content,
			"logprobs": o.takeLogprobs(true)})
	}
	for _, c := range d.ToolCalls {
		o.calls = true
		if o.open != "function_call" || o.call != c.Index {
			o.closeItem()
			o.call = c.Index
			o.items = append(o.items, map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_%s_%d", o.id[5:], len(o.items)),
				"call_id": c.ID, "name": c.Name, "arguments": "", "status": "in_progress"})
			o.open = "function_call"
			o.send("response.output_item.added", map[string]any{"output_index": len(o.items) - 1, "item": clone(o.items[len(o.items)-1])})
		}
		if c.Arguments != "" {
			o.text.WriteString(c.Arguments)
			o.send("response.function_call_arguments.delta", map[string]any{"item_id": o.itemID(), "output_index": len(o.items) - 1, "delta": c.Arguments})
		}
	}
}

func (o *responseOut) itemID() string { return o.items[len(o.items)-1]["id"].(string) }

// openItem closes the open item and opens a reasoning or message item
// with its one content part.
func (o *responseOut) openItem(typ string) {
	o.closeItem()
	k := len(o.items)
	item := map[string]any{"type": "reasoning", "id": fmt.Sprintf("rs_%s_%d", o.id[5:], k), "summary": []any{}, "content": []any{}, "status": "in_progress"}
	part := map[string]any{"type": "reasoning_text", "text": ""}
	if typ == "message" {
		item = map[string]any{"type": "message", "id": fmt.Sprintf("msg_%s_%d", o.id[5:], k), "role": "assistant", "content": []any{}, "status": "in_progress"}
		part = map[string]any{"type": "output_text", "text": "", "annotations": []any{}, "logprobs": []any{}}
	}
	o.items = append(o.items, item)
	o.open = typ
	o.send("response.output_item.added", map[string]any{"output_index": k, "item": clone(item)})
	o.send("response.content_part.added", map[string]any{"item_id": item["id"], "output_index": k, "content_index": 0, "part": part})
}

// closeItem completes the open item, if any, with its text.
func (o *responseOut) closeItem() {
	if o.open == "" {
		return
	}
	k, item, text := len(o.items)-1, o.items[len(o.items)-1], o.text.String()
	id := item["id"]
	switch o.open {
	case "reasoning":
		part := map[string]any{"type": "reasoning_text", "text": text}
		o.send("response.reasoning_text.done", map[string]any{"item_id": id, "output_index": k, "content_index": 0, "text": text})
		o.send("response.content_part.done", map[string]any{"item_id": id, "output_index": k, "content_index": 0, "part": part})
		item["content"] = []any{part}
	case "message":
		lps := []chatLogprob{}
		if o.logprobs != nil {
			lps = o.logprobs(o.lps)
			o.lps = nil
		}
		part := map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": lps}
		o.send("response.output_text.done", map[string]any{"item_id": id, "output_index": k, "content_index": 0, "text": text, "logprobs": lps})
		o.send("response.content_part.done", map[string]any{"item_id": id, "output_index": k, "content_index": 0, "part": part})
		item["content"] = []any{part}
	case "function_call":
		item["arguments"] = text
		o.send("response.function_call_arguments.done", map[string]any{"item_id": id, "output_index": k, "name": item["name"], "arguments": text})
	}
	item["status"] = "completed"
	o.send("response.output_item.done", map[string]any{"output_index": k, "item": clone(item)})
	o.open = ""
	o.text.Reset()
}

// finish ends the reply with the engine's last event and returns the
// whole response: completed, or incomplete when max_output_tokens (or the
// context) cut it.
func (o *responseOut) finish(last engine.Event) map[string]any {
	d, _ := o.reply.end()
	o.delta(d)
	if !o.calls && !o.hasMessage() {
		o.openItem("message") // output_text is "", not absent
	}
	o.closeItem()
	status := "completed"
	if last.Finish.OpenAI() == "length" {
		status = "incomplete"
		o.fields["incomplete_details"] = map[string]any{"reason": "max_output_tokens"}
	}
	reasoning := 0
	if o.think.Len() > 0 {
		reasoning = min(o.countTokens(o.think.String()), last.CompletionTokens)
	}
	usage := map[string]any{
		"input_tokens": last.PromptTokens, "input_tokens_details": map[string]any{"cached_tokens": last.CachedTokens},
		"output_tokens": last.CompletionTokens, "output_tokens_details": map[string]any{"reasoning_tokens": reasoning},
		"total_tokens": last.PromptTokens + last.CompletionTokens,
	}
	return o.object(status, usage)
}

func (o *responseOut) hasMessage() bool {
	for _, it := range o.items {
		if it["type"] == "message" {
			return true
		}
	}
	return false
}

// clone copies an item for an event, which must not change when the item
// later does.
func clone(m map[string]any) map[string]any {
	c := make(map[string]any, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// stream writes the response as the Responses API's server-sent events:
// response.created and response.in_progress, the output items' events as
// the reply is generated, then response.completed (or
// response.incomplete); a generation that fails ends with an error event
// and response.failed. Every event carries its sequence_number.
func (o *responseOut) stream(w http.ResponseWriter, g *generation) {
	s := newSSE(w)
	seq := 0
	o.emit = func(typ string, ev map[string]any) {
		ev["type"], ev["sequence_number"] = typ, seq
		seq++
		b, _ := json.Marshal(ev)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, b)
	}
	o.emit("response.created", map[string]any{"response": o.object("in_progress", nil)})
	o.emit("response.in_progress", map[string]any{"response": o.object("in_progress", nil)})
	s.flush()
	s.relay(g, func(_ int, ev engine.Event) bool {
		o.event(ev)
		if ev.Finish != "" {
			if ev.Finish.Aborted() {
				msg := "generation ended: " + string(ev.Finish)
				o.emit("error", map[string]any{"code": "server_error", "message": msg, "param": nil})
				o.fields["error"] = map[string]any{"code": "server_error", "message": msg}
				o.emit("response.failed", map[string]any{"response": o.object("failed", nil)})
			} else {
				res := o.finish(ev)
				typ := "response.completed"
				if res["status"] == "incomplete" {
					typ = "response.incomplete"
				}
				o.emit(typ, map[string]any{"response": res})
			}
		}
		s.flush()
		return true
	}, func() {})
}

// contextRest is OpenAI's default bound on a chat or response's tokens:
// as much as the context (the tenant's, where it has a smaller one)
// leaves after a prompt of n tokens. (An interactive request reserves KV
// pages for all of it, so a client that knows its bound should send it.)
func contextRest(r *http.Request, m *Model, n int) int {
	ctxLen := m.ContextLength
	if tn := r.Context().Value(tenantKey).(*Tenant); tn.MaxContextTokens > 0 {
		ctxLen = min(ctxLen, tn.MaxContextTokens)
	}
	return max(ctxLen-n, 1)
}
