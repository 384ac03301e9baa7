package engine

import (
	"sync/atomic"

	"github.com/zrtdev/zrt/runtime/engine/quota"
	"github.com/zrtdev/zrt/runtime/engine/sched"
)

// QoS is a request's class (seed 000 §18.5): the engine's name for the
// scheduler's, so a front end needs no package below the engine.
type QoS = sched.QoS

// The classes, most urgent first.
const (
	Interactive = sched.Interactive
	Standard    = sched.Standard
	Batch       = sched.Batch
)

// ParseQoS reads a class name ("interactive", "standard", "batch").
func ParseQoS(s string) (QoS, error) { return sched.ParseQoS(s) }

// TenantPolicy is everything the engine enforces for one tenant, in one
// value: a new tenant limit is a field here and a check where it is
// enforced. Zero means no limit throughout. Three kinds of limit:
// admission limits refuse a request at Submit (an *AdmitError);
// scheduling limits make it wait in the queue; the reservation is fixed
// when the engine starts.
type TenantPolicy struct {
	// Class is the QoS class of the tenant's requests (a front end sets
	// Request.QoS from it).
	Class QoS

	// MaxContext bounds a request's prompt plus max tokens (admission;
	// the model's context bounds it too).
	MaxContext int
	// MaxQueued bounds the tenant's requests waiting for a slot: one
	// submitted while that many wait is refused (admission, ErrQueued).
	MaxQueued int
	// TokensPerMinute and RequestsPerMinute are rate limits (admission,
	// ErrRateLimited): tokens count the prompt plus every choice's max
	// tokens.
	TokensPerMinute   int
	RequestsPerMinute int

	// MaxSlots and MaxPages are hard scheduling limits: slots and KV
	// pages the tenant holds at once (a request needing more pages than
	// MaxPages is refused at Submit).
	MaxSlots int
	MaxPages int
	// DecodeTokensPerSecond and PrefillTokensPerSecond are soft
	// scheduling limits on the tenant's smoothed token rates (DRF: over
	// them its requests yield to others').
	DecodeTokensPerSecond  int
	PrefillTokensPerSecond int

	// ReservedPages are KV pages set aside for the tenant, which no other
	// tenant may take; read once, when the engine starts.
	ReservedPages int
	// Scope names the tenant's prefix-cache scope: tenants of one scope
	// may share cached prompt pages ("": the tenant alone).
	Scope string
}

// PrefixScope is the prefix-cache scope of tenant id's requests under
// p: p.Scope, else the tenant's own.
func (p TenantPolicy) PrefixScope(id string) string {
	if p.Scope != "" {
		return p.Scope
	}
	return id
}

// limits is the scheduler's view of p.
func (p TenantPolicy) limits() sched.Limits {
	return sched.Limits{MaxSlots: p.MaxSlots, MaxPages: p.MaxPages,
		DecodeTokensPerSecond: p.DecodeTokensPerSecond, PrefillTokensPerSecond: p.PrefillTokensPerSecond}
}

// rates is the rate limiter's view of p.
func (p TenantPolicy) rates() quota.Rates {
	return quota.Rates{TokensPerMinute: p.TokensPerMinute, RequestsPerMinute: p.RequestsPerMinute}
}

// Policy is an engine's admission and scheduling policy: the queue's bound
// and every tenant's TenantPolicy.
type Policy struct {
	// QueueDepth bounds the requests waiting for a slot, all tenants
	// together: one submitted while that many wait is refused
	// (ErrQueueFull; 0: no bound).
	QueueDepth int
	// Tenants are the tenants' policies by id; a tenant not in it has the
	// zero TenantPolicy (no limits, class interactive, its own scope).
	Tenants map[string]TenantPolicy
}

// Tenant is the policy of tenant id.
func (p *Policy) Tenant(id string) TenantPolicy { return p.Tenants[id] }

// LivePolicy holds the Policy in force. The engine reads it at every
// admission and every step, so Store (a config reloaded on SIGHUP) takes
// effect at the next request and step without dropping running requests;
// only the reservations stay as the engine started with them. It is safe
// for concurrent use.
type LivePolicy struct {
	cur atomic.Pointer[Policy]
}

// NewLivePolicy returns a LivePolicy holding p.
func NewLivePolicy(p Policy) *LivePolicy {
	l := &LivePolicy{}
	l.Store(p)
	return l
}

// Store replaces the policy in force with p.
func (l *LivePolicy) Store(p Policy) { l.cur.Store(&p) }

// Load returns the policy in force: the zero Policy for a nil l or one
// never stored to. The caller must not modify it.
func (l *LivePolicy) Load() *Policy {
	if l == nil {
		return &Policy{}
	}
	if p := l.cur.Load(); p != nil {
		return p
	}
	return &Policy{}
}
