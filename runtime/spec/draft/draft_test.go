package draft

import (
	"encoding/binary"
	"slices"
	"testing"
)

func TestNGram(t *testing.T) {
	for _, c := range []struct {
		name    string
		g       NGram
		history []int32
		k       int
		want    []int32
	}{
		{"no history", DefaultNGram, nil, 4, nil},
		{"one token", DefaultNGram, []int32{5}, 4, nil},
		{"no match", DefaultNGram, []int32{1, 2, 3, 4}, 4, nil},
		{"k zero", DefaultNGram, []int32{1, 2, 1}, 0, nil},
		// "1 2" occurs at 0: propose what followed it.
		{"bigram", DefaultNGram, []int32{1, 2, 3, 4, 9, 1, 2}, 3, []int32{3, 4, 9}},
		// The longest suffix wins over a later shorter match: "7 1 2"
		// matches at 0, while "2" alone last occurred at 5.
		{"longest first", DefaultNGram, []int32{7, 1, 2, 3, 8, 2, 5, 7, 1, 2}, 2, []int32{3, 8}},
		// Of several occurrences the latest is taken.
		{"latest", DefaultNGram, []int32{1, 2, 3, 1, 2, 4, 1, 2}, 1, []int32{4}},
		// A loop of period 2 goes on around the loop past the history.
		{"loop", DefaultNGram, []int32{9, 5, 6, 5, 6}, 5, []int32{5, 6, 5, 6, 5}},
		{"repeat", DefaultNGram, []int32{3, 3}, 3, []int32{3, 3, 3}},
		// MinN 2 ignores a single-token match.
		{"min n", NGram{MinN: 2, MaxN: 3}, []int32{4, 1, 2, 3, 1}, 2, nil},
		{"max n below min", NGram{MinN: 3, MaxN: 1}, []int32{1, 2, 1, 2}, 2, nil},
	} {
		if got := c.g.Draft(c.history, c.k); !slices.Equal(got, c.want) {
			t.Errorf("%s: Draft(%v, %d) = %v, want %v", c.name, c.history, c.k, got, c.want)
		}
	}
}

// checkDraft holds a proposal to what Draft promises: at most k tokens,
// and, when any, the continuation of an earlier occurrence of a suffix of
// MinN..MaxN tokens, read around the loop past the end.
func checkDraft(t *testing.T, g NGram, history []int32, k int) {
	got := g.Draft(history, k)
	if len(got) > max(k, 0) {
		t.Fatalf("Draft(%v, %d) = %v: more than k", history, k, got)
	}
	if len(got) == 0 {
		return
	}
	all := append(slices.Clone(history), got...)
	for n := max(g.MinN, 1); n <= g.MaxN && n < len(history); n++ {
		suffix := history[len(history)-n:]
		for i := 0; i+n < len(history); i++ {
			if slices.Equal(history[i:i+n], suffix) && slices.Equal(all[i+n:i+n+len(got)], got) {
				return
			}
		}
	}
	t.Fatalf("Draft(%v, %d) = %v continues no earlier occurrence of a suffix", history, k, got)
}

func FuzzNGram(f *testing.F) {
	f.Add([]byte{1, 2, 3, 1, 2}, uint8(4), uint8(1), uint8(3))
	f.Add([]byte{5, 5, 5, 5}, uint8(8), uint8(2), uint8(2))
	f.Add([]byte{}, uint8(1), uint8(0), uint8(0))
	f.Fuzz(func(t *testing.T, b []byte, k, lo, hi uint8) {
		// Two bytes a token, from a small alphabet so that matches occur.
		var history []int32
		for i := 0; i+1 < len(b); i += 2 {
			history = append(history, int32(binary.LittleEndian.Uint16(b[i:])%8))
		}
		checkDraft(t, NGram{MinN: int(lo % 6), MaxN: int(hi % 6)}, history, int(k%32))
	})
}
