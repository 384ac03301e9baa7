// Package tokenizer turns text into token ids and back exactly as llama.cpp
// does (src/llama-vocab.cpp, src/unicode.cpp), from a vocabulary read by
// format/vocab. It supports SentencePiece-style BPE ("llama"), byte-level
// BPE ("gpt2") with llama.cpp's pre-tokenizers, and WordPiece ("bert").
package tokenizer

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/zrtdev/zrt/format/vocab"
)

// Token attributes as llama.cpp derives them from the token types, plus the
// strip flags it sets by model name.
const (
	attrUndefined   = 0
	attrUnknown     = 1 << 0
	attrUnused      = 1 << 1
	attrNormal      = 1 << 2
	attrControl     = 1 << 3
	attrUserDefined = 1 << 4
	attrByte        = 1 << 5
	attrLStrip      = 1 << 7
	attrRStrip      = 1 << 8
)

type modelKind int

const (
	kindSPM modelKind = iota
	kindBPE
	kindWPM
)

// Tokenizer encodes and decodes text for one vocabulary. It is safe for
// concurrent use.
type Tokenizer struct {
	v      *vocab.Vocab
	kind   modelKind
	pre    preType
	text   []string // token texts as llama.cpp holds them (empty ones renamed)
	attr   []uint16
	scores []float32
	ids    map[string]int32
	ranks  map[mergePair]int32
	eog    map[int32]bool
	// eogList is the vocabulary's EOGTokens, found once: they scan every
	// token's text.
	eogList []int32
	// special holds control, user-defined and unknown tokens, longest first,
	// for splitting text on them.
	special []int32
	maxLen  int // longest token text in bytes (WordPiece search bound)
	// pieces holds every token's Piece end to end, token i's at
	// pieces[pieceAt[i]:pieceAt[i+1]], made once: mapping a byte-level
	// token's text back to bytes costs more than the rest of what a
	// server does for each token it generates, and it sends every one.
	pieces  string
	pieceAt []uint32
}

// New builds the lookup tables for v. It rejects models and pre-tokenizers
// it does not implement.
func New(v *vocab.Vocab) (*Tokenizer, error) {
	if v == nil {
		return nil, fmt.Errorf("tokenizer: nil vocabulary")
	}
	if err := v.Validate(); err != nil {
		return nil, err
	}
	t := &Tokenizer{v: v}
	switch v.Model {
	case "llama":
		t.kind = kindSPM
	case "gpt2":
		t.kind = kindBPE
		p, ok := preTypes[v.Pre]
		if !ok {
			return nil, vocab.UnsupportedPre(v.Pre)
		}
		t.pre = p
	case "bert":
		t.kind = kindWPM
	default:
		return nil, vocab.UnsupportedModel(v.Model)
	}

	n := len(v.Tokens)
	t.text = make([]string, n)
	t.attr = make([]uint16, n)
	t.ids = make(map[string]int32, n)
	for i, s := range v.Tokens {
		if s == "" {
			// llama.cpp renames empty tokens so they stay addressable.
			s = "[EMPTY_" + strconv.Itoa(i) + "]"
		}
		if _, dup := t.ids[s]; dup {
			// llama.cpp asserts that token texts are unique.
			return nil, fmt.Errorf("tokenizer: duplicate token text %q (id %d)", s, i)
		}
		t.ids[s] = int32(i)
		t.text[i] = s
		t.maxLen = max(t.maxLen, len(s))
		a := uint16(attrNormal)
		if v.Types != nil {
			a = typeAttr(v.Types[i])
		}
		t.attr[i] = a
	}
	t.scores = v.Scores

	if t.kind == kindBPE {
		t.ranks = make(map[mergePair]int32, len(v.Merges))
		for i, m := range v.Merges {
			// llama.cpp splits at the first space after the first byte.
			k := strings.IndexByte(m[min(1, len(m)):], ' ')
			if k < 0 {
				continue
			}
			k += min(1, len(m))
			p := mergePair{m[:k], m[k+1:]}
			if _, ok := t.ranks[p]; !ok {
				t.ranks[p] = int32(i)
			}
		}
	}

	for id := int32(0); id < int32(n); id++ {
		if t.attr[id]&(attrControl|attrUserDefined|attrUnknown) != 0 {
			t.special = append(t.special, id)
		}
	}
	sort.SliceStable(t.special, func(a, b int) bool {
		return len(t.text[t.special[a]]) > len(t.text[t.special[b]])
	})
	t.setStripAttrs()

	t.eog = map[int32]bool{}
	t.eogList = v.EOGTokens()
	for _, id := range t.eogList {
		t.eog[id] = true
	}
	t.tabulatePieces()
	return t, nil
}

// tabulatePieces fills pieces and pieceAt.
func (t *Tokenizer) tabulatePieces() {
	var all []byte
	t.pieceAt = make([]uint32, len(t.text)+1)
	for id := range t.text {
		all = append(all, t.decodePiece(int32(id), false)...)
		t.pieceAt[id+1] = uint32(len(all))
	}
	t.pieces = string(all)
}

// typeAttr maps a token type to llama.cpp's attribute.
func typeAttr(tt int32) uint16 {
	switch tt {
	case vocab.TypeNormal:
		return attrNormal
	case vocab.TypeUnknown:
		return attrUnknown
	case vocab.TypeControl:
		return attrControl
	case vocab.TypeUserDefined:
		return attrUserDefined
	case vocab.TypeUnused:
		return attrUnused
	case vocab.TypeByte:
		return attrByte
	}
	return attrUndefined
}

// setStripAttrs reproduces llama.cpp's per-model token attributes: the
// jina-v2 <mask> eats spaces before it, and Phi-3's special tokens eat the
// spaces after them.
func (t *Tokenizer) setStripAttrs() {
	setAttr := func(s string, a uint16, on bool) {
		id, ok := t.ids[s]
		if !ok {
			return
		}
		if on {
			t.attr[id] |= a
		} else {
			t.attr[id] &^= a
		}
	}
	name := strings.ToLower(t.v.Name)
	switch {
	case strings.Contains(t.v.Pre, "jina-v2-de"), strings.Contains(t.v.Pre, "jina-v2-es"), strings.Contains(t.v.Pre, "jina-v2-code"):
		setAttr("<mask>", attrLStrip, true)
	case strings.Contains(name, "phi-3"), strings.Contains(name, "phi3"):
		for _, id := range t.special {
			t.attr[id] |= attrRStrip
		}
		setAttr("</s>", attrRStrip, true)
		for _, s := range []string{"<unk>", "<s>", "<|endoftext|>"} {
			setAttr(s, attrRStrip, false)
		}
	}
}

// NVocab returns the number of tokens.
func (t *Tokenizer) NVocab() int { return len(t.text) }

// Vocab returns the vocabulary the tokenizer was built from; callers must
// not modify it.
func (t *Tokenizer) Vocab() *vocab.Vocab { return t.v }

// IsEOG reports whether id ends generation: EOS, EOT, EOM, the FIM
// pad/repo/separator tokens and the tokens llama.cpp recognizes by text
// (<|eot_id|>, <|im_end|>, <|end|>, <end_of_turn>, <|endoftext|>,
// <|eom_id|>, <EOT>).
func (t *Tokenizer) IsEOG(id int32) bool { return id >= 0 && t.eog[id] }

// EOGTokens is the vocabulary's end-of-generation tokens
// (vocab.Vocab.EOGTokens), without scanning the vocabulary again.
func (t *Tokenizer) EOGTokens() []int32 { return slices.Clone(t.eogList) }

// TokenID returns the id of the token whose text is exactly text.
func (t *Tokenizer) TokenID(text string) (int32, bool) {
	id, ok := t.ids[text]
	return id, ok
}

// TokenText returns the stored text of a token ("" when out of range).
func (t *Tokenizer) TokenText(id int32) string {
	if id < 0 || int(id) >= len(t.text) {
		return ""
	}
	return t.text[id]
}

// IsControl reports whether id is a control token.
func (t *Tokenizer) IsControl(id int32) bool {
	return id >= 0 && int(id) < len(t.attr) && t.attr[id]&attrControl != 0
}

// Encode tokenizes text like llama.cpp's llama_tokenize: addSpecial adds
// BOS/EOS as the vocabulary asks (always [CLS]/[SEP] for WordPiece), and
// parseSpecial lets control tokens written in the text become their ids.
// User-defined tokens are always matched as a whole, as in llama.cpp.
func (t *Tokenizer) Encode(text string, addSpecial, parseSpecial bool) []int32 {
	var out []int32
	frags := t.partition(text, parseSpecial)
	v := t.v
	switch t.kind {
	case kindSPM:
		if addSpecial && v.AddBOS && v.BOS >= 0 {
			out = append(out, v.BOS)
		}
		prevSpecial := true // a leading space goes before the first text
		var buf []byte
		for _, f := range frags {
			if f.tok >= 0 {
				out = append(out, f.tok)
				prevSpecial = true
				continue
			}
			buf = buf[:0]
			if v.AddSpacePrefix && prevSpecial {
				buf = append(buf, "\u2581"...)
			}
			buf = escapeSpaces(buf, text[f.off:f.off+f.n])
			out = t.spm(string(buf), out)
			prevSpecial = false
		}
		if addSpecial && v.AddEOS && v.EOS >= 0 {
			out = append(out, v.EOS)
		}
	case kindBPE:
		if addSpecial && v.AddBOS && v.BOS >= 0 {
			out = append(out, v.BOS)
		}
		out = pieces(text, frags, out, t.bpe)
		if addSpecial && v.AddEOS && v.EOS >= 0 {
			out = append(out, v.EOS)
		}
	case kindWPM:
		// llama.cpp's WordPiece path adds [CLS] ... [SEP] whenever
		// addSpecial is set, whatever add_bos says.
		if addSpecial && v.BOS >= 0 {
			out = append(out, v.BOS)
		}
		out = pieces(text, frags, out, t.wpm)
		if addSpecial && v.SEP >= 0 {
			out = append(out, v.SEP)
		}
	}
	return out
}

// pieces appends the tokens of frags: a special token as it is, the text
// between them as model tokenizes it.
func pieces(text string, frags []fragment, out []int32, model func(string, []int32) []int32) []int32 {
	for _, f := range frags {
		if f.tok >= 0 {
			out = append(out, f.tok)
			continue
		}
		out = model(text[f.off:f.off+f.n], out)
	}
	return out
}

// escapeSpaces appends s with every ' ' replaced by U+2581 (SPM's marker).
func escapeSpaces(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' {
			dst = append(dst, "\u2581"...)
		} else {
			dst = append(dst, s[i])
		}
	}
	return dst
}
