package grammar

import (
	"sort"
	"unicode/utf8"
)

// An expr is one node of the grammar as the front ends (GBNF, regular
// expressions) build it: over code points, before it is lowered to the
// byte positions that the matcher runs.
type expr struct {
	kind     exprKind
	subs     []*expr
	lit      []byte      // eLit: UTF-8 bytes
	ranges   []runeRange // eClass: sorted, disjoint code point ranges
	rule     int         // eRef
	min, max int         // eRepeat; max < 0: unbounded
}

type exprKind uint8

const (
	eSeq exprKind = iota
	eAlt
	eLit
	eClass
	eRef
	eRepeat
)

type runeRange struct{ lo, hi rune }

func seqOf(subs ...*expr) *expr { return &expr{kind: eSeq, subs: subs} }
func altOf(subs ...*expr) *expr { return &expr{kind: eAlt, subs: subs} }
func litOf(s string) *expr      { return &expr{kind: eLit, lit: []byte(s)} }

// classOf returns a class of the given ranges, normalized (sorted,
// merged, clipped to valid code points, surrogates removed), complemented
// over all code points when negate is set.
func classOf(rs []runeRange, negate bool) *expr {
	rs = normRanges(rs)
	if negate {
		rs = complementRanges(rs)
	}
	return &expr{kind: eClass, ranges: rs}
}

func normRanges(in []runeRange) []runeRange {
	rs := make([]runeRange, 0, len(in)+1)
	for _, r := range in {
		if r.lo < 0 {
			r.lo = 0
		}
		if r.hi > utf8.MaxRune {
			r.hi = utf8.MaxRune
		}
		if r.lo > r.hi {
			continue
		}
		// Surrogates have no UTF-8 encoding.
		if r.lo < 0xD800 && r.hi > 0xDFFF {
			rs = append(rs, runeRange{r.lo, 0xD7FF}, runeRange{0xE000, r.hi})
			continue
		}
		if r.lo >= 0xD800 && r.lo <= 0xDFFF {
			r.lo = 0xE000
		}
		if r.hi >= 0xD800 && r.hi <= 0xDFFF {
			r.hi = 0xD7FF
		}
		if r.lo <= r.hi {
			rs = append(rs, r)
		}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].lo < rs[j].lo })
	out := rs[:0]
	for _, r := range rs {
		if n := len(out); n > 0 && r.lo <= out[n-1].hi+1 {
			if r.hi > out[n-1].hi {
				out[n-1].hi = r.hi
			}
			continue
		}
		out = append(out, r)
	}
	return out
}

func complementRanges(rs []runeRange) []runeRange {
	var out []runeRange
	next := rune(0)
	for _, r := range rs {
		if r.lo > next {
			out = append(out, runeRange{next, r.lo - 1})
		}
		next = r.hi + 1
	}
	if next <= utf8.MaxRune {
		out = append(out, runeRange{next, utf8.MaxRune})
	}
	return normRanges(out)
}

// byteSeq is one UTF-8 encoding shape: byte i of a match lies in
// [lo[i], hi[i]].
type byteSeq struct {
	n      int
	lo, hi [4]byte
}

// utf8Seqs splits a code point range into byte sequences whose bytes vary
// independently, so that a class becomes a few chains of byte ranges.
func utf8Seqs(r runeRange, out []byteSeq) []byteSeq {
	type item struct{ lo, hi rune }
	stack := []item{{r.lo, r.hi}}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		lo, hi := it.lo, it.hi
		// Split on encoding-length boundaries.
		split := false
		for _, b := range []rune{0x7F, 0x7FF, 0xFFFF} {
			if lo <= b && hi > b {
				stack = append(stack, item{b + 1, hi}, item{lo, b})
				split = true
				break
			}
		}
		if split {
			continue
		}
		n := utf8.RuneLen(lo)
		if n == 1 {
			out = append(out, byteSeq{n: 1, lo: [4]byte{byte(lo)}, hi: [4]byte{byte(hi)}})
			continue
		}
		for i := 1; i < n; i++ {
			m := rune(1)<<(6*uint(i)) - 1
			if lo&^m != hi&^m {
				if lo&m != 0 {
					stack = append(stack, item{(lo | m) + 1, hi}, item{lo, lo | m})
					split = true
					break
				}
				if hi&m != m {
					stack = append(stack, item{hi &^ m, hi}, item{lo, (hi &^ m) - 1})
					split = true
					break
				}
			}
		}
		if split {
			continue
		}
		var a, b [4]byte
		utf8.EncodeRune(a[:], lo)
		utf8.EncodeRune(b[:], hi)
		out = append(out, byteSeq{n: n, lo: a, hi: b})
	}
	return out
}
