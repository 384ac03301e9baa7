package quota

import (
	"math"
	"testing"
	"time"
)

func TestBuckets(t *testing.T) {
	l := New(func(tenant string) Rates {
		return map[string]Rates{"a": {RequestsPerMinute: 2}, "b": {TokensPerMinute: 600}}[tenant]
	})
	t0 := time.Unix(1000, 0)
	// Two requests a minute: the third waits 30 s for the bucket to refill
	// by one.
	for i, want := range []bool{true, true, false} {
		if ok, _ := l.Admit("a", 1, t0); ok != want {
			t.Fatalf("request %d: admitted %v", i, ok)
		}
	}
	if _, wait := l.Admit("a", 1, t0); wait != 30*time.Second {
		t.Errorf("retry after %v, want 30s", wait)
	}
	if ok, _ := l.Admit("a", 1, t0.Add(30*time.Second)); !ok {
		t.Error("not admitted after the wait it was told")
	}
	// Tokens: 600 a minute is 10 a second; a refused request charges nothing.
	if ok, _ := l.Admit("b", 500, t0); !ok {
		t.Fatal("500 of 600 refused")
	}
	if ok, wait := l.Admit("b", 200, t0); ok || wait != 10*time.Second {
		t.Errorf("200 more: admitted %v, retry after %v (want 10s)", ok, wait)
	}
	if ok, _ := l.Admit("b", 100, t0); !ok {
		t.Error("the refused request was charged")
	}
	if ok, wait := l.Admit("b", 601, t0.Add(time.Hour)); ok || wait >= 0 {
		t.Errorf("a request over a minute's tokens: %v %v", ok, wait)
	}
	// No rates, no limit.
	for range 1000 {
		if ok, _ := l.Admit("c", 1e6, t0); !ok {
			t.Fatal("an unlimited tenant was limited")
		}
	}
}

func TestMeter(t *testing.T) {
	var m Meter
	t0 := time.Unix(1000, 0)
	if r := m.Rate(t0); r != 0 {
		t.Fatalf("idle meter reads %v", r)
	}
	// 100 tokens a second in 10 ms steps for a minute reads as 100/s.
	now := t0
	for range 6000 {
		now = now.Add(10 * time.Millisecond)
		m.Add(1, now)
	}
	if r := m.Rate(now); math.Abs(r-100) > 1 {
		t.Fatalf("steady 100 tokens/s reads %.2f", r)
	}
	// Idle for one time constant, it has faded to 1/e.
	if r := m.Rate(now.Add(Smoothing)); math.Abs(r-100/math.E) > 1 {
		t.Fatalf("after %v idle: %.2f, want %.2f", Smoothing, r, 100/math.E)
	}
	// Reading does not change it.
	if a, b := m.Rate(now.Add(time.Second)), m.Rate(now.Add(time.Second)); a != b {
		t.Fatalf("two reads differ: %v, %v", a, b)
	}
}
