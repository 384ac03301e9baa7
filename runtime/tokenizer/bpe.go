package tokenizer

import "container/heap"

// mergePair is the key of a BPE merge rank.
type mergePair struct{ left, right string }

// bpeBigram is a candidate merge of two adjacent symbols.
type bpeBigram struct {
	left, right int
	rank        int32
	size        int
}

// bpeQueue pops the lowest rank first and, on ties, the leftmost pair, as
// llama.cpp's llm_bigram_bpe comparator does.
type bpeQueue []bpeBigram

func (q bpeQueue) Len() int { return len(q) }
func (q bpeQueue) Less(i, j int) bool {
	if q[i].rank != q[j].rank {
		return q[i].rank < q[j].rank
	}
	return q[i].left < q[j].left
}
func (q bpeQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *bpeQueue) Push(x any)   { *q = append(*q, x.(bpeBigram)) }
func (q *bpeQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// byteUnicode is GPT-2's reversible byte -> printable character mapping:
// printable Latin-1 bytes map to themselves, the rest to U+0100 onwards.
var (
	byteUnicode [256]string
	unicodeByte = map[string]byte{}
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
	if len(syms) > 1 {
		q := make(bpeQueue, 0, len(syms))
		try := func(l, r int) {
			if l < 0 || r < 0 {
				return
			}
			a, b := syms[l], syms[r]
			rank, ok := t.ranks[mergePair{w[a.off : a.off+a.n], w[b.off : b.off+b.n]}]
			if !ok {
				return
			}
			heap.Push(&q, bpeBigram{left: l, right: r, rank: rank, size: a.n + b.n})
		}
		for i := 1; i < len(syms); i++ {
			try(i-1, i)
		}
		for q.Len() > 0 {
			b := heap.Pop(&q).(bpeBigram)
			if !merge(syms, b.left, b.right, b.size) {
				continue
			}
			try(syms[b.left].prev, b.left)
			try(b.left, syms[b.left].next)
		}
	}
	for i := 0; i != -1; i = syms[i].next {
		s := w[syms[i].off : syms[i].off+syms[i].n]
		if id, ok := t.ids[s]; ok {
			out = append(out, id)
			continue
		}
		// As llama.cpp: try each byte of the text as a token of its own
		// and silently drop those that are not.
		for k := 0; k < len(s); k++ {
			if id, ok := t.ids[s[k:k+1]]; ok {
				out = append(out, id)
			}
		}
	}
	return out
}
