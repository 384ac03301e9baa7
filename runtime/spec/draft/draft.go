// Package draft proposes the tokens a speculative decoder verifies: the
// guesses of what a sequence's next tokens will be. Drafts here are pure
// functions of the sequence's own tokens (prompt lookup, n-grams), so they
// cost nothing next to a model step and need no model of their own.
package draft

// Drafter proposes up to k tokens to follow history (every token of the
// sequence so far, the one about to be evaluated last). It may propose
// fewer, or none; it must not keep history.
type Drafter interface {
	Draft(history []int32, k int) []int32
}

// NGram is prompt-lookup drafting (llama.cpp's ngram, vLLM's
// prompt_lookup): it looks for the last n tokens of the history earlier in
// the history, for n from MaxN down to MinN, and proposes the tokens that
// followed the latest such occurrence. It pays off where the output
// repeats its input or itself: code edits, summaries, extraction, and the
// loops greedy generations fall into.
type NGram struct {
	MinN, MaxN int
}

// DefaultNGram is the n-gram drafter with the lengths llama.cpp's and
// vLLM's prompt lookups default to (a match of 1 to 3 tokens).
var DefaultNGram = NGram{MinN: 1, MaxN: 3}

// Draft returns up to k tokens after the latest earlier occurrence of the
// longest suffix of history of MinN to MaxN tokens that occurs earlier.
// Where that occurrence's continuation runs into the suffix itself (a
// loop of period p shorter than k), the proposal goes on around the loop:
// the continuation read past the end of history is the proposal so far.
func (g NGram) Draft(history []int32, k int) []int32 {
	if k <= 0 {
		return nil
	}
	lo, hi := max(g.MinN, 1), min(g.MaxN, len(history)-1)
	for n := hi; n >= lo; n-- {
		suffix := history[len(history)-n:]
		// The latest start i < len(history)-n where the suffix occurs.
		for i := len(history) - n - 1; i >= 0; i-- {
			if !equal(history[i:i+n], suffix) {
				continue
			}
			out := make([]int32, 0, k)
			for j := i + n; len(out) < k; j++ {
				if j < len(history) {
					out = append(out, history[j])
				} else {
					out = append(out, out[j-len(history)])
				}
			}
			return out
		}
	}
	return nil
}

func equal(a, b []int32) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
