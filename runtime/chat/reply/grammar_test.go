package reply

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// The tests below sample texts from CallGrammar's grammars with a small
// GBNF reader and generator (enough of GBNF for these grammars: literals,
// classes, rule references, groups, ?, * and +) and require Parse to read
// each sample as exactly the calls the grammar allows.

type gNode struct {
	kind   byte // 'l' literal, 'c' class, 'r' rule, 'g' group (alternatives)
	lit    string
	neg    bool
	ranges [][2]rune
	rule   string
	alts   [][]*gNode
	rep    byte // 0, '?', '*', '+'
}

type gbnf map[string][][]*gNode

func parseGBNF(t *testing.T, src string) gbnf {
	t.Helper()
	g := gbnf{}
	for _, line := range strings.Split(src, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		name, body, ok := strings.Cut(line, " ::= ")
		if !ok {
			t.Fatalf("bad rule line %q", line)
		}
		if _, dup := g[name]; dup {
			t.Fatalf("rule %s defined twice", name)
		}
		p := &gReader{s: body}
		alts := p.alts(t)
		if strings.TrimSpace(p.s) != "" {
			t.Fatalf("rule %s: trailing %q", name, p.s)
		}
		g[name] = alts
	}
	return g
}

type gReader struct{ s string }

func (p *gReader) ws() { p.s = strings.TrimLeft(p.s, " ") }

func (p *gReader) alts(t *testing.T) [][]*gNode {
	var alts [][]*gNode
	for {
		var seq []*gNode
		for {
			p.ws()
			if p.s == "" || p.s[0] == '|' || p.s[0] == ')' {
				break
			}
			seq = append(seq, p.item(t))
		}
		alts = append(alts, seq)
		if strings.HasPrefix(p.s, "|") {
			p.s = p.s[1:]
			continue
		}
		return alts
	}
}

func (p *gReader) item(t *testing.T) *gNode {
	var n *gNode
	switch c := p.s[0]; {
	case c == '"':
		var b strings.Builder
		i := 1
		for ; p.s[i] != '"'; i++ {
			if p.s[i] == '\\' {
				i++
				switch p.s[i] {
				case 'n':
					b.WriteByte('\n')
				case 't':
					b.WriteByte('\t')
				case 'r':
					b.WriteByte('\r')
				case 'x':
					v, err := strconv.ParseUint(p.s[i+1:i+3], 16, 8)
					if err != nil {
						t.Fatal(err)
					}
					b.WriteByte(byte(v))
					i += 2
				default:
					b.WriteByte(p.s[i])
				}
				continue
			}
			b.WriteByte(p.s[i])
		}
		n = &gNode{kind: 'l', lit: b.String()}
		p.s = p.s[i+1:]
	case c == '[':
		n = &gNode{kind: 'c'}
		i := 1
		if p.s[i] == '^' {
			n.neg = true
			i++
		}
		var rs []rune
		for ; p.s[i] != ']'; i++ {
			r := rune(p.s[i])
			if r == '\\' {
				i++
				switch p.s[i] {
				case 'n':
					r = '\n'
				case 't':
					r = '\t'
				default:
					r = rune(p.s[i])
				}
			} else if r == '-' && len(rs) > 0 && p.s[i+1] != ']' {
				i++
				n.ranges = append(n.ranges, [2]rune{rs[len(rs)-1], rune(p.s[i])})
				rs = rs[:len(rs)-1]
				continue
			}
			rs = append(rs, r)
		}
		for _, r := range rs {
			n.ranges = append(n.ranges, [2]rune{r, r})
		}
		p.s = p.s[i+1:]
	case c == '(':
		p.s = p.s[1:]
		n = &gNode{kind: 'g', alts: p.alts(t)}
		if !strings.HasPrefix(p.s, ")") {
			t.Fatalf("unclosed group at %q", p.s)
		}
		p.s = p.s[1:]
	default:
		i := 0
		for i < len(p.s) && (isAlnum(p.s[i]) || p.s[i] == '-') {
			i++
		}
		if i == 0 {
			t.Fatalf("unexpected %q", p.s)
		}
		n = &gNode{kind: 'r', rule: p.s[:i]}
		p.s = p.s[i:]
	}
	if p.s != "" && strings.IndexByte("?*+", p.s[0]) >= 0 {
		n.rep = p.s[0]
		p.s = p.s[1:]
	}
	return n
}

func (c *gNode) matches(r rune) bool {
	in := false
	for _, rg := range c.ranges {
		if r >= rg[0] && r <= rg[1] {
			in = true
		}
	}
	return in != c.neg
}

// sampler expands a grammar at random; past a depth it takes each rule's
// shortest alternative so that every expansion ends.
type sampler struct {
	g     gbnf
	rng   *rand.Rand
	short map[string]int // shortest expansion of each rule, in nodes
}

func newSampler(t *testing.T, g gbnf, seed uint64) *sampler {
	s := &sampler{g: g, rng: rand.New(rand.NewPCG(seed, 1)), short: map[string]int{}}
	for name, alts := range g {
		for _, a := range alts {
			for _, n := range a {
				s.check(t, name, n)
			}
		}
	}
	// Fixpoint of the shortest expansion lengths.
	const inf = 1 << 30
	for name := range g {
		s.short[name] = inf
	}
	for changed := true; changed; {
		changed = false
		for name, alts := range g {
			if m := s.altsLen(alts); m < s.short[name] {
				s.short[name] = m
				changed = true
			}
		}
	}
	for name, m := range s.short {
		if m >= inf {
			t.Fatalf("rule %s never ends", name)
		}
	}
	return s
}

func (s *sampler) check(t *testing.T, in string, n *gNode) {
	switch n.kind {
	case 'r':
		if _, ok := s.g[n.rule]; !ok {
			t.Fatalf("rule %s uses undefined rule %s", in, n.rule)
		}
	case 'g':
		for _, a := range n.alts {
			for _, m := range a {
				s.check(t, in, m)
			}
		}
	}
}

func (s *sampler) altsLen(alts [][]*gNode) int {
	best := 1 << 30
	for _, a := range alts {
		best = min(best, s.seqLen(a))
	}
	return best
}

func (s *sampler) seqLen(seq []*gNode) int {
	total := 0
	for _, n := range seq {
		if n.rep == '?' || n.rep == '*' {
			continue
		}
		switch n.kind {
		case 'r':
			total += s.short[n.rule]
		case 'g':
			total += s.altsLen(n.alts)
		default:
			total++
		}
		if total > 1<<30 {
			return 1 << 30
		}
	}
	return total + 1
}

func (s *sampler) gen(b *strings.Builder, rule string, depth int) {
	s.genAlts(b, s.g[rule], depth)
}

func (s *sampler) genAlts(b *strings.Builder, alts [][]*gNode, depth int) {
	pick := alts[s.rng.IntN(len(alts))]
	if depth > 40 {
		for _, a := range alts {
			if s.seqLen(a) < s.seqLen(pick) {
				pick = a
			}
		}
	}
	for _, n := range pick {
		reps := 1
		switch n.rep {
		case '?':
			reps = s.rng.IntN(2)
		case '*':
			reps = s.rng.IntN(3)
		case '+':
			reps = 1 + s.rng.IntN(2)
		}
		if depth > 40 && n.rep != 0 && n.rep != '+' {
			reps = 0
		}
		for range reps {
			switch n.kind {
			case 'l':
				b.WriteString(n.lit)
			case 'c':
				cands := []rune("ab Z9_-.:,{}\"\n<>/|[]éx")
				for {
					r := cands[s.rng.IntN(len(cands))]
					if n.neg || s.rng.IntN(2) == 0 {
						if n.matches(r) {
							b.WriteRune(r)
							break
						}
						continue
					}
					rg := n.ranges[s.rng.IntN(len(n.ranges))]
					b.WriteRune(rg[0] + rune(s.rng.IntN(int(rg[1]-rg[0])+1)))
					break
				}
			case 'r':
				s.gen(b, n.rule, depth+1)
			case 'g':
				s.genAlts(b, n.alts, depth+1)
			}
		}
	}
}

// testTools are two tools with argument grammars a JSON Schema compiler
// could have written: special_function takes {"arg1": integer}, and
// set_text takes {"text": string} whose strings may hold markers.
func testTools() []ArgGrammar {
	return []ArgGrammar{
		{Tool: "special_function", Rule: ArgRule(0), GBNF: ArgRule(0) + ` ::= "{" "\"arg1\": " ` + ArgRule(0) + `-int "}"` + "\n" +
			ArgRule(0) + `-int ::= "-"? [1-9] [0-9]*`},
		{Tool: "set_text", Rule: ArgRule(1), GBNF: ArgRule(1) + ` ::= "{\"text\": \"" ` + ArgRule(1) + `-char* "\"}"` + "\n" +
			ArgRule(1) + `-char ::= [^"\\\n] | "\\" ["\\n]`},
	}
}

func grammarFormats(t *testing.T) map[string]Format {
	tm := familyTemplates(t)
	return map[string]Format{
		"qwen2.5":    Detect(tm["Qwen-Qwen2.5-7B-Instruct.jinja"]),
		"qwen3":      Detect(tm["Qwen-Qwen3-0.6B.jinja"]),
		"qwen3-open": Detect(tm["Qwen-Qwen3-0.6B.jinja"]).AfterPrompt("<think>\n"),
		"llama3.1":   Detect(tm["meta-llama-Llama-3.1-8B-Instruct.jinja"]),
		"nemo":       Detect("[TOOL_CALLS]"),
		"small3.2":   Detect(tm["Mistral-Small-3.2-24B-Instruct-2506.jinja"]),
		"ministral3": Detect(tm["mistralai-Ministral-3-14B-Reasoning-2512.jinja"]),
		"gpt-oss":    Detect(tm["openai-gpt-oss-120b.jinja"]),
		"gemma4":     Detect(tm["google-gemma-4-31B-it.jinja"]),
	}
}

func TestCallGrammarSamplesParse(t *testing.T) {
	tools := testTools()
	for name, f := range grammarFormats(t) {
		for _, choice := range []string{"required", "set_text"} {
			for _, parallel := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/%v", name, choice, parallel), func(t *testing.T) {
					src, err := f.CallGrammar(tools, choice, parallel)
					if err != nil {
						t.Fatal(err)
					}
					g := parseGBNF(t, src)
					if _, ok := g["root"]; !ok {
						t.Fatal("no root rule")
					}
					s := newSampler(t, g, 1)
					maxCalls := 0
					for i := range 300 {
						var b strings.Builder
						s.gen(&b, "root", 0)
						text := b.String()
						p := f.Parse(text)
						if p.Content != "" || len(p.ToolCalls) == 0 {
							t.Fatalf("sample %d %q parsed as %+v", i, text, p)
						}
						if !parallel && len(p.ToolCalls) != 1 {
							t.Fatalf("sample %d %q: %d calls without parallel", i, text, len(p.ToolCalls))
						}
						maxCalls = max(maxCalls, len(p.ToolCalls))
						for _, c := range p.ToolCalls {
							if choice != "required" && c.Name != choice || c.Name != "special_function" && c.Name != "set_text" {
								t.Fatalf("sample %d %q: call to %q", i, text, c.Name)
							}
							if !sameJSON(c.Arguments, c.Arguments) {
								t.Fatalf("sample %d %q: arguments %q are not JSON", i, text, c.Arguments)
							}
						}
					}
					if parallel && f.Kind != Llama3 && f.Kind != Harmony && maxCalls < 2 {
						t.Error("parallel grammar never sampled two calls")
					}
				})
			}
		}
	}
}

func TestCallGrammarErrors(t *testing.T) {
	tm := familyTemplates(t)
	tools := testTools()
	cases := []struct {
		f      Format
		tools  []ArgGrammar
		choice string
	}{
		{Format{Kind: Hermes}, tools, "auto"},
		{Format{Kind: Hermes}, tools, "missing"},
		{Format{Kind: Hermes}, nil, "required"},
		{Format{Kind: Hermes}, []ArgGrammar{{Tool: "f"}}, "required"},
		{Format{Kind: Plain}, tools, "required"},
		{Detect(tm["Qwen3.5-4B.jinja"]), tools, "required"},
	}
	for i, c := range cases {
		if _, err := c.f.CallGrammar(c.tools, c.choice, false); err == nil {
			t.Errorf("case %d: no error", i)
		}
	}
}

// TestWriteUntil checks the reasoning-body rules against a direct test
// of "no earlier end": every sample ends with the end marker and holds
// it nowhere before.
func TestWriteUntil(t *testing.T) {
	for _, end := range []string{"</think>", "<|end|>", "aab", "[/THINK]"} {
		var b strings.Builder
		writeUntil(&b, "u", end)
		g := parseGBNF(t, b.String())
		s := newSampler(t, g, 2)
		for range 200 {
			var o strings.Builder
			s.gen(&o, "u", 0)
			text := o.String()
			if !strings.HasSuffix(text, end) || strings.Index(text, end) != len(text)-len(end) {
				t.Fatalf("%q: sample %q", end, text)
			}
		}
	}
}
