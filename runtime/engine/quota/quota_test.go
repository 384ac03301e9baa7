package quota

import (
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
