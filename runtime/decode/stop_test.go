package decode

import "testing"

func TestStopFilter(t *testing.T) {
	cases := []struct {
		stops   []string
		pieces  []string
		want    string
		stopped bool
	}{
		{[]string{"\n\n"}, []string{"Hello", " world", "\n", "\nmore"}, "Hello world", true},
		{[]string{"END"}, []string{"a", "EN", "D", "b"}, "a", true},
		{[]string{"END"}, []string{"a", "EN", "x"}, "aENx", false},
		{[]string{"xyz", "yz"}, []string{"abxy", "z!"}, "ab", true}, // the earliest match wins
		{nil, []string{"plain"}, "plain", false},
	}
	for _, c := range cases {
		f := NewStopFilter(c.stops)
		got, stopped := "", false
		for _, p := range c.pieces {
			e, s := f.Add(p)
			got += e
			if s {
				stopped = true
				break
			}
		}
		if !stopped {
			got += f.Flush()
		}
		if got != c.want || stopped != c.stopped {
			t.Errorf("%q over %q: got %q (stopped %v), want %q (%v)", c.stops, c.pieces, got, stopped, c.want, c.stopped)
		}
	}
}
