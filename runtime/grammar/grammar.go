// Package grammar constrains generation: it compiles an output constraint
// (a JSON Schema, any JSON object, a llama.cpp GBNF grammar or a regular
// expression) into a grammar over bytes, and for each decode step of a
// request gives the mask of the vocabulary's tokens that may come next.
//
// Matching is a pushdown automaton over bytes: a state is a set of rule
// stacks. The per-step mask does not re-parse the vocabulary: tokens are
// walked as a trie in byte order (a rejected prefix prunes its subtree),
// and, as xgrammar does, each grammar position caches the tokens it
// accepts without leaving its rule (context-independent), so a step only
// re-checks the few tokens whose acceptance depends on the rules below.
package grammar

import (
	"bytes"
	"container/list"
	"context"
	"crypto/sha256"
	"errors"
	"sort"
	"sync"
)

// Vocab is what the library needs of a tokenizer (*tokenizer.Tokenizer
// satisfies it): the number of tokens, each token's bytes as it appears
// in the output, and which tokens end generation.
type Vocab interface {
	NVocab() int
	Piece(id int32) []byte
	IsEOG(id int32) bool
}

// Compiler compiles specs for one vocabulary and caches the results by
// content. It is safe for concurrent use.
type Compiler struct {
	vt  *vocabTrie
	lim Limits
	// warm: each grammar compiled afresh is warmed in the background
	// (WarmInBackground).
	warm bool

	mu    sync.Mutex
	lru   *list.List // of *cacheEntry, most recent first
	byKey map[[32]byte]*list.Element
}

type cacheEntry struct {
	key [32]byte
	g   *Grammar
}

// NewCompiler returns a compiler for vocabulary v; the zero Limits take
// the defaults. Building it sorts the vocabulary once.
func NewCompiler(v Vocab, lim Limits) *Compiler {
	return &Compiler{vt: newVocabTrie(v), lim: lim.withDefaults(), lru: list.New(), byKey: map[[32]byte]*list.Element{}}
}

// WarmInBackground makes the compiler warm each grammar it compiles from
// now on (Grammar.Warm) on a goroutine of its own, which ends when every
// position is cached. A tier that takes masks on the device wants this:
// there a mask that walks a position for the first time holds up the
// whole step, every request's row waiting for it.
func (c *Compiler) WarmInBackground() {
	c.mu.Lock()
	c.warm = true
	c.mu.Unlock()
}

// Compile returns the grammar of s, from the cache when the same spec was
// compiled before. It stops at the Limits' CompileTime or when ctx ends.
func (c *Compiler) Compile(ctx context.Context, s Spec) (*Grammar, error) {
	key, err := specKey(s)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if el, ok := c.byKey[key]; ok {
		c.lru.MoveToFront(el)
		g := el.Value.(*cacheEntry).g
		c.mu.Unlock()
		return g, nil
	}
	c.mu.Unlock()
	g, err := compileSpec(ctx, s, c.lim)
	if err != nil {
		return nil, err
	}
	g.vt = c.vt
	g.cache = make([]*posCache, len(g.pos))
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok { // compiled meanwhile by another request
		return el.Value.(*cacheEntry).g, nil
	}
	c.byKey[key] = c.lru.PushFront(&cacheEntry{key, g})
	if c.warm {
		go g.Warm(context.Background())
	}
	for c.lru.Len() > c.lim.CacheEntries {
		old := c.lru.Back()
		c.lru.Remove(old)
		delete(c.byKey, old.Value.(*cacheEntry).key)
	}
	return g, nil
}

// specKey hashes a spec's content; a spec must set exactly one field.
func specKey(s Spec) ([32]byte, error) {
	n := 0
	h := sha256.New()
	if len(s.JSONSchema) > 0 {
		n++
		h.Write([]byte("schema\x00"))
		h.Write(s.JSONSchema)
	}
	if s.JSONObject {
		n++
		h.Write([]byte("object\x00"))
	}
	if s.GBNF != "" {
		n++
		h.Write([]byte("gbnf\x00"))
		h.Write([]byte(s.GBNF))
	}
	if s.Regex != "" {
		n++
		h.Write([]byte("regex\x00"))
		h.Write([]byte(s.Regex))
	}
	var k [32]byte
	if n != 1 {
		return k, errors.New("grammar: a spec must set exactly one of JSONSchema, JSONObject, GBNF, Regex")
	}
	copy(k[:], h.Sum(nil))
	return k, nil
}

// compileSpec compiles one spec without a vocabulary.
func compileSpec(ctx context.Context, s Spec, lim Limits) (*Grammar, error) {
	ctx, cancel := context.WithTimeout(ctx, lim.CompileTime)
	defer cancel()
	b := &budget{ctx: ctx, lim: lim}
	var rs *ruleSet
	var err error
	switch {
	case len(s.JSONSchema) > 0:
		var text string
		if text, err = schemaGBNF(s.JSONSchema, "root", lim, b); err != nil {
			return nil, err
		}
		rs, err = parseGBNF(text, "root", lim, b)
	case s.JSONObject:
		rs, err = parseGBNF(jsonObjectGBNF, "root", lim, b)
	case s.GBNF != "":
		rs, err = parseGBNF(s.GBNF, "root", lim, b)
	default:
		rs, err = parseRegex(s.Regex, lim, b)
	}
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, (&budget{ctx: ctx, lim: lim, ticks: 1023}).check()
	}
	return compileRules(rs, lim, b)
}

// SchemaGBNF converts a JSON Schema to GBNF text whose entry rule is name
// and whose other rules are all named "name-...", so that several schemas
// compose into one grammar (tool calls: root ::= "<tool_call>\n" ( f1 |
// f2 ) "\n</tool_call>"). It applies the default Limits.
func SchemaGBNF(schema []byte, name string) (string, error) {
	lim := Limits{}.withDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), lim.CompileTime)
	defer cancel()
	return schemaGBNF(schema, name, lim, &budget{ctx: ctx, lim: lim})
}

// Grammar is a compiled constraint for one vocabulary. It is immutable
// apart from its per-position token cache and safe for concurrent use;
// each request takes its own Matcher.
type Grammar struct {
	pos    []position
	starts []int32 // rule index -> its start position
	root   int32   // start position of the entry rule
	names  []string
	lim    Limits
	vt     *vocabTrie

	cacheMu    sync.Mutex
	cache      []*posCache // by position, filled as matching reaches them
	cacheBytes int

	// machines are released matchers' machines (Matcher.Release), whose
	// memoized states and transitions the next matchers start with.
	machines sync.Pool
}

// Positions returns the size of the compiled grammar.
func (g *Grammar) Positions() int { return len(g.pos) }

// warmPositions bounds the grammars Warm warms: each position costs a
// walk of the whole vocabulary (milliseconds for 152 000 tokens), so a
// grammar past it (a hostile schema near GrammarSize, say) is left to
// cache its positions as matching reaches them.
const warmPositions = 16384

// Warm caches the tokens of every position the grammar has (what a mask
// otherwise computes when matching first reaches the position: a walk of
// the whole vocabulary), until ctx ends or the cache reaches
// PositionCacheBytes. A server calls it in the background after it
// compiled the grammar, so that later masks only look positions up
// (xgrammar computes its token cache at compile time for the same
// reason; here the compile's time limit stays the grammar's own).
func (g *Grammar) Warm(ctx context.Context) {
	if len(g.pos) > warmPositions {
		return
	}
	for q := range g.pos {
		if ctx.Err() != nil {
			return
		}
		g.cacheMu.Lock()
		done, full := g.cache[q] != nil, g.cacheBytes >= g.lim.PositionCacheBytes
		g.cacheMu.Unlock()
		if full {
			return
		}
		if !done {
			g.posCache(int32(q))
		}
	}
}

// vocabTrie is the vocabulary sorted by bytes as a preorder trie: the
// subtree of node i is nodes i..end[i]-1, and the tokens sorted under it
// are toks[tokLo[i]:tokLo[end[i]]].
type vocabTrie struct {
	nvocab   int
	maxDepth int      // longest token in bytes
	pieces   [][]byte // by token id
	eog      []int32  // end-of-generation tokens
	isEOG    []bool   // by token id: one of eog (shared by every matcher)
	toks     []int32  // token ids with bytes, in byte order
	sorted   [][]byte // their bytes
	// Trie nodes in preorder; node 0 is the root (the empty prefix).
	nbyte []byte
	depth []int32
	end   []int32
	tokLo []int32 // first sorted token at or under the node; len(nodes)+1 entries
	tokHi []int32 // tokens ending exactly at the node are toks[tokLo:tokHi]
}

func newVocabTrie(v Vocab) *vocabTrie {
	n := v.NVocab()
	vt := &vocabTrie{nvocab: n, pieces: make([][]byte, n), isEOG: make([]bool, n)}
	for id := 0; id < n; id++ {
		if v.IsEOG(int32(id)) {
			vt.eog = append(vt.eog, int32(id))
			vt.isEOG[id] = true
			continue
		}
		p := v.Piece(int32(id))
		if len(p) == 0 {
			continue // no bytes: cannot advance any grammar, never allowed
		}
		vt.pieces[id] = bytes.Clone(p)
		vt.toks = append(vt.toks, int32(id))
	}
	sort.SliceStable(vt.toks, func(i, j int) bool { return bytes.Compare(vt.pieces[vt.toks[i]], vt.pieces[vt.toks[j]]) < 0 })
	vt.sorted = make([][]byte, len(vt.toks))
	for i, id := range vt.toks {
		vt.sorted[i] = vt.pieces[id]
	}
	// Build the preorder trie: each token adds the nodes of its bytes past
	// the prefix it shares with the previous token.
	vt.nbyte, vt.depth, vt.end, vt.tokLo, vt.tokHi = []byte{0}, []int32{0}, []int32{0}, []int32{0}, []int32{0}
	path := []int32{0} // node at each depth of the previous token
	var prev []byte
	for i, p := range vt.sorted {
		l := commonPrefix(prev, p)
		if l == len(p) && len(p) == len(prev) && i > 0 {
			vt.tokHi[path[l]] = int32(i + 1) // same bytes as the previous token
			prev = p
			continue
		}
		for len(path) > l+1 {
			nd := path[len(path)-1]
			vt.end[nd] = int32(len(vt.nbyte))
			path = path[:len(path)-1]
		}
		for d := l; d < len(p); d++ {
			nd := int32(len(vt.nbyte))
			vt.nbyte = append(vt.nbyte, p[d])
			vt.depth = append(vt.depth, int32(d+1))
			vt.end = append(vt.end, 0)
			vt.tokLo = append(vt.tokLo, int32(i))
			vt.tokHi = append(vt.tokHi, int32(i))
			path = append(path, nd)
		}
		vt.tokHi[path[len(p)]] = int32(i + 1)
		prev = p
	}
	for _, nd := range path {
		vt.end[nd] = int32(len(vt.nbyte))
	}
	vt.tokLo = append(vt.tokLo, int32(len(vt.toks)))
	for _, d := range vt.depth {
		vt.maxDepth = max(vt.maxDepth, int(d))
	}
	return vt
}

func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// jsonObjectGBNF is any JSON object, written compactly (no whitespace
// between tokens but one optional space after ':' and ',').
const jsonObjectGBNF = `root ::= object
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ( string ":" " "? value ( "," " "? string ":" " "? value )* )? "}"
array ::= "[" ( value ( "," " "? value )* )? "]"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
`
