package grammar

import (
	"context"
	"fmt"
	"math/rand"
	"strconv"
	"testing"
)

// accepts says whether a grammar matches s completely.
func accepts(g *Grammar, s string) bool {
	m := g.NewMatcher()
	return m.AcceptBytes([]byte(s)) == nil && m.Complete()
}

// TestIntegerRanges: an integer schema's grammar matches exactly the
// integers in its bounds, written canonically, for random bounds.
func TestIntegerRanges(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	comp := NewCompiler(fuzzVocab, Limits{})
	for i := 0; i < 40; i++ {
		lo := rng.Intn(3000) - 1500
		hi := lo + rng.Intn(2500)
		kw := []string{"minimum", "exclusiveMinimum"}[rng.Intn(2)]
		kwHi := []string{"maximum", "exclusiveMaximum"}[rng.Intn(2)]
		schema := fmt.Sprintf(`{"type":"integer","%s":%d,"%s":%d}`, kw, lo, kwHi, hi)
		g, err := comp.Compile(context.Background(), Spec{JSONSchema: []byte(schema)})
		if err != nil {
			t.Fatalf("%s: %v", schema, err)
		}
		a, b := lo, hi
		if kw == "exclusiveMinimum" {
			a++
		}
		if kwHi == "exclusiveMaximum" {
			b--
		}
		for v := -1700; v <= 4200; v++ {
			if got, want := accepts(g, strconv.Itoa(v)), v >= a && v <= b; got != want {
				t.Fatalf("%s: %d accepted=%v", schema, v, got)
			}
		}
		for _, bad := range []string{"-0", "00", "01", "+1", "1.0", ""} {
			if accepts(g, bad) {
				t.Fatalf("%s: accepts %q", schema, bad)
			}
		}
	}
	// One-sided and fractional bounds.
	g, err := comp.Compile(context.Background(), Spec{JSONSchema: []byte(`{"type":"integer","minimum":-2.5}`)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		s  string
		ok bool
	}{{"-3", false}, {"-2", true}, {"0", true}, {"123456789012345678901234567890", true}} {
		if accepts(g, c.s) != c.ok {
			t.Errorf("minimum -2.5: %q accepted=%v", c.s, !c.ok)
		}
	}
}

// TestNumberBounds: a bounded number's grammar writes only values in the
// bounds.
func TestNumberBounds(t *testing.T) {
	g, err := NewCompiler(fuzzVocab, Limits{}).Compile(context.Background(), Spec{JSONSchema: []byte(`{"type":"number","exclusiveMinimum":-2,"maximum":3.5}`)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		s  string
		ok bool
	}{{"-2", false}, {"-1.99", true}, {"-1", true}, {"-0.5", true}, {"0", true}, {"2.999", true}, {"3", true}, {"3.1", false}, {"4", false}, {"-2.5", false}, {"1e2", false}} {
		if accepts(g, c.s) != c.ok {
			t.Errorf("(-2, 3.5]: %q accepted=%v", c.s, !c.ok)
		}
		if c.ok {
			v, _ := strconv.ParseFloat(c.s, 64)
			if v <= -2 || v > 3.5 {
				t.Errorf("test case %q is out of bounds", c.s)
			}
		}
	}
}
