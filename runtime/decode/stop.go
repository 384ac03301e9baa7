package decode

import "strings"

// StopFilter holds back generated text that might be the start of a stop
// string, so a stop string never reaches the output, even when it arrives
// split across tokens.
type StopFilter struct {
	stops   []string
	pending string
}

// NewStopFilter returns a filter for the given stop strings (empty ones
// are ignored).
func NewStopFilter(stops []string) *StopFilter {
	f := &StopFilter{}
	for _, s := range stops {
		if s != "" {
			f.stops = append(f.stops, s)
		}
	}
	return f
}

// Add takes the next piece of text and returns what can be emitted now,
// and whether a stop string was completed (the text before it is emitted,
// the stop string and anything after it are not).
func (f *StopFilter) Add(text string) (emit string, stopped bool) {
	f.pending += text
	cut := len(f.pending)
	for _, s := range f.stops {
		if i := strings.Index(f.pending, s); i >= 0 && i < cut {
			cut, stopped = i, true
		}
	}
	if stopped {
		emit, f.pending = f.pending[:cut], ""
		return emit, true
	}
	// Hold back the longest suffix that is a proper prefix of a stop string.
	hold := 0
	for _, s := range f.stops {
		for n := min(len(s)-1, len(f.pending)); n > hold; n-- {
			if strings.HasSuffix(f.pending, s[:n]) {
				hold = n
				break
			}
		}
	}
	emit, f.pending = f.pending[:len(f.pending)-hold], f.pending[len(f.pending)-hold:]
	return emit, false
}

// Flush returns the held-back text at the end of generation.
func (f *StopFilter) Flush() string {
	s := f.pending
	f.pending = ""
	return s
}
