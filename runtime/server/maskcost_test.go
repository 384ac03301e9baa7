package server

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/zrtdev/zrt/runtime/decode"
)

// plainConstraint allows everything and says nothing of its ends.
type plainConstraint struct{ released bool }

func (*plainConstraint) Mask(allowed []uint64) {
	for i := range allowed {
		allowed[i] = ^uint64(0)
	}
}
func (*plainConstraint) Accept(int32) error { return nil }
func (*plainConstraint) Done() bool         { return false }
func (c *plainConstraint) Release()         { c.released = true }

// enderConstraint is a plainConstraint that ends at token 7.
type enderConstraint struct{ plainConstraint }

func (*enderConstraint) Ends(tok int32) bool { return tok == 7 }

// TestTimedConstraint: the timing wrapper is an Ender exactly when what it
// wraps is one, passes Ends and Release on, and observes each mask.
func TestTimedConstraint(t *testing.T) {
	n := 0
	obs := prometheus.ObserverFunc(func(float64) { n++ })
	p := &plainConstraint{}
	if _, ok := timed(p, obs).(decode.Ender); ok {
		t.Error("a constraint without Ends became an Ender")
	}
	e := &enderConstraint{}
	c := timed(e, obs)
	en, ok := c.(decode.Ender)
	if !ok {
		t.Fatal("a matcher-like constraint lost its Ends")
	}
	if !en.Ends(7) || en.Ends(3) {
		t.Error("Ends not passed on")
	}
	c.Mask(make([]uint64, 2))
	c.(interface{ Release() }).Release()
	if !e.released {
		t.Error("Release not passed on")
	}
	if n != 1 {
		t.Errorf("%d masks observed, want 1", n)
	}
}
