// Package engine serves many requests at once on one runtime.Program: it
// queues submitted requests, and every step asks the scheduler (package
// sched) whom to admit and which query rows to compute — every decoding
// request's next token and prefill chunks up to a budget, in one replay —
// runs that step, and streams each request's tokens back as events. KV
// pages come from one pool (package kvpool). It knows nothing of HTTP: a
// server sits on its small API (Submit, the event channel, cancellation
// through the request's context, Stats, Drain), which is all a front end
// needs: each tenant's policy is one TenantPolicy (policy.go), every
// refusal an *AdmitError, every ending a Finish.
package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	goruntime "runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/decode"
	"github.com/zrtdev/zrt/runtime/engine/hostkv"
	"github.com/zrtdev/zrt/runtime/engine/kvpool"
	"github.com/zrtdev/zrt/runtime/engine/prefix"
	"github.com/zrtdev/zrt/runtime/engine/quota"
	"github.com/zrtdev/zrt/runtime/engine/sched"
	"github.com/zrtdev/zrt/runtime/sample"
	"github.com/zrtdev/zrt/runtime/spec"
	"github.com/zrtdev/zrt/runtime/spec/draft"
	"github.com/zrtdev/zrt/runtime/tokenizer"
)

// Model is what the engine needs of a runtime.Program (an interface so a
// scripted model can drive the simulation tests).
type Model interface {
	Key(stage runtime.Stage, rows int) (runtime.ShapeKey, bool)
	Slots() int
	MaxPages() int
	KVPages() int
	// SlotState reports state a slot holds beside its KV pages (recurrent
	// layers' state, a ring of window-layer pages), which a prompt must
	// build from its first token and the slot's next occupant
	// overwrites: such a model gets no prefix cache, and a preempted
	// request recomputes its tokens.
	SlotState() bool
	Step(ctx context.Context, b runtime.Batch) error
	Logits(slot int, dst []float32) []float32
	// Greedy is the token the step's ARGMAX picked for slot: the first
	// largest of its logits.
	Greedy(slot int) int32
}

// KVPager is a Model whose KV pages the engine can copy to and from host
// memory, between steps: the prefix cache's host tier (Config.HostKVBytes)
// keeps the bytes of pages the pool evicts and copies them back into
// fresh pages when a request's prefix finds them.
type KVPager interface {
	// KVLayout identifies how the model's KV pages hold their bytes
	// (the model, its build, the target, the cache types, the page
	// size): bytes stored under one layout are never written into pages
	// of another. "" means the pages cannot be copied (the tier has no
	// way to, or the KV is split across devices).
	KVLayout() string
	// KVPageBytes is one page's bytes.
	KVPageBytes() int
	// ReadKVPage copies page's bytes into dst (KVPageBytes long), as the
	// last step left them.
	ReadKVPage(page uint32, dst []byte) error
	// WriteKVPage copies src into page, in time for the next step to
	// read it.
	WriteKVPage(page uint32, src []byte) error
}

// KVCopier is a Model that can copy one KV page's bytes into another
// between steps: a SubmitN choice takes its own copy of its group's
// first choice's partial prompt page instead of computing the tokens on
// it again. A model that is none (or whose CopiesKVPages is false) has
// its choices compute those tokens.
type KVCopier interface {
	// CopiesKVPages reports whether CopyKVPage can copy pages (the tier
	// has a way to, and the KV is not split across devices).
	CopiesKVPages() bool
	// CopyKVPage copies page src's bytes, as the last step left them,
	// into page dst, in time for the next step to read them.
	CopyKVPage(dst, src uint32) error
}

// DeviceMasker is a Model whose steps take a constrained row's greedy
// choice under its token mask on the device (runtime.Row.Mask): the
// engine then sends each greedy constrained row's mask with its step,
// instead of reading the row's logits after it.
type DeviceMasker interface {
	MasksOnDevice() bool
}

// DeviceSampler is a Model that draws sampled rows' tokens on the device
// (runtime.Row.Sample, runtime.Program.SamplesOnDevice): their logits
// stay there.
type DeviceSampler interface {
	SamplesOnDevice() bool
}

// Config is the engine's policy.
type Config struct {
	// Slots is how many requests run at once (≤ the program's slots).
	Slots int
	// ChunkCap is the query rows one step computes at most (≥ Slots, and
	// ≤ the rows of the largest prefill variant).
	ChunkCap int
	// ContextLength bounds a request's prompt plus generated tokens.
	ContextLength int
	// EventBuffer bounds the events a request's consumer may leave unread;
	// past it the request is cancelled as too slow (backpressure).
	EventBuffer int
	// Policy is the queue's bound and every tenant's policy (limits,
	// rates, reservation, prefix-cache scope), read at each admission
	// and step (nil: no limits, each tenant its own scope).
	Policy *LivePolicy
	// Now is the clock rate limits use (nil: time.Now).
	Now func() time.Time
	// NoPrefixCache turns the prefix cache off.
	NoPrefixCache bool
	// HostKVBytes, when > 0, gives the prefix cache a host-memory tier
	// of that many bytes: pages the pool evicts keep their bytes there
	// (least recently used out first), and a request whose prefix they
	// hold gets fresh pages with the bytes copied back instead of
	// computing them. It needs a model that is a KVPager with a layout;
	// a model without a prefix cache has no use for it.
	HostKVBytes int64
	// Trace, when set, receives a Chrome trace-event file of the engine's
	// steps, slot and page counters, admissions, preemptions and finishes
	// (chrome://tracing, Perfetto); Close writes its end. Timestamps come
	// from Now.
	Trace io.Writer
	// InteractiveSlack is how much longer than a step without prefill a
	// step may take while an interactive request decodes, as a fraction
	// (seed 000 §18.4's latency budget): the engine times its steps and
	// cuts standard and batch prefill to fit (sched.Input.LatencyRows).
	// 0 means the default, 0.2; a negative value turns the limit off.
	InteractiveSlack float64
	// PrefillHold bounds, in steps, how long a request's prompt rows may
	// wait while others decode (planPrefill): a step that carries any
	// prompt row runs a prefill variant, whose time depends on which
	// variant more than on how many of its rows are used, so prompts
	// that arrive one by one would otherwise make most steps a
	// half-empty one. Once the variants' times are measured, each step
	// takes the prompt rows of the variant that adds the least time per
	// prompt row, or waits for more arrivals when that would be a poor
	// fill; before that, prompts wait while they and the decoding rows
	// fill less than ChunkCap. 0 means the default, 4; a negative value
	// holds none.
	PrefillHold int
	// StepLog, when set, receives a JSON line per step of everything the
	// step depended on and sampled (StepRecord), for Rerun. It holds the
	// prompts' tokens.
	StepLog io.Writer
	// Speculative is speculative decoding (speculate.go): off (the zero
	// value), or drafts of up to K tokens a step — n-gram lookups, or the
	// bundle's draft variant (self) — for each request that decodes
	// without a constraint, as many as the measured acceptance and step
	// costs pay for (all of them when Fixed).
	Speculative Speculation
	// Drafter, when set, proposes the drafts instead of the mode's
	// (n-gram prompt lookup): a test's, whose acceptance it chooses.
	Drafter draft.Drafter
	// DraftModel is the draft bundle of speculative kind draft
	// (draftmodel.go): a second model of the same vocabulary, with at
	// least Slots slots, on the same tier; nil for the other kinds.
	DraftModel Model
	// NoFastForward turns off taking the tokens a request's constraint
	// forces ahead of the model (forced.go): each then costs the request
	// a step, as any other token does.
	NoFastForward bool
}

// Request is one generation request.
type Request struct {
	Tenant string
	// QoS is the request's class: its tenant's TenantPolicy.Class, as a
	// front end sets it.
	QoS    QoS
	Prompt []int32
	Decode decode.Params // MaxTokens bounds the generated tokens
}

// Event is one thing that happened to a request: a token (with the text it
// completes), a preemption, or its end.
type Event struct {
	Token int32 // -1 when the event carries no token
	// Preempted says the request lost its slot to a more urgent one (it
	// keeps its KV pages), or its pages because the pool ran dry (it
	// computes its tokens again on resume); either way its stream goes on
	// where it stopped when it resumes.
	Preempted bool
	Text      string // output that may be shown now
	// Logprobs are Token's, when the request's decode.Params ask for them.
	Logprobs *decode.Logprobs
	Finish   Finish // set on the last event
	Err      error  // why the request failed (Finish == Failed)
	// Usage, on the last event: CachedTokens of the prompt came from the
	// prefix cache (its host tier included) instead of being computed.
	PromptTokens, CompletionTokens, CachedTokens int
}

// Engine is the serving engine.
type Engine struct {
	m     Model
	tok   *tokenizer.Tokenizer
	cfg   Config
	rates *quota.Limiter

	mu       sync.Mutex // guards arrivals, waiting, draining and stats
	arrivals []*request
	// waiting and waitingBy count the requests the step loop holds that
	// wait for a slot, all and by tenant, as of the last step's
	// admissions (and the arrivals it has taken since): with arrivals,
	// what the policy's queue bounds limit. running counts those in
	// slots.
	waiting, running int
	waitingBy        map[string]int
	draining         bool
	// drained, made by a Drain that waits, is closed when nothing is
	// left to run.
	drained chan struct{}
	stats   Stats
	// wake tells an idle Run that a request arrived or one's context
	// ended (poke).
	wake chan struct{}

	// Owned by the step loop.
	pool   *kvpool.Pool
	prefix *prefix.Cache // nil when off
	reqs   []*request    // admitted and waiting, in arrival order
	slots  []*request    // by slot; nil = free
	nextID uint64
	logits []float32
	// sampleBufs are sampleAhead's workers' logits buffers.
	sampleBufs [][]float32
	meters     map[string]*meters // tenants' recent token rates
	cost       stepCost
	vcost      variantCosts
	// prefillRows is the prefill variants' row counts up to ChunkCap
	// (prefillLadder).
	prefillRows []int
	// host is the prefix cache's host tier (nil when off): the bytes of
	// evicted pages, under layout; hp copies them, in batches.
	host   *hostkv.Store
	layout string
	hp     hostPages
	// copier copies a SubmitN choice's partial prompt page from its
	// lead's (nil: the model cannot, and choices compute its tokens).
	copier KVCopier
	// pinned, set by Rerun, is the logged step being rerun: its latency
	// and prefill budgets, which came from timing the steps before it,
	// replace those the engine would compute.
	pinned *StepRecord
	tr     *tracer // nil: no trace
	// deviceMasks: the model takes masks (DeviceMasker).
	deviceMasks bool
	// deviceSamples: the model draws sampled rows' tokens (DeviceSampler).
	deviceSamples bool
	slog          *stepLog
	onStep        func(*StepRecord) // Rerun's view of each step
	drafter       draft.Drafter
	specPolicy    specPolicy
	dm            *draftModel // the draft model of kind draft
	// pinDrafts, set by Rerun, replaces each request's proposed draft
	// with the logged one.
	pinDrafts func(id uint64) []int32
	// resolve decides a row's token whose draft was drawn from a draft
	// model's distribution q (decode.Decoder.NextDrafted); a test
	// replaces it with a wrong rule to show that its statistics tell.
	resolve  func(d *decode.Decoder, src decode.Source, history []int32, pos int, draft int32, q sample.Dist) decode.Step
	rec      *StepRecord // the step's record while logging
	logged   int         // steps logged
	stepping sync.Mutex  // one Step at a time
	// maskWait is how long the step's model waited for the masks of its
	// device-masked rows (runtime.Batch.MasksReady), for the trace.
	maskWait time.Duration
	// forcing: the model can take a request's forced tokens in slots no
	// request holds (fastForward).
	forcing bool
	// masksDue are the device-masked rows whose next masks advance left
	// to compute: the next step's MasksReady computes them while the
	// device runs that step (flushMasks, also wherever that step will
	// not call it), so that starting the goroutines for them costs the
	// step loop nothing between two replays.
	masksDue []*decode.Decoder
}

// request is the engine's state for one Request.
type request struct {
	Request
	id     uint64
	ctx    context.Context
	events chan Event
	dec    *decode.Decoder
	slot   int // -1 until admitted
	// pages is its page table: the pages its tokens fill, growing as the
	// steps' rows reach new ones; the first mapped of them are mapped
	// from the prefix cache or its lead and are not its own.
	pages  []uint32
	mapped int
	// hits are the pages it would map if admitted this step (the
	// scheduler's view, fixed when the step's input is taken); fromLead
	// says they are its lead's.
	hits     []uint32
	fromLead bool
	// copying says that, admitted this step, it also takes a fresh page
	// with a copy of copySrc, its lead's partial prompt page, and starts
	// at its prompt's last token (see copiesLast); fixed with hits.
	copying bool
	copySrc uint32
	// swap are the indexes of the leading chunks it would take from the
	// host tier on admission (the others before the last of them are in
	// hits, in order): it maps hits, gets fresh pages for swap and
	// starts after them all.
	swap   []int
	tokens []int32 // prompt, then generated tokens
	// next is the token sampleAhead sampled for this step's row, which
	// route takes when ahead is set.
	next     decode.Step
	ahead    bool
	done     int      // tokens in the KV cache
	need     int      // pages for its longest possible sequence
	keys     []uint64 // prefix-cache keys of its prompt's full chunks
	cached   int      // prompt tokens mapped from the prefix cache at its first admission
	admitted bool     // admitted once: a later admission resumes it
	// replay, after a preemption on a model with recurrent layers or
	// one that released its pages, is how many of its tokens it
	// recomputes from position 0 (their state went with the slot, or
	// their pages with the pool); the scheduler sees them as its prompt.
	replay int
	// unwake stops waking Run when ctx ends (once r has finished).
	unwake func() bool
	// lead, for a choice after the first of a SubmitN group, is the
	// group's first choice, whose prompt pages it maps instead of
	// computing them (see shares); copies says the engine can copy the
	// lead's partial prompt page for it too (see copiesLast).
	lead   *request
	copies bool
	// held counts the steps its prompt rows waited (Config.PrefillHold):
	// those it was held back, and every step whose prefill the variants'
	// times sized while it had rows left (planPrefill).
	held int
	// spec is its speculative state; nil when it does not speculate
	// (speculation off, or a constrained request).
	spec *speculating
}

// stepCost estimates a replay's time from its rows, for the interactive
// latency budget: the time of a step without prefill, and what each
// prefill row adds, as exponential moving averages of replays timed by
// Config.Now (so a simulation's fake clock, which stands still within a
// step, measures nothing and limits nothing, and its seeds reproduce).
type stepCost struct {
	decode, row float64 // seconds
}

func (c *stepCost) observe(d time.Duration, prefill int) {
	const a = 0.1
	t := d.Seconds()
	switch {
	case prefill == 0 && c.decode == 0:
		c.decode = t
	case prefill == 0:
		c.decode += a * (t - c.decode)
	case c.decode > 0:
		r := max(t-c.decode, 0) / float64(prefill)
		if c.row == 0 {
			c.row = r
		} else {
			c.row += a * (r - c.row)
		}
	}
}

// rows is how many prefill rows keep a step within (1+slack) times one
// without prefill: at least 1, so prompts still advance; 0 (no limit)
// until both costs have been measured.
func (c *stepCost) rows(slack float64) int {
	if c.decode <= 0 || c.row <= 0 {
		return 0
	}
	return max(1, int(slack*c.decode/c.row))
}

// meters are a tenant's smoothed token rates, which its soft limits
// (sched.Limits) weigh.
type meters struct{ decode, prefill quota.Meter }

// Stats is a snapshot for metrics, health and the status page.
type Stats struct {
	Steps                   uint64
	LastStep                time.Time
	Slots, Waiting, Running int
	PagesFree, PagesTotal   int
	PromptTokens, Generated uint64
	Preemptions             uint64
	// Released counts the preemptions that took a request's KV pages as
	// well, because the pool ran dry: it computed its tokens again.
	Released uint64
	// PrefixQueried and PrefixHit count prompt tokens looked up in the
	// prefix cache and found there (vLLM counts its cache in tokens too).
	PrefixQueried, PrefixHit uint64
	PrefixPages              int
	// PrefixIdle counts the cached pages no request maps: the engine
	// evicts them as soon as a request needs the room, so they are as good
	// as free (vLLM's KV-cache usage counts them free too).
	PrefixIdle int

	// PrefixHostHit counts prompt tokens found in the prefix cache's host
	// tier and copied back (not counted in PrefixHit); HostPages and
	// HostBytes are what the tier holds, HostStored and HostEvicted the
	// pages it took in and pushed out for room.
	PrefixHostHit           uint64
	HostPages               int
	HostBytes               int64
	HostStored, HostEvicted uint64
	// HostReadErrors counts evicted pages the tier failed to read, which
	// the host tier therefore lacks.
	HostReadErrors uint64

	// ChoiceShared counts prompt tokens a SubmitN choice mapped from its
	// group's first choice, or copied from its partial prompt page,
	// instead of computing them.
	ChoiceShared uint64
	Finished     map[Finish]uint64
	// Decode and Mixed split the steps that computed rows by kind: decode
	// rows only, or prompt rows too. Where a step's time goes shows what
	// bounds serving: the device (Replay) or the host (Host); the time
	// between steps is idle.
	Decode, Mixed StepTimes
	// Speculative decoding (vLLM's spec_decode counters): SpecDrafts
	// counts the drafts verified (one a request a step), SpecDraftTokens
	// their tokens, SpecAccepted the tokens accepted, and
	// SpecAcceptedAt[i] the drafts whose token at position i was
	// accepted. The mean acceptance length is 1 + SpecAccepted /
	// SpecDrafts.
	SpecDrafts, SpecDraftTokens, SpecAccepted uint64
	SpecAcceptedAt                            []uint64
	// SpecDraftErrors counts a draft model's failed steps (the request
	// went on without a draft), SpecDraftError the last one's error.
	SpecDraftErrors uint64
	SpecDraftError  string
	// ForcedTokens counts the tokens constraints forced, which the
	// engine took ahead of the model (fastForward).
	ForcedTokens uint64
}

// Add returns the stats of two engines serving one model as replicas:
// every count and gauge summed, the later LastStep, the last draft error
// of either. TestStatsAdd holds it to every field.
func (s Stats) Add(o Stats) Stats {
	out := s
	if o.LastStep.After(s.LastStep) {
		out.LastStep = o.LastStep
	}
	out.Steps += o.Steps
	out.Slots += o.Slots
	out.Waiting += o.Waiting
	out.Running += o.Running
	out.PagesFree += o.PagesFree
	out.PagesTotal += o.PagesTotal
	out.PromptTokens += o.PromptTokens
	out.Generated += o.Generated
	out.Preemptions += o.Preemptions
	out.Released += o.Released
	out.PrefixQueried += o.PrefixQueried
	out.PrefixHit += o.PrefixHit
	out.PrefixPages += o.PrefixPages
	out.PrefixIdle += o.PrefixIdle
	out.PrefixHostHit += o.PrefixHostHit
	out.HostPages += o.HostPages
	out.HostBytes += o.HostBytes
	out.HostStored += o.HostStored
	out.HostEvicted += o.HostEvicted
	out.HostReadErrors += o.HostReadErrors
	out.ChoiceShared += o.ChoiceShared
	out.Finished = make(map[Finish]uint64, len(s.Finished)+len(o.Finished))
	for _, m := range []map[Finish]uint64{s.Finished, o.Finished} {
		for k, v := range m {
			out.Finished[k] += v
		}
	}
	out.Decode = out.Decode.add(o.Decode)
	out.Mixed = out.Mixed.add(o.Mixed)
	out.SpecDrafts += o.SpecDrafts
	out.SpecDraftTokens += o.SpecDraftTokens
	out.SpecAccepted += o.SpecAccepted
	out.SpecAcceptedAt = make([]uint64, max(len(s.SpecAcceptedAt), len(o.SpecAcceptedAt)))
	for _, at := range [][]uint64{s.SpecAcceptedAt, o.SpecAcceptedAt} {
		for i, v := range at {
			out.SpecAcceptedAt[i] += v
		}
	}
	out.SpecDraftErrors += o.SpecDraftErrors
	out.ForcedTokens += o.ForcedTokens
	if o.SpecDraftError != "" {
		out.SpecDraftError = o.SpecDraftError
	}
	return out
}

// StepTimes adds up steps of one kind.
type StepTimes struct {
	Steps uint64
	// Replay is the seconds spent in the model's Step: the device's work
	// and the host's wait for it.
	Replay float64
	// Host is the seconds of the engine's own work in those steps:
	// scheduling, building the batch, sampling, sending the tokens.
	Host float64
}

func (t StepTimes) add(o StepTimes) StepTimes {
	return StepTimes{Steps: t.Steps + o.Steps, Replay: t.Replay + o.Replay, Host: t.Host + o.Host}
}

// New returns an engine over m with the vocabulary tok.
func New(m Model, tok *tokenizer.Tokenizer, cfg Config) (*Engine, error) {
	if cfg.Slots <= 0 || cfg.Slots > m.Slots() {
		return nil, fmt.Errorf("engine: %d slots, the bundle has %d", cfg.Slots, m.Slots())
	}
	if cfg.ChunkCap < cfg.Slots {
		return nil, fmt.Errorf("engine: chunk_cap %d is below the %d slots: every decoding slot needs its row each step", cfg.ChunkCap, cfg.Slots)
	}
	if _, ok := m.Key(runtime.Prefill, cfg.ChunkCap); !ok {
		return nil, fmt.Errorf("engine: chunk_cap %d exceeds the bundle's largest prefill variant", cfg.ChunkCap)
	}
	if cfg.ContextLength <= 0 || cfg.ContextLength > m.MaxPages()*kernels.KVPageTokens {
		cfg.ContextLength = m.MaxPages() * kernels.KVPageTokens
	}
	if cfg.EventBuffer <= 0 {
		cfg.EventBuffer = 1024
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.InteractiveSlack == 0 {
		cfg.InteractiveSlack = 0.2
	}
	if cfg.PrefillHold == 0 {
		cfg.PrefillHold = 4
	}
	if testHookSpeculative != nil && !cfg.Speculative.On() {
		if sp, d := testHookSpeculative(); sp.Kind != spec.Draft && checkSpeculation(m, sp) == nil { // (a draft model is no test-wide setting)
			cfg.Speculative, cfg.Drafter = sp, d
		}
	}
	if err := checkSpeculation(m, cfg.Speculative); err != nil {
		return nil, err
	}
	e := &Engine{m: m, tok: tok, cfg: cfg, wake: make(chan struct{}, 1), pool: kvpool.New(m.KVPages()), slots: make([]*request, cfg.Slots),
		meters: map[string]*meters{}, waitingBy: map[string]int{}, vcost: variantCosts{}, prefillRows: prefillLadder(m, cfg.ChunkCap)}
	if cfg.Speculative.Kind == spec.Draft {
		if err := checkDraftModel(cfg.DraftModel, cfg.Slots); err != nil {
			return nil, fmt.Errorf("engine: speculative %s: %w", cfg.Speculative, err)
		}
		e.dm = newDraftModel(cfg.DraftModel)
	} else if cfg.DraftModel != nil {
		return nil, fmt.Errorf("engine: a draft model goes with speculative kind draft, not %s", cfg.Speculative)
	}
	e.specPolicy.draftRows = draftRows(m, cfg.Speculative, cfg.DraftModel)
	_, manyRows := m.Key(runtime.Decode, 2)
	e.forcing = !cfg.NoFastForward && !m.SlotState() && manyRows
	e.resolve = (*decode.Decoder).NextDrafted
	e.drafter = cfg.Drafter
	if e.drafter == nil {
		e.drafter = defaultDrafter(cfg.Speculative)
	}
	e.rates = quota.New(func(tenant string) quota.Rates { return e.tenant(tenant).rates() })
	if dm, ok := m.(DeviceMasker); ok {
		e.deviceMasks = dm.MasksOnDevice()
	}
	if ds, ok := m.(DeviceSampler); ok {
		e.deviceSamples = ds.SamplesOnDevice()
	}
	e.stats.Finished = map[Finish]uint64{}
	e.stats.Slots = cfg.Slots
	e.stats.PagesFree, e.stats.PagesTotal = e.pool.Free(), e.pool.Pages()
	if m.SlotState() {
		cfg.NoPrefixCache = true
	}
	if !cfg.NoPrefixCache {
		e.prefix = prefix.New()
	}
	if c, ok := m.(KVCopier); ok && c.CopiesKVPages() && !m.SlotState() {
		e.copier = c
	}
	if cfg.HostKVBytes > 0 && e.prefix != nil {
		pg, ok := m.(KVPager)
		if !ok || pg.KVLayout() == "" || pg.KVPageBytes() <= 0 {
			return nil, errors.New("engine: a host KV tier needs a tier that can copy KV pages to and from host memory, and this model's cannot")
		}
		if int64(pg.KVPageBytes()) > cfg.HostKVBytes {
			return nil, fmt.Errorf("engine: a host KV tier of %d bytes cannot hold one KV page of %d bytes", cfg.HostKVBytes, pg.KVPageBytes())
		}
		e.host, e.layout = hostkv.New(cfg.HostKVBytes), pg.KVLayout()
		bp, ok := pg.(KVBatchPager)
		if !ok {
			bp = syncPager{pg}
		}
		e.hp = hostPages{pager: bp, leaving: map[uint64]bool{}, pageBytes: pg.KVPageBytes()}
		bp.ReserveKVHostBuffers(int(cfg.HostKVBytes / int64(pg.KVPageBytes())))
	}
	if cfg.Trace != nil {
		e.tr = newTracer(cfg.Trace, cfg.Now)
	}
	reserved := map[string]int{}
	for t, p := range cfg.Policy.Load().Tenants {
		if p.ReservedPages > 0 {
			reserved[t] = p.ReservedPages
		}
	}
	if cfg.StepLog != nil {
		e.slog = &stepLog{w: cfg.StepLog}
		e.slog.write(&StepRecord{Config: &StepLogConfig{Slots: cfg.Slots, ChunkCap: cfg.ChunkCap, ContextLength: cfg.ContextLength,
			NoPrefixCache: cfg.NoPrefixCache, Reserved: reserved, Speculative: cfg.Speculative.String(), HostKVBytes: cfg.HostKVBytes,
			PrefillHold: max(cfg.PrefillHold, 0)}})
	}
	for _, t := range slices.Sorted(maps.Keys(reserved)) {
		if err := e.pool.Reserve(t, reserved[t]); err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
	}
	return e, nil
}

// tenant is the policy of tenant in force now.
func (e *Engine) tenant(tenant string) TenantPolicy { return e.cfg.Policy.Load().Tenant(tenant) }

// scope is tenant's prefix-cache scope now.
func (e *Engine) scope(tenant string) string { return e.tenant(tenant).PrefixScope(tenant) }

// Submit queues a request. Its events arrive on the returned channel,
// which is closed after the last one; cancelling ctx cancels the request
// at the next step.
func (e *Engine) Submit(ctx context.Context, r Request) (<-chan Event, error) {
	chs, err := e.SubmitN(ctx, r, []decode.Params{r.Decode})
	if err != nil {
		return nil, err
	}
	return chs[0], nil
}

// SubmitN queues len(choices) requests for one prompt, r's with each
// choice's decoding parameters in turn (OpenAI's n): choice i's events
// arrive on the i-th channel. Each choice is a request of its own (its own
// decoder, slot and sampler stream), so it produces what it would alone;
// but the choices after the first wait for the first to compute the
// prompt and map its full pages read-only instead of computing them
// again; the prompt's last, partial page each copies into a page of its
// own (KVCopier) and computes only the last token, whose logits it
// samples (on a model that cannot copy pages, it computes that page's
// tokens). On a model whose slots hold state beside the KV pages
// (recurrent layers) every choice computes its whole prompt. r.Decode
// is ignored.
func (e *Engine) SubmitN(ctx context.Context, r Request, choices []decode.Params) ([]<-chan Event, error) {
	if len(choices) == 0 {
		return nil, errors.New("engine: no choices to generate")
	}
	pol := e.cfg.Policy.Load() // one policy for the whole admission
	tp := pol.Tenant(r.Tenant)
	needs, err := e.check(r, tp, choices)
	if err != nil {
		return nil, err
	}
	var reqs []*request
	total := len(r.Prompt) // the prompt once: the choices share it
	for i, p := range choices {
		total += max(p.MaxTokens, 0)
		c := r
		c.Decode = p
		c.Decode.ContextLength = e.cfg.ContextLength
		req := &request{Request: c, ctx: ctx, events: make(chan Event, e.cfg.EventBuffer), slot: -1, need: needs[i],
			tokens: append([]int32(nil), r.Prompt...), dec: decode.New(e.tok, c.Decode)}
		if len(reqs) > 0 && !e.m.SlotState() {
			req.lead, req.copies = reqs[0], e.copier != nil
		}
		if e.cfg.Speculative.On() && p.Constraint == nil {
			req.spec = e.newSpeculating(req.dec)
		}
		reqs = append(reqs, req)
	}
	refuse := func(reason error, limit int) *AdmitError {
		return &AdmitError{Reason: reason, Tenant: r.Tenant, Limit: limit, Prompt: len(r.Prompt), MaxTokens: maxTokens(choices), Choices: len(choices)}
	}
	// The queue checks, the rate charge and the queueing happen under one
	// lock, so concurrent submissions cannot overfill a queue, and a
	// request refused for its queue is not charged.
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.draining:
		return nil, &AdmitError{Reason: ErrDraining}
	case pol.QueueDepth > 0 && e.waiting+len(e.arrivals) >= pol.QueueDepth:
		err := refuse(ErrQueueFull, pol.QueueDepth)
		err.Tenant = "" // the engine's limit, not the tenant's
		return nil, err
	case tp.MaxQueued > 0 && e.queued(r.Tenant) >= tp.MaxQueued:
		return nil, refuse(ErrQueued, tp.MaxQueued)
	}
	if ok, wait := e.rates.Admit(r.Tenant, total, e.cfg.Now()); !ok {
		if wait < 0 {
			return nil, refuse(ErrExceedsRate, tp.TokensPerMinute)
		}
		err := refuse(ErrRateLimited, 0)
		err.RetryAfter = wait
		return nil, err
	}
	out := make([]<-chan Event, len(reqs))
	for i, req := range reqs {
		// A request whose context ends wakes an idle Run to finish it.
		req.unwake = context.AfterFunc(ctx, e.poke)
		out[i] = req.events
	}
	e.arrivals = append(e.arrivals, reqs...)
	e.poke()
	return out, nil
}

// check is the admission a request can fail on its own, whatever else
// waits: its prompt, its context and the KV pages it needs, against the
// model's limits and its tenant's (tp). It returns the pages each choice
// needs.
func (e *Engine) check(r Request, tp TenantPolicy, choices []decode.Params) ([]int, error) {
	refuse := func(reason error, p decode.Params) *AdmitError {
		return &AdmitError{Reason: reason, Prompt: len(r.Prompt), MaxTokens: p.MaxTokens, Choices: len(choices)}
	}
	if len(r.Prompt) == 0 {
		return nil, refuse(ErrEmpty, choices[0])
	}
	if e.tok != nil {
		for _, id := range r.Prompt {
			if id < 0 || int(id) >= e.tok.NVocab() {
				err := refuse(ErrBadToken, choices[0])
				err.Token, err.Limit = id, e.tok.NVocab()
				return nil, err
			}
		}
	}
	needs := make([]int, len(choices))
	for i, p := range choices {
		n := len(r.Prompt) + max(p.MaxTokens, 0)
		err := refuse(ErrTooLong, p)
		err.Context = e.cfg.ContextLength
		switch {
		case tp.MaxContext > 0 && n > tp.MaxContext:
			err.Limit, err.Tenant = tp.MaxContext, r.Tenant
			return nil, err
		case n > e.cfg.ContextLength:
			err.Limit = e.cfg.ContextLength
			return nil, err
		}
		need := (n + kernels.KVPageTokens - 1) / kernels.KVPageTokens
		err.Pages = need
		switch {
		case need > e.m.KVPages():
			err.Limit = e.m.KVPages()
			return nil, err
		case tp.MaxPages > 0 && need > tp.MaxPages:
			err.Limit, err.Tenant = tp.MaxPages, r.Tenant
			return nil, err
		}
		needs[i] = need
	}
	return needs, nil
}

// maxTokens is the largest of the choices' max tokens.
func maxTokens(choices []decode.Params) int {
	n := 0
	for _, p := range choices {
		n = max(n, p.MaxTokens)
	}
	return n
}

// queued is how many of tenant's requests wait for a slot (e.mu held):
// those the last step left waiting and those that arrived since.
func (e *Engine) queued(tenant string) int {
	n := e.waitingBy[tenant]
	for _, r := range e.arrivals {
		if r.Tenant == tenant {
			n++
		}
	}
	return n
}

// sharedChunks is how many of a prompt's leading 16-token chunks a choice
// can map from its group's first choice: every full chunk but the one
// holding the last token, whose row must be computed for its logits (the
// chunks the prefix cache would key).
func sharedChunks(prompt int) int { return (prompt - 1) / kernels.KVPageTokens }

// shares is how many prompt pages r maps from its lead now: its shared
// chunks once the lead has computed them and while it holds them, else 0.
func (r *request) shares() int {
	l := r.lead
	if l == nil || l.events == nil || len(l.pages) == 0 {
		return 0
	}
	k := sharedChunks(len(r.Prompt))
	if l.done < k*kernels.KVPageTokens || len(l.pages) < k {
		return 0
	}
	return k
}

// copiesLast reports whether r, admitted now, would take a copy of its
// lead's partial prompt page: the engine copies pages, the prompt has
// tokens before its last on that page, and the lead has computed them
// and holds the page. It then starts at its prompt's last token, whose
// row it computes for its logits.
func (r *request) copiesLast() bool {
	l := r.lead
	n := len(r.Prompt)
	if !r.copies || l == nil || l.events == nil || (n-1)%kernels.KVPageTokens == 0 {
		return false
	}
	return l.done >= n-1 && len(l.pages) > sharedChunks(n)
}

// waitsForLead reports whether r should not be admitted yet: its lead
// runs (or waits to) and has yet to compute the pages r would map or
// copy.
func (r *request) waitsForLead() bool {
	l := r.lead
	if l == nil || l.events == nil || r.slot >= 0 || len(r.pages) > 0 {
		return false
	}
	if r.copies && (len(r.Prompt)-1)%kernels.KVPageTokens != 0 {
		return !r.copiesLast()
	}
	return sharedChunks(len(r.Prompt)) > 0 && r.shares() == 0
}

// MasksOnDevice reports whether the model takes constrained rows' greedy
// choice on the device (DeviceMasker): its steps then wait for every
// masked row's mask, so a slow mask holds up the whole batch.
func (e *Engine) MasksOnDevice() bool { return e.deviceMasks }

// Step runs one engine step and reports whether it computed anything.
func (e *Engine) Step(ctx context.Context) (bool, error) {
	e.stepping.Lock()
	defer e.stepping.Unlock()
	defer e.tr.flush()
	start := e.cfg.Now()
	if e.logging() {
		e.rec = &StepRecord{Time: start.UnixNano()}
		defer e.endRecord()
	}
	if e.host != nil {
		e.landHost(false) // the copy-outs that have landed, for this plan
	}
	e.mu.Lock()
	arrived := e.arrivals
	e.arrivals = nil
	for _, r := range arrived {
		e.waiting++
		e.waitingBy[r.Tenant]++
	}
	e.mu.Unlock()
	for _, r := range arrived {
		e.nextID++
		r.id = e.nextID
		if e.prefix != nil {
			// Hashed here, not under the lock Submit takes. The scope
			// includes the prompt's length class (kernels.RowLongPrompt):
			// a tier may compute a long prompt's rows another way than a
			// short one's, so their pages are not interchangeable bit for
			// bit.
			scope := e.scope(r.Tenant)
			if len(r.Prompt) >= kernels.LongPromptRows {
				scope += "\x00long"
			}
			r.keys = e.prefix.Keys(scope, r.Prompt)
		}
		e.reqs = append(e.reqs, r)
		if e.rec != nil {
			lr := LoggedRequest{ID: r.id, Tenant: r.Tenant, QoS: r.QoS, Scope: e.scope(r.Tenant),
				Limits: e.tenant(r.Tenant).limits(), Prompt: r.Prompt, Decode: r.Decode}
			if r.lead != nil {
				lr.Lead = r.lead.id
			}
			e.rec.Arrivals = append(e.rec.Arrivals, lr)
		}
	}

	for _, r := range e.reqs {
		if r.ctx.Err() != nil {
			if e.rec != nil {
				e.rec.Cancelled = append(e.rec.Cancelled, r.id)
			}
			e.finish(r, Event{Token: -1, Finish: Cancelled})
		}
	}
	e.compact()

	e.propose()
	e.modelDraft(ctx)
	e.fastForward()
	in := e.input(start)
	if e.pinned != nil {
		in.LatencyRows = e.pinned.LatencyRows
	}
	if e.rec != nil {
		e.rec.LatencyRows = in.LatencyRows
	}
	plan := sched.Schedule(in)
	byID := map[uint64]*request{}
	for _, r := range e.reqs {
		byID[r.id] = r
	}
	paged := map[uint64]bool{}
	for _, id := range plan.Admit {
		paged[id] = len(byID[id].pages) > 0
		e.mapHits(byID[id])
	}
	for _, id := range plan.Release {
		e.release(byID[id])
	}
	for _, id := range plan.Preempt {
		e.preempt(byID[id])
	}
	for _, id := range plan.Admit {
		e.admit(byID[id], paged[id])
	}
	if len(plan.SwapIn) > 0 {
		plan = e.swapIn(plan, byID)
	}
	// Pages as the rows reach them, once every admitted request has
	// mapped its cached pages (which allocating may otherwise evict).
	for _, c := range plan.Rows {
		r := byID[c.ID]
		if c.From != r.done {
			panic(fmt.Sprintf("engine: the plan computes request %d from position %d, it has %d tokens in the KV cache", r.id, c.From, r.done))
		}
		e.grow(r, c.From+c.N)
	}
	if e.host != nil {
		e.flushOut() // before the step writes the pages grow reallocated
	}
	e.mu.Lock()
	e.countWaiting() // before the replay: a request admitted now no longer queues
	e.mu.Unlock()
	if e.rec != nil {
		e.rec.Plan = &plan
		e.recordSlots()
	}
	if plan.NRows == 0 {
		e.flushMasks()
		e.publish(false)
		return false, nil
	}
	prefill := 0 // prompt rows; the rest decode
	for _, c := range plan.Rows {
		prefill += byID[c.ID].prefillRows(c)
	}
	var replay time.Duration
	var parts stepParts
	err := e.selfDraft(ctx, plan, byID)
	var batch runtime.Batch
	var borrowed []int
	if err == nil {
		batch, borrowed, err = e.batch(plan, byID)
	}
	if err == nil {
		if e.rec != nil {
			e.rec.Rows, e.rec.Variant = batch.Rows, batch.Key.String()
		}
		if batch.MasksReady == nil {
			e.flushMasks() // due, but of rows this step does not take
		}
		at := e.cfg.Now()
		e.maskWait = 0
		err = e.m.Step(ctx, batch)
		parts.launch, parts.replayed, parts.maskWait = at, e.cfg.Now(), e.maskWait
		replay = parts.replayed.Sub(at)
		e.cost.observe(replay, prefill)
		e.vcost.observe(batch.Key, len(batch.Rows), replay)
		if prefill == 0 {
			e.specPolicy.observe(len(batch.Rows), replay)
		}
	}
	// A model that failed, or did not ask for the masks (none there
	// since its MasksReady), leaves them due: their decoders wait for
	// them.
	e.flushMasks()
	if err != nil && e.rec != nil {
		e.rec.Err = err.Error()
	}
	if err != nil {
		e.traceStep(start, plan, prefill, batch, parts, err)
		for _, c := range plan.Rows {
			e.finish(byID[c.ID], Event{Token: -1, Finish: Failed, Err: err})
		}
		e.compact()
		e.timeStep(prefill > 0, e.cfg.Now().Sub(start), replay)
		e.publish(true)
		e.traceCounters()
		return true, err
	}
	last := lastSlots(plan, byID, borrowed)
	e.advance(plan, byID, last)
	parts.advanced = e.cfg.Now()
	e.sampleAhead(plan, byID)
	for i, c := range plan.Rows {
		r := byID[c.ID]
		if c.Draft > 0 && r.spec != nil {
			slots := append([]int{r.slot}, borrowed[:c.Draft]...)
			borrowed = borrowed[c.Draft:]
			e.count(r.Tenant, 0, e.verify(r, c.From, slots), start)
			continue
		}
		borrowed = borrowed[c.Draft:] // a forced chunk's, whose tokens r has
		takes := r.takes(c)
		e.count(r.Tenant, r.prefillRows(c), c.N, start)
		r.done += c.N
		if takes {
			e.route(r, last[i])
		}
	}
	e.traceStep(start, plan, prefill, batch, parts, nil) // after sampling, which the step's time includes
	e.compact()
	e.timeStep(prefill > 0, e.cfg.Now().Sub(start), replay)
	e.publish(true)
	e.traceCounters()
	return true, nil
}

// advance advances the constraints of the step's device-masked rows
// past their tokens (decode.Decoder.Advance) on several cores at once,
// before route takes the rows one by one: a constrained row's token
// costs its grammar a walk, which would otherwise add up over the batch
// on this goroutine. (A grammar matcher's Advance only looks up whether
// the token ends the output, and leaves the walk to MaskNext: when every
// row's is such, this goroutine advances them all itself and waits for
// no other, and the next masks wait for the next step's MasksReady,
// masksDue.) Otherwise the same goroutines then compute the rows' next
// masks (decode.Decoder.MaskNext) while this one routes the rows and
// plans the next step, so it starts no goroutine a row for them (each
// start may wake a thread, a system call on this goroutine's path).
func (e *Engine) advance(plan sched.Plan, byID map[uint64]*request, last []int) {
	// The workers read these after advance returns: not reused.
	var rows []*decode.Decoder
	var srcs []slotSource
	for i, c := range plan.Rows {
		if r := byID[c.ID]; r.takes(c) && r.dec.OnDevice() {
			rows, srcs = append(rows, r.dec), append(srcs, slotSource{e, last[i], &e.logits})
		}
	}
	n := len(rows)
	if n == 0 {
		return
	}
	cheap := true
	for _, d := range rows {
		cheap = cheap && d.AdvancesCheaply()
	}
	if cheap {
		// No walk here: this goroutine advances them all, faster than
		// others could start, and leaves the masks (and the walks) to
		// the next step's MasksReady, while the device runs it.
		for i, d := range rows {
			if d.Advance(srcs[i]) {
				e.masksDue = append(e.masksDue, d)
			}
		}
		return
	}
	due := make([]bool, n)
	var next, nextMask atomic.Int64
	var accepted sync.WaitGroup
	accepted.Add(n)
	accept := func() {
		for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
			due[i] = rows[i].Advance(srcs[i])
			accepted.Done()
		}
	}
	mask := func() {
		accepted.Wait() // due is complete, and no constraint is advancing
		for i := int(nextMask.Add(1)) - 1; i < n; i = int(nextMask.Add(1)) - 1 {
			if due[i] {
				rows[i].MaskNext()
			}
		}
	}
	workers := min(goruntime.GOMAXPROCS(0), n) - 1
	for range workers {
		go func() {
			accept()
			mask()
		}()
	}
	accept()
	accepted.Wait()
	if workers == 0 {
		mask() // nobody else would
	}
}

// stepParts are the times at which a step passed its parts: the model's
// step launched (scheduling and batching done) and returned, and the
// constraints of the device-masked rows advanced (sampling follows). A
// zero time: the step did not get that far.
type stepParts struct {
	launch, replayed, advanced time.Time
	// maskWait is the part of the replay the model spent waiting for
	// the rows' masks (the host computes them while the device runs).
	maskWait time.Duration
}

// flushMasks computes the masks advance left due (masksDue) on this
// goroutine and others it starts (the first start wakes the rest, so
// this one pays one wake-up), and returns when all are done. The model
// calls it from the step's MasksReady, after it launched the step's
// forward pass, so the starts and the masks take the device's time, not
// the step loop's; the step calls it itself where no MasksReady will
// (rows that left the batch, a step that computes nothing or fails),
// since a decoder whose mask is due waits for it.
func (e *Engine) flushMasks() {
	rows := e.masksDue
	n := len(rows)
	if n == 0 {
		return
	}
	defer func() {
		clear(rows) // the decoders of requests that may end
		e.masksDue = rows[:0]
	}()
	var next atomic.Int64
	var done sync.WaitGroup
	work := func() {
		for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
			rows[i].MaskNext()
		}
	}
	if helpers := min(goruntime.GOMAXPROCS(0), n) - 1; helpers > 0 {
		done.Add(helpers)
		go func() {
			for range helpers - 1 {
				go func() {
					defer done.Done()
					work()
				}()
			}
			defer done.Done()
			work()
		}()
	}
	work()
	done.Wait()
}

// traceStep records the step that started at start with its plan, split
// into decode rows (generated tokens) and prefill rows (prompt tokens),
// and where its time went.
func (e *Engine) traceStep(start time.Time, plan sched.Plan, prefill int, b runtime.Batch, parts stepParts, err error) {
	if e.tr == nil {
		return
	}
	variant := ""
	if b.Key.Rows > 0 {
		variant = b.Key.String()
	}
	e.mu.Lock()
	n := e.stats.Steps + 1 // publish counts this step after the trace records it
	e.mu.Unlock()
	e.tr.step(n, start, plan, plan.NRows-prefill, prefill, variant, parts, err)
}

// prefillRows is how many of chunk c's rows are r's prompt; the rest
// decode.
func (r *request) prefillRows(c sched.Chunk) int {
	return min(max(len(r.Prompt)-c.From, 0), c.N)
}

// count adds a chunk of n rows, prefill of them prompt rows, to tenant's
// meters.
func (e *Engine) count(tenant string, prefill, n int, now time.Time) {
	m := e.meters[tenant]
	if m == nil {
		m = &meters{}
		e.meters[tenant] = m
	}
	if prefill > 0 {
		m.prefill.Add(prefill, now)
	}
	if n > prefill {
		m.decode.Add(n-prefill, now)
	}
}

// input is the scheduler's view of the engine at now.
func (e *Engine) input(now time.Time) sched.Input {
	in := sched.Input{Budget: e.cfg.ChunkCap, Slots: e.cfg.Slots, Pages: e.pool.Pages(), Rates: map[string]sched.Rates{},
		PageTokens: kernels.KVPageTokens}
	pol := e.cfg.Policy.Load() // one policy for the whole decision
	in.Limits = func(tenant string) sched.Limits { return pol.Tenant(tenant).limits() }
	// Pages only the prefix cache holds are as good as free: the pool
	// takes them back as it needs them (alloc). A tenant's unused
	// reservation counts its own such pages as unused.
	in.FreePages, in.Reservations, in.Used = e.pool.Free(), e.pool.Reservations(), map[string]int{}
	idle := map[string]int{}
	if e.prefix != nil {
		// Counted in runs of one owner: the cache holds up to the whole
		// pool, and a map update a page was most of this function's time
		// at 256 slots (serve --cpuprofile).
		owner, n := "", 0
		e.prefix.Held(func(pg uint32, keys int) {
			if e.pool.Refs(pg) != keys { // not e.idle(pg), for each key
				return
			}
			in.FreePages += keys
			if o := e.pool.Owner(pg); o != owner {
				if n > 0 {
					idle[owner] += n
				}
				owner, n = o, 0
			}
			n += keys
		})
		if n > 0 {
			idle[owner] += n
		}
	}
	for t := range in.Reservations {
		in.Used[t] = e.pool.Used(t) - idle[t]
	}
	if e.cfg.InteractiveSlack > 0 {
		in.LatencyRows = e.cost.rows(e.cfg.InteractiveSlack)
	}
	if e.cfg.Speculative.On() || e.forcing {
		in.VerifySlots = e.m.Slots()
	}
	active := map[string]bool{}
	for _, r := range e.reqs {
		active[r.Tenant] = true
	}
	for t, m := range e.meters {
		// A rate under a thousandth of a token a second reads as none,
		// so dropping a long-idle tenant's meters changes no reading.
		r := sched.Rates{Decode: m.decode.Rate(now), Prefill: m.prefill.Rate(now)}
		if r.Decode < 1e-3 && r.Prefill < 1e-3 {
			if !active[t] {
				delete(e.meters, t)
			}
			continue
		}
		in.Rates[t] = r
	}
	for _, s := range e.slots {
		if s == nil {
			in.FreeSlots++
		}
	}
	// Who maps each page: a waiting request that would map one is not
	// admitted in a step in which they give it up (sched.Seq.From).
	// Built once some request has hits: most steps have none.
	var mappers map[uint32][]uint64
	from := map[*request][]uint64{}
	for _, r := range e.reqs {
		r.hits, r.swap, r.fromLead, r.copying = nil, nil, false, false
		if r.waitsForLead() {
			continue
		}
		if r.slot < 0 && len(r.pages) == 0 && r.copiesLast() {
			k := sharedChunks(len(r.Prompt))
			r.hits, r.fromLead = slices.Clone(r.lead.pages[:k]), true
			r.copying, r.copySrc = true, r.lead.pages[k]
		} else if k := r.shares(); k > 0 && r.slot < 0 && len(r.pages) == 0 {
			r.hits, r.fromLead = slices.Clone(r.lead.pages[:k]), true
		} else {
			r.hits, r.swap = e.hits(r)
		}
		if (len(r.hits) > 0 || r.copying) && mappers == nil {
			mappers = map[uint32][]uint64{}
			for _, r := range e.reqs {
				for _, pg := range r.pages {
					mappers[pg] = append(mappers[pg], r.id)
				}
			}
		}
		reads := r.hits
		if r.copying {
			reads = append(slices.Clip(reads), r.copySrc)
		}
		for _, pg := range reads {
			for _, id := range mappers[pg] {
				if !slices.Contains(from[r], id) {
					from[r] = append(from[r], id)
				}
			}
		}
	}
	ps := e.planPrefill()
	in.Budget = ps.budget
	if ps.sized && e.rec != nil {
		e.rec.Prefill = &LoggedPrefill{Budget: ps.budget, Hold: ps.hold}
	}
	for _, r := range e.reqs {
		if r.waitsForLead() {
			continue // admitted once its lead has computed the pages it maps
		}
		if (ps.hold || ps.sized) && (r.fresh() || r.prompting()) {
			r.held++
		}
		if ps.hold && r.fresh() {
			continue
		}
		s := sched.Seq{ID: r.id, Tenant: r.Tenant, QoS: r.QoS, Arrival: r.id, Prompt: max(len(r.Prompt), r.replay), Done: r.done, Pages: r.need,
			Held: len(r.pages), Shared: r.mapped, Running: r.slot >= 0, Paged: r.slot < 0 && len(r.pages) > 0}
		s.Hold = ps.hold && r.prompting()
		if r.spec != nil && r.slot >= 0 {
			s.Draft = len(r.spec.draft)
		}
		if f := r.forced(); f > 0 {
			s.Draft = f
		}
		for _, pg := range r.pages {
			// No other request maps it, and it is charged to r's tenant or
			// one without a reservation (freeing another's reserved page
			// would give it back to that tenant alone).
			if o := e.pool.Owner(pg); e.pool.Refs(pg)-e.cacheRefs(pg) == 1 && (o == r.Tenant || in.Reservations[o] == 0) {
				s.Frees++
			}
		}
		s.From = from[r]
		if len(r.hits)+len(r.swap) > 0 {
			// It would start after its cached chunks, mapping those on
			// the device and taking the host tier's into fresh pages.
			s.Done, s.Held, s.Shared, s.Host = (len(r.hits)+len(r.swap))*kernels.KVPageTokens, len(r.hits), len(r.hits), len(r.swap)
			for _, pg := range r.hits {
				if e.idle(pg) {
					s.Idle++
				}
			}
		}
		if r.copying {
			// Its copy of the lead's partial page is a fresh page that
			// admission takes, like a host-tier page's.
			s.Done, s.Held, s.Shared, s.Host = len(r.Prompt)-1, len(r.hits), len(r.hits), 1
		}
		in.Seqs = append(in.Seqs, s)
	}
	return in
}

// fresh says r has computed nothing yet and holds no slot or page: its
// prefill is all to come.
func (r *request) fresh() bool {
	return r.slot < 0 && len(r.pages) == 0 && r.done == 0 && !r.admitted
}

// prompting says r runs and has prompt rows left to compute (not
// tokens it recomputes after giving up its pages).
func (r *request) prompting() bool {
	return r.slot >= 0 && r.replay == 0 && r.done < len(r.Prompt)
}

// preempt takes r's slot at a step boundary; r keeps its pages, tokens
// and decoder, and resumes when the scheduler admits it again.
func (e *Engine) preempt(r *request) {
	if r.QoS == sched.Interactive {
		panic("engine: the scheduler preempted an interactive request")
	}
	e.slots[r.slot], r.slot = nil, -1
	if e.m.SlotState() {
		// The slot held state of r's (recurrent, or a window ring), which
		// the next occupant overwrites: on resume it recomputes its
		// tokens from position 0,
		// the pending one last, which yields the next token as its decode
		// step would have. Its pages are rewritten with the same bits
		// (the kernels are batch-invariant).
		r.done, r.replay = 0, len(r.tokens)
	}
	e.tr.instant("preempt", r, map[string]any{"done": r.done})
	e.mu.Lock()
	e.stats.Preemptions++
	e.mu.Unlock()
	e.send(r, Event{Token: -1, Preempted: true})
}

// release takes r's pages, and its slot if it runs, because the pool ran
// dry. Its tokens stay: on resume it computes them again (those of its
// prompt's full chunks that are still cached, it maps), the pending one
// last, which yields the next token as its decode step would have; the
// kernels are batch-invariant, so the stream goes on as it would have.
func (e *Engine) release(r *request) {
	if r.QoS == sched.Interactive {
		panic("engine: the scheduler released an interactive request's pages")
	}
	if r.slot >= 0 {
		e.slots[r.slot], r.slot = nil, -1
	}
	e.tr.instant("preempt", r, map[string]any{"done": r.done, "released": true})
	e.remember(r) // its prompt's computed chunks, for its resume and for others
	for _, pg := range r.pages {
		e.pool.Release(pg)
	}
	r.pages, r.mapped = nil, 0
	r.done, r.replay = 0, len(r.tokens)
	e.mu.Lock()
	e.stats.Preemptions++
	e.stats.Released++
	e.mu.Unlock()
	e.send(r, Event{Token: -1, Preempted: true})
}

// mapHits maps the pages r is admitted with, as the scheduler saw them:
// its lead's full prompt pages or its prompt's cached chunks, read-only
// (r writes only the positions after them). It runs before anyone gives
// up pages in the step, so they are all still there.
//
// The chunks it takes from the host tier get a placeholder (noPage) in
// its page table until swapIn gives them pages, once everyone who gives
// up pages in the step has.
//
// A request that copies its lead's partial prompt page (copying) holds
// a reference to that page until swapIn has copied it, so that the
// page outlives anyone's giving it up in the step.
func (e *Engine) mapHits(r *request) {
	if len(r.pages) > 0 || len(r.hits)+len(r.swap) == 0 && !r.copying {
		return
	}
	for _, pg := range r.hits {
		e.pool.Ref(pg)
	}
	hits, swap := r.hits, r.swap
	for i := range len(hits) + len(swap) {
		if len(swap) > 0 && swap[0] == i {
			r.pages = append(r.pages, noPage)
			swap = swap[1:]
			continue
		}
		if !r.fromLead {
			e.prefix.Lookup(r.keys[i : i+1]) // used now, for the eviction order
		}
		r.pages = append(r.pages, hits[0])
		hits = hits[1:]
	}
	r.mapped = len(r.hits)
	r.done = len(r.pages) * kernels.KVPageTokens
	if r.copying {
		e.pool.Ref(r.copySrc)
		r.pages = append(r.pages, noPage)
		r.done = len(r.Prompt) - 1
	}
	if !r.admitted {
		e.mu.Lock()
		if r.fromLead {
			e.stats.ChoiceShared += uint64(r.done)
		} else {
			e.stats.PrefixHit += uint64(len(r.hits) * kernels.KVPageTokens)
			e.stats.PrefixHostHit += uint64(len(r.swap) * kernels.KVPageTokens)
		}
		e.mu.Unlock()
	}
}

// noPage marks a page-table entry a swap-in has yet to fill.
const noPage = ^uint32(0)

// swapIn gives the plan's swapped-in requests their host-tier pages: it
// reads every such page's bytes from the tier first (the allocations
// after may evict device pages into it, pushing others out), then takes a
// fresh page for each and queues the copies in, in one batch, after the
// copy-outs of the pages those allocations evicted; a SubmitN choice
// that copies its lead's partial prompt page (copying) gets it the same
// way, copied on the device. A request whose copy fails fails, and its
// rows leave the plan.
func (e *Engine) swapIn(plan sched.Plan, byID map[uint64]*request) sched.Plan {
	// The tier's buffers first, taken out of it (the allocations after
	// may evict device pages into it, pushing others out); two requests
	// of the step may want one chunk.
	failed := map[uint64]error{}
	taken := map[uint64][]byte{}
	var takenKeys []uint64
	for _, sw := range plan.SwapIn {
		r := byID[sw.ID]
		for _, i := range r.swap {
			k := r.keys[i]
			if _, ok := taken[k]; ok {
				continue
			}
			if b, ok := e.host.Take(hostkv.Key{Layout: e.layout, Chunk: k}); ok {
				taken[k] = b
				takenKeys = append(takenKeys, k)
			} else if failed[r.id] == nil {
				failed[r.id] = fmt.Errorf("engine: the host KV tier lost chunk %d of request %d between the step's plan and its swap-in", i, r.id)
			}
		}
	}
	for _, sw := range plan.SwapIn {
		r := byID[sw.ID]
		for _, i := range r.swap {
			r.pages[i] = e.alloc(r.Tenant)
		}
		if r.copying {
			r.pages[len(r.hits)] = e.alloc(r.Tenant)
		}
	}
	if e.host != nil {
		// The copy-outs of the pages those allocations evicted queue
		// before anything writes the pages again.
		e.flushOut()
	}
	var pages []uint32
	var srcs [][]byte
	var restoring []uint64
	for _, sw := range plan.SwapIn {
		r := byID[sw.ID]
		if len(r.swap) > 0 && failed[r.id] == nil {
			for _, i := range r.swap {
				pages, srcs = append(pages, r.pages[i]), append(srcs, taken[r.keys[i]])
			}
			restoring = append(restoring, r.id)
			e.tr.instant("swap-in", r, map[string]any{"pages": len(r.swap)})
		}
		r.swap = nil
		if r.copying {
			// Its own copy of its lead's partial prompt page, in the
			// placeholder after its mapped pages.
			i := len(r.hits)
			if failed[r.id] == nil {
				if err := e.copier.CopyKVPage(r.pages[i], r.copySrc); err != nil {
					failed[r.id] = fmt.Errorf("engine: copying request %d's partial prompt page from its first choice: %w", r.id, err)
				}
			}
			e.pool.Release(r.copySrc) // mapHits's hold
			e.tr.instant("copy-page", r, map[string]any{"page": r.pages[i], "from": r.copySrc})
			r.copying = false
		}
	}
	if e.host != nil {
		if err := e.restore(pages, srcs, takenKeys, taken); err != nil {
			for _, id := range restoring {
				if failed[id] == nil {
					failed[id] = fmt.Errorf("engine: copying request %d's pages from the host KV tier: %w", id, err)
				}
			}
		}
	}
	if len(failed) == 0 {
		return plan
	}
	for id, err := range failed {
		e.finish(byID[id], Event{Token: -1, Finish: Failed, Err: err})
	}
	plan.Rows = slices.DeleteFunc(slices.Clone(plan.Rows), func(c sched.Chunk) bool { return failed[c.ID] != nil })
	plan.NRows = 0
	for _, c := range plan.Rows {
		plan.NRows += c.N
	}
	return plan
}

// admit gives r a slot (mapHits has mapped the pages it starts with;
// paged says it resumes with its own); it takes the rest as its rows
// reach them.
func (e *Engine) admit(r *request, paged bool) {
	for i, s := range e.slots {
		if s == nil {
			e.slots[i], r.slot = r, i
			break
		}
	}
	if paged || r.admitted {
		// Back after a preemption: with its pages, where it stopped; or
		// having given them up, computing its tokens again from its
		// cached prefix on.
		e.tr.instant("resume", r, map[string]any{"slot": r.slot, "done": r.done})
		return
	}
	r.admitted = true
	r.cached = r.done
	if e.prefix != nil && !r.fromLead {
		e.mu.Lock()
		e.stats.PrefixQueried += uint64(len(r.Prompt))
		e.mu.Unlock()
	}
	e.tr.instant("admit", r, map[string]any{"slot": r.slot, "prompt": len(r.Prompt), "cached": r.cached, "pages": len(r.pages)})
}

// batch turns the plan into the program's batch, on the smallest variant
// that holds its rows: a decode variant when every row decodes (a draft
// row is a decode row). It returns the slots the draft rows take, in the
// order of the plan's chunks with drafts.
func (e *Engine) batch(plan sched.Plan, byID map[uint64]*request) (runtime.Batch, []int, error) {
	var b runtime.Batch
	free := e.borrowSlots()
	var borrowed []int
	var masked []*decode.Decoder
	// maskLast gives the batch's last row, r's row that takes its next
	// token, r's device mask where it has one.
	maskLast := func(r *request) {
		if m := r.dec.DeviceMask(); m != nil {
			b.Rows[len(b.Rows)-1].Mask = m
			masked = append(masked, r.dec)
		}
	}
	decodeOnly := true
	for _, c := range plan.Rows {
		r := byID[c.ID]
		if c.Draft > 0 {
			// The pending token in r's slot, then each draft (or forced)
			// token in a free slot mapping r's page table: row i sees the
			// rows before it through the pages, as a decode of them one
			// by one would. Every draft row wants logits; of forced rows,
			// whose tokens r already has, only the last, where it is r's
			// newest token.
			if len(free) < c.Draft || c.N != c.Draft+1 {
				return b, nil, fmt.Errorf("engine: a verify chunk of %d rows (%d drafted) with %d free slots", c.N, c.Draft, len(free))
			}
			slots := append([]int{r.slot}, free[:c.Draft]...)
			free = free[c.Draft:]
			borrowed = append(borrowed, slots[1:]...)
			for i, slot := range slots {
				row := runtime.Row{Slot: slot, Pos: c.From + i, Logits: true}
				switch {
				case r.spec == nil:
					row.Token, row.Logits = r.tokens[c.From+i], i == c.Draft && r.takes(c)
				case i == 0:
					row.Token = r.tokens[c.From]
				default:
					row.Token = r.spec.draft[i-1]
				}
				b.Rows = append(b.Rows, row)
				b.Pages = append(b.Pages, runtime.SlotPages{Slot: slot, Pages: r.pages})
			}
			if r.spec == nil && r.takes(c) && e.deviceMasks {
				maskLast(r)
			}
			continue
		}
		logits := r.takes(c)
		if c.From < len(r.Prompt) || c.N > 1 {
			decodeOnly = false
		}
		prompt := 0
		if c.From < len(r.Prompt) {
			// The whole prompt's length, cached part included: a property of
			// the request, so its rows take the path they take alone.
			prompt = len(r.Prompt)
		}
		for i := range c.N {
			b.Rows = append(b.Rows, runtime.Row{Slot: r.slot, Pos: c.From + i, Token: r.tokens[c.From+i], Logits: logits && i == c.N-1,
				Prompt: prompt})
		}
		if e.deviceMasks && logits {
			maskLast(r)
		}
		if e.deviceSamples && logits && b.Rows[len(b.Rows)-1].Mask == nil {
			if inv, u, ban, ok := r.dec.DeviceSample(runtime.MaxSampleBans); ok {
				b.Rows[len(b.Rows)-1].Sample = &runtime.RowSample{Inv: inv, U: u, Ban: ban}
			}
		}
		b.Pages = append(b.Pages, runtime.SlotPages{Slot: r.slot, Pages: r.pages})
	}
	if len(masked) > 0 {
		// The masks of the tokens just sampled are still to compute: the
		// model asks for them after it launched the step.
		b.MasksReady = func() {
			at := e.cfg.Now()
			e.flushMasks()
			for _, d := range masked {
				d.MaskReady()
			}
			e.maskWait = e.cfg.Now().Sub(at)
		}
	}
	// A step of one request's verify rows alone stands for its one-row
	// steps: a tier whose bits depend on a step's rows (T-CUDA) gives
	// them a one-row step's, so that its greedy output is the same as
	// without speculation. A step of several requests' rows keeps the
	// batched kernels: without speculation such a step's rows have no
	// one-row bits on that tier either, and one-row kernels read the
	// weights once for every few rows.
	b.OneRowBits = len(plan.Rows) == 1 && plan.Rows[0].Draft > 0
	var ok bool
	if decodeOnly {
		b.Key, ok = e.m.Key(runtime.Decode, len(b.Rows))
	}
	if !ok {
		if b.Key, ok = e.m.Key(runtime.Prefill, len(b.Rows)); !ok {
			return b, nil, fmt.Errorf("engine: no variant for a step of %d rows", len(b.Rows))
		}
	}
	return b, borrowed, nil
}

// route samples r's next token from the outcome of the row in slot and
// sends it; it reports whether r goes on.
func (e *Engine) route(r *request, slot int) bool {
	if r.ahead {
		r.ahead = false
		return e.take(r, r.next)
	}
	return e.take(r, r.dec.NextFrom(slotSource{e, slot, &e.logits}, r.tokens, r.done))
}

// take records and sends the token r's decoder decided in st; it reports
// whether r goes on.
func (e *Engine) take(r *request, st decode.Step) bool {
	if e.rec != nil {
		e.rec.Sampled = append(e.rec.Sampled, Sampled{ID: r.id, Token: st.Token, Finish: finishOf(st.Finish)})
	}
	if st.Finish != decode.Running {
		e.finish(r, Event{Token: st.Token, Text: st.Text, Logprobs: st.Logprobs, Finish: finishOf(st.Finish)})
		return false
	}
	r.tokens = append(r.tokens, st.Token)
	e.send(r, Event{Token: st.Token, Text: st.Text, Logprobs: st.Logprobs})
	return r.events != nil
}

// slotSource is a slot's outcome of the last step: its greedy token, and
// its logits, copied into buf (the engine's, or a sampleAhead worker's)
// only when a decoder needs them (a vocabulary of floats per request per
// step otherwise).
type slotSource struct {
	e    *Engine
	slot int
	buf  *[]float32
}

func (s slotSource) Greedy() int32 { return s.e.m.Greedy(s.slot) }

func (s slotSource) Logits() []float32 {
	*s.buf = s.e.m.Logits(s.slot, *s.buf)
	return *s.buf
}

// LogitsView is the slot's logits in the model's own memory, read-only,
// for a model that keeps them on the host (runtime.Program.LogitsView);
// nil otherwise.
func (s slotSource) LogitsView() []float32 {
	if v, ok := s.e.m.(interface{ LogitsView(slot int) []float32 }); ok {
		return v.LogitsView(s.slot)
	}
	return nil
}

// send delivers an event without blocking the step loop; a consumer that
// has left EventBuffer events unread is cut off.
func (e *Engine) send(r *request, ev Event) {
	select {
	case r.events <- ev:
	default:
		e.finish(r, Event{Token: -1, Finish: ClientTooSlow})
	}
}

// finish ends r with its last event and frees its slot and pages; compact
// removes it from the list.
func (e *Engine) finish(r *request, last Event) {
	if r.events == nil {
		return // already finished
	}
	last.PromptTokens, last.CompletionTokens, last.CachedTokens = len(r.Prompt), r.dec.Generated(), r.cached
	select {
	case r.events <- last:
	default:
		// The consumer has left the buffer full: drop its oldest event to
		// make room for the one that says it was too slow. (It may have
		// read meanwhile; either way there is room after this, and only
		// this goroutine sends.)
		select {
		case <-r.events:
		default:
		}
		last = Event{Token: -1, Finish: ClientTooSlow, PromptTokens: last.PromptTokens, CompletionTokens: last.CompletionTokens}
		r.events <- last
	}
	close(r.events)
	r.events = nil
	r.unwake()
	r.dec.Release()
	if last.Finish != Failed {
		e.remember(r)
	}
	for _, pg := range r.pages {
		e.pool.Release(pg)
	}
	r.pages = nil
	if r.slot >= 0 {
		e.slots[r.slot] = nil
	}
	args := map[string]any{"reason": string(last.Finish), "prompt": last.PromptTokens, "generated": last.CompletionTokens}
	if last.Err != nil {
		args["error"] = last.Err.Error()
	}
	e.tr.instant("finish", r, args)
	e.mu.Lock()
	e.stats.Finished[last.Finish]++
	e.stats.PromptTokens += uint64(len(r.Prompt))
	e.stats.Generated += uint64(last.CompletionTokens)
	e.mu.Unlock()
}

// hits are the pages of a waiting request's leading chunks that are
// cached now, which it would map, and the indexes of those of the chunks
// that only the host tier holds, which it would take from there: the
// longest run of chunks from the first that are in either. (The device
// cache evicts a conversation's oldest chunks first, so the host tier
// tends to hold a prefix's head while the device holds its tail.) The
// host tier's chunks count only while copying a page back costs less
// than computing its tokens (restoreCheaper).
func (e *Engine) hits(r *request) ([]uint32, []int) {
	if r.slot >= 0 || len(r.pages) > 0 || e.prefix == nil {
		return nil, nil
	}
	if e.host == nil {
		return e.prefix.Peek(r.keys), nil
	}
	var pages []uint32
	var swap []int
	restore := e.restoreCheaper()
	for i, k := range r.keys {
		if pg, ok := e.prefix.Page(k); ok {
			pages = append(pages, pg)
		} else if restore && e.host.Has(hostkv.Key{Layout: e.layout, Chunk: k}) {
			swap = append(swap, i)
		} else {
			break
		}
	}
	return pages, swap
}

// cacheRefs is how many references the prefix cache holds to pg.
func (e *Engine) cacheRefs(pg uint32) int {
	if e.prefix == nil {
		return 0
	}
	return e.prefix.Refs(pg)
}

// idle reports whether only the prefix cache holds pg.
func (e *Engine) idle(pg uint32) bool {
	n := e.cacheRefs(pg)
	return n > 0 && e.pool.Refs(pg) == n
}

// remember indexes the pages of r's prompt chunks that are complete in the
// KV cache, so a later request with the same prefix can map them; the
// cache holds its own reference to each.
func (e *Engine) remember(r *request) {
	if e.prefix == nil {
		return
	}
	for i, k := range r.keys {
		if (i+1)*kernels.KVPageTokens > r.done || i >= len(r.pages) {
			break
		}
		if !e.prefix.Has(k) {
			e.pool.Ref(r.pages[i])
			e.prefix.Insert(k, r.pages[i], r.Tenant)
		}
	}
}

// grow gives r the pages its rows up to position end-1 reach.
func (e *Engine) grow(r *request, end int) {
	for len(r.pages)*kernels.KVPageTokens < end {
		r.pages = append(r.pages, e.alloc(r.Tenant))
	}
}

// alloc takes a page for tenant, evicting cached pages no request maps,
// least recently used first, while none is available to it.
func (e *Engine) alloc(tenant string) uint32 {
	for {
		if pg, ok := e.pool.Alloc(tenant); ok {
			return pg
		}
		var pg uint32
		var key uint64
		ok := e.prefix != nil
		if ok {
			key, pg, ok = e.prefix.Evict(func(pg uint32) bool { return !e.idle(pg) })
		}
		if !ok {
			panic("engine: the scheduler planned a page that is not available")
		}
		if e.host != nil {
			e.evicted(key, pg)
		}
		e.pool.Release(pg)
	}
}

// compact drops finished requests.
func (e *Engine) compact() {
	live := e.reqs[:0]
	for _, r := range e.reqs {
		if r.events != nil {
			live = append(live, r)
		}
	}
	clear(e.reqs[len(live):])
	e.reqs = live
}

// timeStep adds a step's time, took in all of which replay in the
// model's Step, to its kind's.
func (e *Engine) timeStep(mixed bool, took, replay time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := &e.stats.Decode
	if mixed {
		t = &e.stats.Mixed
	}
	t.Steps++
	t.Replay += replay.Seconds()
	t.Host += (took - replay).Seconds()
}

// publish updates the stats snapshot after a step.
func (e *Engine) publish(computed bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if computed {
		e.stats.Steps++
		e.stats.LastStep = time.Now()
	}
	e.countWaiting()
	e.stats.Running, e.stats.Waiting = e.running, e.waiting+len(e.arrivals)
	e.stats.PagesFree, e.stats.PagesTotal = e.pool.Free(), e.pool.Pages()
	if e.host != nil {
		st := e.host.Stats()
		e.stats.HostPages, e.stats.HostBytes, e.stats.HostStored, e.stats.HostEvicted = e.host.Len(), e.host.Bytes(), st.Stored, st.Evicted
	}
	if e.prefix != nil {
		e.stats.PrefixPages, e.stats.PrefixIdle = e.prefix.Len(), 0
		e.prefix.Held(func(pg uint32, keys int) {
			if e.pool.Refs(pg) == 1 { // the cache's own reference only
				e.stats.PrefixIdle += keys
			}
		})
	}
}

// countWaiting recounts the requests the step loop holds that wait for a
// slot, and those that run (e.mu held); once none is left or queued, it
// ends a Drain.
func (e *Engine) countWaiting() {
	e.waiting, e.running = 0, 0
	clear(e.waitingBy)
	for _, r := range e.reqs {
		if r.slot < 0 {
			e.waiting++
			e.waitingBy[r.Tenant]++
		} else {
			e.running++
		}
	}
	if e.drained != nil && e.waiting+e.running+len(e.arrivals) == 0 {
		close(e.drained)
		e.drained = nil
	}
}

// Stats returns a snapshot.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.stats
	s.SpecAcceptedAt = slices.Clone(e.stats.SpecAcceptedAt)
	s.Finished = make(map[Finish]uint64, len(e.stats.Finished))
	for k, v := range e.stats.Finished {
		s.Finished[k] = v
	}
	return s
}

// Load is how many requests the engine holds — arrived, waiting for a
// slot or in one (those that finished since the last step still
// counted) — and its slots, for a server of several replicas choosing
// where a request goes.
func (e *Engine) Load() (held, slots int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.arrivals) + e.waiting + e.running, e.cfg.Slots
}

// Run steps until ctx is done. A step that computes nothing leaves it
// blocked on a channel until something changes what the next step can
// do: a request arrives, or one's context is done. Nothing else lifts a
// waiting request's bar while nothing runs — slots and pages free only as
// requests end, and the smoothed token rates order requests without
// holding them back — so it never polls.
func (e *Engine) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		did, err := e.Step(ctx)
		// Let the goroutines the step made runnable (the front ends
		// writing its tokens) run before the next step: on a tier that
		// computes on this goroutine and the CPUs' others (T-CPU), they
		// otherwise wait for the Go scheduler's preemption, about 10 ms,
		// and a stream's tokens arrive in bursts.
		goruntime.Gosched()
		if err != nil && ctx.Err() == nil {
			continue // the step's requests have failed with it; serve the rest
		}
		if !did {
			select {
			case <-ctx.Done():
			case <-e.wake:
			}
		}
	}
	return ctx.Err()
}

// poke wakes an idle Run; one pending signal is enough, so it never
// blocks.
func (e *Engine) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// StopAdmitting makes Submit refuse every request from now on
// (ErrDraining), without waiting for those queued and running.
func (e *Engine) StopAdmitting() {
	e.mu.Lock()
	e.draining = true
	e.mu.Unlock()
}

// Drain stops admitting new requests and returns when every queued and
// running request has finished (the step loop must be running), or when
// ctx is done.
func (e *Engine) Drain(ctx context.Context) error {
	e.mu.Lock()
	e.draining = true
	if e.waiting+e.running+len(e.arrivals) == 0 {
		e.mu.Unlock()
		return nil
	}
	if e.drained == nil {
		e.drained = make(chan struct{})
	}
	drained := e.drained
	e.mu.Unlock()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-drained:
		return nil
	}
}
