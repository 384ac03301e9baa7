package grammar

import (
	"context"
	"math/rand"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/zrtdev/zrt/runtime/tokenizer"
)

var _ Vocab = (*tokenizer.Tokenizer)(nil)

// bruteMask is the mask by definition: every token walked from the
// matcher's state on its own.
func bruteMask(mt *Matcher, allowed []uint64) {
	vt := mt.g.vt
	clear(allowed)
	if mt.complete() {
		for _, id := range vt.eog {
			allowed[id>>6] |= 1 << (id & 63)
		}
	}
	for id, b := range vt.pieces {
		if len(b) == 0 {
			continue
		}
		if st := mt.m.walk(mt.st, b); st != dead {
			allowed[id>>6] |= 1 << (id & 63)
		}
	}
	mt.st = mt.m.rebase(mt.st)
}

// TestMaskMatchesBruteForce: the trie walk with cached positions allows
// exactly the tokens that walking each token alone allows, along random
// runs of several grammars over the Qwen vocabulary.
func TestMaskMatchesBruteForce(t *testing.T) {
	tok, comp := qwen(t)
	specs := []Spec{{JSONObject: true}, {Regex: `[a-z]{1,8}( [0-9]+)?\.`}, {GBNF: `root ::= "<tool_call>\n" [^<]{0,12} "\n</tool_call>"`}}
	for _, f := range []string{"01_person.json", "05_refs_recursive.json", "08_pattern.json", "12_open_object.json"} {
		raw, err := os.ReadFile("testdata/schemas/" + f)
		if err != nil {
			t.Fatal(err)
		}
		specs = append(specs, Spec{JSONSchema: raw})
	}
	n := tok.NVocab()
	fast, slow := make([]uint64, (n+63)/64), make([]uint64, (n+63)/64)
	for si, s := range specs {
		g, err := comp.Compile(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		m := g.NewMatcher()
		rng := rand.New(rand.NewSource(int64(si)))
		punct := punctTokens(g)
		for step := 0; step < 25 && !m.Done(); step++ {
			m.Mask(fast)
			bruteMask(m, slow)
			var allowed, pun []int32
			for id := 0; id < n; id++ {
				f, b := fast[id/64]&(1<<(id%64)) != 0, slow[id/64]&(1<<(id%64)) != 0
				if f != b {
					t.Fatalf("spec %d step %d: token %d %q: mask %v, brute force %v", si, step, id, tok.Piece(int32(id)), f, b)
				}
				if f && !tok.IsEOG(int32(id)) {
					allowed = append(allowed, int32(id))
					if punct[id] {
						pun = append(pun, int32(id))
					}
				}
			}
			if len(allowed) == 0 {
				break
			}
			if len(pun) > 0 && rng.Intn(2) == 0 {
				allowed = pun
			}
			if err := m.Accept(allowed[rng.Intn(len(allowed))]); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestConcurrentMatchers: matchers of one grammar run in parallel while
// the position caches fill.
func TestConcurrentMatchers(t *testing.T) {
	g, err := NewCompiler(fuzzVocab, Limits{}).Compile(context.Background(), Spec{JSONObject: true})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := g.NewMatcher()
			for _, s := range []string{`{"`, "abc", `":`, "true", `,"`, "\xc3\xa9", `":`, "null", "}"} {
				m.Mask(make([]uint64, (fuzzVocab.NVocab()+63)/64))
				if err := m.AcceptBytes([]byte(s)); err != nil {
					t.Error(err)
					return
				}
			}
			if !m.Done() {
				t.Error("not done")
			}
		}()
	}
	wg.Wait()
}

// TestReleasedMachine: a matcher on a machine released by earlier
// matchers (with their memoized states) gives the same masks as one on a
// fresh machine along random runs; a released matcher is finished.
func TestReleasedMachine(t *testing.T) {
	tok, comp := qwen(t)
	n := tok.NVocab()
	pooled, fresh := make([]uint64, (n+63)/64), make([]uint64, (n+63)/64)
	for _, f := range []string{"01_person.json", "05_refs_recursive.json", "10_openai_tool.json"} {
		raw, err := os.ReadFile("testdata/schemas/" + f)
		if err != nil {
			t.Fatal(err)
		}
		g, err := comp.Compile(context.Background(), Spec{JSONSchema: raw})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[*machine]bool{}
		reused := 0
		for seed := range int64(8) {
			m := g.NewMatcher()
			if seen[m.m] {
				reused++
			}
			seen[m.m] = true
			ref := &Matcher{g: g, m: newMachine(g), eog: g.vt.isEOG}
			ref.st = ref.m.start()
			rng := rand.New(rand.NewSource(seed))
			for step := 0; step < 60 && !m.Done(); step++ {
				m.Mask(pooled)
				ref.Mask(fresh)
				var allowed []int32
				for id := 0; id < n; id++ {
					p, q := pooled[id/64]&(1<<(id%64)) != 0, fresh[id/64]&(1<<(id%64)) != 0
					if p != q {
						t.Fatalf("%s seed %d step %d: token %d %q: released machine %v, fresh %v", f, seed, step, id, tok.Piece(int32(id)), p, q)
					}
					if p && !tok.IsEOG(int32(id)) {
						allowed = append(allowed, int32(id))
					}
				}
				if len(allowed) == 0 {
					break
				}
				pick := allowed[rng.Intn(len(allowed))]
				if err, want := m.Accept(pick), ref.Accept(pick); (err == nil) != (want == nil) || m.Done() != ref.Done() {
					t.Fatalf("%s seed %d step %d: accept %v, fresh %v", f, seed, step, err, want)
				}
			}
			m.Release()
			m.Mask(pooled)
			if slices.ContainsFunc(pooled, func(w uint64) bool { return w != 0 }) || !m.Done() || m.Accept(220) == nil {
				t.Fatalf("%s seed %d: a released matcher is not finished", f, seed)
			}
		}
		if reused == 0 {
			t.Errorf("%s: no matcher took a released machine", f)
		}
	}
}

// TestEndsMatchesBruteForce: after a Mask, Ends names exactly the allowed
// tokens whose walk from the matcher's state leaves it Done, both from
// what the Mask found and, after anything invalidates that, by walking;
// along random runs that reach the ends of their grammars.
func TestEndsMatchesBruteForce(t *testing.T) {
	tok, comp := qwen(t)
	specs := []Spec{{Regex: `[a-z]{1,8}( [0-9]+)?\.`}, {GBNF: `root ::= "<tool_call>\n" [^<]{0,12} "\n</tool_call>"`}, {GBNF: `root ::= "a" | "ab" "c"?`}}
	raw, err := os.ReadFile("testdata/schemas/02_enum_const.json")
	if err != nil {
		t.Fatal(err)
	}
	specs = append(specs, Spec{JSONSchema: raw})
	n := tok.NVocab()
	mask := make([]uint64, (n+63)/64)
	seen := 0
	for si, s := range specs {
		g, err := comp.Compile(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		for run := range 3 {
			m := g.NewMatcher()
			rng := rand.New(rand.NewSource(int64(10*si + run)))
			punct := punctTokens(g)
			for step := 0; step < 60 && !m.Done(); step++ {
				m.Mask(mask)
				var allowed, pun []int32
				for id := 0; id < n; id++ {
					if mask[id/64]&(1<<(id%64)) == 0 || tok.IsEOG(int32(id)) {
						continue
					}
					allowed = append(allowed, int32(id))
					if punct[id] {
						pun = append(pun, int32(id))
					}
					ns := m.m.walk(m.st, g.vt.pieces[id])
					want := ns >= 0 && m.m.states[ns].complete && len(m.m.states[ns].stacks) == 0
					if got := m.Ends(int32(id)); got != want {
						t.Fatalf("spec %d run %d step %d: token %d %q: Ends %v after the Mask, the walk says %v", si, run, step, id, tok.Piece(int32(id)), got, want)
					}
					if want {
						seen++
					}
				}
				for _, id := range tok.EOGTokens() {
					if m.Ends(id) != m.Complete() {
						t.Fatalf("spec %d step %d: Ends(EOG %d) = %v, Complete %v", si, step, id, m.Ends(id), m.Complete())
					}
				}
				if len(allowed) == 0 {
					break
				}
				if len(pun) > 0 && rng.Intn(4) != 0 {
					allowed = pun
				}
				pick := allowed[rng.Intn(len(allowed))]
				endsBefore := m.Ends(pick)
				m.endsOK = false // as after an Accept: Ends walks
				if m.Ends(pick) != endsBefore {
					t.Fatalf("spec %d step %d: token %d: Ends by walking %v, from the Mask %v", si, step, pick, !endsBefore, endsBefore)
				}
				if err := m.Accept(pick); err != nil {
					t.Fatal(err)
				}
				if m.Done() != endsBefore {
					t.Fatalf("spec %d step %d: token %d: Done %v after Accept, Ends said %v", si, step, pick, m.Done(), endsBefore)
				}
				if m.Ends(pick) && m.Done() {
					t.Fatalf("spec %d step %d: Ends true after the match is done", si, step)
				}
			}
		}
	}
	if seen == 0 {
		t.Fatal("no run reached a token that ends its grammar: the test checks nothing")
	}
	t.Logf("%d (step, token) pairs that end their grammar", seen)
}
