package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/decode"
)

// TestMaxQueued holds the per-tenant queue bound: a tenant's request is
// refused with ErrQueued while MaxQueued of its requests wait for a slot,
// counting both those queued since the last step and those the step left
// waiting, never the ones running; other tenants are not affected; a
// refused request is not charged against its tenant's rate; and a new
// policy applies to the next request.
func TestMaxQueued(t *testing.T) {
	m := &duringStep{scripted: &scripted{t: t, slots: 1, maxPages: 16, kvPages: 100, last: map[int]int32{}}}
	clock := time.Unix(1_700_000_000, 0)
	policy := NewLivePolicy(Policy{Tenants: map[string]TenantPolicy{"a": {MaxQueued: 2, RequestsPerMinute: 4}}})
	e, err := New(m, simTokenizer(t), Config{Slots: 1, ChunkCap: 16, Policy: policy, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	submit := func(tenant string) error {
		_, err := e.Submit(ctx, Request{Tenant: tenant, Prompt: []int32{1, 5, 6}, Decode: decode.Params{MaxTokens: 50, IgnoreEOS: true}})
		return err
	}
	refused := func(what string, err error) {
		t.Helper()
		var ae *AdmitError
		if !errors.Is(err, ErrQueued) || !errors.As(err, &ae) || ae.Tenant != "a" || ae.Limit != 2 {
			t.Fatalf("%s: %v (%+v), want ErrQueued for tenant a at its limit of 2", what, err, ae)
		}
	}
	// Nothing has run: a1 and a2 wait, a3 is one too many; b has no bound.
	for _, tn := range []string{"a", "a", "b", "b", "b"} {
		if err := submit(tn); err != nil {
			t.Fatalf("tenant %s: %v", tn, err)
		}
	}
	refused("a third waiting request", submit("a"))
	// A step admits a1 into the one slot: a2 still waits, so one more of
	// a's may queue, and not two — already while the step computes.
	m.during = func() {
		m.during = nil
		if err := submit("a"); err != nil {
			t.Fatalf("with a1 running and a2 waiting: %v", err)
		}
		refused("a's requests waiting during the step", submit("a"))
	}
	if _, err := e.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if m.during != nil {
		t.Fatal("the step computed nothing")
	}
	refused("a's requests waiting after the step", submit("a"))
	// Its rate was charged for the three admitted requests only: the
	// fourth is admitted under a policy without the bound, the fifth is
	// over requests_per_minute.
	policy.Store(Policy{Tenants: map[string]TenantPolicy{"a": {RequestsPerMinute: 4}}})
	if err := submit("a"); err != nil {
		t.Fatalf("without max queued: %v", err)
	}
	if err := submit("a"); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("a's fifth request in a minute: %v, want ErrRateLimited", err)
	}
	// The engine's own bound, QueueDepth, counts every tenant's.
	policy.Store(Policy{QueueDepth: 6})
	if err := submit("c"); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("with a2, a3, a4 and three of b's waiting: %v, want ErrQueueFull", err)
	}
}

// TestAdmitErrors: each check Submit makes refuses with its kind and the
// numbers that explain it.
func TestAdmitErrors(t *testing.T) {
	m := &scripted{t: t, slots: 2, maxPages: 16, kvPages: 10, last: map[int]int32{}}
	policy := NewLivePolicy(Policy{Tenants: map[string]TenantPolicy{
		"ctx": {MaxContext: 20}, "pages": {MaxPages: 2}, "tpm": {TokensPerMinute: 30}}})
	tok := simTokenizer(t)
	e, err := New(m, tok, Config{Slots: 2, ChunkCap: 16, ContextLength: 256, Policy: policy})
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int32{1, 5, 6, 7}
	for _, c := range []struct {
		name    string
		tenant  string
		prompt  []int32
		max     int
		kind    error
		want    AdmitError
		choices int
	}{
		{"empty", "x", nil, 4, ErrEmpty, AdmitError{MaxTokens: 4, Choices: 1}, 1},
		{"bad token", "x", []int32{1, int32(tok.NVocab())}, 4, ErrBadToken, AdmitError{Token: int32(tok.NVocab()), Limit: tok.NVocab(), Prompt: 2, MaxTokens: 4, Choices: 1}, 1},
		{"model context", "x", prompt, 300, ErrTooLong, AdmitError{Limit: 256, Context: 256, Prompt: 4, MaxTokens: 300, Choices: 1}, 1},
		{"tenant context", "ctx", prompt, 20, ErrTooLong, AdmitError{Tenant: "ctx", Limit: 20, Context: 256, Prompt: 4, MaxTokens: 20, Choices: 1}, 1},
		{"pool pages", "x", prompt, 200, ErrTooLong, AdmitError{Limit: 10, Pages: 13, Context: 256, Prompt: 4, MaxTokens: 200, Choices: 1}, 1},
		{"tenant pages", "pages", prompt, 40, ErrTooLong, AdmitError{Tenant: "pages", Limit: 2, Pages: 3, Context: 256, Prompt: 4, MaxTokens: 40, Choices: 1}, 1},
		{"beyond a minute's tokens", "tpm", prompt, 14, ErrExceedsRate, AdmitError{Tenant: "tpm", Limit: 30, Prompt: 4, MaxTokens: 14, Choices: 2}, 2},
	} {
		choices := make([]decode.Params, c.choices)
		for i := range choices {
			choices[i] = decode.Params{MaxTokens: c.max}
		}
		_, err := e.SubmitN(context.Background(), Request{Tenant: c.tenant, Prompt: c.prompt}, choices)
		var ae *AdmitError
		if !errors.Is(err, c.kind) || !errors.As(err, &ae) {
			t.Errorf("%s: %v, want %v", c.name, err, c.kind)
			continue
		}
		c.want.Reason = c.kind
		if *ae != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, *ae, c.want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.Run(ctx)
	if err := e.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Submit(ctx, Request{Tenant: "x", Prompt: prompt, Decode: decode.Params{MaxTokens: 4}}); !errors.Is(err, ErrDraining) {
		t.Errorf("while draining: %v, want ErrDraining", err)
	}
}

// duringStep is a scripted model that calls during, when set, inside its
// next step: what a request submitted while the engine computes meets.
type duringStep struct {
	*scripted
	during func()
}

func (m *duringStep) Step(ctx context.Context, b runtime.Batch) error {
	if m.during != nil {
		m.during()
	}
	return m.scripted.Step(ctx, b)
}

// TestIdleWakesOnCancel: with nothing running and a request that cannot
// be admitted (the floating pool is too small beside another tenant's
// reservation), Run blocks without polling, and the request's
// cancellation wakes it to finish the request.
func TestIdleWakesOnCancel(t *testing.T) {
	m := &scripted{t: t, slots: 2, maxPages: 16, kvPages: 20, last: map[int]int32{}}
	policy := NewLivePolicy(Policy{Tenants: map[string]TenantPolicy{"a": {ReservedPages: 15}}})
	e, err := New(m, simTokenizer(t), Config{Slots: 2, ChunkCap: 16, Policy: policy})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.Run(ctx)
	rctx, rcancel := context.WithCancel(ctx)
	ch, err := e.Submit(rctx, Request{Tenant: "b", Prompt: []int32{1, 5, 6}, Decode: decode.Params{MaxTokens: 100}})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s := e.Stats(); s.Waiting != 1 || s.Running != 0; s = e.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("the request never queued: %+v", s)
		}
		time.Sleep(time.Millisecond)
	}
	rcancel()
	select {
	case ev := <-ch:
		if ev.Finish != Cancelled {
			t.Fatalf("ended %q, want %q", ev.Finish, Cancelled)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled request never ended: the idle engine did not wake")
	}
}

// TestDrainWaits: Drain returns once the requests queued and running when
// it was called have ended — their streams are closed by then — and
// Submit refuses from its call on.
func TestDrainWaits(t *testing.T) {
	m := &scripted{t: t, slots: 1, maxPages: 16, kvPages: 100, last: map[int]int32{}}
	e, err := New(m, simTokenizer(t), Config{Slots: 1, ChunkCap: 16})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var chans []<-chan Event
	for range 3 {
		ch, err := e.Submit(ctx, Request{Tenant: "a", Prompt: []int32{1, 5, 6}, Decode: decode.Params{MaxTokens: 20, IgnoreEOS: true}})
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	go e.Run(ctx)
	if err := e.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	for i, ch := range chans {
		for open := true; open; {
			select {
			case _, open = <-ch:
			default:
				t.Fatalf("request %d's stream is still open after Drain", i)
			}
		}
	}
	if s := e.Stats(); s.Waiting != 0 || s.Running != 0 {
		t.Errorf("after Drain: %d waiting, %d running", s.Waiting, s.Running)
	}
	if _, err := e.Submit(ctx, Request{Tenant: "a", Prompt: []int32{1}}); !errors.Is(err, ErrDraining) {
		t.Errorf("after Drain: %v, want ErrDraining", err)
	}
}
