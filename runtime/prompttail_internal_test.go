package runtime

import (
	"testing"

	"github.com/zrtdev/zrt/kernels"
)

// TestPromptTail: a prompt row is in the tail (ggml's repacked GEMV, not
// its GEMM) exactly when it is among the last n mod 4 rows of the ubatch
// of n rows llama.cpp evaluates it in.
func TestPromptTail(t *testing.T) {
	u := kernels.PromptUbatchRows
	for _, c := range []struct {
		prompt, pos int
		want        bool
	}{
		{0, 0, false},         // decode
		{1, 0, true},          // one row: 1 mod 4
		{4, 3, false},         // a whole group
		{32, 31, false},       // 32 rows: no tail
		{35, 31, false},       // rows 32-34 are the tail
		{35, 32, true},        // ...
		{35, 34, true},        // the last row
		{u + 6, u - 1, false}, // the first ubatch is whole
		{u + 6, u + 3, false}, // the second: 6 rows, 4 in the GEMM
		{u + 6, u + 4, true},  // and 2 in the tail
		{u + 6, u + 6, false}, // past the prompt
		{7, -1, false},        // no position
	} {
		if got := promptTail(Row{Prompt: c.prompt, Pos: c.pos}); got != c.want {
			t.Errorf("prompt %d, position %d: tail %v, want %v", c.prompt, c.pos, got, c.want)
		}
	}
}
