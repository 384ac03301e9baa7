package tokenizer

// mergePair is the key of a BPE merge rank.
type mergePair struct{ left, right string }

// byteUnicode is GPT-2's reversible byte -> printable character mapping:
// printable Latin-1 bytes map to themselves, the rest to U+0100 onwards.
var (
	byteUnicode [256]string
	unicodeByte = map[string]byte{}
	// runeByte is unicodeByte by character, for decoding a token's
	// piece without a map look-up a character: the byte plus one, 0
	// for a character that stands for no byte.
	runeByte [256 + 68]uint16
)

func init() {
	n := 0
	for b := 0; b < 256; b++ {
		c := rune(b)
		if !(b >= 0x21 && b <= 0x7e || b >= 0xa1 && b <= 0xac || b >= 0xae && b <= 0xff) {
			c = rune(256 + n)
			n++
		}
		byteUnicode[b] = string(c)
		unicodeByte[string(c)] = byte(b)
		runeByte[c] = uint16(b) + 1
	}
}

// bpe tokenizes one text fragment like llm_tokenizer_bpe_session: split it
// with the pre-tokenizer, map each word's bytes to GPT-2 characters, merge
// by rank within each word, and look the results up.
func (t *Tokenizer) bpe(text string, out []int32) []int32 {
	cps := decodeCpts(text, nil)
	pieces := pretokenize(t.pre.stages, cps)
	var word, utf []byte
	pos := 0
	for _, n := range pieces {
		utf = utf[:0]
		for _, c := range cps[pos : pos+n] {
			utf = appendCpt(utf, c)
		}
		pos += n
		word = word[:0]
		for _, b := range utf {
			word = append(word, byteUnicode[b]...)
		}
		out = t.bpeWord(string(word), out)
	}
	return out
}

// bpeWord merges one byte-encoded word.
func (t *Tokenizer) bpeWord(w string, out []int32) []int32 {
	if w == "" {
		return out
	}
	if t.pre.ignoreMerges {
		if id, ok := t.ids[w]; ok {
			return append(out, id)
		}
	}
	syms := splitSymbols(w)
	mergeSymbols(syms, func(l, r int) (float64, bool) {
		a, b := syms[l], syms[r]
		rank, ok := t.ranks[mergePair{w[a.off : a.off+a.n], w[b.off : b.off+b.n]}]
		return float64(rank), ok
	})
	// As llama.cpp: try each byte of an unknown symbol's text as a token
	// of its own and silently drop those that are not.
	return t.appendSymbols(out, syms, w, func(out []int32, b string) []int32 {
		if id, ok := t.ids[b]; ok {
			out = append(out, id)
		}
		return out
	})
}
