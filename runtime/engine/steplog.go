package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/zrtdev/zrt/runtime/spec"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/decode"
	"github.com/zrtdev/zrt/runtime/engine/sched"
	"github.com/zrtdev/zrt/runtime/tokenizer"
)

// StepRecord is one line of a step log (Config.StepLog): the first line
// carries only Config; every later one is a step that received arrivals,
// saw cancellations, computed rows or changed who holds slots and pages,
// with everything it depended on, so Rerun can run the same steps on a
// fresh engine and compare what they sampled.
type StepRecord struct {
	Config *StepLogConfig `json:"config,omitempty"`
	// Step numbers the log's steps from 1 (steps that did nothing are
	// not logged, so it may be less than Stats().Steps counts).
	Step int `json:"step,omitempty"`
	// Time is the engine's clock at the step's start (Unix ns), which
	// the tenants' token rates are read at.
	Time int64 `json:"time,omitempty"`
	// Arrivals are the requests this step took from the queue, in
	// submission order (which fixes their ids).
	Arrivals []LoggedRequest `json:"arrivals,omitempty"`
	// Cancelled are the requests whose context was done at the step's
	// start.
	Cancelled []uint64 `json:"cancelled,omitempty"`
	// LatencyRows is the latency budget the step was planned with
	// (sched.Input): it comes from timing earlier steps, so a rerun uses
	// the logged value.
	LatencyRows int `json:"latency_rows,omitempty"`
	// Prefill is how the step treated waiting prompts when the variants'
	// measured times decided it (Config.PrefillHold), which a rerun does
	// too; nil when they did not.
	Prefill *LoggedPrefill `json:"prefill,omitempty"`
	Plan    *sched.Plan    `json:"plan,omitempty"`
	Slots   []uint64       `json:"slots,omitempty"` // the request in each slot during the step; 0: free
	Variant string         `json:"variant,omitempty"`
	Rows    []runtime.Row  `json:"rows,omitempty"` // the query rows the step computed
	Sampled []Sampled      `json:"sampled,omitempty"`
	// Drafts are the draft tokens proposed for requests before the step
	// was planned (speculative decoding), which a rerun proposes again.
	Drafts []LoggedDraft `json:"drafts,omitempty"`
	Err    string        `json:"error,omitempty"` // the step failed
}

// LoggedPrefill is a step's plan for the prompts that wait for their
// prefill: its query rows, or that it computes none of them.
type LoggedPrefill struct {
	Budget int  `json:"budget"`
	Hold   bool `json:"hold,omitempty"`
}

// StepLogConfig is the engine's configuration as far as a rerun needs it.
type StepLogConfig struct {
	Slots         int            `json:"slots"`
	ChunkCap      int            `json:"chunk_cap"`
	ContextLength int            `json:"context_length"`
	NoPrefixCache bool           `json:"no_prefix_cache,omitempty"`
	Reserved      map[string]int `json:"reserved,omitempty"`
	Speculative   string         `json:"speculative,omitempty"`
	HostKVBytes   int64          `json:"host_kv_bytes,omitempty"`
	// PrefillHold is Config.PrefillHold in effect (0: none; logs from
	// before it held none).
	PrefillHold int `json:"prefill_hold,omitempty"`
}

// LoggedDraft is a request's proposed draft of a step: its tokens (an
// n-gram draft, a draft model's), or how many the draft variant was to
// make (N). Sampled says a draft model drew the tokens from its
// distribution for a sampled request: verifying them weighs each by its
// probability there, which the log does not hold, so a rerun makes them
// again with the draft model (RerunDraft) and compares.
type LoggedDraft struct {
	ID      uint64  `json:"id"`
	Tokens  []int32 `json:"tokens,omitempty"`
	N       int     `json:"n,omitempty"`
	Sampled bool    `json:"sampled,omitempty"`
}

// LoggedRequest is an arrival with its id and the policy it met: its
// tenant's scheduling limits and prefix-cache scope at arrival.
type LoggedRequest struct {
	ID     uint64        `json:"id"`
	Tenant string        `json:"tenant"`
	QoS    sched.QoS     `json:"qos"`
	Scope  string        `json:"scope"`
	Limits sched.Limits  `json:"limits"`
	Prompt []int32       `json:"prompt"`
	Decode decode.Params `json:"decode"`
	// Lead is the first choice of the SubmitN group this request is a
	// later choice of (0: none); the log lists a group's choices
	// together, the lead first.
	Lead uint64 `json:"lead,omitempty"`
}

// Sampled is a token a step sampled for a request, and whether it ended it.
type Sampled struct {
	ID     uint64 `json:"id"`
	Token  int32  `json:"token"`
	Finish Finish `json:"finish,omitempty"`
}

// stepLog writes the step log as JSON lines, one Write per line so the
// file ends on a whole record if the process dies.
type stepLog struct {
	w   io.Writer
	n   int
	err error
}

func (l *stepLog) write(rec *StepRecord) {
	if l.err != nil {
		return
	}
	b, err := json.Marshal(rec)
	if err == nil {
		_, err = l.w.Write(append(b, '\n'))
	}
	if err != nil {
		l.err = fmt.Errorf("engine: writing the step log: %w", err)
	}
}

// logging reports whether steps are recorded (to a step log or a rerun).
func (e *Engine) logging() bool { return e.slog != nil || e.onStep != nil }

// endRecord emits the step's record if the step did anything.
func (e *Engine) endRecord() {
	rec := e.rec
	e.rec = nil
	if rec == nil || (len(rec.Arrivals) == 0 && len(rec.Cancelled) == 0 && (rec.Plan == nil ||
		rec.Plan.NRows == 0 && len(rec.Plan.Admit) == 0 && len(rec.Plan.Preempt) == 0 && len(rec.Plan.Release) == 0)) {
		return
	}
	e.logged++
	rec.Step = e.logged
	if e.slog != nil {
		e.slog.write(rec)
	}
	if e.onStep != nil {
		e.onStep(rec)
	}
}

// recordSlots notes which request holds each slot.
func (e *Engine) recordSlots() {
	if e.rec == nil {
		return
	}
	e.rec.Slots = make([]uint64, len(e.slots))
	for i, r := range e.slots {
		if r != nil {
			e.rec.Slots[i] = r.id
		}
	}
}

// RerunError is the first step at which a rerun diverged from its log.
type RerunError struct {
	Step    int
	Request uint64 // 0 when the step's plan, not a token, differs
	Msg     string
}

func (e *RerunError) Error() string {
	if e.Request != 0 {
		return fmt.Sprintf("rerun: step %d, request %d: %s", e.Step, e.Request, e.Msg)
	}
	return fmt.Sprintf("rerun: step %d: %s", e.Step, e.Msg)
}

// Rerun replays a step log on a fresh engine over m: it submits each
// step's arrivals, cancels what the log cancelled, runs the step, and
// returns a *RerunError at the first step whose sampled tokens (or,
// failing that, plan) differ from the log's. It returns the steps replayed.
// Requests the original engine cut off as too slow are not reproduced.
// A draft model's tokens are taken from the log, except those it drew for
// sampled requests (LoggedDraft.Sampled), which need RerunDraft.
func Rerun(ctx context.Context, m Model, tok *tokenizer.Tokenizer, log io.Reader) (int, error) {
	return RerunDraft(ctx, m, nil, tok, log)
}

// RerunDraft is Rerun with draft the draft model of a log served with
// one (speculative kind draft): it makes each logged draft again, greedy
// or sampled, and fails at the first step whose draft tokens differ from
// the log's. With draft nil it is Rerun.
func RerunDraft(ctx context.Context, m, draft Model, tok *tokenizer.Tokenizer, log io.Reader) (int, error) {
	sc := bufio.NewScanner(log)
	sc.Buffer(nil, 1<<28) // a record carries whole prompts
	var recs []StepRecord
	for line := 1; sc.Scan(); line++ {
		var rec StepRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return 0, fmt.Errorf("rerun: step log line %d: %w", line, err)
		}
		recs = append(recs, rec)
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("rerun: reading the step log: %w", err)
	}
	if len(recs) == 0 || recs[0].Config == nil {
		return 0, errors.New("rerun: the step log does not start with the engine's config")
	}
	lc := recs[0].Config
	// The tenants' policies as the log met them: reservations from the
	// start, limits and scopes as of each tenant's latest arrival.
	tenants := map[string]TenantPolicy{}
	for t, n := range lc.Reserved {
		tenants[t] = TenantPolicy{ReservedPages: n}
	}
	policy := NewLivePolicy(Policy{Tenants: maps.Clone(tenants)})
	var clock time.Time
	var sp Speculation
	if lc.Speculative != "" {
		var err error
		if sp, err = ParseSpeculation(lc.Speculative); err != nil {
			return 0, fmt.Errorf("rerun: the step log's config: %w", err)
		}
		if sp.Kind == spec.Draft && draft == nil {
			sp.Kind = spec.NGram // a draft model's tokens are logged: the rerun pins them, needing no draft model
		}
	}
	if draft != nil && sp.Kind != spec.Draft {
		return 0, fmt.Errorf("rerun: a draft model was given, but the step log's engine speculated %q", lc.Speculative)
	}
	cfg := Config{Speculative: sp, DraftModel: draft, Now: func() time.Time { return clock }, Slots: lc.Slots, ChunkCap: lc.ChunkCap, ContextLength: lc.ContextLength, NoPrefixCache: lc.NoPrefixCache,
		HostKVBytes: lc.HostKVBytes, EventBuffer: 1 << 20, Policy: policy, PrefillHold: -1}
	if lc.PrefillHold > 0 {
		cfg.PrefillHold = lc.PrefillHold
	}
	e, err := New(m, tok, cfg)
	if err != nil {
		return 0, fmt.Errorf("rerun: %w", err)
	}
	var got *StepRecord
	e.onStep = func(r *StepRecord) { got = r }
	drafts := map[uint64][]int32{}
	e.pinDrafts = func(id uint64) []int32 { return drafts[id] }
	cancels := map[uint64]context.CancelFunc{}
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	var streams []<-chan Event
	for i := range recs[1:] {
		want := &recs[i+1]
		for j := 0; j < len(want.Arrivals); {
			a := want.Arrivals[j]
			tp := tenants[a.Tenant]
			tp.MaxSlots, tp.MaxPages = a.Limits.MaxSlots, a.Limits.MaxPages
			tp.DecodeTokensPerSecond, tp.PrefillTokensPerSecond = a.Limits.DecodeTokensPerSecond, a.Limits.PrefillTokensPerSecond
			tp.Scope = a.Scope
			tenants[a.Tenant] = tp
			policy.Store(Policy{Tenants: maps.Clone(tenants)})
			// A group is its lead and the arrivals after it that name it;
			// they share one context, as SubmitN's choices do.
			choices := []decode.Params{a.Decode}
			for j++; j < len(want.Arrivals) && want.Arrivals[j].Lead == a.ID; j++ {
				choices = append(choices, want.Arrivals[j].Decode)
			}
			rctx, cancel := context.WithCancel(ctx)
			// The engine numbers arrivals in submission order from 1, as
			// the original did, so the log's id names this request.
			cancels[a.ID] = cancel
			ev, err := e.SubmitN(rctx, Request{Tenant: a.Tenant, QoS: a.QoS, Prompt: a.Prompt}, choices)
			if err != nil {
				return i, &RerunError{Step: want.Step, Request: a.ID, Msg: fmt.Sprintf("refused: %v", err)}
			}
			streams = append(streams, ev...)
		}
		for _, id := range want.Cancelled {
			if c := cancels[id]; c != nil {
				c()
			}
		}
		got = nil
		clock, e.pinned = time.Unix(0, want.Time), want
		clear(drafts)
		for _, d := range want.Drafts {
			switch {
			case draft != nil:
				drafts[d.ID] = slices.Repeat([]int32{-1}, len(d.Tokens)) // the rerun's draft model makes them
			case d.Sampled:
				return i, &RerunError{Step: want.Step, Request: d.ID, Msg: "its draft tokens were drawn from the draft model's distribution, " +
					"which verifying them needs: rerun with the draft model (zrt-run rerun BUNDLE LOG DRAFT)"}
			default:
				drafts[d.ID] = d.Tokens
			}
			for range d.N {
				drafts[d.ID] = append(drafts[d.ID], -1) // the rerun's draft variant makes them
			}
		}
		if _, err := e.Step(ctx); err != nil && want.Err == "" {
			return i, &RerunError{Step: want.Step, Msg: fmt.Sprintf("the step failed: %v", err)}
		}
		// Read every stream so no request is cut off as too slow.
		for j, ch := range streams {
			for drained := false; ch != nil && !drained; {
				select {
				case _, ok := <-ch:
					if !ok {
						streams[j], ch = nil, nil
					}
				default:
					drained = true
				}
			}
		}
		if got == nil {
			got = &StepRecord{}
		}
		if err := compareStep(want, got); err != nil {
			return i, err
		}
	}
	return len(recs) - 1, nil
}

// compareStep compares a rerun's step with the log's: tokens first, as
// they are what a client saw, then the plan.
func compareStep(want, got *StepRecord) error {
	// The drafts first: a token of a row past a draft that differs is
	// that difference's consequence.
	gotDraft := map[uint64]LoggedDraft{}
	for _, d := range got.Drafts {
		gotDraft[d.ID] = d
	}
	for _, w := range want.Drafts {
		if g := gotDraft[w.ID]; !slices.Equal(g.Tokens, w.Tokens) || g.N != w.N {
			return &RerunError{Step: want.Step, Request: w.ID, Msg: fmt.Sprintf("drafted %v (%d made by the draft variant), the log has %v (%d)", g.Tokens, g.N, w.Tokens, w.N)}
		}
	}
	// A request may take several tokens in a step (a verified draft):
	// they are compared in order.
	gotTok := map[uint64][]Sampled{}
	for _, s := range got.Sampled {
		gotTok[s.ID] = append(gotTok[s.ID], s)
	}
	for _, w := range want.Sampled {
		gs := gotTok[w.ID]
		if len(gs) == 0 {
			return &RerunError{Step: want.Step, Request: w.ID, Msg: fmt.Sprintf("the log has token %d, the rerun sampled none", w.Token)}
		}
		if g := gs[0]; g != w {
			return &RerunError{Step: want.Step, Request: w.ID, Msg: fmt.Sprintf("sampled token %d (finish %q), the log has %d (finish %q)", g.Token, g.Finish, w.Token, w.Finish)}
		}
		gotTok[w.ID] = gs[1:]
	}
	for _, id := range slices.Sorted(maps.Keys(gotTok)) {
		if gs := gotTok[id]; len(gs) > 0 {
			return &RerunError{Step: want.Step, Request: id, Msg: fmt.Sprintf("sampled token %d, the log has none", gs[0].Token)}
		}
	}
	wp, gp := "none", "none"
	if want.Plan != nil {
		wp = want.Plan.String()
	}
	if got.Plan != nil {
		gp = got.Plan.String()
	}
	if wp != gp || !slices.Equal(want.Slots, got.Slots) {
		return &RerunError{Step: want.Step, Msg: fmt.Sprintf("plan %s, slots %v; the log has %s, slots %v", gp, got.Slots, wp, want.Slots)}
	}
	return nil
}
