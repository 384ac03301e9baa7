package reply

import (
	"strings"

	"github.com/zrtdev/zrt/runtime/chat"
)

// Parsed is a whole reply split up. Reasoning has the text of reasoning
// blocks (without their tags), Content what the user is to see, and
// ToolCalls the calls the model made, in order, each with an id (its own
// where the format has one, else CallID).
type Parsed struct {
	Reasoning, Content string
	ToolCalls          []chat.ToolCall
}

// Delta is what a Stream decided since the last call: text to append to
// the reasoning and to the content, and tool calls as OpenAI's
// delta.tool_calls entries want them.
type Delta struct {
	Reasoning, Content string
	ToolCalls          []CallDelta
}

// CallDelta is one tool call's part of a Delta. The first delta of call
// Index carries its ID and Name; Arguments are appended, in pieces as
// they are generated where the format allows (see argstream.go), else
// whole once the call is read.
type CallDelta struct {
	Index               int
	ID, Name, Arguments string
}

// Empty reports whether d carries nothing.
func (d Delta) Empty() bool {
	return d.Reasoning == "" && d.Content == "" && len(d.ToolCalls) == 0
}

// Parse splits a whole reply. Text that does not parse as a call stays
// content; Parse never fails. It is the same as feeding text to a Stream
// and flushing it, in any pieces.
func (f Format) Parse(text string) Parsed {
	s := f.NewStream()
	var p Parsed
	for _, d := range []Delta{s.Add(text), s.Flush()} {
		p.Reasoning += d.Reasoning
		p.Content += d.Content
		for _, c := range d.ToolCalls {
			for len(p.ToolCalls) <= c.Index {
				p.ToolCalls = append(p.ToolCalls, chat.ToolCall{})
			}
			tc := &p.ToolCalls[c.Index]
			if c.ID != "" {
				tc.ID = c.ID
			}
			if c.Name != "" {
				tc.Name = c.Name
			}
			tc.Arguments += c.Arguments
		}
	}
	return p
}

type mode int

const (
	modeStart mode = iota
	modeReasoning
	modeContent
	modeCall
	// harmony modes
	modeHeader
	modeBody
	modeAfter
	modeRaw
)

// Stream splits a reply as it is generated. Text that may still turn
// out to be a marker (a tool-call opening, the end of reasoning) or the
// head of a call is held back until it is decided; a call's arguments are
// sent as they come where the format puts them last (Hermes, Mistral's
// [ARGS], gpt-oss), else with the whole call once it is read. The deltas
// of a Stream, concatenated, are exactly what Parse returns for the whole
// text, however the text was cut. A Stream is not safe for concurrent
// use.
type Stream struct {
	f       Format
	pending string
	mode    mode
	reason  trimmer
	content trimmer
	calls   int
	marker  string // the marker that opened the call being read
	bareOK  bool   // Llama3: a bare JSON object here would be a call
	header  header // Harmony: the message being read
	// streaming is set while a call's arguments are being sent: they
	// start at pending[argAt:], of which argSent bytes are sent.
	streaming      bool
	argAt, argSent int
	args           trimmer // Harmony: a call body's surrounding space
	done           bool
}

// NewStream starts splitting a reply in format f.
func (f Format) NewStream() *Stream {
	s := &Stream{f: f, mode: modeStart}
	s.reason.dropLeading = true
	s.content.dropLeading = true
	s.bareOK = f.Kind == Llama3
	switch {
	case f.Kind == Harmony:
		s.mode = modeHeader
	case f.inReasoning:
		s.mode = modeReasoning
	}
	return s
}

// Add takes the next piece of generated text and returns what it
// decided.
func (s *Stream) Add(text string) Delta {
	if s.done {
		return Delta{}
	}
	s.pending += text
	return s.run(false)
}

// Flush ends the reply: held-back text is decided as if nothing follows
// (a call whose arguments had started keeps what it has; one still
// unread becomes content). Later Adds and Flushes return empty deltas.
func (s *Stream) Flush() Delta {
	if s.done {
		return Delta{}
	}
	d := s.run(true)
	s.done = true
	return d
}

func (s *Stream) run(final bool) Delta {
	var d Delta
	if s.f.Kind == Harmony {
		s.runHarmony(&d, final)
	} else {
		s.runMarked(&d, final)
	}
	return d
}

// runMarked reads the formats whose calls open with a marker.
func (s *Stream) runMarked(d *Delta, final bool) {
	f := s.f
	for {
		switch s.mode {
		case modeStart:
			t := strings.TrimLeft(s.pending, spaces)
			if f.ThinkStart != "" {
				if strings.HasPrefix(t, f.ThinkStart) {
					s.pending = t[len(f.ThinkStart):]
					s.mode = modeReasoning
					continue
				}
				if !final && strings.HasPrefix(f.ThinkStart, t) {
					return
				}
			} else if !final && t == "" {
				return
			}
			s.mode = modeContent
		case modeReasoning:
			if i := strings.Index(s.pending, f.ThinkEnd); i >= 0 {
				d.Reasoning += s.reason.push(s.pending[:i])
				s.reason.end(false)
				s.pending = s.pending[i+len(f.ThinkEnd):]
				s.mode = modeContent
				s.content.dropLeading = true
				continue
			}
			keep := 0
			if !final {
				keep = heldBack(s.pending, f.ThinkEnd)
			}
			d.Reasoning += s.reason.push(s.pending[:len(s.pending)-keep])
			s.pending = s.pending[len(s.pending)-keep:]
			if final {
				s.reason.end(false)
			}
			return
		case modeContent:
			if s.bareOK {
				t := strings.TrimLeft(s.pending, spaces)
				if t == "" && !final {
					return
				}
				if strings.HasPrefix(t, "{") {
					s.pending = t
					s.marker = ""
					s.mode = modeCall
					continue
				}
				s.bareOK = false
			}
			markers := f.openMarkers()
			i, m := firstMarker(s.pending, markers)
			if i >= 0 {
				d.Content += s.content.push(s.pending[:i])
				rest := s.pending[i+len(m):]
				switch m {
				case gemmaChannelEnd:
					// A stray end of a reasoning block: not content.
					s.pending = rest
					continue
				case gemmaChannel:
					// Gemma 4 may open a thought block (often empty) after
					// content, or an empty channel: neither is content.
					if strings.HasPrefix(rest, "thought") {
						s.pending = rest[len("thought"):]
						s.reason.dropLeading = true
						s.mode = modeReasoning
						continue
					}
					if !final && strings.HasPrefix("thought", rest) {
						s.pending = s.pending[i:]
						return
					}
					s.pending = rest
					continue
				}
				s.pending = rest
				s.marker = m
				s.mode = modeCall
				continue
			}
			keep := 0
			if !final {
				for _, m := range markers {
					keep = max(keep, heldBack(s.pending, m))
				}
			}
			d.Content += s.content.push(s.pending[:len(s.pending)-keep])
			s.pending = s.pending[len(s.pending)-keep:]
			if final {
				d.Content += s.content.end(true)
			}
			return
		case modeCall:
			if s.streaming {
				if !s.streamArgs(d, final) {
					return
				}
				s.mode = modeContent
				s.content.dropLeading = true
				s.bareOK = f.Kind == Llama3
				continue
			}
			if s.marker != "" {
				name, id, argAt, st := f.callHead(s.pending, final)
				if st == needMore {
					return
				}
				if st == complete {
					d.Content += s.content.end(true)
					if id == "" {
						id = f.CallID(s.calls)
					}
					d.ToolCalls = append(d.ToolCalls, CallDelta{Index: s.calls, ID: id, Name: name})
					s.streaming, s.argAt, s.argSent = true, argAt, 0
					continue
				}
			}
			calls, n, st := f.readCall(s.marker, s.pending, final)
			switch st {
			case needMore:
				return
			case invalid:
				// The marker was text after all: it becomes content and
				// reading goes on right after it.
				d.Content += s.content.push(s.marker)
				s.bareOK = false
				s.mode = modeContent
				continue
			}
			// Whitespace before a call stays content, as in llama.cpp.
			d.Content += s.content.end(true)
			for _, c := range calls {
				id := c.ID
				if id == "" {
					id = f.CallID(s.calls)
				}
				d.ToolCalls = append(d.ToolCalls, CallDelta{Index: s.calls, ID: id, Name: c.Name, Arguments: c.Arguments})
				s.calls++
			}
			s.pending = s.pending[n:]
			s.mode = modeContent
			s.content.dropLeading = true
			s.bareOK = f.Kind == Llama3
		default:
			return
		}
	}
}

// openMarkers are the strings that open a call in f's syntax.
func (f Format) openMarkers() []string {
	switch f.Kind {
	case Hermes:
		return []string{"<tool_call>"}
	case Llama3:
		return []string{"<|python_tag|>"}
	case MistralNemo, MistralArgs:
		return []string{"[TOOL_CALLS]"}
	case Gemma4:
		return []string{"<|tool_call>", gemmaChannel, gemmaChannelEnd}
	}
	return nil
}

const spaces = " \t\r\n"

// Gemma 4's channel tokens, which open and close its thought blocks.
const (
	gemmaChannel    = "<|channel>"
	gemmaChannelEnd = "<channel|>"
)

// trimmer drops whitespace at the start of a span (when dropLeading) and
// holds whitespace at its end until it knows whether more text follows.
type trimmer struct {
	dropLeading bool
	ws          string
}

func (t *trimmer) push(s string) string {
	if t.dropLeading {
		s = strings.TrimLeft(s, spaces)
		if s == "" {
			return ""
		}
		t.dropLeading = false
	}
	s = t.ws + s
	j := len(strings.TrimRight(s, spaces))
	t.ws = s[j:]
	return s[:j]
}

// end closes the span: its held whitespace is returned when keep, else
// dropped.
func (t *trimmer) end(keep bool) string {
	ws := t.ws
	t.ws = ""
	if keep {
		return ws
	}
	return ""
}

// heldBack is the length of the longest end of s that begins marker m
// without completing it: text that must wait for the next piece.
func heldBack(s, m string) int {
	for n := min(len(s), len(m)-1); n > 0; n-- {
		if strings.HasSuffix(s, m[:n]) {
			return n
		}
	}
	return 0
}

// firstMarker finds the earliest of markers in s.
func firstMarker(s string, markers []string) (int, string) {
	at, which := -1, ""
	for _, m := range markers {
		if i := strings.Index(s, m); i >= 0 && (at < 0 || i < at) {
			at, which = i, m
		}
	}
	return at, which
}
