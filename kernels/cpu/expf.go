package cpu

import "math"

// expf is libm's expf, correctly rounded in practice: e^x evaluated in
// float64 to about one part in 2^52, then rounded to float32, which gives
// the correctly rounded float32 unless e^x lies within 2^-52 of a
// rounding boundary. The float64 evaluation is spelled out (rather than
// math.Exp, whose bits vary with the CPU's FMA) so that expfs, its
// AVX-512 form, reproduces it bit for bit, lane by lane:
//
//   - x is clamped to [-110, 100]: e^-110 rounds to float32 0 and e^100
//     to +Inf as the true values do, and 2^n stays a normal float64;
//   - n = round(x·log2 e) (to even, by adding and subtracting 1.5·2^52);
//   - r = x - n·ln 2 by two FMAs (ln 2 in a high and a low part);
//   - e^r by its Taylor series to r^13 (|r| <= 0.35: the next term is
//     below 2^-57) in Horner's form with FMAs;
//   - times 2^n, exact, and one rounding to float32.
func expf(x float32) float32 {
	d := max(-110, min(float64(x), 100))
	t := float64(d*expLog2E) + expRound
	n := t - expRound
	r := math.FMA(-n, expLn2Hi, d)
	r = math.FMA(-n, expLn2Lo, r)
	p := expTaylor[0]
	for _, c := range expTaylor[1:] {
		p = math.FMA(p, r, c)
	}
	scale := math.Float64frombits((math.Float64bits(t) + 1023) << 52)
	return float32(p * scale)
}

// expf's constants. expRound's low mantissa bits hold n after the
// rounding add, so (bits(t)+1023)<<52 is 2^n for |n| < 1022.
const (
	expLog2E = 0x1.71547652b82fep0
	expRound = 0x1.8p52
	expLn2Hi = 0x1.62e42fefa39efp-1
	expLn2Lo = 0x1.abc9e3b39803fp-56
)

// expTaylor holds 1/k! for k = 13 down to 0, as expfs reads them.
var expTaylor = [14]float64{
	1.0 / 6227020800, 1.0 / 479001600, 1.0 / 39916800, 1.0 / 3628800,
	1.0 / 362880, 1.0 / 40320, 1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24,
	1.0 / 6, 1.0 / 2, 1, 1,
}

// Exp sets x[i] = expf(x[i]) for every i: eight at a time where the CPU
// has AVX-512 (expfs, the same bits), the rest one at a time.
func Exp(x []float32) {
	n := 0
	if faSIMDOK {
		if n = len(x) &^ 7; n > 0 {
			expfs(&x[0], n)
		}
	}
	for i := n; i < len(x); i++ {
		x[i] = expf(x[i])
	}
}
