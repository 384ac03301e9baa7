package engine

import (
	"testing"

	"github.com/zrtdev/zrt/runtime/decode"
)

// TestFinish holds the one vocabulary of endings: each decoder reason
// keeps its string through the engine (the ledger and the metrics carry
// it), and maps onto OpenAI's finish_reason as the server always did.
func TestFinish(t *testing.T) {
	for _, c := range []struct {
		dec    decode.Finish
		want   Finish
		openAI string
	}{
		{decode.EOG, EOG, "stop"},
		{decode.StopString, StopString, "stop"},
		{decode.Length, Length, "length"},
		{decode.Context, Context, "length"},
	} {
		f := finishOf(c.dec)
		if f != c.want || string(f) != string(c.dec) {
			t.Errorf("finishOf(%q) = %q, want %q with the decoder's string", c.dec, f, c.want)
		}
		if f.OpenAI() != c.openAI || f.Aborted() {
			t.Errorf("%q: OpenAI %q, aborted %v; want %q, false", f, f.OpenAI(), f.Aborted(), c.openAI)
		}
	}
	for f, wire := range map[Finish]string{Cancelled: "cancelled", ClientTooSlow: "client_too_slow", Failed: "error"} {
		if string(f) != wire || f.OpenAI() != wire || !f.Aborted() {
			t.Errorf("%q: OpenAI %q, aborted %v; want %q, true", f, f.OpenAI(), f.Aborted(), wire)
		}
	}
}
