// Package chisq is Pearson's χ² goodness-of-fit test, for the tests that
// hold sampled tokens to a distribution (speculative sampling's).
package chisq

import "math"

// Statistic is Pearson's statistic of counts, from n draws, against the
// distribution p (p[i] the probability of cell i), and its degrees of
// freedom: the cells of positive probability, less one. A count in a
// cell of probability 0 makes it +Inf.
func Statistic(counts []int, p []float64, n int) (float64, int) {
	x2, cells := 0.0, 0
	for i, c := range counts {
		e := 0.0
		if i < len(p) {
			e = p[i] * float64(n)
		}
		if e == 0 {
			if c > 0 {
				return math.Inf(1), cells
			}
			continue
		}
		cells++
		x2 += (float64(c) - e) * (float64(c) - e) / e
	}
	return x2, cells - 1
}

// Critical is the value a χ² statistic of df degrees of freedom (at
// least 1) exceeds with probability 0.001, by the Wilson–Hilferty
// approximation (within 2% of the exact quantile from 5 degrees of
// freedom on, and above it there: a test that uses it rejects no more
// often than it says).
func Critical(df int) float64 {
	k := float64(max(df, 1))
	a := 2 / (9 * k)
	return k * math.Pow(1-a+3.0902*math.Sqrt(a), 3)
}
