package spec

import (
	"fmt"
	"strconv"
	"strings"
)

// Kinds of speculation a Mode names.
const (
	Off   = "off"   // no speculation: one token a step
	NGram = "ngram" // prompt-lookup drafts from the sequence's own tokens (draft.NGram)
)

// MaxK bounds the draft length a Mode may ask for: a verify step takes a
// slot per row, and a longer draft is almost never accepted whole.
const MaxK = 32

// DefaultK is the draft length when a Mode gives none.
const DefaultK = 4

// Mode is a --speculative setting: the kind of draft and the most tokens
// one step drafts.
type Mode struct {
	Kind string
	K    int
}

func (m Mode) String() string {
	if m.Kind == Off || m.Kind == "" {
		return Off
	}
	return fmt.Sprintf("%s:%d", m.Kind, m.K)
}

// On reports whether m speculates.
func (m Mode) On() bool { return m.Kind != Off && m.Kind != "" }

// ParseMode reads KIND[:K]: "off" (or ""), "ngram" or "ngram:K" with K in
// [1, MaxK] (DefaultK when absent).
func ParseMode(s string) (Mode, error) {
	kind, k, hasK := strings.Cut(s, ":")
	switch kind {
	case "", Off:
		if hasK {
			return Mode{}, fmt.Errorf("speculative mode %q: off takes no draft length", s)
		}
		return Mode{Kind: Off}, nil
	case NGram:
	default:
		return Mode{}, fmt.Errorf("speculative mode %q: want off or ngram[:K]", s)
	}
	m := Mode{Kind: kind, K: DefaultK}
	if hasK {
		n, err := strconv.Atoi(k)
		if err != nil || n < 1 || n > MaxK {
			return Mode{}, fmt.Errorf("speculative mode %q: draft length %q is not a number in [1, %d]", s, k, MaxK)
		}
		m.K = n
	}
	return m, nil
}
