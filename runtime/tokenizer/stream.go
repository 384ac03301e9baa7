package tokenizer

import "unicode/utf8"

// StreamDecoder turns ids into text one at a time while generating. Byte
// tokens can split a UTF-8 character across several ids, so it holds back
// an incomplete trailing sequence until the rest arrives.
//
// Pieces are concatenated as llama.cpp's examples print them
// (token_to_piece per token, control tokens empty); unlike Decode it does
// not drop SPM's leading space or clean up spaces, since those need the
// whole sequence.
type StreamDecoder struct {
	t   *Tokenizer
	buf []byte
}

// NewStreamDecoder returns a decoder with nothing buffered.
func (t *Tokenizer) NewStreamDecoder() *StreamDecoder { return &StreamDecoder{t: t} }

// Add appends the piece of id and returns the text that is now complete:
// valid UTF-8 only. Bytes that can never start or continue a valid
// character are returned as U+FFFD; an incomplete sequence at the end is
// kept for the next call.
func (d *StreamDecoder) Add(id int32) string {
	p := d.t.PieceText(id)
	if len(d.buf) == 0 && utf8.ValidString(p) {
		return p // the common case, without a copy
	}
	return d.addBuffered(p)
}

// addBuffered is Add of the piece p through the buffer (every piece would
// give the same text this way; the tests hold Add to it).
func (d *StreamDecoder) addBuffered(p string) string {
	d.buf = append(d.buf, p...)
	if utf8.Valid(d.buf) {
		// Whole characters only, the common case: all of it, as the loop
		// below would give it.
		s := string(d.buf)
		d.buf = d.buf[:0]
		return s
	}
	var out []byte
	i := 0
	for i < len(d.buf) {
		r, n := utf8.DecodeRune(d.buf[i:])
		if r == utf8.RuneError && n <= 1 {
			if !utf8.FullRune(d.buf[i:]) {
				break // may still be completed by later bytes
			}
			out = append(out, "\uFFFD"...)
			i++
			continue
		}
		out = append(out, d.buf[i:i+n]...)
		i += n
	}
	d.buf = append(d.buf[:0], d.buf[i:]...)
	return string(out)
}

// Flush returns whatever is still buffered (an incomplete UTF-8 sequence,
// as raw bytes) and empties the decoder.
func (d *StreamDecoder) Flush() string {
	s := string(d.buf)
	d.buf = d.buf[:0]
	return s
}
