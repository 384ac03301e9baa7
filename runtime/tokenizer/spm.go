package tokenizer

import "container/heap"

// symbol is a piece of a word being merged: bytes [off, off+n) of the word,
// linked to its live neighbours. n == 0 marks a symbol merged away.
type symbol struct {
	prev, next int
	off, n     int
}

// splitSymbols returns one linked symbol per UTF-8 character of a
// non-empty text (a truncated trailing sequence is one symbol).
func splitSymbols(text string) []symbol {
	syms := make([]symbol, 0, len(text))
	for off := 0; off < len(text); {
		n := min(utf8Len(text[off]), len(text)-off)
		i := len(syms)
		syms = append(syms, symbol{prev: i - 1, next: i + 1, off: off, n: n})
		off += n
	}
	syms[len(syms)-1].next = -1
	return syms
}

// merge joins symbol right into its left neighbour left, if the pair is
// still the one of the given total size. Symbols only grow rightwards and
// stay adjacent while alive, so an unchanged total length means an
// unchanged pair; otherwise one side was merged since and it reports false.
func merge(syms []symbol, left, right, size int) bool {
	l, r := &syms[left], &syms[right]
	if l.n == 0 || r.n == 0 || l.n+r.n != size {
		return false
	}
	l.n += r.n
	r.n = 0
	l.next = r.next
	if r.next >= 0 {
		syms[r.next].prev = left
	}
	return true
}

// bigram is a candidate merge of two adjacent symbols: prio orders the
// queue, size is the pair's total length when it was pushed.
type bigram struct {
	left, right int
	prio        float64
	size        int
}

// bigramQueue pops the lowest prio first and, on ties, the leftmost pair,
// as llama.cpp's llm_bigram_bpe and llm_bigram_spm comparators do (BPE's
// prio is the merge's rank, SPM's the negated score of the token).
type bigramQueue []bigram

func (q bigramQueue) Len() int { return len(q) }
func (q bigramQueue) Less(i, j int) bool {
	if q[i].prio != q[j].prio {
		return q[i].prio < q[j].prio
	}
	return q[i].left < q[j].left
}
func (q bigramQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *bigramQueue) Push(x any)   { *q = append(*q, x.(bigram)) }
func (q *bigramQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// mergeSymbols merges adjacent symbols of syms while any pair can merge,
// the best first: prio(l, r) is the priority of merging symbols l and r
// (the lowest merges first), false when they cannot merge.
func mergeSymbols(syms []symbol, prio func(l, r int) (float64, bool)) {
	q := make(bigramQueue, 0, len(syms))
	try := func(l, r int) {
		if l < 0 || r < 0 {
			return
		}
		p, ok := prio(l, r)
		if !ok {
			return
		}
		heap.Push(&q, bigram{left: l, right: r, prio: p, size: syms[l].n + syms[r].n})
	}
	for i := 1; i < len(syms); i++ {
		try(i-1, i)
	}
	for q.Len() > 0 {
		b := heap.Pop(&q).(bigram)
		if !merge(syms, b.left, b.right, b.size) {
			continue
		}
		try(syms[b.left].prev, b.left)
		try(b.left, syms[b.left].next)
	}
}

// appendSymbols appends the token of each symbol of text left after
// merging; a symbol that is no token gives what fallback makes of each of
// its bytes (as a one-byte string).
func (t *Tokenizer) appendSymbols(out []int32, syms []symbol, text string, fallback func(out []int32, b string) []int32) []int32 {
	for i := 0; i != -1; i = syms[i].next {
		s := text[syms[i].off : syms[i].off+syms[i].n]
		if id, ok := t.ids[s]; ok {
			out = append(out, id)
			continue
		}
		for k := 0; k < len(s); k++ {
			out = fallback(out, s[k:k+1])
		}
	}
	return out
}

// spm tokenizes text (spaces already escaped) like llm_tokenizer_spm: start
// from UTF-8 characters and repeatedly merge the adjacent pair whose union
// is the best-scoring token; what never forms a token falls back to byte
// tokens.
func (t *Tokenizer) spm(text string, out []int32) []int32 {
	if text == "" {
		return out
	}
	syms := splitSymbols(text)
	mergeSymbols(syms, func(l, r int) (float64, bool) {
		id, ok := t.ids[text[syms[l].off:syms[l].off+syms[l].n+syms[r].n]]
		if !ok {
			return 0, false
		}
		var score float32
		if t.scores != nil {
			score = t.scores[id]
		}
		return -float64(score), true
	})
	// llama.cpp's resegment would look an unknown symbol's text up in its
	// reverse merge map, but only texts that are tokens are ever put
	// there, so an unknown symbol always falls back to bytes.
	return t.appendSymbols(out, syms, text, func(out []int32, b string) []int32 { return t.appendByteToken(out, b[0]) })
}

const hexDigits = "0123456789ABCDEF"

// appendByteToken appends SPM's token for one byte: <0xXX>, else the byte
// itself as a token. llama.cpp throws when neither exists; we use the
// unknown token (or nothing) so that Encode never fails.
func (t *Tokenizer) appendByteToken(out []int32, b byte) []int32 {
	name := string([]byte{'<', '0', 'x', hexDigits[b>>4], hexDigits[b&15], '>'})
	if id, ok := t.ids[name]; ok {
		return append(out, id)
	}
	if id, ok := t.ids[string([]byte{b})]; ok {
		return append(out, id)
	}
	if t.v.UNK >= 0 {
		return append(out, t.v.UNK)
	}
	return out
}
