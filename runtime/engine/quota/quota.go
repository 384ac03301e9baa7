// Package quota holds the serving engine's rate limits (seed 000 §18.6):
// per tenant, requests per minute and tokens per minute (prompt plus the
// most it may generate), each a token bucket that refills continuously. A
// request over either limit is refused at arrival with the time after which
// it would be accepted, unlike the scheduling limits, under which it waits.
// It also meters each tenant's token rates (Meter) for the soft limits the
// scheduler weighs.
package quota

import (
	"sync"
	"time"
)

// Rates are a tenant's rate limits (0: none).
type Rates struct {
	TokensPerMinute   int
	RequestsPerMinute int
}

// bucket holds up to a minute's allowance and refills at rate per second.
type bucket struct {
	level float64
	last  time.Time
}

func (b *bucket) refill(perMinute float64, now time.Time) {
	if b.last.IsZero() {
		b.level = perMinute
	} else if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.level = min(perMinute, b.level+dt*perMinute/60)
	}
	b.last = now
}

// wait is how long until the bucket holds n.
func (b *bucket) wait(n, perMinute float64) time.Duration {
	if b.level >= n {
		return 0
	}
	return time.Duration((n - b.level) / (perMinute / 60) * float64(time.Second))
}

// Limiter tracks every tenant's buckets. It is safe for concurrent use.
type Limiter struct {
	mu     sync.Mutex
	rates  func(tenant string) Rates
	tokens map[string]*bucket
	reqs   map[string]*bucket
}

// New returns a limiter with each tenant's rates.
func New(rates func(tenant string) Rates) *Limiter {
	return &Limiter{rates: rates, tokens: map[string]*bucket{}, reqs: map[string]*bucket{}}
}

// Admit charges one request of n tokens to tenant at now. When either
// bucket cannot cover it, nothing is charged and retryAfter says when it
// could be; a request larger than a whole minute's tokens is never
// admitted (retryAfter < 0).
func (l *Limiter) Admit(tenant string, n int, now time.Time) (ok bool, retryAfter time.Duration) {
	r := l.rates(tenant)
	l.mu.Lock()
	defer l.mu.Unlock()
	type charge struct {
		b         *bucket
		n, perMin float64
	}
	var charges []charge
	if r.RequestsPerMinute > 0 {
		charges = append(charges, charge{get(l.reqs, tenant), 1, float64(r.RequestsPerMinute)})
	}
	if r.TokensPerMinute > 0 {
		if n > r.TokensPerMinute {
			return false, -1
		}
		charges = append(charges, charge{get(l.tokens, tenant), float64(n), float64(r.TokensPerMinute)})
	}
	for _, c := range charges {
		c.b.refill(c.perMin, now)
		retryAfter = max(retryAfter, c.b.wait(c.n, c.perMin))
	}
	if retryAfter > 0 {
		return false, retryAfter
	}
	for _, c := range charges {
		c.b.level -= c.n
	}
	return true, 0
}

func get(m map[string]*bucket, tenant string) *bucket {
	b, ok := m[tenant]
	if !ok {
		b = &bucket{}
		m[tenant] = b
	}
	return b
}
