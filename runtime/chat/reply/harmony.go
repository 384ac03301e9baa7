package reply

import (
	"strings"

	"github.com/zrtdev/zrt/runtime/chat"
)

// gpt-oss writes a reply as messages, each a header, <|message|>, a body
// and a terminator; the prompt already opened the first with
// <|start|>assistant:
//
//	<|channel|>analysis<|message|>reasoning<|end|>
//	<|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>
//	<|start|>assistant<|channel|>final<|message|>content
//
// The recipient may also stand before the channel
// (" to=functions.NAME<|channel|>commentary"), as llama.cpp's parser
// accepts.
const (
	harmonyMessage = "<|message|>"
	harmonyStart   = "<|start|>assistant"
	// maxHeader is how far a header is searched for <|message|>; text
	// without one that far in is not Harmony and is taken as content.
	maxHeader = 512
)

var harmonyEnds = []string{"<|end|>", "<|call|>", "<|return|>"}

// header is what a message header said.
type header struct {
	channel   string
	recipient string
}

// kind says where the message's body goes: "reasoning", "content", "call"
// or "drop" (a call to a built-in tool the request did not offer, which
// llama.cpp also consumes without a trace).
func (h header) kind() string {
	switch r := h.recipient; {
	case strings.HasPrefix(r, "functions.") && len(r) > len("functions."):
		return "call"
	case r == "functions.":
		return "content" // a call to no function: its body is text
	case r != "" && r != "assistant":
		return "drop"
	case h.channel == "analysis":
		return "reasoning"
	}
	return "content"
}

func parseHeader(s string) header {
	s = strings.TrimPrefix(s, harmonyStart)
	var h header
	if i := strings.Index(s, "<|channel|>"); i >= 0 {
		c := s[i+len("<|channel|>"):]
		n := 0
		for n < len(c) && isAlnum(c[n]) {
			n++
		}
		h.channel = c[:n]
	}
	if i := strings.Index(s, " to="); i >= 0 {
		r := s[i+len(" to="):]
		if j := strings.IndexAny(r, " \t\n<"); j >= 0 {
			r = r[:j]
		}
		h.recipient = r
	}
	return h
}

func (s *Stream) runHarmony(d *Delta, final bool) {
	for {
		switch s.mode {
		case modeHeader:
			window := s.pending[:min(len(s.pending), maxHeader+len(harmonyMessage))]
			i := strings.Index(window, harmonyMessage)
			if i < 0 {
				if !final && len(s.pending) < maxHeader+len(harmonyMessage) {
					return
				}
				s.mode = modeRaw
				continue
			}
			s.header = parseHeader(s.pending[:i])
			s.pending = s.pending[i+len(harmonyMessage):]
			s.mode = modeBody
		case modeBody:
			i, end := firstMarker(s.pending, harmonyEnds)
			k := s.header.kind()
			if k == "drop" {
				if i < 0 && !final {
					return
				}
				if i >= 0 {
					s.pending = s.pending[i+len(end):]
				} else {
					s.pending = ""
				}
				s.mode = modeAfter
				continue
			}
			// The body up to its end marker, or all but what may start one.
			text := s.pending
			if i >= 0 {
				text = s.pending[:i]
			} else if !final {
				keep := 0
				for _, m := range harmonyEnds {
					keep = max(keep, heldBack(s.pending, m))
				}
				text = s.pending[:len(s.pending)-keep]
			}
			if k == "call" {
				// The body is the arguments, sent as they come.
				if !s.streaming {
					name := strings.TrimPrefix(s.header.recipient, "functions.")
					d.ToolCalls = append(d.ToolCalls, CallDelta{Index: s.calls, ID: s.f.CallID(s.calls), Name: name})
					s.streaming = true
					s.args = trimmer{dropLeading: true}
				}
				sendArgs(d, s.calls, s.args.push(text))
				s.pending = s.pending[len(text):]
				if i < 0 && !final {
					return
				}
				s.args.end(false)
				if i >= 0 {
					s.pending = s.pending[len(end):]
				}
				s.streaming = false
				s.calls++
				s.mode = modeAfter
				continue
			}
			if k == "reasoning" {
				d.Reasoning += text
			} else {
				d.Content += text
			}
			s.pending = s.pending[len(text):]
			if i < 0 {
				return
			}
			s.pending = s.pending[len(end):]
			s.mode = modeAfter
		case modeAfter:
			if strings.HasPrefix(s.pending, harmonyStart) {
				s.pending = s.pending[len(harmonyStart):]
			} else if !final && strings.HasPrefix(harmonyStart, s.pending) {
				return
			}
			s.mode = modeHeader
			if s.pending == "" && final {
				return
			}
		case modeRaw:
			d.Content += s.pending
			s.pending = ""
			return
		default:
			return
		}
	}
}

// harmonyCallText is how gpt-oss writes a call after the prompt's
// <|start|>assistant, for tests and grammars.
func harmonyCallText(c chat.ToolCall) string {
	return "<|channel|>commentary to=functions." + c.Name + " <|constrain|>json" + harmonyMessage + c.Arguments + "<|call|>"
}
