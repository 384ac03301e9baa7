package chisq

import (
	"math"
	"testing"
)

// TestCritical: the approximation against tabulated 0.1% quantiles: at
// or above them, within 2%.
func TestCritical(t *testing.T) {
	for df, want := range map[int]float64{5: 20.515, 11: 31.264, 30: 59.703, 255: 330.520} {
		if got := Critical(df); got < want || got > 1.02*want {
			t.Errorf("Critical(%d) = %.3f, table %.3f", df, got, want)
		}
	}
}

// TestStatistic: counts equal to the expectation score 0, a count in an
// impossible cell +Inf, and cells of probability 0 are no degree of
// freedom.
func TestStatistic(t *testing.T) {
	if x2, df := Statistic([]int{25, 75, 0}, []float64{0.25, 0.75, 0}, 100); x2 != 0 || df != 1 {
		t.Errorf("exact counts: %g, %d", x2, df)
	}
	if x2, _ := Statistic([]int{25, 74, 1}, []float64{0.25, 0.75, 0}, 100); !math.IsInf(x2, 1) {
		t.Errorf("a count where p is 0: %g", x2)
	}
	if x2, df := Statistic([]int{30, 70}, []float64{0.25, 0.75}, 100); math.Abs(x2-(25.0/25+25.0/75)) > 1e-12 || df != 1 {
		t.Errorf("Statistic = %g, %d", x2, df)
	}
}
