package sample

import "math"

// expNeg is exp(x) for x ≤ 0 to within a few units in the last place
// (0 below -708, where exp leaves float64's normal range), a table of
// 2^(j/256) and a degree-4 polynomial on a remainder of at most ln 2/512:
// about a third of math.Exp's time, which a sampled token pays once for
// every token of the vocabulary.
func expNeg(x float64) float64 {
	if !(x >= -708) { // NaN too
		return 0
	}
	// x = (256·e + j)·ln2/256 + r, |r| ≤ ln2/512.
	k := int64(x*(expSteps/math.Ln2) - 0.5) // round half down: x ≤ 0
	kf := float64(k)
	r := x - kf*(ln2Hi/expSteps) - kf*(ln2Lo/expSteps)
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24))))
	e := k >> 8 // floor(k/256): k < 0 shifts in ones
	return p * exp2Steps[k&(expSteps-1)] * math.Float64frombits(uint64(e+1023)<<52)
}

const (
	expSteps = 256
	// ln 2 split so that k·ln2Hi is exact for |k| < 2^21 (fdlibm's).
	ln2Hi = 6.93147180369123816490e-01
	ln2Lo = 1.90821492927058770002e-10
)

// exp2Steps[j] is 2^(j/256).
var exp2Steps = func() (t [expSteps]float64) {
	for j := range t {
		t[j] = math.Exp2(float64(j) / expSteps)
	}
	return t
}()
