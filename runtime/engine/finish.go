package engine

import "github.com/zrtdev/zrt/runtime/decode"

// Finish says why a request ended: the one vocabulary of endings from the
// decoder to the wire. The decoder's reasons keep their names (and their
// strings, which the ledger, the step log and the zrt_requests_finished_total
// metric carry); the engine adds its own; OpenAI's finish_reason is a
// method, so a front end maps no reason itself.
type Finish string

// The finish reasons: the decoder's (a completion) first, then the
// engine's (no completion).
const (
	EOG           Finish = Finish(decode.EOG)        // the model produced an end-of-generation token
	StopString    Finish = Finish(decode.StopString) // the text reached one of the stop strings
	Length        Finish = Finish(decode.Length)     // MaxTokens were generated
	Context       Finish = Finish(decode.Context)    // the sequence filled its context
	Cancelled     Finish = "cancelled"               // its context was cancelled
	ClientTooSlow Finish = "client_too_slow"         // its consumer left EventBuffer events unread
	Failed        Finish = "error"                   // a step failed
)

// finishOf is the engine's name for the decoder's reason f (which is not
// decode.Running).
func finishOf(f decode.Finish) Finish {
	switch f {
	case decode.EOG:
		return EOG
	case decode.StopString:
		return StopString
	case decode.Length:
		return Length
	case decode.Context:
		return Context
	}
	// A reason the decoder gained and this table lacks: still named, so
	// it shows in the metrics rather than vanishing.
	return Finish(f)
}

// Aborted reports whether a request that ended so has no completion an
// OpenAI-compatible API can express: it failed, was cancelled, or its
// consumer was cut off.
func (f Finish) Aborted() bool {
	return f == Failed || f == Cancelled || f == ClientTooSlow
}

// OpenAI is OpenAI's finish_reason for f: "stop" for a natural end (an
// end-of-generation token or a stop string), "length" for one cut short by
// max_tokens or the context, and the reason itself otherwise.
func (f Finish) OpenAI() string {
	switch f {
	case EOG, StopString:
		return "stop"
	case Length, Context:
		return "length"
	}
	return string(f)
}
