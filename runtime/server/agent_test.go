package server_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
)

// agentModel is the fixture of the agents' API: random weights with the
// real Qwen tokenizer and the Qwen3 chat template, which renders tools
// (Hermes-style <tool_call> replies) and thinking.
const agentModel = "synthetic/syn-qwen3-chat-q8_0.gguf"

// agentConfig is its model config: prompts with tools run to a few
// hundred tokens.
const agentConfig = "context_length = 1024\ndecode_slots = [1, 2, 4]\nprefill_rows = [16, 128]\n"

// serveAgent serves the fixture with one keyless tenant.
func serveAgent(t *testing.T) *testServer {
	t.Helper()
	return serveStories(t, serveOptions{file: agentModel, model: agentConfig, config: "[[tenant]]\nid = \"local\"\n", slots: 4, chunkCap: 128})
}

func TestAgentProbe(t *testing.T) {
	t0 := time.Now()
	ts := serveAgent(t)
	t.Logf("served in %v", time.Since(t0))
	c := client(ts.URL, "")
	ctx := context.Background()
	weather := openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_weather", Description: openai.String("The weather in a city"),
		Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string", "maxLength": 12}}, "required": []string{"city"}, "additionalProperties": false}})
	t0 = time.Now()
	res, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "syn-qwen3-chat-q8_0", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What's the weather in Paris?")},
		Tools: []openai.ChatCompletionToolUnionParam{weather}, ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")},
		MaxTokens: openai.Int(60), Seed: openai.Int(1)})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(res, "", " ")
	t.Logf("%v: %s", time.Since(t0), b)
}
