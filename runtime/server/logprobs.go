package server

import (
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/zrtdev/zrt/runtime/decode"
	"github.com/zrtdev/zrt/runtime/tokenizer"
)

// reportable is a log-probability as JSON can carry it: -Inf (a token the
// request banned) and NaN become -9999, the floor OpenAI reports for a
// token it considers impossible.
func reportable(lp float64) float64 {
	if math.IsNaN(lp) || lp < -9999 {
		return -9999
	}
	return lp
}

// tokenText is a token's piece as text: itself when it is valid UTF-8, or
// OpenAI's "bytes:\xNN…" for a piece that is part of a character.
func tokenText(piece []byte) string {
	if utf8.Valid(piece) {
		return string(piece)
	}
	var b strings.Builder
	b.WriteString("bytes:")
	for _, c := range piece {
		fmt.Fprintf(&b, "\\x%02x", c)
	}
	return b.String()
}

// completionLogprobs is the legacy completions' logprobs object.
type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// legacyLogprobs builds a completion's logprobs objects, one for the
// response or for each chunk of a stream, whose text offsets count on
// from the chunks before.
type legacyLogprobs struct {
	tok *tokenizer.Tokenizer
	// The generated pieces so far, and how many characters their first
	// cut bytes hold: a character split across byte tokens is counted once
	// all of it has arrived.
	text  []byte
	cut   int
	chars int
}

// object returns the logprobs object of the tokens lps. A token's
// text_offset is in characters (Unicode code points), as OpenAI's Python
// clients index text, from the start of the generated text: the tokens'
// pieces are exactly what the text is made of, up to a stop string.
func (b *legacyLogprobs) object(lps []decode.Logprobs) *completionLogprobs {
	o := &completionLogprobs{Tokens: []string{}, TokenLogprobs: []float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
	for _, l := range lps {
		piece := b.tok.Piece(l.Token)
		o.Tokens = append(o.Tokens, tokenText(piece))
		o.TokenLogprobs = append(o.TokenLogprobs, reportable(l.Logprob))
		top := make(map[string]float64, len(l.Top))
		for _, t := range l.Top {
			// Two tokens can share a text; the map keeps the likelier.
			k := tokenText(b.tok.Piece(t.Token))
			if _, dup := top[k]; !dup {
				top[k] = reportable(t.Logprob)
			}
		}
		o.TopLogprobs = append(o.TopLogprobs, top)
		o.TextOffset = append(o.TextOffset, b.chars+utf8.RuneCount(b.text[b.cut:]))
		b.text = append(b.text, piece...)
		for b.cut < len(b.text) && utf8.FullRune(b.text[b.cut:]) {
			_, n := utf8.DecodeRune(b.text[b.cut:])
			b.cut += n
			b.chars++
		}
	}
	return o
}

// chatLogprob is one entry of a chat choice's logprobs content.
type chatLogprob struct {
	Token       string         `json:"token"`
	Logprob     float64        `json:"logprob"`
	Bytes       []int          `json:"bytes"`
	TopLogprobs []chatTopEntry `json:"top_logprobs"`
}

// chatTopEntry is one of a chat token's most likely alternatives.
type chatTopEntry struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// chatLogprobs is a chat choice's logprobs object for the tokens lps.
func chatLogprobs(tok *tokenizer.Tokenizer, lps []decode.Logprobs) map[string]any {
	// bytes is a list of integers: []byte would marshal as base64.
	byteList := func(piece []byte) []int {
		out := make([]int, len(piece))
		for i, c := range piece {
			out[i] = int(c)
		}
		return out
	}
	content := make([]chatLogprob, 0, len(lps))
	for _, l := range lps {
		piece := tok.Piece(l.Token)
		e := chatLogprob{Token: tokenText(piece), Logprob: reportable(l.Logprob), Bytes: byteList(piece), TopLogprobs: make([]chatTopEntry, 0, len(l.Top))}
		for _, t := range l.Top {
			tp := tok.Piece(t.Token)
			e.TopLogprobs = append(e.TopLogprobs, chatTopEntry{Token: tokenText(tp), Logprob: reportable(t.Logprob), Bytes: byteList(tp)})
		}
		content = append(content, e)
	}
	return map[string]any{"content": content, "refusal": nil}
}
