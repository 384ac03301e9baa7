package engine

import "testing"

// ratePager is a KVBatchPager that only reports a copy rate.
type ratePager struct {
	syncPager
	rate float64
}

func (p ratePager) KVCopyRate() float64 { return p.rate }

// TestRestoreCheaper: a host-tier page comes back while its bytes at the
// measured copy rate take less than its tokens' prefill rows at the
// measured row time, and always while either is unmeasured.
func TestRestoreCheaper(t *testing.T) {
	const page = 1 << 20 // bytes; 16 tokens
	for _, c := range []struct {
		rate, row float64 // bytes/s, s
		want      bool
	}{
		{0, 10e-6, true},    // copies not measured yet
		{10e9, 0, true},     // prefill not measured yet
		{10e9, 10e-6, true}, // 105 µs against 160 µs
		{5e9, 10e-6, false}, // 210 µs against 160 µs
		{50e9, 1e-6, false}, // 21 µs against 16 µs
	} {
		e := &Engine{hp: hostPages{pager: ratePager{rate: c.rate}, pageBytes: page}}
		e.cost.row = c.row
		if got := e.restoreCheaper(); got != c.want {
			t.Errorf("a %d-byte page at %g B/s, prefill rows of %g s: restore %v, want %v", page, c.rate, c.row, got, c.want)
		}
	}
}
