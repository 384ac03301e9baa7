package spec

import (
	"strings"
	"testing"

	"github.com/zrtdev/zrt/format/support"
)

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{
		"": {Kind: Off}, "off": {Kind: Off}, "ngram": {Kind: NGram, K: DefaultK},
		"ngram:1": {Kind: NGram, K: 1}, "ngram:32": {Kind: NGram, K: 32}, "ngram:3:fixed": {Kind: NGram, K: 3, Fixed: true},
		"self": {Kind: Self, K: DefaultK}, "self:2:fixed": {Kind: Self, K: 2, Fixed: true},
		"draft": {Kind: Draft, K: DefaultK}, "draft:6:fixed": {Kind: Draft, K: 6, Fixed: true},
	} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"ngram:0", "ngram:33", "ngram:", "ngram:x", "off:2", "drafts", "draft:0", "NGRAM", "self:0", "ngram:4:5", "ngram::fixed", "ngram:4:fixed:", "ngram:4:"} {
		if m, err := ParseMode(in); err == nil {
			t.Errorf("ParseMode(%q) = %+v, want an error", in, m)
		}
	}
	// MTP is a mode a user may rightly ask for: refused as unsupported,
	// with the reason, not as a typo.
	for _, in := range []string{"mtp", "mtp:3", "mtp:3:fixed"} {
		if m, err := ParseMode(in); !support.Is(err) || !strings.Contains(err.Error(), "nextn") {
			t.Errorf("ParseMode(%q) = %+v, %v; want the unsupported error saying why", in, m, err)
		}
	}
}

// FuzzParseMode: any input parses to a valid mode that prints back to
// itself, or fails with an error naming the input.
func FuzzParseMode(f *testing.F) {
	for _, s := range []string{"", "off", "ngram", "ngram:4", "ngram:99", "ngram:-1", "x:y:z", "draft:3:fixed"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseMode(s)
		if err != nil {
			if !strings.Contains(err.Error(), "speculative mode") {
				t.Fatalf("ParseMode(%q): error %q does not say what it parsed", s, err)
			}
			return
		}
		if m.On() && (m.K < 1 || m.K > MaxK) {
			t.Fatalf("ParseMode(%q) = %+v: draft length out of range", s, m)
		}
		if again, err := ParseMode(m.String()); err != nil || again != m {
			t.Fatalf("ParseMode(%q) = %+v prints %q, which parses to %+v, %v", s, m, m.String(), again, err)
		}
	})
}
