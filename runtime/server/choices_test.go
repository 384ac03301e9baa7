package server_test

import (
	"context"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
)

// TestChoices asks for n = 4 choices with seed s, on both endpoints,
// streamed and not, and requires choice i to equal a request of one
// choice with seed s + i; the usage counts the prompt once.
func TestChoices(t *testing.T) {
	ts := serveStories(t, serveOptions{config: "[[tenant]]\nid = \"local\"\n", slots: 4, chunkCap: 64})
	c := client(ts.URL, "")
	ctx := context.Background()
	const seed = 11
	// A prompt past two KV pages, so the later choices have full pages to
	// map from the first.
	prompt := "Lily and Ben went to the park to play with a big red ball. They ran and laughed all day, and when the sun went down they"
	params := openai.CompletionNewParams{Model: "stories260K", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
		MaxTokens: openai.Int(20), Temperature: openai.Float(0.9), Seed: openai.Int(seed), N: openai.Int(4)}
	comp, err := c.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(comp.Choices) != 4 {
		t.Fatalf("%d choices, want 4", len(comp.Choices))
	}
	var completion int64
	texts := map[string]bool{}
	for i, ch := range comp.Choices {
		if int(ch.Index) != i {
			t.Errorf("choice %d has index %d", i, ch.Index)
		}
		one := params
		one.N, one.Seed = openai.Int(1), openai.Int(seed+int64(i))
		alone, err := c.Completions.New(ctx, one)
		if err != nil {
			t.Fatal(err)
		}
		if ch.Text != alone.Choices[0].Text || ch.FinishReason != alone.Choices[0].FinishReason {
			t.Errorf("choice %d: %q (%s), alone with seed %d: %q (%s)", i, ch.Text, ch.FinishReason, seed+i, alone.Choices[0].Text, alone.Choices[0].FinishReason)
		}
		if i == 0 && comp.Usage.PromptTokens != alone.Usage.PromptTokens {
			t.Errorf("usage counts %d prompt tokens for 4 choices, %d for one", comp.Usage.PromptTokens, alone.Usage.PromptTokens)
		}
		completion += alone.Usage.CompletionTokens
		texts[ch.Text] = true
	}
	if comp.Usage.CompletionTokens != completion || comp.Usage.TotalTokens != comp.Usage.PromptTokens+completion {
		t.Errorf("usage %+v, the choices generated %d", comp.Usage, completion)
	}
	if len(texts) < 2 {
		t.Errorf("the four seeds gave one text: the test does not tell the choices apart")
	}

	// Streamed: the chunks interleave, each naming its choice.
	s := c.Completions.NewStreaming(ctx, params)
	streamed := make([]strings.Builder, 4)
	finishes := 0
	for s.Next() {
		for _, ch := range s.Current().Choices {
			streamed[ch.Index].WriteString(ch.Text)
			if ch.FinishReason != "" {
				finishes++
			}
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	for i := range streamed {
		if streamed[i].String() != comp.Choices[i].Text {
			t.Errorf("streamed choice %d: %q, want %q", i, streamed[i].String(), comp.Choices[i].Text)
		}
	}
	if finishes != 4 {
		t.Errorf("%d finish reasons in the stream, want 4", finishes)
	}

	// Chat likewise.
	chat := openai.ChatCompletionNewParams{Model: "stories260K", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
		MaxTokens: openai.Int(12), Temperature: openai.Float(0.9), Seed: openai.Int(seed), N: openai.Int(4)}
	cc, err := c.Chat.Completions.New(ctx, chat)
	if err != nil {
		t.Fatal(err)
	}
	if len(cc.Choices) != 4 {
		t.Fatalf("chat: %d choices, want 4", len(cc.Choices))
	}
	cs := c.Chat.Completions.NewStreaming(ctx, chat)
	chatStreamed := make([]strings.Builder, 4)
	for cs.Next() {
		for _, ch := range cs.Current().Choices {
			chatStreamed[ch.Index].WriteString(ch.Delta.Content)
		}
	}
	if err := cs.Err(); err != nil {
		t.Fatal(err)
	}
	for i, ch := range cc.Choices {
		one := chat
		one.N, one.Seed = openai.Int(1), openai.Int(seed+int64(i))
		alone, err := c.Chat.Completions.New(ctx, one)
		if err != nil {
			t.Fatal(err)
		}
		if ch.Message.Content != alone.Choices[0].Message.Content {
			t.Errorf("chat choice %d: %q, alone with seed %d: %q", i, ch.Message.Content, seed+i, alone.Choices[0].Message.Content)
		}
		if got := chatStreamed[i].String(); got != ch.Message.Content {
			t.Errorf("chat choice %d streamed %q, want %q", i, got, ch.Message.Content)
		}
	}
}
