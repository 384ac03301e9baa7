package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/zrtdev/zrt/runtime/decode"
)

// maskBuckets span a mask that a grammar state's cached tokens answer
// (a microsecond) to one that walks a large vocabulary inside a free
// string on a slow core (seconds), about 1.5× apart so that a median or
// p99 read from them is within that factor.
var maskBuckets = prometheus.ExponentialBucketsRange(1e-6, 4, 40)

// newMaskHistogram is zrt_constraint_mask_seconds: the time to compute one
// constrained row's token mask, observed per token of every constrained
// request (the mask is computed on the CPU on every tier, while the model
// computes the step's logits), so its median and p99 are the mask cost per
// token per request.
func newMaskHistogram() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "zrt_constraint_mask_seconds",
		Help: "Time to compute a constrained request's token mask, per generated token.", Buckets: maskBuckets}, []string{"model_name"})
}

// timedConstraint times each mask of the constraint it wraps.
type timedConstraint struct {
	decode.Constraint
	obs prometheus.Observer
}

func (c timedConstraint) Mask(allowed []uint64) {
	t0 := time.Now()
	c.Constraint.Mask(allowed)
	c.obs.Observe(time.Since(t0).Seconds())
}

// Release hands the constraint's resources back (a grammar matcher's
// machine to the next request of its grammar) once the request ended.
func (c timedConstraint) Release() {
	if r, ok := c.Constraint.(interface{ Release() }); ok {
		r.Release()
	}
}

// timedEnder is a timedConstraint of a constraint that says which tokens
// end it (decode.Ender: a grammar matcher), which it passes on, so that
// the engine may leave a token's Accept off its step's path.
type timedEnder struct {
	timedConstraint
}

func (c timedEnder) Ends(tok int32) bool { return c.Constraint.(decode.Ender).Ends(tok) }

// timed wraps c to time its masks.
func timed(c decode.Constraint, obs prometheus.Observer) decode.Constraint {
	t := timedConstraint{Constraint: c, obs: obs}
	if _, ok := c.(decode.Ender); ok {
		return timedEnder{t}
	}
	return t
}
