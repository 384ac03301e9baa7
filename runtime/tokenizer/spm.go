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

// spmBigram is a candidate merge of two adjacent symbols.
type spmBigram struct {
	left, right int
	score       float32
	size        int
}

// spmQueue pops the highest score first and, on ties, the leftmost pair, as
// llama.cpp's llm_bigram_spm comparator does.
type spmQueue []spmBigram

func (q spmQueue) Len() int { return len(q) }
func (q spmQueue) Less(i, j int) bool {
	if q[i].score != q[j].score {
		return q[i].score > q[j].score
	}
	return q[i].left < q[j].left
}
func (q spmQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *spmQueue) Push(x any)   { *q = append(*q, x.(spmBigram)) }
func (q *spmQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
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

	q := make(spmQueue, 0, len(syms))
	try := func(l, r int) {
		if l < 0 || r < 0 {
			return
		}
		s := text[syms[l].off : syms[l].off+syms[l].n+syms[r].n]
		id, ok := t.ids[s]
		if !ok {
			return
		}
		var score float32
		if t.scores != nil {
			score = t.scores[id]
		}
		heap.Push(&q, spmBigram{left: l, right: r, score: score, size: len(s)})
	}
	for i := 1; i < len(syms); i++ {
		try(i-1, i)
	}
	for q.Len() > 0 {
		b := heap.Pop(&q).(spmBigram)
		if !merge(syms, b.left, b.right, b.size) {
			continue
		}
		try(syms[b.left].prev, b.left)
		try(b.left, syms[b.left].next)
	}

	for i := 0; i != -1; i = syms[i].next {
		s := text[syms[i].off : syms[i].off+syms[i].n]
		if id, ok := t.ids[s]; ok {
			out = append(out, id)
			continue
		}
		// llama.cpp's resegment would look the text up in its reverse merge
		// map, but only texts that are tokens are ever put there, so an
		// unknown symbol always falls back to bytes.
		for k := 0; k < len(s); k++ {
			out = t.appendByteToken(out, s[k])
		}
	}
	return out
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
