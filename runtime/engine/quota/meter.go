package quota

import (
	"math"
	"time"
)

// Smoothing is the time constant of a Meter: seed 000 §18.6 smooths the
// soft token-rate limits over 5 s.
const Smoothing = 5 * time.Second

// Meter measures a rate of tokens, smoothed exponentially over Smoothing:
// a steady rate reads as itself, and a burst fades with that time
// constant. Its reading is a function of the amounts and times added and
// the time read, not of how often it is read, so a rerun with the same
// clock reads the same rates. The zero value is an idle meter.
type Meter struct {
	level float64 // tokens, decayed to last
	last  time.Time
}

// Add counts n tokens at now.
func (m *Meter) Add(n int, now time.Time) {
	m.level = m.at(now) + float64(n)
	m.last = now
}

// Rate is the smoothed tokens a second at now.
func (m *Meter) Rate(now time.Time) float64 {
	return m.at(now) / Smoothing.Seconds()
}

func (m *Meter) at(now time.Time) float64 {
	dt := now.Sub(m.last).Seconds()
	if m.last.IsZero() || dt <= 0 {
		return m.level
	}
	return m.level * math.Exp(-dt/Smoothing.Seconds())
}
