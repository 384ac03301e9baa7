package tokenizer

import "strings"

// fragment is a piece of the input: a token already decided (tok >= 0) or
// raw text [off, off+n) still to be tokenized.
type fragment struct {
	tok    int32
	off, n int
}

// partition splits text on special tokens like llama.cpp's
// tokenizer_st_partition: tokens are tried longest first, each splitting
// every remaining text fragment at all its (non-overlapping, leftmost)
// occurrences. Control and unknown tokens take part only when parseSpecial
// is set; user-defined tokens always do. Tokens with the lstrip/rstrip
// attribute swallow ASCII whitespace beside them.
func (t *Tokenizer) partition(text string, parseSpecial bool) []fragment {
	if text == "" {
		return nil
	}
	frags := []fragment{{tok: -1, off: 0, n: len(text)}}
	var next []fragment
	for _, id := range t.special {
		a := t.attr[id]
		if !parseSpecial && a&(attrControl|attrUnknown) != 0 {
			continue
		}
		tok := t.text[id]
		if !strings.Contains(text, tok) {
			continue
		}
		next = next[:0]
		for _, f := range frags {
			if f.tok >= 0 {
				next = append(next, f)
				continue
			}
			off, n := f.off, f.n
			for {
				k := strings.Index(text[off:off+n], tok)
				if k < 0 {
					break
				}
				m := off + k
				if k > 0 {
					ln := k
					if a&attrLStrip != 0 {
						for ln > 0 && isCSpace(text[off+ln-1]) {
							ln--
						}
					}
					if ln > 0 {
						next = append(next, fragment{tok: -1, off: off, n: ln})
					}
				}
				next = append(next, fragment{tok: id})
				roff := m + len(tok)
				rn := off + n - roff
				if a&attrRStrip != 0 {
					for rn > 0 && isCSpace(text[roff]) {
						roff++
						rn--
					}
				}
				off, n = roff, rn
				if n <= 0 {
					break
				}
			}
			if n > 0 {
				next = append(next, fragment{tok: -1, off: off, n: n})
			}
		}
		frags, next = next, frags
	}
	return frags
}

// isCSpace is C's isspace in the "C" locale, which llama.cpp uses for the
// strip attributes.
func isCSpace(c byte) bool { return c == ' ' || (c >= '\t' && c <= '\r') }
