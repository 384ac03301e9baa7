package tokenizer

// Pre-tokenization: llama.cpp's unicode_regex_split applies a list of
// regexes in turn, each splitting every piece left by the previous one into
// matches and the unmatched gaps between them. Go's regexp has neither
// look-ahead nor llama.cpp's view of Unicode, so each regex is a hand
// scanner here with the semantics llama.cpp gets:
//
//   - the GPT-2 and Llama-3 regexes use llama.cpp's hand-written splitters
//     (unicode_regex_split_custom_gpt2/_llama3), reproduced by gpt2Split and
//     llama3Split with their quirks;
//   - regexes with \p{..} run through std::regex over a "collapsed" text in
//     which every codepoint >= 128 becomes one byte standing for its
//     category (whitespace -> \v), so \p{L} means A-Za-z or any non-ASCII
//     letter, \p{P}/\p{S} use fixed ASCII lists (llama.cpp's \p{S} lacks '~'),
//     and \s is ASCII whitespace plus llama.cpp's non-ASCII whitespace;
//   - other regexes run through std::wregex on codepoints, with non-ASCII
//     whitespace replaced by \v.
//
// The std::regex ones are ECMAScript: leftmost match, alternatives tried in
// order, greedy quantifiers with backtracking. Each matcher below returns
// the end of the match the ECMAScript engine would pick at a position.

// text is one piece of input seen by the scanners: codepoints plus their
// collapsed and wide views, computed once per tokenize call.
type text struct {
	cps  []rune
	col  []byte // collapsed view (std::regex path)
	wide []rune // wide view (std::wregex path)
}

// Collapsed bytes for non-ASCII codepoints, as in llama.cpp.
const (
	colOther  = 0xd0
	colNumber = 0xd1
	colLetter = 0xd2
	colPunct  = 0xd3
	colMark   = 0xd4
	colSymbol = 0xd5
)

func newText(cps []rune) *text {
	t := &text{cps: cps, col: make([]byte, len(cps)), wide: make([]rune, len(cps))}
	for i, c := range cps {
		if c >= 0 && c < 128 {
			t.col[i] = byte(c)
			t.wide[i] = c
			continue
		}
		f := cptFlags(c)
		t.wide[i] = c
		if f&fWhitespace != 0 {
			t.col[i] = '\v'
			t.wide[i] = '\v'
			continue
		}
		switch f & fCategories {
		case fNumber:
			t.col[i] = colNumber
		case fLetter:
			t.col[i] = colLetter
		case fPunct:
			t.col[i] = colPunct
		case fMark:
			t.col[i] = colMark
		case fSymbol:
			t.col[i] = colSymbol
		default:
			t.col[i] = colOther
		}
	}
	return t
}

// Predicates on collapsed bytes (the std::regex classes after llama.cpp
// rewrote \p{..} into byte sets).
func cSpace(c byte) bool  { return c == ' ' || (c >= '\t' && c <= '\r') }
func cLetter(c byte) bool { return c == colLetter || (c|0x20 >= 'a' && c|0x20 <= 'z') }
func cNumber(c byte) bool { return c == colNumber || (c >= '0' && c <= '9') }
func cMark(c byte) bool   { return c == colMark }
func cPunct(c byte) bool {
	if c == colPunct {
		return true
	}
	switch {
	case c >= 0x21 && c <= 0x23, c >= 0x25 && c <= 0x2a, c >= 0x2c && c <= 0x2f,
		c == 0x3a, c == 0x3b, c == 0x3f, c == 0x40, c >= 0x5b && c <= 0x5d,
		c == 0x5f, c == 0x7b, c == 0x7d:
		return true
	}
	return false
}
func cSymbol(c byte) bool {
	switch c {
	case colSymbol, '$', '+', '<', '=', '>', '^', '`', '|':
		return true
	}
	return false
}
func cUpper(c byte) bool { return c >= 'A' && c <= 'Z' }
func cLower(c byte) bool { return c >= 'a' && c <= 'z' }

// wSpace is \s of std::wregex on the wide view.
func wSpace(c rune) bool { return c == ' ' || (c >= '\t' && c <= '\r') }

// stage splits the piece [lo, hi) of t, appending piece lengths to out.
type stage interface {
	split(t *text, lo, hi int, out []int) []int
}

// regexStage emulates std::regex_iterator over a piece: at each position
// from the left, match returns the end of the match starting there or -1;
// unmatched stretches become pieces of their own.
type regexStage struct {
	match func(t *text, i, hi int) int
}

func (s regexStage) split(t *text, lo, hi int, out []int) []int {
	gap := lo
	for i := lo; i < hi; {
		e := s.match(t, i, hi)
		if e <= i { // no match here (none of our regexes matches empty)
			i++
			continue
		}
		if i > gap {
			out = append(out, i-gap)
		}
		out = append(out, e-i)
		i, gap = e, e
	}
	if hi > gap {
		out = append(out, hi-gap)
	}
	return out
}

// funcStage adapts a whole-piece splitter.
type funcStage func(t *text, lo, hi int, out []int) []int

func (f funcStage) split(t *text, lo, hi int, out []int) []int { return f(t, lo, hi, out) }

// pretokenize runs the stages over cps and returns the piece lengths.
func pretokenize(stages []stage, cps []rune) []int {
	t := newText(cps)
	pieces := []int{len(cps)}
	if len(cps) == 0 {
		return nil
	}
	for _, st := range stages {
		next := make([]int, 0, len(pieces)*2)
		pos := 0
		for _, n := range pieces {
			next = st.split(t, pos, pos+n, next)
			pos += n
		}
		pieces = next
	}
	return pieces
}

// ---- reusable pieces of matchers (collapsed view unless named w*) ----

// run returns the end of the run of bytes satisfying p from i.
func run(t *text, i, hi int, p func(byte) bool) int {
	for i < hi && p(t.col[i]) {
		i++
	}
	return i
}

func wrun(t *text, i, hi int, p func(rune) bool) int {
	for i < hi && p(t.wide[i]) {
		i++
	}
	return i
}

// contraction matches (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]).
func contraction(t *text, i, hi int) int {
	if i+1 >= hi || t.col[i] != '\'' {
		return -1
	}
	switch t.col[i+1] | 0x20 {
	case 's', 't', 'm', 'd':
		return i + 2
	}
	if i+2 < hi {
		a, b := t.col[i+1]|0x20, t.col[i+2]|0x20
		if (a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l') {
			return i + 3
		}
	}
	return -1
}

// spaceTail matches the whitespace alternatives that end the Llama-3 family
// of regexes: \s*[\r\n]+ (when withNL), then \s+(?!\S), then \s+ (when
// withPlain).
func spaceTail(t *text, i, hi int, withNL, withPlain bool) int {
	e := run(t, i, hi, cSpace)
	if e == i {
		return -1
	}
	if withNL {
		// \s* backtracks to the last \r or \n of the run, [\r\n]+ takes it.
		for k := e - 1; k >= i; k-- {
			if c := t.col[k]; c == '\r' || c == '\n' {
				return k + 1
			}
		}
	}
	if e == hi { // (?!\S) holds at the end of the piece
		return e
	}
	if e-i >= 2 {
		return e - 1
	}
	if withPlain {
		return e
	}
	return -1
}

// optSpaceRun matches " ?X+" for a class X: the space is taken only when X
// follows it (otherwise the engine backtracks and ' ' must be X itself).
func optSpaceRun(t *text, i, hi int, x func(byte) bool) int {
	if t.col[i] == ' ' && i+1 < hi && x(t.col[i+1]) {
		return run(t, i+1, hi, x)
	}
	if x(t.col[i]) {
		return run(t, i, hi, x)
	}
	return -1
}

// optSpaceCharRun matches "\s?X+".
func optSpaceCharRun(t *text, i, hi int, x func(byte) bool) int {
	if cSpace(t.col[i]) && i+1 < hi && x(t.col[i+1]) {
		return run(t, i+1, hi, x)
	}
	if x(t.col[i]) {
		return run(t, i, hi, x)
	}
	return -1
}

// newlines extends e over [\r\n]* (and '/' when slash is set).
func newlines(t *text, e, hi int, slash bool) int {
	for e < hi {
		c := t.col[e]
		if c == '\r' || c == '\n' || (slash && c == '/') {
			e++
			continue
		}
		break
	}
	return e
}

// ---- the GPT-2 and Llama-3 custom splitters of llama.cpp ----

// gpt2Split is llama.cpp's unicode_regex_split_custom_gpt2 for
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
// using the full codepoint flags (not the collapsed view).
func gpt2Split(t *text, lo, hi int, out []int) []int {
	sp := &span{t: t, lo: lo, hi: hi, prev: lo, out: out}
	flags, add := sp.flags, sp.add
	for pos := lo; pos < hi; {
		if e := sp.contraction(pos, func(r rune) rune { return r }); e > 0 {
			pos += add(e)
			continue
		}
		var cut bool
		if pos, cut = sp.spaceRun(pos, func(f uint16) bool { return f&fLetter != 0 }); cut {
			continue
		}
		if pos, cut = sp.spaceRun(pos, func(f uint16) bool { return f&fNumber != 0 }); cut {
			continue
		}
		if pos, cut = sp.spaceRun(pos, func(f uint16) bool { return f&(fWhitespace|fLetter|fNumber) == 0 && f != 0 }); cut {
			continue
		}
		nws := 0
		for flags(pos+nws)&fWhitespace != 0 {
			nws++
		}
		pos = sp.spaces(pos, nws)
	}
	return sp.out
}

// llama3Split is llama.cpp's unicode_regex_split_custom_llama3 for
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func llama3Split(t *text, lo, hi int, out []int) []int {
	const oor = -1
	sp := &span{t: t, lo: lo, hi: hi, prev: lo, out: out}
	cpt, flags, add := sp.cpt, sp.flags, sp.add
	for pos := lo; pos < hi; {
		c := cpt(pos)
		f := flags(pos)
		if e := sp.contraction(pos, toLower); e > 0 {
			pos += add(e)
			continue
		}
		if !(c == '\r' || c == '\n' || f&fNumber != 0) {
			if f&fLetter != 0 || flags(pos+1)&fLetter != 0 {
				pos++
				for flags(pos)&fLetter != 0 {
					pos++
				}
				add(pos)
				continue
			}
		}
		if f&fNumber != 0 {
			ini := pos
			for flags(pos)&fNumber != 0 {
				pos++
				if pos-ini >= 3 {
					add(pos)
					ini = pos
				}
			}
			add(pos)
			continue
		}
		f2 := f
		if c == ' ' {
			f2 = flags(pos + 1)
		}
		// llama.cpp tests f (not f2) for "is a codepoint" here; kept as is.
		if f2&(fWhitespace|fLetter|fNumber) == 0 && f != 0 {
			if c == ' ' {
				pos++
			}
			for f2&(fWhitespace|fLetter|fNumber) == 0 && f2 != 0 {
				pos++
				f2 = flags(pos)
			}
			for c2 := cpt(pos); c2 == '\r' || c2 == '\n'; c2 = cpt(pos) {
				pos++
			}
			add(pos)
			continue
		}
		nws, lastNL := 0, 0
		for flags(pos+nws)&fWhitespace != 0 {
			if c2 := cpt(pos + nws); c2 == '\r' || c2 == '\n' {
				lastNL = pos + nws + 1
			}
			nws++
		}
		if lastNL > 0 {
			pos = lastNL
			add(pos)
			continue
		}
		pos = sp.spaces(pos, nws)
	}
	return sp.out
}

// span is a custom splitter's view of the codepoints lo..hi of t (outside
// them there is nothing: no codepoint, no flags) and the lengths of the
// pieces it has cut, the last ending at prev.
type span struct {
	t      *text
	lo, hi int
	prev   int
	out    []int
}

// cpt is codepoint i, or -1 outside the span.
func (s *span) cpt(i int) rune {
	if i < s.lo || i >= s.hi {
		return -1
	}
	return s.t.cps[i]
}

// flags are codepoint i's full flags, 0 outside the span.
func (s *span) flags(i int) uint16 {
	if i < s.lo || i >= s.hi {
		return 0
	}
	return cptFlags(s.t.cps[i])
}

// add cuts a piece from the previous cut to end (none when empty) and
// returns its length.
func (s *span) add(end int) int {
	n := end - s.prev
	if n > 0 {
		s.out = append(s.out, n)
	}
	s.prev = end
	return n
}

// spaceRun cuts ` ?X+` at pos, X the codepoints whose flags in accepts,
// when the codepoint at pos (or, after a space there, the next one) is
// one; it returns where the next piece starts and whether it cut.
func (s *span) spaceRun(pos int, in func(flags uint16) bool) (int, bool) {
	space := s.cpt(pos) == ' '
	f := s.flags(pos)
	if space {
		f = s.flags(pos + 1)
	}
	if !in(f) {
		return pos, false
	}
	if space {
		pos++
	}
	for in(s.flags(pos)) {
		pos++
	}
	s.add(pos)
	return pos, true
}

// spaces cuts the nws whitespace codepoints at pos as \s+(?!\S)|\s+
// does — all but the last when a codepoint follows them — or, with none,
// the one codepoint at pos; it returns where the next piece starts.
func (s *span) spaces(pos, nws int) int {
	switch {
	case nws > 1 && pos+nws < s.hi:
		pos += nws - 1
	case nws > 0:
		pos += nws
	default:
		pos++
	}
	s.add(pos)
	return pos
}

// contraction returns the end of 's, 't, 're, 've, 'm, 'll or 'd at pos
// (the letters compared after fold), or -1.
func (s *span) contraction(pos int, fold func(rune) rune) int {
	if s.cpt(pos) != '\'' || pos+1 >= s.hi {
		return -1
	}
	n := fold(s.cpt(pos + 1))
	if n == 's' || n == 't' || n == 'm' || n == 'd' {
		return pos + 2
	}
	if pos+2 < s.hi {
		nn := fold(s.cpt(pos + 2))
		if (n == 'r' && nn == 'e') || (n == 'v' && nn == 'e') || (n == 'l' && nn == 'l') {
			return pos + 3
		}
	}
	return -1
}

// ---- std::regex emulations (collapsed view) ----

// qwenMatch matches the Qwen2 regex
// (?:'[sS]|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// and, with marks, the Qwen3.5 variant that puts \p{M} with the letters
// ([\p{L}\p{M}]+ and [^\s\p{L}\p{M}\p{N}]). maxDigits is 1 for these; 3
// gives llama.cpp's other \p{N}{1,3} spellings run through std::regex.
func qwenMatch(marks bool, maxDigits int) func(t *text, i, hi int) int {
	word := cLetter
	if marks {
		word = func(c byte) bool { return cLetter(c) || cMark(c) }
	}
	other := func(c byte) bool { return !cSpace(c) && !word(c) && !cNumber(c) }
	return func(t *text, i, hi int) int {
		if e := contraction(t, i, hi); e >= 0 {
			return e
		}
		c := t.col[i]
		// [^\r\n\p{L}\p{N}]?WORD+ : with the prefix first, then without.
		if c != '\r' && c != '\n' && !cLetter(c) && !cNumber(c) && i+1 < hi && word(t.col[i+1]) {
			return run(t, i+1, hi, word)
		}
		if word(c) {
			return run(t, i, hi, word)
		}
		if cNumber(c) {
			e := i + 1
			for e < hi && e-i < maxDigits && cNumber(t.col[e]) {
				e++
			}
			return e
		}
		if e := optSpaceRun(t, i, hi, other); e >= 0 {
			return newlines(t, e, hi, false)
		}
		return spaceTail(t, i, hi, true, true)
	}
}

// tekkenMatch matches llama.cpp's rewrite of Mistral's Tekken regex:
// [^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|
// [^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|
// \p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
// In the collapsed view "letter but not a-z" is A-Z or any non-ASCII
// letter, and "letter but not A-Z" is a-z or any non-ASCII letter.
func tekkenMatch(t *text, i, hi int) int {
	up := func(c byte) bool { return cLetter(c) && !cLower(c) }
	lw := func(c byte) bool { return cLetter(c) && !cUpper(c) }
	c := t.col[i]
	s := i
	if c != '\r' && c != '\n' && !cLetter(c) && !cNumber(c) {
		s = i + 1 // the optional prefix; without it no letter alternative can match
	}
	if s < hi {
		// UP* LW+ : UP* greedy, then backtrack until LW+ can start.
		e := run(t, s, hi, up)
		for k := e; k >= s; k-- {
			if k < hi && lw(t.col[k]) {
				return run(t, k, hi, lw)
			}
		}
		// UP+ LW*
		if e > s {
			return run(t, e, hi, lw)
		}
	}
	if cNumber(c) {
		return i + 1
	}
	other := func(c byte) bool { return !cSpace(c) && !cLetter(c) && !cNumber(c) }
	if e := optSpaceRun(t, i, hi, other); e >= 0 {
		return newlines(t, e, hi, true)
	}
	return spaceTail(t, i, hi, true, true)
}

// deepseek3Match matches the last DeepSeek-V3 regex:
// [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|
// ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func deepseek3Match(t *text, i, hi int) int {
	ascii := func(c byte) bool { return cUpper(c) || cLower(c) }
	c := t.col[i]
	if c >= 0x21 && c <= 0x7e && !ascii(c) && !(c >= '0' && c <= '9') && i+1 < hi && ascii(t.col[i+1]) {
		return run(t, i+1, hi, ascii)
	}
	lm := func(c byte) bool { return cLetter(c) || cMark(c) }
	if c != '\r' && c != '\n' && !cLetter(c) && !cPunct(c) && !cSymbol(c) && i+1 < hi && lm(t.col[i+1]) {
		return run(t, i+1, hi, lm)
	}
	if lm(c) {
		return run(t, i, hi, lm)
	}
	ps := func(c byte) bool { return cPunct(c) || cSymbol(c) }
	if e := optSpaceRun(t, i, hi, ps); e >= 0 {
		return newlines(t, e, hi, false)
	}
	return spaceTail(t, i, hi, true, true)
}

// classRun matches X+ (or a single X when one is set) for a collapsed class.
func classRun(x func(byte) bool, one bool) func(t *text, i, hi int) int {
	return func(t *text, i, hi int) int {
		if !x(t.col[i]) {
			return -1
		}
		if one {
			return i + 1
		}
		return run(t, i, hi, x)
	}
}

// numberUpTo matches \p{N}{1,n}.
func numberUpTo(n int) func(t *text, i, hi int) int {
	return func(t *text, i, hi int) int {
		e := i
		for e < hi && e-i < n && cNumber(t.col[e]) {
			e++
		}
		if e == i {
			return -1
		}
		return e
	}
}

// ---- std::wregex emulations (wide view) ----

// runeRanges is a bracket expression of codepoint ranges.
type runeRanges [][2]rune

func (r runeRanges) has(c rune) bool {
	for _, x := range r {
		if c >= x[0] && c <= x[1] {
			return true
		}
	}
	return false
}

// parseRanges reads a bracket body such as "A-Za-z\u00b5" into ranges. The
// classes below are llama.cpp's literal class text with every non-ASCII
// character escaped: the source holds lookalikes (U+212A KELVIN SIGN,
// U+2126 OHM SIGN) that tools silently normalize to K and Ω.
func parseRanges(s string) runeRanges {
	rs := []rune(s)
	var out runeRanges
	for i := 0; i < len(rs); i++ {
		if i+2 < len(rs) && rs[i+1] == '-' {
			out = append(out, [2]rune{rs[i], rs[i+2]})
			i += 2
			continue
		}
		out = append(out, [2]rune{rs[i], rs[i]})
	}
	return out
}

// wideRun matches [class]+ (or one char of it) on the wide view.
func wideRun(r runeRanges, one bool) func(t *text, i, hi int) int {
	return func(t *text, i, hi int) int {
		if !r.has(t.wide[i]) {
			return -1
		}
		if one {
			return i + 1
		}
		return wrun(t, i, hi, r.has)
	}
}

// wideOptSpaceRun matches \s?[class]+ on the wide view.
func wideOptSpaceRun(r runeRanges) func(t *text, i, hi int) int {
	return func(t *text, i, hi int) int {
		if wSpace(t.wide[i]) && i+1 < hi && r.has(t.wide[i+1]) {
			return wrun(t, i+1, hi, r.has)
		}
		if r.has(t.wide[i]) {
			return wrun(t, i, hi, r.has)
		}
		return -1
	}
}

// trailingSpace splits off \s+$: the whitespace that ends the piece.
func trailingSpace(t *text, lo, hi int, out []int) []int {
	s := hi
	for s > lo && wSpace(t.wide[s-1]) {
		s--
	}
	if s > lo {
		out = append(out, s-lo)
	}
	if hi > s {
		out = append(out, hi-s)
	}
	return out
}

// threeDigits matches [0-9][0-9][0-9].
func threeDigits(t *text, i, hi int) int {
	if i+3 <= hi {
		for k := i; k < i+3; k++ {
			if t.wide[k] < '0' || t.wide[k] > '9' {
				return -1
			}
		}
		return i + 3
	}
	return -1
}

// bloomMatch matches " ?[^(\s|.,!?…。，、।۔،)]+".
func bloomMatch(t *text, i, hi int) int {
	excl := func(c rune) bool {
		switch c {
		case '(', '|', '.', ',', '!', '?', '…', '。', '，', '、', '।', '۔', '،', ')':
			return true
		}
		return wSpace(c)
	}
	in := func(c rune) bool { return !excl(c) }
	if t.wide[i] == ' ' && i+1 < hi && in(t.wide[i+1]) {
		return wrun(t, i+1, hi, in)
	}
	if in(t.wide[i]) {
		return wrun(t, i, hi, in)
	}
	return -1
}

// prefix returns the end of the ASCII text p at i, or -1 where it is not
// there.
func prefix(t *text, i, hi int, p string) int {
	if i+len(p) > hi {
		return -1
	}
	for k := 0; k < len(p); k++ {
		if t.wide[i+k] != rune(p[k]) {
			return -1
		}
	}
	return i + len(p)
}

// chameleon's regexes besides the shared ones.
func chameleonSentinel(t *text, i, hi int) int { // <sentinel:[0-9]+>
	j := prefix(t, i, hi, "<sentinel:")
	if j < 0 {
		return -1
	}
	e := wrun(t, j, hi, func(c rune) bool { return c >= '0' && c <= '9' })
	if e == j || e >= hi || t.wide[e] != '>' {
		return -1
	}
	return e + 1
}

func chameleonImage(t *text, i, hi int) int { // (IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z
	j := prefix(t, i, hi, "IMGIMG")
	if j < 0 {
		return -1
	}
	e := j
	for e < hi && e-j < 4 && t.wide[e] >= 'A' && t.wide[e] <= 'I' {
		e++
	}
	// {1,4} backtracks, but a letter A-I is never 'Z', so only e can work.
	if e == j || e >= hi || t.wide[e] != 'Z' {
		return -1
	}
	return e + 1
}

func chameleonSpaces(t *text, i, hi int) int { // ([\t\n]|    |  )
	c := t.wide[i]
	if c == '\t' || c == '\n' {
		return i + 1
	}
	n := 0
	for i+n < hi && n < 4 && t.wide[i+n] == ' ' {
		n++
	}
	switch {
	case n == 4:
		return i + 4
	case n >= 2:
		return i + 2
	}
	return -1
}

// ---- pre-tokenizer table ----

// preType is one value of tokenizer.ggml.pre for byte-level BPE.
type preType struct {
	stages       []stage
	ignoreMerges bool // a word that is a whole token skips the merges
	cleanSpaces  bool // detokenize removes spaces before punctuation
}

var (
	stGPT2   stage = funcStage(gpt2Split)
	stLlama3 stage = funcStage(llama3Split)
	stNumOne       = regexStage{classRun(cNumber, true)}
	stNumAll       = regexStage{classRun(cNumber, false)}
	stDigit3       = regexStage{threeDigits}
	stCRLF         = regexStage{wideRun(parseRanges("\r\n"), true)}
	stCJK          = regexStage{wideRun(parseRanges("\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff"), false)}
	// [\p{P}\$\+<=>\^~\|]+
	stPunctDefault = regexStage{classRun(func(c byte) bool {
		return cPunct(c) || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' || c == '~' || c == '|'
	}, false)}
	// [\p{P}\$\+<=>\^~\|`]+ (falcon; current llama.cpp added the backtick)
	stPunctFalcon = regexStage{classRun(func(c byte) bool {
		return cPunct(c) || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' || c == '~' || c == '|' || c == '`'
	}, false)}
	stQwen2  = regexStage{qwenMatch(false, 1)}
	stQwen35 = regexStage{qwenMatch(true, 1)}
	stBloom  = regexStage{bloomMatch}
	stDSLLM  = []stage{
		stCRLF,
		regexStage{wideOptSpaceRun(parseRanges("A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943"))},
		regexStage{wideOptSpaceRun(parseRanges("!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002"))},
		funcStage(trailingSpace),
		stCJK,
		stNumAll,
	}
)

// preTypes maps tokenizer.ggml.pre to llama.cpp's pre-tokenizer
// (llm_tokenizer_bpe and the pre_type switch of llama_vocab::impl::load).
// Its names are format/vocab's PreTokenizers, which also holds each one's
// BOS default; a test keeps the two lists equal.
var preTypes = map[string]preType{}

func init() {
	def := preType{stages: []stage{stPunctDefault, stGPT2, stNumAll, stDigit3}, cleanSpaces: true}
	llama3 := preType{stages: []stage{stLlama3}, ignoreMerges: true, cleanSpaces: true}
	gpt2 := preType{stages: []stage{stGPT2}, cleanSpaces: true}
	starcoder := preType{stages: []stage{stNumOne, stGPT2}, cleanSpaces: true}
	qwen2 := preType{stages: []stage{stQwen2}}
	set := func(p preType, names ...string) {
		for _, n := range names {
			preTypes[n] = p
		}
	}
	set(def, "default")
	set(llama3, "llama3", "llama-v3", "llama-bpe", "falcon3")
	set(preType{stages: stDSLLM}, "deepseek-llm")
	set(preType{stages: []stage{stCRLF, regexStage{func(t *text, i, hi int) int { return optSpaceCharRun(t, i, hi, cLetter) }},
		regexStage{func(t *text, i, hi int) int { return optSpaceCharRun(t, i, hi, cPunct) }}, stCJK, stNumOne}}, "deepseek-coder")
	set(preType{stages: []stage{regexStage{numberUpTo(3)}, regexStage{wideRun(parseRanges("\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff"), false)}, regexStage{deepseek3Match}}}, "deepseek-v3")
	set(preType{stages: []stage{stPunctFalcon, stGPT2, stDigit3}, cleanSpaces: true}, "falcon")
	set(gpt2, "mpt", "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v1-en", "jina-v2-es", "jina-v2-de", "jina-v2-code", "roberta-bpe", "olmo", "jais")
	set(starcoder, "starcoder", "refact", "codeshell", "exaone", "minerva-7b")
	set(preType{stages: starcoder.stages}, "command-r", "smollm")
	set(qwen2, "qwen2", "deepseek-r1-qwen", "megrez")
	set(preType{stages: []stage{stQwen2}, cleanSpaces: true}, "stablelm2")
	set(preType{stages: []stage{stQwen35}}, "qwen35")
	// dbrx and smaug use the Llama-3 regex but none of its flags.
	set(preType{stages: []stage{stLlama3}, cleanSpaces: true}, "dbrx", "smaug-bpe")
	set(preType{stages: []stage{stBloom}}, "poro-chat")
	set(preType{stages: []stage{stBloom}, cleanSpaces: true}, "bloom", "gpt3-finnish")
	set(preType{stages: []stage{stLlama3}, cleanSpaces: true}, "chatglm-bpe")
	set(preType{stages: []stage{stBloom, stNumOne}}, "viking")
	set(preType{stages: []stage{regexStage{tekkenMatch}}, ignoreMerges: true}, "tekken")
	set(preType{stages: []stage{
		regexStage{chameleonSentinel}, regexStage{chameleonImage}, regexStage{chameleonSpaces}, stNumOne,
		// [\p{P}!-/:-@\[-`{-~]
		regexStage{classRun(func(c byte) bool {
			return cPunct(c) || (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') || (c >= '{' && c <= '~')
		}, true)},
		stGPT2,
	}}, "chameleon")
}
