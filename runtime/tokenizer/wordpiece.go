package tokenizer

// wpm tokenizes a text fragment like llm_tokenizer_wpm_session: normalize
// and split into words, then greedily take the longest vocabulary entry at
// each position of "▁"+word. A word that cannot be covered becomes [UNK].
func (t *Tokenizer) wpm(text string, out []int32) []int32 {
	for _, word := range wpmWords(text) {
		w := "\u2581" + word
		start := len(out)
		for i := 0; i < len(w); {
			matched := false
			for j := min(len(w), i+t.maxLen+1); j > i; j-- {
				if id, ok := t.ids[w[i:j]]; ok {
					out = append(out, id)
					matched = true
					i = j
					break
				}
			}
			if !matched {
				out = out[:start]
				break
			}
		}
		if len(out) == start && t.v.UNK >= 0 {
			out = append(out, t.v.UNK)
		}
	}
	return out
}

// wpmWords is llama.cpp's WordPiece pre-processing: map each codepoint
// through its one-codepoint NFD table (which drops accents from precomposed
// letters), lowercase, split on whitespace, drop NUL, U+FFFD and control
// characters, and make every punctuation character, ASCII symbol and CJK
// ideograph a word of its own.
func wpmWords(text string) []string {
	var words []string
	var cur []byte
	flush := func() {
		if len(cur) > 0 {
			words = append(words, string(cur))
			cur = cur[:0]
		}
	}
	for _, c := range decodeCpts(text, nil) {
		c = nfd(c)
		f := cptFlags(c)
		if f&fWhitespace != 0 {
			flush()
			continue
		}
		if c == 0 || c == 0xfffd || f&fControl != 0 {
			continue
		}
		lc := toLower(c)
		if f&fPunct != 0 || (c < 0x7f && f&fSymbol != 0) || isChineseChar(c) {
			flush()
			words = append(words, string(appendCpt(nil, lc)))
			continue
		}
		cur = appendCpt(cur, lc)
	}
	flush()
	return words
}

// isChineseChar is the CJK test of BERT's tokenizer, with the same range
// quirk (0x2B920 rather than 0x2B820) that llama.cpp copies from HF.
func isChineseChar(c rune) bool {
	return (c >= 0x4e00 && c <= 0x9fff) ||
		(c >= 0x3400 && c <= 0x4dbf) ||
		(c >= 0x20000 && c <= 0x2a6df) ||
		(c >= 0x2a700 && c <= 0x2b73f) ||
		(c >= 0x2b740 && c <= 0x2b81f) ||
		(c >= 0x2b920 && c <= 0x2ceaf) ||
		(c >= 0xf900 && c <= 0xfaff) ||
		(c >= 0x2f800 && c <= 0x2fa1f)
}
