package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// noThinking turns the fixture's thinking off, so that a short reply is
// content (random weights think at length).
var noThinking = responses.ResponseNewParams{Reasoning: openai.ReasoningParam{Effort: openai.ReasoningEffort("none")}}.Reasoning

// streamResponse runs a streamed response and returns its events' types
// in order, the text of its output_text deltas, the arguments of its
// function_call_arguments deltas per item, and its final response.
func streamResponse(t *testing.T, c openai.Client, params responses.ResponseNewParams, opts ...option.RequestOption) ([]string, string, map[string]string, responses.Response) {
	t.Helper()
	st := c.Responses.NewStreaming(context.Background(), params, opts...)
	var types []string
	var text strings.Builder
	args := map[string]string{}
	var final responses.Response
	seq := int64(0)
	for st.Next() {
		ev := st.Current()
		types = append(types, ev.Type)
		if ev.SequenceNumber != seq {
			t.Errorf("event %d (%s) has sequence_number %d", seq, ev.Type, ev.SequenceNumber)
		}
		seq++
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.function_call_arguments.delta":
			args[ev.ItemID] += ev.Delta
		case "response.completed", "response.incomplete":
			final = ev.Response
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	return types, text.String(), args, final
}

// hello is one brief, greedy, unthinking conversation as a Responses
// request and as the chat completion the server must answer alike.
func hello() (responses.ResponseNewParams, openai.ChatCompletionNewParams) {
	return responses.ResponseNewParams{Model: agentName, Instructions: openai.String("Be brief."),
			Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hello.")},
			MaxOutputTokens: openai.Int(12), Temperature: openai.Float(0), Reasoning: noThinking},
		openai.ChatCompletionNewParams{Model: agentName, MaxTokens: openai.Int(12), Temperature: openai.Float(0),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("Say hello.")}, ReasoningEffort: "none"}
}

// TestResponsesText: a plain text response through openai-go's Responses
// client, whole and streamed (the stream's deltas add up to the whole
// response's output_text, its events start with response.created and end
// with response.completed or response.incomplete), equal to what chat
// completions answers the same conversation with, since both render,
// sample and parse through the same code.
func TestResponsesText(t *testing.T) {
	ts := serveAgent(t)
	c := client(ts.URL, "")
	ctx := context.Background()
	params, chatParams := hello()
	res, err := c.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if res.Object != "response" || !strings.HasPrefix(res.ID, "resp_") || res.Model != agentName || res.OutputText() == "" {
		t.Fatalf("response %s %s %s, output_text %q", res.Object, res.ID, res.Model, res.OutputText())
	}
	if res.Usage.InputTokens == 0 || res.Usage.OutputTokens == 0 || res.Usage.OutputTokens > 12 || res.Usage.TotalTokens != res.Usage.InputTokens+res.Usage.OutputTokens {
		t.Errorf("usage %+v", res.Usage)
	}
	if (res.Status == "incomplete") != (res.IncompleteDetails.Reason == "max_output_tokens") || (res.Status != "completed" && res.Status != "incomplete") {
		t.Errorf("status %q, incomplete_details %+v", res.Status, res.IncompleteDetails)
	}
	if len(res.Output) != 1 || res.Output[0].Type != "message" || res.Output[0].Role != "assistant" {
		t.Errorf("output %+v", res.Output)
	}

	types, text, _, final := streamResponse(t, c, params)
	if text != res.OutputText() || final.OutputText() != res.OutputText() || final.Status != res.Status || final.Usage.OutputTokens != res.Usage.OutputTokens {
		t.Errorf("streamed %q (final %q, %s), not streamed %q (%s)", text, final.OutputText(), final.Status, res.OutputText(), res.Status)
	}
	if len(types) < 4 || types[0] != "response.created" || types[1] != "response.in_progress" || types[len(types)-1] != "response."+string(res.Status) {
		t.Errorf("event types %v", types)
	}

	chat, err := c.Chat.Completions.New(ctx, chatParams)
	if err != nil {
		t.Fatal(err)
	}
	if chat.Choices[0].Message.Content != res.OutputText() || chat.Usage.PromptTokens != res.Usage.InputTokens {
		t.Errorf("chat completions answers %q (%d prompt tokens), responses %q (%d)", chat.Choices[0].Message.Content, chat.Usage.PromptTokens, res.OutputText(), res.Usage.InputTokens)
	}
}

func responseTools() []responses.ToolUnionParam {
	var out []responses.ToolUnionParam
	for _, tl := range agentTools {
		out = append(out, responses.ToolParamOfFunction(tl.name, tl.schema, true))
	}
	return out
}

// TestResponsesToolRoundTrip: tool_choice required on random weights
// makes a function_call whose arguments validate against its tool's
// schema, streamed the same in function_call_arguments deltas; the call
// and a function_call_output answering it go back as input items, and the
// model answers with a message.
func TestResponsesToolRoundTrip(t *testing.T) {
	ts := serveAgent(t)
	c := client(ts.URL, "")
	ctx := context.Background()
	user := responses.ResponseInputItemParamOfMessage("What is the weather in Paris?", responses.EasyInputMessageRoleUser)
	params := responses.ResponseNewParams{Model: agentName, Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{user}},
		Tools: responseTools(), ToolChoice: responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsRequired)},
		ParallelToolCalls: openai.Bool(false), MaxOutputTokens: openai.Int(120), Temperature: openai.Float(1)}
	seed := option.WithJSONSet("seed", 3)
	res, err := c.Responses.New(ctx, params, seed)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != "completed" || len(res.Output) != 1 || res.Output[0].Type != "function_call" {
		t.Fatalf("status %s, output %s", res.Status, res.RawJSON())
	}
	call := res.Output[0].AsFunctionCall()
	var schema []byte
	for _, tl := range agentTools {
		if tl.name == call.Name {
			schema, _ = json.Marshal(tl.schema)
		}
	}
	if schema == nil || call.CallID == "" || call.Status != "completed" {
		t.Fatalf("call %+v", call)
	}
	if err := validate(validator(t, schema), call.Arguments); err != nil {
		t.Errorf("arguments %s: %v", call.Arguments, err)
	}

	types, _, args, final := streamResponse(t, c, params, seed)
	if len(final.Output) != 1 || args[final.Output[0].ID] != call.Arguments || final.Output[0].AsFunctionCall().CallID != call.CallID {
		t.Errorf("streamed %v (arguments %v), not streamed %+v", final.RawJSON(), args, call)
	}
	if !strings.Contains(strings.Join(types, " "), "response.output_item.added response.function_call_arguments.delta") {
		t.Errorf("event types %v", types)
	}

	// The round trip: the call and its output go back, and the model
	// answers (auto: it may call again, but 8 tokens of random weights do
	// not make a call).
	input := responses.ResponseInputParam{user, {OfFunctionCall: &[]responses.ResponseFunctionToolCallParam{call.ToParam()}[0]},
		responses.ResponseInputItemParamOfFunctionCallOutput(`{"result": "sunny, 21 degrees"}`)}
	input[2].OfFunctionCallOutput.CallID = openai.String(call.CallID)
	ans, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: agentName, Input: responses.ResponseNewParamsInputUnion{OfInputItemList: input},
		Tools: responseTools(), MaxOutputTokens: openai.Int(8), Reasoning: noThinking}, seed)
	if err != nil {
		t.Fatal(err)
	}
	if ans.OutputText() == "" || ans.Output[len(ans.Output)-1].Type != "message" || ans.Usage.InputTokens <= res.Usage.InputTokens {
		t.Errorf("the answer after the call's output: %s (%d input tokens, the call's %d)", ans.RawJSON(), ans.Usage.InputTokens, res.Usage.InputTokens)
	}
}

// TestResponsesStructured: text.format json_schema (strict) constrains
// the reply: output_text validates against the schema (an independent
// validator), streamed and not.
func TestResponsesStructured(t *testing.T) {
	ts := serveAgent(t)
	c := client(ts.URL, "")
	schemas := schemaFiles(t)
	tokens := int64(0)
	for _, name := range []string{"person", "02_enum_const.json"} {
		schema := schemas[name]
		if schema == nil {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(schema, &m); err != nil {
			t.Fatal(err)
		}
		format := responses.ResponseFormatTextConfigParamOfJSONSchema("out", m)
		format.OfJSONSchema.Strict = openai.Bool(true)
		params := responses.ResponseNewParams{Model: agentName, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Reply in JSON.")},
			Text: responses.ResponseTextConfigParam{Format: format}, MaxOutputTokens: openai.Int(400)}
		res, err := c.Responses.New(context.Background(), params, option.WithJSONSet("seed", 5))
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != "completed" {
			t.Fatalf("%s: status %s: %q", name, res.Status, res.OutputText())
		}
		if err := validate(validator(t, schema), res.OutputText()); err != nil {
			t.Errorf("%s: %q: %v", name, res.OutputText(), err)
		}
		_, text, _, final := streamResponse(t, c, params, option.WithJSONSet("seed", 5))
		if text != res.OutputText() {
			t.Errorf("%s: streamed %q, not streamed %q", name, text, res.OutputText())
		}
		tokens += res.Usage.OutputTokens + final.Usage.OutputTokens
	}
	// Every constrained token's mask was timed: one observation a token
	// (and one for the token after the last, computed ahead).
	masks := scrape(t, ts.URL).sum("zrt_constraint_mask_seconds_count", "model_name", agentName)
	if masks < float64(tokens) || masks > float64(tokens+4) {
		t.Errorf("zrt_constraint_mask_seconds counted %v masks for %d constrained tokens", masks, tokens)
	}
	// The schemas' keys and consts force tokens, which the server took
	// ahead of the model (fast-forward), and the replies still validate.
	if forced := scrape(t, ts.URL).sum("zrt_constraint_forced_tokens_total", "model_name", agentName); forced == 0 || forced >= float64(tokens) {
		t.Errorf("zrt_constraint_forced_tokens_total is %v for %d constrained tokens", forced, tokens)
	}
}

// TestResponsesBadInput: what the server cannot do or the request gets
// wrong is a 400 naming the parameter and saying why.
func TestResponsesBadInput(t *testing.T) {
	ts := serveAgent(t)
	for _, c := range []struct{ body, param, says string }{
		{`{"input": "hi", "previous_response_id": "resp_1"}`, "previous_response_id", "stores no responses"},
		{`{"input": [{"type": "item_reference", "id": "msg_1"}]}`, "input[0]", "stores no responses"},
		{`{}`, "input", "input is required"},
		{`{"input": []}`, "input", "must not be empty"},
		{`{"input": [{"role": "wizard", "content": "x"}]}`, "input[0].role", `"wizard"`},
		{`{"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}`, "input[0].content[0].type", "input_image"},
		{`{"input": [{"type": "function_call_output", "call_id": "c9", "output": "x"}]}`, "input[0].call_id", "c9"},
		{`{"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}`, "input[0].call_id", "call_id"},
		{`{"input": "hi", "tools": [{"type": "web_search"}]}`, "tools[0].type", "web_search"},
		{`{"input": "hi", "tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "function", "name": "g"}}`, "tool_choice", `"g"`},
		{`{"input": "hi", "text": {"format": {"type": "json_schema", "name": "x"}}}`, "text.format.schema", "schema"},
		{`{"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 3}}}}}}`, "text.format", "multipleOf"},
		{`{"input": "hi", "max_output_tokens": 0}`, "max_output_tokens", "max_output_tokens"},
		{`{"input": "hi", "max_output_tokens": 1024}`, "max_output_tokens", "max_output_tokens may be at most"},
		{`{"input": "hi", "temperature": -1}`, "temperature", "temperature"},
	} {
		code, raw, e, _ := post(t, ts.URL, "POST", "/v1/responses", c.body)
		if code != http.StatusBadRequest || e.Param == nil || *e.Param != c.param || !strings.Contains(e.Message, c.says) {
			t.Errorf("%s: %d %s, want a 400 about %s saying %s", c.body, code, raw, c.param, c.says)
		}
	}
}

// TestResponsesLogprobs: include message.output_text.logprobs with
// top_logprobs gives the message's tokens' logprobs, equal to what chat
// completions reports for the same conversation; streamed, the deltas'
// logprobs add up to them; an include this server has nothing for is a
// 400 naming it.
func TestResponsesLogprobs(t *testing.T) {
	ts := serveAgent(t)
	c := client(ts.URL, "")
	ctx := context.Background()
	params, chatParams := hello()
	params.Include, params.TopLogprobs = []responses.ResponseIncludable{responses.ResponseIncludableMessageOutputTextLogprobs}, openai.Int(3)
	chatParams.Logprobs, chatParams.TopLogprobs = openai.Bool(true), openai.Int(3)
	res, err := c.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Output) != 1 || len(res.Output[0].Content) != 1 {
		t.Fatalf("output %s", res.RawJSON())
	}
	got := res.Output[0].Content[0].Logprobs
	chat, err := c.Chat.Completions.New(ctx, chatParams)
	if err != nil {
		t.Fatal(err)
	}
	want := chat.Choices[0].Logprobs.Content
	if len(got) == 0 || len(got) != len(want) || int64(len(got)) != res.Usage.OutputTokens {
		t.Fatalf("%d logprobs (%d output tokens), chat completions %d", len(got), res.Usage.OutputTokens, len(want))
	}
	var text strings.Builder
	for i, g := range got {
		w := want[i]
		if g.Token != w.Token || g.Logprob != w.Logprob || !slices.Equal(g.Bytes, w.Bytes) || len(g.TopLogprobs) != 3 || len(w.TopLogprobs) != 3 {
			t.Fatalf("token %d: %+v, chat completions %+v", i, g, w)
		}
		for j, top := range g.TopLogprobs {
			if top.Token != w.TopLogprobs[j].Token || top.Logprob != w.TopLogprobs[j].Logprob {
				t.Fatalf("token %d alternative %d: %+v, chat completions %+v", i, j, top, w.TopLogprobs[j])
			}
		}
		text.WriteString(g.Token)
	}
	if strings.TrimSpace(text.String()) != res.OutputText() { // the reply parser trims the content's ends
		t.Errorf("the logprobs' tokens spell %q, output_text %q", text.String(), res.OutputText())
	}

	st := c.Responses.NewStreaming(ctx, params)
	deltas := 0
	var final responses.Response
	for st.Next() {
		ev := st.Current()
		switch ev.Type {
		case "response.output_text.delta":
			var d struct {
				Logprobs []json.RawMessage `json:"logprobs"`
			}
			if err := json.Unmarshal([]byte(ev.RawJSON()), &d); err != nil {
				t.Fatal(err)
			}
			deltas += len(d.Logprobs)
		case "response.completed", "response.incomplete":
			final = ev.Response
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if deltas != len(got) || len(final.Output) != 1 || !reflect.DeepEqual(final.Output[0].Content[0].Logprobs, got) {
		t.Errorf("streamed: %d logprobs in deltas, final %+v; not streamed %d", deltas, final.Output, len(got))
	}

	params.Include = []responses.ResponseIncludable{responses.ResponseIncludableFileSearchCallResults}
	_, err = c.Responses.New(ctx, params)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "include" || !strings.Contains(apiErr.Message, "file_search_call.results") {
		t.Errorf("include file_search_call.results: %v", err)
	}
}
