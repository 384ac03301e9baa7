package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// agentModel is the fixture of the agents' API: random weights with the
// real Qwen tokenizer and the Qwen3 chat template, which renders tools
// (Hermes-style <tool_call> replies) and thinking.
const (
	agentModel = "synthetic/syn-qwen3-chat-q8_0.gguf"
	agentName  = "syn-qwen3-chat-q8_0"
)

// agentConfig is its model config: prompts with tools run to a few
// hundred tokens.
const agentConfig = "context_length = 1024\ndecode_slots = [1, 2, 4]\nprefill_rows = [16, 128]\n"

// serveAgent serves the fixture with one keyless tenant.
func serveAgent(t *testing.T) *testServer {
	t.Helper()
	return serveStories(t, serveOptions{file: agentModel, model: agentConfig, config: "[[tenant]]\nid = \"local\"\n", slots: 4, chunkCap: 128})
}

// validator compiles a JSON Schema with an independent implementation,
// formats asserted.
func validator(t *testing.T, schema []byte) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// validate checks that text is JSON valid against s.
func validate(s *jsonschema.Schema, text string) error {
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return s.Validate(v)
}

// apiStatus is the HTTP status and param of an API error.
func apiStatus(err error) (int, string) {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		return apiErr.StatusCode, apiErr.Param
	}
	return 0, ""
}

// agentTools are two functions with bounded arguments, so that a forced
// call on random weights ends within a few dozen tokens.
var agentTools = []struct {
	name   string
	schema map[string]any
}{
	{"get_weather", map[string]any{"type": "object", "properties": map[string]any{
		"city": map[string]any{"type": "string", "minLength": 1, "maxLength": 10},
		"unit": map[string]any{"type": "string", "enum": []string{"celsius", "fahrenheit"}}},
		"required": []string{"city", "unit"}, "additionalProperties": false}},
	{"add", map[string]any{"type": "object", "properties": map[string]any{
		"a": map[string]any{"type": "integer", "minimum": -1000, "maximum": 1000},
		"b": map[string]any{"type": "integer", "minimum": -1000, "maximum": 1000}},
		"required": []string{"a", "b"}, "additionalProperties": false}},
}

func toolParams() []openai.ChatCompletionToolUnionParam {
	var out []openai.ChatCompletionToolUnionParam
	for _, tl := range agentTools {
		out = append(out, openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: tl.name, Description: openai.String("Tool " + tl.name),
			Parameters: shared.FunctionParameters(tl.schema)}))
	}
	return out
}

// TestToolCalls forces tool calls (tool_choice required, and a named
// function) on random weights, streamed and not: every reply is calls
// whose arguments validate against their tool's parameters, with
// finish_reason tool_calls, and the stream's delta.tool_calls add up to
// the same calls. Then the round trip: the calls and a tool message
// answering each go back, and the model answers.
func TestToolCalls(t *testing.T) {
	ts := serveAgent(t)
	c := client(ts.URL, "")
	ctx := context.Background()
	schemas := map[string]*jsonschema.Schema{}
	for _, tl := range agentTools {
		b, _ := json.Marshal(tl.schema)
		schemas[tl.name] = validator(t, b)
	}
	user := openai.UserMessage("What is the weather in Paris, and what is 2 + 3?")
	choices := map[string]openai.ChatCompletionToolChoiceOptionUnionParam{
		"required": {OfAuto: openai.String("required")},
		"named":    openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "add"}),
	}
	for name, choice := range choices {
		for seed := int64(1); seed <= 3; seed++ {
			params := openai.ChatCompletionNewParams{Model: agentName, Messages: []openai.ChatCompletionMessageParamUnion{user}, Tools: toolParams(),
				ToolChoice: choice, ParallelToolCalls: openai.Bool(false), MaxTokens: openai.Int(120), Seed: openai.Int(seed), Temperature: openai.Float(1)}
			res, err := c.Chat.Completions.New(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			ch := res.Choices[0]
			if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 {
				t.Fatalf("%s seed %d: finish %q, %d calls, content %q", name, seed, ch.FinishReason, len(ch.Message.ToolCalls), ch.Message.Content)
			}
			call := ch.Message.ToolCalls[0]
			s := schemas[call.Function.Name]
			if s == nil || (name == "named" && call.Function.Name != "add") {
				t.Fatalf("%s seed %d: call of %q", name, seed, call.Function.Name)
			}
			if err := validate(s, call.Function.Arguments); err != nil {
				t.Errorf("%s seed %d: arguments %s: %v", name, seed, call.Function.Arguments, err)
			}
			if call.ID == "" || call.Type != "function" {
				t.Errorf("%s seed %d: call id %q type %q", name, seed, call.ID, call.Type)
			}

			// Streamed, the same seed gives the same call in
			// delta.tool_calls pieces.
			st := c.Chat.Completions.NewStreaming(ctx, params)
			var acc openai.ChatCompletionAccumulator
			finish := ""
			for st.Next() {
				chunk := st.Current()
				acc.AddChunk(chunk)
				for _, sc := range chunk.Choices {
					if sc.FinishReason != "" {
						finish = sc.FinishReason
					}
				}
			}
			if err := st.Err(); err != nil {
				t.Fatal(err)
			}
			if len(acc.Choices) != 1 || finish != "tool_calls" || len(acc.Choices[0].Message.ToolCalls) != 1 {
				t.Fatalf("%s seed %d streamed: finish %q, %+v", name, seed, finish, acc.Choices)
			}
			got := acc.Choices[0].Message.ToolCalls[0]
			if got.ID != call.ID || got.Function.Name != call.Function.Name || got.Function.Arguments != call.Function.Arguments {
				t.Errorf("%s seed %d streamed call %s %s %s, not streamed %s %s %s", name, seed, got.ID, got.Function.Name, got.Function.Arguments,
					call.ID, call.Function.Name, call.Function.Arguments)
			}

			if seed > 1 {
				continue
			}
			// The round trip: the assistant's calls, a tool message
			// answering each, and the model's answer (auto: it may call
			// again, but 8 tokens of random weights do not make a call).
			msgs := []openai.ChatCompletionMessageParamUnion{user, ch.Message.ToParam()}
			for _, tc := range ch.Message.ToolCalls {
				msgs = append(msgs, openai.ToolMessage(`{"result": "sunny, 21 degrees"}`, tc.ID))
			}
			answer := openai.ChatCompletionNewParams{Model: agentName, Messages: msgs, Tools: toolParams(), ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("auto")},
				MaxTokens: openai.Int(8), Seed: openai.Int(seed)}
			ans, err := c.Chat.Completions.New(ctx, answer, option.WithJSONSet("chat_template_kwargs", map[string]any{"enable_thinking": false}))
			if err != nil {
				t.Fatal(err)
			}
			if ans.Choices[0].Message.Content == "" || len(ans.Choices[0].Message.ToolCalls) != 0 || ans.Usage.PromptTokens <= res.Usage.PromptTokens {
				t.Errorf("%s: the answer after the tool message: %+v, prompt %d tokens (the call's %d)", name, ans.Choices[0].Message, ans.Usage.PromptTokens, res.Usage.PromptTokens)
			}
			as := c.Chat.Completions.NewStreaming(ctx, answer, option.WithJSONSet("chat_template_kwargs", map[string]any{"enable_thinking": false}))
			var streamed strings.Builder
			for as.Next() {
				for _, sc := range as.Current().Choices {
					streamed.WriteString(sc.Delta.Content)
				}
			}
			if err := as.Err(); err != nil || streamed.String() != ans.Choices[0].Message.Content {
				t.Errorf("%s: the streamed answer %q (%v), not streamed %q", name, streamed.String(), err, ans.Choices[0].Message.Content)
			}
		}
	}

	// A named function that is not among the tools is the client's error.
	_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: agentName, Messages: []openai.ChatCompletionMessageParamUnion{user}, Tools: toolParams(),
		ToolChoice: openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "launch_rockets"}), MaxTokens: openai.Int(8)})
	var apiErr *openai.Error
	if status, param := apiStatus(err); status != http.StatusBadRequest || param != "tool_choice" || !errors.As(err, &apiErr) || !strings.Contains(apiErr.Message, "launch_rockets") {
		t.Errorf("tool_choice naming an unknown function: %v", err)
	}
}

// schemaFiles are the grammar library's test schemas, which use every
// keyword it supports, or a few of this test's own without them.
func schemaFiles(t *testing.T) map[string][]byte {
	out := map[string][]byte{}
	files, _ := filepath.Glob(filepath.Join("..", "grammar", "testdata", "schemas", "*.json"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = b
	}
	if len(out) == 0 {
		out["person"] = []byte(`{"type":"object","properties":{"name":{"type":"string","minLength":1,"maxLength":12},"age":{"type":"integer","minimum":0,"maximum":150},"tags":{"type":"array","items":{"type":"string","enum":["a","b","c"]},"minItems":1,"maxItems":3}},"required":["name","age","tags"],"additionalProperties":false}`)
		out["choice"] = []byte(`{"anyOf":[{"type":"object","properties":{"kind":{"const":"circle"},"r":{"type":"number","minimum":0,"maximum":10}},"required":["kind","r"],"additionalProperties":false},{"type":"object","properties":{"kind":{"const":"square"},"side":{"type":"integer","minimum":1,"maximum":9}},"required":["kind","side"],"additionalProperties":false}]}`)
		out["refs"] = []byte(`{"$defs":{"id":{"type":"string","format":"uuid"}},"type":"object","properties":{"id":{"$ref":"#/$defs/id"},"when":{"type":"string","format":"date"}},"required":["id","when"],"additionalProperties":false}`)
	}
	return out
}

// quickSchemas are the schemas TestStructuredOutput runs by default: on
// 2 CPU cores a step's mask over the 151k-token vocabulary inside a free
// string costs a few hundred milliseconds, so the default run takes the
// schemas whose replies are short; ZRT_SCHEMA_SWEEP=N runs every schema
// with N seeded choices.
var quickSchemas = map[string]bool{"02_enum_const.json": true, "04_anyof_nullable.json": true, "11_optional_order.json": true, "person": true, "choice": true}

// unbounded are the schemas whose objects take additional properties,
// whose names are strings of any length: on random weights a reply may
// run to max_tokens ("length") instead of stopping (seen: 400 tokens).
var unbounded = map[string]bool{"09_additional.json": true, "12_open_object.json": true}

// TestStructuredOutput asks for strict json_schema replies over the
// schemas, seeded choices each, on random weights: every reply ends with
// stop and validates against its schema (checked by an independent
// validator), and the stream gives the same text; then llama-server's
// json_schema field on /v1/completions.
func TestStructuredOutput(t *testing.T) {
	ts := serveAgent(t)
	// A sweep's replies wait on one another for the engine's slots.
	c := openai.NewClient(option.WithBaseURL(ts.URL+"/v1/"), option.WithMaxRetries(0), option.WithRequestTimeout(time.Hour))
	ctx := context.Background()
	schemas := schemaFiles(t)
	n, sweep := int64(2), os.Getenv("ZRT_SCHEMA_SWEEP") != ""
	if sweep {
		if _, err := fmt.Sscan(os.Getenv("ZRT_SCHEMA_SWEEP"), &n); err != nil || n < 1 || n > 16 {
			t.Fatalf("ZRT_SCHEMA_SWEEP=%q: want a count of seeds in [1, 16]", os.Getenv("ZRT_SCHEMA_SWEEP"))
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	valid := 0
	streamedOne := false
	for name, schema := range schemas {
		if !sweep && !quickSchemas[name] {
			continue
		}
		stream := !streamedOne
		streamedOne = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := validator(t, schema)
			var m map[string]any
			if err := json.Unmarshal(schema, &m); err != nil {
				t.Error(err)
				return
			}
			params := openai.ChatCompletionNewParams{Model: agentName, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Reply in JSON.")},
				ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{
					Name: "out", Schema: m, Strict: openai.Bool(true)}}},
				MaxTokens: openai.Int(400), Seed: openai.Int(5), N: openai.Int(n)}
			t0 := time.Now()
			res, err := c.Chat.Completions.New(ctx, params)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				return
			}
			t.Logf("%s: %d choices, %d tokens in %v", name, len(res.Choices), res.Usage.CompletionTokens, time.Since(t0))
			for _, ch := range res.Choices {
				if ch.FinishReason == "length" && unbounded[name] {
					continue // its property names are free strings: random weights need not stop
				}
				if ch.FinishReason != "stop" {
					t.Errorf("%s choice %d: finish %q after %d tokens: %q", name, ch.Index, ch.FinishReason, res.Usage.CompletionTokens, ch.Message.Content)
					continue
				}
				if err := validate(s, ch.Message.Content); err != nil {
					t.Errorf("%s choice %d: %q: %v", name, ch.Index, ch.Message.Content, err)
					continue
				}
				mu.Lock()
				valid++
				mu.Unlock()
			}
			if !stream {
				return
			}
			st := c.Chat.Completions.NewStreaming(ctx, params)
			streamed := make([]strings.Builder, n)
			for st.Next() {
				for _, sc := range st.Current().Choices {
					streamed[sc.Index].WriteString(sc.Delta.Content)
				}
			}
			if err := st.Err(); err != nil {
				t.Errorf("%s streamed: %v", name, err)
				return
			}
			for i, ch := range res.Choices {
				if streamed[i].String() != ch.Message.Content {
					t.Errorf("%s choice %d streamed %q, not streamed %q", name, i, streamed[i].String(), ch.Message.Content)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d replies validated", valid)

	// llama-server's json_schema on /v1/completions.
	schema := schemas["02_enum_const.json"]
	if schema == nil {
		schema = schemas["choice"]
	}
	comp, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: agentName, Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("JSON:")},
		MaxTokens: openai.Int(400), Seed: openai.Int(9)}, option.WithJSONSet("json_schema", json.RawMessage(schema)))
	if err != nil {
		t.Fatal(err)
	}
	if comp.Choices[0].FinishReason != "stop" {
		t.Errorf("completions: finish %q: %q", comp.Choices[0].FinishReason, comp.Choices[0].Text)
	} else if err := validate(validator(t, schema), comp.Choices[0].Text); err != nil {
		t.Errorf("completions: %q: %v", comp.Choices[0].Text, err)
	}
}

// TestGrammarFields constrains replies with llama.cpp's GBNF (grammar)
// and with a regular expression (regex), on both endpoints, and checks
// each reply against the same language written as a Go regexp; a cut by
// max_tokens says length; json_object gives a JSON object.
func TestGrammarFields(t *testing.T) {
	ts := serveAgent(t)
	c := client(ts.URL, "")
	ctx := context.Background()
	cases := []struct {
		field, constraint, check string
	}{
		{"grammar", `root ::= answer " " num
answer ::= "yes" | "no"
num ::= [1-9] [0-9]? [0-9]?`, `^(yes|no) [1-9][0-9]{0,2}$`},
		{"regex", `[A-Z][a-z]{2,6}-[0-9]{3}`, `^[A-Z][a-z]{2,6}-[0-9]{3}$`},
	}
	for _, tc := range cases {
		re := regexp.MustCompile(tc.check)
		for seed := int64(1); seed <= 3; seed++ {
			res, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: agentName, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Answer.")},
				MaxTokens: openai.Int(40), Seed: openai.Int(seed)}, option.WithJSONSet(tc.field, tc.constraint))
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Choices[0].Message.Content; res.Choices[0].FinishReason != "stop" || !re.MatchString(got) {
				t.Errorf("%s seed %d: %q (%s)", tc.field, seed, got, res.Choices[0].FinishReason)
			}
			comp, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: agentName, Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Answer:")},
				MaxTokens: openai.Int(40), Seed: openai.Int(seed)}, option.WithJSONSet(tc.field, tc.constraint))
			if err != nil {
				t.Fatal(err)
			}
			if got := comp.Choices[0].Text; comp.Choices[0].FinishReason != "stop" || !re.MatchString(got) {
				t.Errorf("completions %s seed %d: %q (%s)", tc.field, seed, got, comp.Choices[0].FinishReason)
			}
		}
	}

	// A cut by max_tokens is length, even though the grammar is not done.
	res, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: agentName, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Answer.")},
		MaxTokens: openai.Int(2), Seed: openai.Int(1)}, option.WithJSONSet("regex", `[a-z]{30}`))
	if err != nil {
		t.Fatal(err)
	}
	if res.Choices[0].FinishReason != "length" {
		t.Errorf("cut by max_tokens: %q (%s)", res.Choices[0].Message.Content, res.Choices[0].FinishReason)
	}

	// json_object: some JSON object.
	obj, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: agentName, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("JSON please.")},
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}, MaxTokens: openai.Int(12), Seed: openai.Int(2)})
	if err != nil {
		t.Fatal(err)
	}
	// Cut by max_tokens unless it closed early; either way an object's
	// start.
	var anyObj map[string]any
	got := obj.Choices[0].Message.Content
	if !strings.HasPrefix(got, "{") || obj.Choices[0].FinishReason == "stop" && json.Unmarshal([]byte(got), &anyObj) != nil {
		t.Errorf("json_object: %q (%s)", got, obj.Choices[0].FinishReason)
	}

	// Two constraints at once, and a grammar that does not parse, are the
	// client's errors, naming the field.
	for _, bad := range []struct {
		body  string
		param string
	}{
		{`{"messages":[{"role":"user","content":"x"}],"grammar":"root ::= \"a\"","regex":"b"}`, "regex"},
		{`{"messages":[{"role":"user","content":"x"}],"grammar":"root ::= (\"a\""}`, "grammar"},
		{`{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"xml"}}`, "response_format"},
	} {
		status, body := postJSON(t, ts.URL+"/v1/chat/completions", bad.body)
		if status != http.StatusBadRequest || !strings.Contains(body, `"param":"`+bad.param+`"`) {
			t.Errorf("%s: %d %s", bad.body, status, body)
		}
	}
}

// postJSON sends a JSON body and returns the status and the body.
func postJSON(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestHostileSchema sends schemas past the grammar's limits (deep
// nesting, a huge enum, a repetition count past its bound): each is a 400
// that names the limit, within the compile bound, and the server answers
// /health meanwhile and after.
func TestHostileSchema(t *testing.T) {
	ts := serveAgent(t)
	deep := strings.Repeat(`{"type":"object","properties":{"a":`, 200) + `{"type":"string"}` + strings.Repeat(`}}`, 200)
	var enum []string
	for i := range 5000 {
		enum = append(enum, fmt.Sprintf("value-%d", i))
	}
	huge, _ := json.Marshal(map[string]any{"type": "string", "enum": enum})
	cases := map[string]string{
		"deep nesting": deep,
		"huge enum":    string(huge),
		"huge repeat":  `{"type":"array","items":{"type":"string","maxLength":100},"maxItems":100000}`,
	}
	done := make(chan struct{})
	healthy := make(chan error, 1)
	go func() {
		// /health keeps answering while the schemas are refused.
		defer close(healthy)
		for {
			select {
			case <-done:
				return
			default:
			}
			resp, err := http.Get(ts.URL + "/health")
			if err != nil || resp.StatusCode != 200 {
				healthy <- fmt.Errorf("/health: %v %v", err, resp)
				return
			}
			resp.Body.Close()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	for name, schema := range cases {
		body := `{"messages":[{"role":"user","content":"x"}],"max_tokens":4,"response_format":{"type":"json_schema","json_schema":{"name":"h","strict":true,"schema":` + schema + `}}}`
		t0 := time.Now()
		status, resp := postJSON(t, ts.URL+"/v1/chat/completions", body)
		took := time.Since(t0)
		if status != http.StatusBadRequest || !strings.Contains(resp, "limit") || !strings.Contains(resp, `"param":"response_format"`) {
			t.Errorf("%s: %d %.300s", name, status, resp)
		}
		if took > 5*time.Second {
			t.Errorf("%s: refused after %v", name, took)
		}
		t.Logf("%s: %d in %v: %.200s", name, status, took, resp)
	}
	// A regular expression whose repetitions multiply past the grammar's
	// size, and a tool whose parameters nest past the depth bound.
	for body, param := range map[string]string{
		`{"messages":[{"role":"user","content":"x"}],"max_tokens":4,"regex":"((((a{1,999}){1,999}){1,999}){1,999})"}`:                                                          "regex",
		`{"messages":[{"role":"user","content":"x"}],"max_tokens":4,"tool_choice":"required","tools":[{"type":"function","function":{"name":"f","parameters":` + deep + `}}]}`: "tools",
	} {
		t0 := time.Now()
		status, resp := postJSON(t, ts.URL+"/v1/chat/completions", body)
		if status != http.StatusBadRequest || !strings.Contains(resp, "limit") || !strings.Contains(resp, `"param":"`+param+`"`) || time.Since(t0) > 5*time.Second {
			t.Errorf("%s: %d in %v: %.300s", param, status, time.Since(t0), resp)
		}
	}
	close(done)
	if err := <-healthy; err != nil {
		t.Error(err)
	}
	// And it still generates.
	if status, resp := postJSON(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":2}`); status != 200 {
		t.Errorf("after the hostile schemas: %d %s", status, resp)
	}
}

// TestConstrainedChoices asks for n = 4 choices under a schema with seed
// s and requires choice i to equal a request of one choice with seed
// s + i: each choice has its own matcher.
func TestConstrainedChoices(t *testing.T) {
	ts := serveAgent(t)
	c := client(ts.URL, "")
	ctx := context.Background()
	schema := map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer", "minimum": 0, "maximum": 99},
		"w": map[string]any{"type": "string", "maxLength": 6}}, "required": []string{"n", "w"}, "additionalProperties": false}
	params := openai.ChatCompletionNewParams{Model: agentName, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("JSON.")},
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{
			Name: "o", Schema: schema, Strict: openai.Bool(true)}}},
		MaxTokens: openai.Int(60), Seed: openai.Int(21), N: openai.Int(4)}
	res, err := c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Choices) != 4 {
		t.Fatalf("%d choices", len(res.Choices))
	}
	for i, ch := range res.Choices {
		one := params
		one.N, one.Seed = openai.Int(1), openai.Int(21+int64(i))
		alone, err := c.Chat.Completions.New(ctx, one)
		if err != nil {
			t.Fatal(err)
		}
		if ch.Message.Content != alone.Choices[0].Message.Content {
			t.Errorf("choice %d: %q, alone with seed %d: %q", i, ch.Message.Content, 21+i, alone.Choices[0].Message.Content)
		}
	}
}
