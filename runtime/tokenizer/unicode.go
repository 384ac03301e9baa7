package tokenizer

import (
	"sort"
	"sync"
)

// Codepoint flags, numbered as in llama.cpp's unicode_cpt_flags so the
// generated range table can be used as is.
const (
	fUndefined  = 0x0001
	fNumber     = 0x0002 // \p{N}
	fLetter     = 0x0004 // \p{L}
	fSeparator  = 0x0008 // \p{Z}
	fMark       = 0x0010 // \p{M}
	fPunct      = 0x0020 // \p{P}
	fSymbol     = 0x0040 // \p{S}
	fControl    = 0x0080 // \p{C}
	fCategories = 0x00ff
	fWhitespace = 0x0100 // \s, from llama.cpp's own whitespace set
)

const maxCodepoints = 0x110000

var (
	flagsOnce  sync.Once
	flagsTable []uint16
)

// buildFlags expands the range table once; a flat table keeps the
// per-codepoint lookup in the pre-tokenizer loops to one index.
func buildFlags() {
	t := make([]uint16, maxCodepoints)
	for i := 0; i+1 < len(flagRanges); i++ {
		lo, hi := flagRanges[i]>>8, flagRanges[i+1]>>8
		f := uint16(flagRanges[i] & 0xff)
		for c := lo; c < hi && c < maxCodepoints; c++ {
			t[c] = f
		}
	}
	for _, c := range whitespaceCpts {
		t[c] |= fWhitespace
	}
	flagsTable = t
}

// cptFlags returns llama.cpp's flags for a codepoint; values outside
// Unicode (which llama.cpp's lenient decoder can produce) are undefined.
func cptFlags(c rune) uint16 {
	flagsOnce.Do(buildFlags)
	if c < 0 || c >= maxCodepoints {
		return fUndefined
	}
	return flagsTable[c]
}

// utf8Len is llama.cpp's unicode_len_utf8: the sequence length implied by a
// lead byte, 1 for continuation bytes.
func utf8Len(b byte) int {
	switch b >> 4 {
	case 0xc, 0xd:
		return 2
	case 0xe:
		return 3
	case 0xf:
		return 4
	}
	return 1
}

// decodeCpts decodes UTF-8 the way llama.cpp's unicode_cpts_from_utf8 does:
// overlong forms and surrogates are accepted, and each byte that does not
// start a complete sequence becomes U+FFFD on its own.
func decodeCpts(s string, dst []rune) []rune {
	for i := 0; i < len(s); {
		c, n := decodeOne(s, i)
		dst = append(dst, c)
		i += n
	}
	return dst
}

func decodeOne(s string, i int) (rune, int) {
	b := s[i]
	cont := func(k int) bool { return i+k < len(s) && s[i+k]&0xc0 == 0x80 }
	switch {
	case b&0x80 == 0:
		return rune(b), 1
	case b&0x40 == 0:
		return 0xfffd, 1
	case b&0x20 == 0:
		if cont(1) {
			return rune(b&0x1f)<<6 | rune(s[i+1]&0x3f), 2
		}
	case b&0x10 == 0:
		if cont(1) && cont(2) {
			return rune(b&0x0f)<<12 | rune(s[i+1]&0x3f)<<6 | rune(s[i+2]&0x3f), 3
		}
	case b&0x08 == 0:
		if cont(1) && cont(2) && cont(3) {
			return rune(b&0x07)<<18 | rune(s[i+1]&0x3f)<<12 | rune(s[i+2]&0x3f)<<6 | rune(s[i+3]&0x3f), 4
		}
	}
	return 0xfffd, 1
}

// appendCpt encodes c as llama.cpp's unicode_cpt_to_utf8 does (surrogates
// are encoded like any other codepoint). llama.cpp throws for values above
// U+10FFFF, which its decoder can produce from F5..F7 lead bytes; we write
// U+FFFD instead so that tokenization never fails.
func appendCpt(dst []byte, c rune) []byte {
	switch {
	case c >= 0 && c <= 0x7f:
		return append(dst, byte(c))
	case c >= 0x80 && c <= 0x7ff:
		return append(dst, 0xc0|byte(c>>6), 0x80|byte(c&0x3f))
	case c >= 0x800 && c <= 0xffff:
		return append(dst, 0xe0|byte(c>>12), 0x80|byte(c>>6&0x3f), 0x80|byte(c&0x3f))
	case c >= 0x10000 && c <= 0x10ffff:
		return append(dst, 0xf0|byte(c>>18), 0x80|byte(c>>12&0x3f), 0x80|byte(c>>6&0x3f), 0x80|byte(c&0x3f))
	}
	return append(dst, 0xef, 0xbf, 0xbd)
}

// toLower maps c through llama.cpp's lowercase table (simple mappings only).
func toLower(c rune) rune {
	n := len(lowercasePairs) / 2
	i := sort.Search(n, func(i int) bool { return rune(lowercasePairs[2*i]) >= c })
	if i < n && rune(lowercasePairs[2*i]) == c {
		return rune(lowercasePairs[2*i+1])
	}
	return c
}

// nfd maps c through llama.cpp's unicode_cpts_normalize_nfd, which replaces
// a precomposed character by the first codepoint of its decomposition.
func nfd(c rune) rune {
	n := len(nfdRanges) / 3
	// last range whose first <= c
	i := sort.Search(n, func(i int) bool { return rune(nfdRanges[3*i]) > c }) - 1
	if i >= 0 && rune(nfdRanges[3*i]) <= c && c <= rune(nfdRanges[3*i+1]) {
		return rune(nfdRanges[3*i+2])
	}
	return c
}
