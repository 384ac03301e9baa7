package reply_test

import (
	"fmt"

	"github.com/zrtdev/zrt/runtime/chat/reply"
)

// A server detects the format from the model's template once, sets it for
// each request's prompt and id seed, and feeds generated text to a
// Stream, turning each Delta into an SSE chunk.
func ExampleFormat_NewStream() {
	template := "...{{- '<tool_call>' }}...{{- '<think>' }}..." // the model's chat template
	prompt := "<|im_start|>user\nTime in Paris?<|im_end|>\n<|im_start|>assistant\n"
	f := reply.Detect(template).AfterPrompt(prompt).WithIDs(42)
	s := f.NewStream()
	for _, piece := range []string{"<think>\nThe user", " wants the time.\n</think>\n\n", "<tool_call>\n{\"name\": \"get_time\", ", "\"arguments\": {\"city\": ", "\"Paris\"}}\n</tool_call>"} {
		if d := s.Add(piece); !d.Empty() {
			fmt.Printf("%+v\n", d)
		}
	}
	if d := s.Flush(); !d.Empty() {
		fmt.Printf("%+v\n", d)
	}
	// Output:
	// {Reasoning:The user Content: ToolCalls:[]}
	// {Reasoning: wants the time. Content: ToolCalls:[]}
	// {Reasoning: Content: ToolCalls:[{Index:0 ID:call_78jvxpZX1QrivmsGube9FPO7 Name:get_time Arguments:{"city": }]}
	// {Reasoning: Content: ToolCalls:[{Index:0 ID: Name: Arguments:"Paris"}}]}
}
