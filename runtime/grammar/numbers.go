package grammar

import (
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// bound reads a numeric keyword as an exact rational.
func (g *schemaGen) bound(o *jobj, path, k string) (*big.Rat, bool, error) {
	v, ok := o.get(k)
	if !ok {
		return nil, false, nil
	}
	n, ok := v.(json.Number)
	if !ok {
		return nil, false, g.errf(path+"/"+k, "%s must be a number", k)
	}
	if len(n) > 64 {
		return nil, false, g.errf(path+"/"+k, "%s is too long a number", k)
	}
	if i := strings.IndexAny(n.String(), "eE"); i >= 0 {
		// big.Rat would expand the exponent: bound it first.
		e, err := strconv.Atoi(n.String()[i+1:])
		if err != nil || e > 40 || e < -40 {
			return nil, false, g.errf(path+"/"+k, "%s has an exponent beyond ±40", k)
		}
	}
	r, ok := new(big.Rat).SetString(n.String())
	if !ok {
		return nil, false, g.errf(path+"/"+k, "%s is not a number", k)
	}
	return r, true, nil
}

func ratFloor(r *big.Rat) *big.Int {
	q := new(big.Int).Div(r.Num(), r.Denom()) // Euclidean: floor for a positive denominator
	return q
}

func ratCeil(r *big.Rat) *big.Int {
	q := ratFloor(r)
	if !r.IsInt() {
		q.Add(q, big.NewInt(1))
	}
	return q
}

// number returns the values of an integer or number schema within its
// bounds. Integers in range are exact. With bounds, a number is an
// integer in range or one with a fraction whose whole integer part
// interval lies in range (no exponent), so bounds hold without
// arithmetic on decimals; without bounds it is any JSON number.
func (g *schemaGen) number(o *jobj, path string, integer bool) (string, error) {
	// lo, hi: the integer bounds (nil: unbounded); loC, hiF: the ceiling
	// and floor of the real bounds, inclusive or not, which bound the
	// intervals a fraction may fill.
	var lo, hi, loC, hiF *big.Int
	one := big.NewInt(1)
	raiseLo := func(v, c *big.Int) {
		if lo == nil || v.Cmp(lo) > 0 {
			lo = v
		}
		if loC == nil || c.Cmp(loC) > 0 {
			loC = c
		}
	}
	lowerHi := func(v, f *big.Int) {
		if hi == nil || v.Cmp(hi) < 0 {
			hi = v
		}
		if hiF == nil || f.Cmp(hiF) < 0 {
			hiF = f
		}
	}
	exMin, _ := o.get("exclusiveMinimum")
	exMax, _ := o.get("exclusiveMaximum")
	if r, ok, err := g.bound(o, path, "minimum"); err != nil {
		return "", err
	} else if ok {
		v := ratCeil(r)
		if exMin == true && r.IsInt() { // draft 4
			v = new(big.Int).Add(v, one)
		}
		raiseLo(v, ratCeil(r))
	}
	if r, ok, err := g.bound(o, path, "maximum"); err != nil {
		return "", err
	} else if ok {
		v := ratFloor(r)
		if exMax == true && r.IsInt() {
			v = new(big.Int).Sub(v, one)
		}
		lowerHi(v, ratFloor(r))
	}
	if exMin != true && exMin != false {
		if r, ok, err := g.bound(o, path, "exclusiveMinimum"); err != nil {
			return "", err
		} else if ok {
			raiseLo(new(big.Int).Add(ratFloor(r), one), ratCeil(r))
		}
	}
	if exMax != true && exMax != false {
		if r, ok, err := g.bound(o, path, "exclusiveMaximum"); err != nil {
			return "", err
		} else if ok {
			lowerHi(new(big.Int).Sub(ratCeil(r), one), ratFloor(r))
		}
	}
	if lo == nil && hi == nil {
		if integer {
			return g.prim("integer")
		}
		return g.prim("number")
	}
	if lo != nil && hi != nil && lo.Cmp(hi) > 0 {
		return "", g.errf(path, "the bounds leave no integer part this grammar can write")
	}
	alts := []string{intRange(lo, hi)}
	if !integer {
		frac := `"." [0-9]+`
		// I.f for I ≥ 0 lies in [I, I+1), open at I+1: I in
		// [max(lo,0), floor(max)-1].
		a := big.NewInt(0)
		if lo != nil && lo.Sign() > 0 {
			a = lo
		}
		var b *big.Int
		if hiF != nil {
			b = new(big.Int).Sub(hiF, one)
		}
		if b == nil || a.Cmp(b) <= 0 {
			alts = append(alts, "( "+nonNeg(a, b)+" ) "+frac)
		}
		// -I.f for I ≥ 1 lies in (-I-1, -I], open at -I-1: I in
		// [max(1,-hi), -ceil(min)-1].
		a = big.NewInt(1)
		if hi != nil && hi.Sign() < 0 {
			a = new(big.Int).Neg(hi)
		}
		b = nil
		if loC != nil {
			b = new(big.Int).Sub(new(big.Int).Neg(loC), one)
		}
		if b == nil || a.Cmp(b) <= 0 {
			alts = append(alts, `"-" ( `+nonNeg(a, b)+" ) "+frac)
		}
		// -0.f lies in (-1, 0].
		if (loC == nil || loC.Cmp(big.NewInt(-1)) <= 0) && (hi == nil || hi.Sign() >= 0) {
			alts = append(alts, `"-0" `+frac)
		}
	}
	return g.rule(hintOf(path, "number"), strings.Join(alts, " | "))
}

// intRange is the decimal integers in [lo, hi] (nil: unbounded), written
// without leading zeros or "-0".
func intRange(lo, hi *big.Int) string {
	var alts []string
	if hi == nil || hi.Sign() >= 0 {
		a := big.NewInt(0)
		if lo != nil && lo.Sign() > 0 {
			a = lo
		}
		alts = append(alts, nonNeg(a, hi))
	}
	if lo == nil || lo.Sign() < 0 {
		a := big.NewInt(1)
		if hi != nil && hi.Sign() < 0 {
			a = new(big.Int).Neg(hi)
		}
		var b *big.Int
		if lo != nil {
			b = new(big.Int).Neg(lo)
		}
		alts = append(alts, `"-" ( `+nonNeg(a, b)+" )")
	}
	return strings.Join(alts, " | ")
}

// nonNeg is the integers in [a, b], 0 ≤ a ≤ b (b nil: unbounded).
func nonNeg(a, b *big.Int) string {
	as := a.String()
	var alts []string
	if b == nil {
		nines := strings.Repeat("9", len(as))
		alts = append(alts, sameLen(as, nines))
		alts = append(alts, fmt.Sprintf("[1-9] [0-9]{%d,}", len(as)))
		return strings.Join(alts, " | ")
	}
	bs := b.String()
	for l := len(as); l <= len(bs); l++ {
		lo := as
		if l > len(as) {
			lo = "1" + strings.Repeat("0", l-1)
		}
		hi := bs
		if l < len(bs) {
			hi = strings.Repeat("9", l)
		}
		alts = append(alts, sameLen(lo, hi))
	}
	return strings.Join(alts, " | ")
}

// sameLen is the digit strings of one length from x to y (x ≤ y).
func sameLen(x, y string) string {
	if x == y {
		return `"` + x + `"`
	}
	if len(x) == 1 {
		return fmt.Sprintf("[%c-%c]", x[0], y[0])
	}
	if x[0] == y[0] {
		return fmt.Sprintf(`"%c" ( %s )`, x[0], sameLen(x[1:], y[1:]))
	}
	n := len(x) - 1
	zeros, nines := strings.Repeat("0", n), strings.Repeat("9", n)
	var alts []string
	from, to := x[0], y[0]
	if x[1:] != zeros {
		alts = append(alts, fmt.Sprintf(`"%c" ( %s )`, x[0], sameLen(x[1:], nines)))
		from++
	}
	if y[1:] != nines {
		to--
	}
	if from <= to {
		alts = append(alts, fmt.Sprintf("[%c-%c] [0-9]{%d}", from, to, n))
	}
	if y[1:] != nines {
		alts = append(alts, fmt.Sprintf(`"%c" ( %s )`, y[0], sameLen(zeros, y[1:])))
	}
	return "( " + strings.Join(alts, " | ") + " )"
}
