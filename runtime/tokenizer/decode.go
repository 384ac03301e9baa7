package tokenizer

import (
	"fmt"
	"strings"
)

// Piece returns the bytes of a token as llama.cpp's token_to_piece with
// special=false: byte tokens give their byte, SPM's '▁' becomes ' ',
// byte-level BPE text is mapped back to bytes, and control and unknown
// tokens give nothing. Out-of-range ids give nil.
func (t *Tokenizer) Piece(id int32) []byte { return t.TokenToPiece(id, false) }

// PieceText is Piece as a string, without a copy: the tokenizer keeps
// every token's piece. Out-of-range ids give "".
func (t *Tokenizer) PieceText(id int32) string {
	if id < 0 || int(id) >= len(t.text) {
		return ""
	}
	return t.pieces[t.pieceAt[id]:t.pieceAt[id+1]]
}

// TokenToPiece is Piece with llama.cpp's special flag: when special is set,
// control and unknown tokens give their text.
func (t *Tokenizer) TokenToPiece(id int32, special bool) []byte {
	if id < 0 || int(id) >= len(t.text) {
		return nil
	}
	if !special {
		if p := t.PieceText(id); p != "" {
			return []byte(p)
		}
		return nil
	}
	return t.decodePiece(id, special)
}

// decodePiece is TokenToPiece from the token's text, for a valid id.
func (t *Tokenizer) decodePiece(id int32, special bool) []byte {
	a := t.attr[id]
	if !special && a&(attrUnknown|attrControl) != 0 {
		return nil
	}
	s := t.text[id]
	if a&(attrUnknown|attrControl|attrUserDefined) != 0 {
		return []byte(s)
	}
	switch t.kind {
	case kindSPM, kindWPM:
		if a&attrNormal != 0 {
			return []byte(strings.ReplaceAll(s, "\u2581", " "))
		}
		if a&attrByte != 0 {
			return []byte{byteTokenValue(s)}
		}
	case kindBPE:
		if a&attrNormal != 0 {
			return decodeByteLevel(s)
		}
	}
	// unused, undefined and (for BPE) byte tokens print nothing, as in
	// llama.cpp.
	return nil
}

// byteTokenValue parses "<0xXX>" as llama.cpp's token_to_byte does
// (strtol of the two characters after "<0x"; garbage gives 0).
func byteTokenValue(s string) byte {
	if len(s) < 5 {
		return 0
	}
	var v byte
	for _, c := range []byte(s[3:5]) {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | (c - '0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | (c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | (c - 'A' + 10)
		default:
			return v
		}
	}
	return v
}

// decodeByteLevel maps GPT-2 byte characters back to bytes
// (llama_decode_text); a character outside the mapping is written as
// "[UNK_BYTE_0x..<text>]" like llama.cpp does.
func decodeByteLevel(s string) []byte {
	out := make([]byte, 0, len(s))
	var buf []byte
	for i := 0; i < len(s); {
		c, n := decodeOne(s, i)
		i += n
		if c >= 0 && int(c) < len(runeByte) && runeByte[c] != 0 {
			out = append(out, byte(runeByte[c]-1))
			continue
		}
		buf = appendCpt(buf[:0], c)
		out = append(out, "[UNK_BYTE_0x"...)
		for _, x := range buf {
			out = fmt.Appendf(out, "%02x", x)
		}
		out = append(out, s...)
		out = append(out, ']')
	}
	return out
}

// Decode turns ids into text like llama.cpp's detokenize with
// remove_special=false and unparse_special=false: control tokens vanish,
// SPM drops the leading space of the first token (the one its encoder
// added), and for vocabularies that ask for it the spaces the GPT-2 style
// tokenizers put before punctuation and contractions are cleaned up.
func (t *Tokenizer) Decode(ids []int32) string { return t.Detokenize(ids, false, false) }

// Detokenize is llama.cpp's detokenize. removeSpecial drops a leading BOS
// and trailing EOS that the vocabulary adds itself (and then keeps the
// space after BOS); unparseSpecial writes control tokens as text.
func (t *Tokenizer) Detokenize(ids []int32, removeSpecial, unparseSpecial bool) string {
	removeSpace := t.v.AddSpacePrefix
	if removeSpecial && t.v.AddBOS && len(ids) > 0 && ids[0] == t.v.BOS {
		removeSpace = false
		ids = ids[1:]
	}
	if removeSpecial && t.v.AddEOS && len(ids) > 0 && ids[len(ids)-1] == t.v.EOS {
		ids = ids[:len(ids)-1]
	}
	var out []byte
	for _, id := range ids {
		p := t.TokenToPiece(id, unparseSpecial)
		if removeSpace && len(p) > 0 && p[0] == ' ' {
			p = p[1:]
		}
		removeSpace = false
		out = append(out, p...)
	}
	if t.cleanSpaces() {
		out = cleanSpaces(out)
	}
	return string(out)
}

// cleanSpaces reports whether detokenize runs clean_up_tokenization_spaces.
func (t *Tokenizer) cleanSpaces() bool {
	switch t.kind {
	case kindBPE:
		return t.pre.cleanSpaces
	case kindWPM:
		return true
	}
	return false
}

// cleanSpaces is llama.cpp's three-pass port of HF's
// clean_up_tokenization: drop the space before ?!., ; drop the spaces
// around a lone apostrophe; drop the space before 's 'm 're 've.
func cleanSpaces(b []byte) []byte {
	if len(b) == 0 {
		return b
	}
	// pass 1: " ?", " !", " .", " ,"
	b = squeeze(b, func(i int) (bool, int) {
		x := b[i]
		return b[i-1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ','), 0
	})
	// pass 2: " ' " -> "'"
	b = squeeze(b, func(i int) (bool, int) {
		if b[i] == '\'' && i+1 < len(b) && b[i-1] == ' ' && b[i+1] == ' ' {
			b[i+1] = 0 // llama.cpp blanks the next space; the loop then skips it
			return true, 1
		}
		return false, 0
	})
	// pass 3: " 's", " 'm", " 're", " 've"
	return squeeze(b, func(i int) (bool, int) {
		if b[i-1] != ' ' || b[i] != '\'' || i+1 >= len(b) {
			return false, 0
		}
		switch x1 := b[i+1]; {
		case x1 == 's' || x1 == 'm':
			return true, 0
		case x1 == 't' || x1 == 'd':
		case i+2 < len(b):
			x2 := b[i+2]
			return (x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e'), 0
		}
		return false, 0
	})
}

// squeeze is one pass of cleanSpaces over b in place: each byte after
// the first is kept, the byte before it dropped when drop says so (drop
// reads b as it was when the pass reached i), and skip more bytes after
// it passed over.
func squeeze(b []byte, drop func(i int) (dropPrev bool, skip int)) []byte {
	n := 1
	for i := 1; i < len(b); i++ {
		x := b[i]
		prev, skip := drop(i)
		if prev {
			n--
		}
		b[n] = x
		n++
		i += skip
	}
	return b[:n]
}
