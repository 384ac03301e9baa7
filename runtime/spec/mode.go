package spec

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/zrtdev/zrt/format/support"
)

// Kinds of speculation a Mode names.
const (
	Off   = "off"   // no speculation: one token a step
	NGram = "ngram" // prompt-lookup drafts from the sequence's own tokens (draft.NGram)
	// Self drafts through the bundle's draft variant: the model's first
	// layers and its own head (a bundle built with draft_layers).
	Self = "self"
	// Draft drafts through a second, smaller model that shares the
	// target's vocabulary (a draft bundle: NewWithDraft).
	Draft = "draft"
)

// MTP names drafting by a model's own multi-token-prediction heads, which
// ParseMode refuses with a *support.Error: no GGUF of an architecture zrt
// builds carries them (mtpDetail says where they stand).
const MTP = "mtp"

// mtpDetail is why MTP is refused: llama.cpp loads a model's nextn (MTP)
// layers only for the glm4, glm4moe, deepseek2, exaone-moe and
// bailingmoe2 architectures (and leaves them unused), none of which zrtc
// builds; its qwen3next and qwen35 models have none.
const mtpDetail = "no GGUF of an architecture zrt builds carries multi-token-prediction (nextn) layers " +
	"(llama.cpp reads them only for glm4, glm4moe, deepseek2, exaone-moe and bailingmoe2, and its qwen3next and qwen35 have none); " +
	"use self, draft or ngram"

// MaxK bounds the draft length a Mode may ask for: a verify step takes a
// slot per row, and a longer draft is almost never accepted whole.
const MaxK = 32

// DefaultK is the draft length when a Mode gives none.
const DefaultK = 4

// Mode is a --speculative setting: the kind of draft, the most tokens
// one step drafts, and whether every step verifies all the draft offers
// (Fixed) rather than what the Policy finds worth its rows.
type Mode struct {
	Kind  string
	K     int
	Fixed bool
}

func (m Mode) String() string {
	if m.Kind == Off || m.Kind == "" {
		return Off
	}
	if m.Fixed {
		return fmt.Sprintf("%s:%d:fixed", m.Kind, m.K)
	}
	return fmt.Sprintf("%s:%d", m.Kind, m.K)
}

// On reports whether m speculates.
func (m Mode) On() bool { return m.Kind != Off && m.Kind != "" }

// ParseMode reads KIND[:K[:fixed]]: "off" (or ""), or KIND ngram or
// self or draft, alone, with K in [1, MaxK] (DefaultK when absent), or with K and
// fixed. Kind draft needs a draft model beside the target (--draft).
func ParseMode(s string) (Mode, error) {
	kind, k, hasK := strings.Cut(s, ":")
	k, fixed, hasFixed := strings.Cut(k, ":")
	switch kind {
	case "", Off:
		if hasK {
			return Mode{}, fmt.Errorf("speculative mode %q: off takes no draft length", s)
		}
		return Mode{Kind: Off}, nil
	case NGram, Self, Draft:
	case MTP:
		return Mode{}, &support.Error{What: "speculative mode", Value: s, Detail: mtpDetail}
	default:
		return Mode{}, fmt.Errorf("speculative mode %q: want off, ngram[:K[:fixed]], self[:K[:fixed]] or draft[:K[:fixed]]", s)
	}
	if hasFixed && fixed != "fixed" {
		return Mode{}, fmt.Errorf("speculative mode %q: %q after the draft length, want fixed", s, fixed)
	}
	m := Mode{Kind: kind, K: DefaultK, Fixed: hasFixed}
	if hasK {
		n, err := strconv.Atoi(k)
		if err != nil || n < 1 || n > MaxK {
			return Mode{}, fmt.Errorf("speculative mode %q: draft length %q is not a number in [1, %d]", s, k, MaxK)
		}
		m.K = n
	}
	return m, nil
}
