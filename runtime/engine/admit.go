package engine

import (
	"errors"
	"fmt"
	"time"
)

// The kinds of admission error: every refusal Submit makes is an
// *AdmitError whose Reason is one of these, so errors.Is(err, ErrQueued)
// tells a front end what happened and the error's fields give the numbers
// to say it in its own words.
var (
	// ErrEmpty: the prompt has no tokens.
	ErrEmpty = errors.New("engine: empty prompt")
	// ErrBadToken: a prompt token (Token) is outside the vocabulary
	// (Limit tokens).
	ErrBadToken = errors.New("engine: token id outside the vocabulary")
	// ErrTooLong: the prompt plus max tokens exceed a context, or need
	// more KV pages than can be had; see AdmitError.
	ErrTooLong = errors.New("engine: prompt and max tokens exceed the context")
	// ErrExceedsRate: the request alone is more than its tenant's tokens
	// per minute (Limit), so it could never be admitted.
	ErrExceedsRate = errors.New("engine: the request exceeds its tenant's tokens per minute")
	// ErrRateLimited: the tenant is over a rate limit; RetryAfter says
	// when the request would be admitted.
	ErrRateLimited = errors.New("engine: over the tenant's rate limit")
	// ErrQueueFull: Limit requests wait for a slot already (the policy's
	// QueueDepth).
	ErrQueueFull = errors.New("engine: the queue is full")
	// ErrQueued: Limit of the tenant's requests wait for a slot already
	// (its MaxQueued).
	ErrQueued = errors.New("engine: the tenant's queue is full")
	// ErrDraining: the engine is draining and admits nothing.
	ErrDraining = errors.New("engine: draining, not admitting")
)

// AdmitError is a request Submit refused, and why: Reason is one of the
// Err kinds above (errors.Is matches it), the rest the numbers that
// explain it.
//
// For ErrTooLong: Pages == 0 means the prompt plus max tokens exceed
// Limit tokens of context; Pages > 0 that they need Pages KV pages where
// Limit are to be had. Tenant is set when the limit is the tenant's
// (max context, max pages), empty when it is the model's or the pool's.
type AdmitError struct {
	Reason error
	// Tenant is the tenant whose own limit refused the request ("" for
	// the engine's limits).
	Tenant string
	// Limit is the limit met, in its unit: tokens of context, KV pages,
	// waiting requests, tokens a minute, or the vocabulary's size.
	Limit int
	// Prompt and MaxTokens are the request's tokens (MaxTokens the
	// largest of its choices'); Choices how many it has.
	Prompt, MaxTokens, Choices int
	// Pages are the KV pages the request needs, and Context the model's
	// context in tokens (ErrTooLong).
	Pages, Context int
	// Token is the token outside the vocabulary (ErrBadToken).
	Token int32
	// RetryAfter is when the tenant's rate limits would admit the
	// request (ErrRateLimited).
	RetryAfter time.Duration
}

func (e *AdmitError) Error() string {
	switch e.Reason {
	case ErrBadToken:
		return fmt.Sprintf("%v: %d, vocabulary of %d", e.Reason, e.Token, e.Limit)
	case ErrTooLong:
		switch {
		case e.Pages == 0 && e.Tenant == "":
			return fmt.Sprintf("%v: %d prompt + %d tokens > %d", e.Reason, e.Prompt, e.MaxTokens, e.Limit)
		case e.Pages == 0:
			return fmt.Sprintf("%v: %d prompt + %d tokens > tenant %s's %d", e.Reason, e.Prompt, e.MaxTokens, e.Tenant, e.Limit)
		case e.Tenant == "":
			return fmt.Sprintf("%v: needs %d KV pages, the pool has %d", e.Reason, e.Pages, e.Limit)
		}
		return fmt.Sprintf("%v: needs %d KV pages, tenant %s may hold %d", e.Reason, e.Pages, e.Tenant, e.Limit)
	case ErrExceedsRate:
		return fmt.Sprintf("%v: tenant %s has %d a minute", e.Reason, e.Tenant, e.Limit)
	case ErrRateLimited:
		return fmt.Sprintf("engine: tenant %s is over its rate limit; retry after %.1f s", e.Tenant, e.RetryAfter.Seconds())
	case ErrQueueFull:
		return fmt.Sprintf("%v: %d requests wait", e.Reason, e.Limit)
	case ErrQueued:
		return fmt.Sprintf("engine: tenant %s has %d requests waiting, its most (max queued)", e.Tenant, e.Limit)
	}
	return e.Reason.Error()
}

// Unwrap makes errors.Is(err, e.Reason) true.
func (e *AdmitError) Unwrap() error { return e.Reason }
