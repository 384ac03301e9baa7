package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zrtdev/zrt/format/vocab"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/decode"
	"github.com/zrtdev/zrt/runtime/engine/sched"
	"github.com/zrtdev/zrt/runtime/sample"
	"github.com/zrtdev/zrt/runtime/tokenizer"
)

const simVocab = 64

// scripted is a Model whose "logits" follow from the batch alone, so a
// simulation can run thousands of steps in milliseconds. It checks every
// batch as a tier's kernels would rely on it, and remembers the last one.
type scripted struct {
	t        testing.TB
	slots    int
	maxPages int
	kvPages  int
	last     map[int]int32 // slot → token of its newest logits row
	batch    runtime.Batch
	fail     bool // the next Step fails
	// slotState makes it a model with per-slot state.
	slotState bool
	// draftAccept, when set, gives it a draft variant (self-speculation)
	// whose greedy choice is the model's own with that probability,
	// drawn from draftRng, and another token otherwise.
	draftAccept float64
	draftRng    *rand.Rand
	// draftRows are its draft variants' rows (default: the one-row one),
	// decodeRows its decode variants' (default 1, 2, 4 and 8).
	draftRows, decodeRows []int
	drafted               map[int]int32 // slot → the draft variant's choice, until its next step
	// kv, when set, is its KV pool's bytes: each row writes its token and
	// position+1 at its slot's page and offset (simEntry bytes an entry),
	// so a test can check that every request's pages hold its tokens,
	// host-tier round trips included. It makes the model a KVPager.
	kv [][]byte
	// oneRowSteps counts the steps that asked for one-row bits.
	oneRowSteps int
	// noCopy makes a model with kv one that cannot copy a page into
	// another (KVCopier); copied counts the pages it was asked to copy,
	// every 50th of which it fails to.
	noCopy bool
	copied int
	// async, when set, makes it (as asyncPager) a KVBatchPager whose
	// copies land late: a read's bytes reach its buffers, and a batch
	// reports done, only after done has been asked a number of times
	// async draws (0-3); a write reads its buffers when the stream
	// would, at the next thing ordered after it (a step, a copy, a read,
	// a look at the KV) or when it is done. A buffer the engine read or
	// reused too early gives wrong bytes, which checkKV finds.
	async   *rand.Rand
	writes  []simWrite // queued, not yet applied
	pending int        // batches queued and not yet done
	// hostBufs counts the host buffers asked for: every seventh is not
	// ready yet (a tier still pinning its reservation), so the engine
	// keeps fewer pages than it evicts.
	hostBufs int
	// clock, when set, is the engine's (Config.Now), which each step
	// moves on by its variant's time in cost.
	clock *time.Time
	cost  func(runtime.ShapeKey) time.Duration
}

type simWrite struct {
	page uint32
	src  []byte
}

// The engine finds a model's batched copies by type assertion: this
// holds the program to the interface at compile time.
var _ KVBatchPager = (*runtime.Program)(nil)

// asyncPager is a scripted model with async set, as a KVBatchPager.
type asyncPager struct{ *scripted }

func (m asyncPager) KVHostBuffer() ([]byte, error) {
	if m.hostBufs++; m.hostBufs%7 == 0 {
		return nil, errors.New("scripted: the host buffers are still being prepared")
	}
	return make([]byte, m.KVPageBytes()), nil
}
func (m asyncPager) ReserveKVHostBuffers(int) {}
func (m asyncPager) KVCopyRate() float64      { return 0 }

func (m asyncPager) ReadKVPages(pages []uint32, dsts [][]byte) (func() (bool, error), error) {
	m.applyWrites()
	snap := make([][]byte, len(pages))
	for i, pg := range pages {
		if int(pg) >= len(m.kv) || len(dsts[i]) != m.KVPageBytes() {
			return nil, fmt.Errorf("scripted: no page %d of %d bytes", pg, len(dsts[i]))
		}
		snap[i] = slices.Clone(m.kv[pg])
		for j := range dsts[i] {
			dsts[i][j] = 0xee // not there yet
		}
	}
	return m.later(func() {
		for i := range snap {
			copy(dsts[i], snap[i])
		}
	}), nil
}

func (m asyncPager) WriteKVPages(pages []uint32, srcs [][]byte) (func() (bool, error), error) {
	m.applyWrites()
	for i, pg := range pages {
		if int(pg) >= len(m.kv) || len(srcs[i]) != m.KVPageBytes() {
			return nil, fmt.Errorf("scripted: no page %d of %d bytes", pg, len(srcs[i]))
		}
		m.writes = append(m.writes, simWrite{pg, srcs[i]})
	}
	return m.later(m.applyWrites), nil
}

// later is the done of a batch that lands, running land, once done has
// been asked a drawn number of times.
func (m asyncPager) later(land func()) func() (bool, error) {
	m.pending++
	n, landed := m.async.IntN(4), false
	return func() (bool, error) {
		if landed {
			return true, nil
		}
		if n > 0 {
			n--
			return false, nil
		}
		land()
		landed = true
		m.pending--
		return true, nil
	}
}

// applyWrites makes the queued writes, in order.
func (m *scripted) applyWrites() {
	for _, w := range m.writes {
		copy(m.kv[w.page], w.src)
	}
	m.writes = m.writes[:0]
}

// simEntry is the bytes a scripted KV page gives one position.
const simEntry = 8

func (m *scripted) KVLayout() string {
	if m.kv == nil {
		return ""
	}
	return "scripted"
}
func (m *scripted) KVPageBytes() int { return kernels.KVPageTokens * simEntry }
func (m *scripted) ReadKVPage(page uint32, dst []byte) error {
	if int(page) >= len(m.kv) || len(dst) != m.KVPageBytes() {
		return fmt.Errorf("scripted: no page %d of %d bytes", page, len(dst))
	}
	copy(dst, m.kv[page])
	return nil
}
func (m *scripted) WriteKVPage(page uint32, src []byte) error {
	if int(page) >= len(m.kv) || len(src) != m.KVPageBytes() {
		return fmt.Errorf("scripted: no page %d of %d bytes", page, len(src))
	}
	copy(m.kv[page], src)
	return nil
}

func (m *scripted) CopiesKVPages() bool { return m.kv != nil && !m.noCopy }
func (m *scripted) CopyKVPage(dst, src uint32) error {
	if !m.CopiesKVPages() || int(dst) >= len(m.kv) || int(src) >= len(m.kv) {
		return fmt.Errorf("scripted: no copy of page %d into %d", src, dst)
	}
	if m.copied++; m.copied%50 == 0 {
		return fmt.Errorf("scripted copy failure") // its request fails
	}
	m.applyWrites()
	copy(m.kv[dst], m.kv[src])
	return nil
}

// kvEntry is what the scripted KV holds for position pos of page pg:
// the token, and pos+1 (0: never written).
func (m *scripted) kvEntry(pg uint32, pos int) (int32, int) {
	m.applyWrites()
	b := m.kv[pg][pos%kernels.KVPageTokens*simEntry:]
	return int32(binary.LittleEndian.Uint32(b)), int(binary.LittleEndian.Uint32(b[4:]))
}

func (m *scripted) Key(stage runtime.Stage, rows int) (runtime.ShapeKey, bool) {
	caps := map[runtime.Stage][]int{runtime.Decode: {1, 2, 4, 8}, runtime.Prefill: {16, 64}}[stage]
	if stage == runtime.Decode && m.decodeRows != nil {
		caps = m.decodeRows
	}
	if stage == runtime.Draft && m.draftAccept > 0 {
		caps = []int{1}
		if m.draftRows != nil {
			caps = m.draftRows
		}
	}
	for _, c := range caps {
		if rows <= c {
			return runtime.ShapeKey{Stage: stage, Slots: m.slots, Rows: c}, true
		}
	}
	return runtime.ShapeKey{}, false
}
func (m *scripted) Slots() int      { return m.slots }
func (m *scripted) MaxPages() int   { return m.maxPages }
func (m *scripted) KVPages() int    { return m.kvPages }
func (m *scripted) SlotState() bool { return m.slotState }

func (m *scripted) Step(_ context.Context, b runtime.Batch) error {
	if m.fail {
		m.fail = false
		return fmt.Errorf("scripted failure")
	}
	m.applyWrites()
	if m.clock != nil {
		*m.clock = m.clock.Add(m.cost(b.Key))
	}
	if len(b.Rows) == 0 || len(b.Rows) > b.Key.Rows {
		m.t.Fatalf("step of %d rows on %s", len(b.Rows), b.Key)
	}
	// page → requests mapping it (prefix pages are shared); the slots of
	// one request's verify rows map the same table, which counts once.
	mappers := map[uint32]int{}
	tables := map[int][]uint32{}
	seen := map[string]bool{}
	for _, sp := range b.Pages {
		key := fmt.Sprint(sp.Pages)
		if seen[key] {
			tables[sp.Slot] = sp.Pages
			continue
		}
		seen[key] = true
		for _, pg := range sp.Pages {
			mappers[pg]++
			if int(pg) >= m.kvPages {
				m.t.Fatalf("page %d outside the pool of %d", pg, m.kvPages)
			}
		}
		tables[sp.Slot] = sp.Pages
	}
	// One-row bits are asked for exactly by the steps of one request's
	// verify rows alone: consecutive positions, each row in a slot of
	// its own mapping the same pages.
	one := len(b.Rows) > 1
	for i, r := range b.Rows {
		r0 := b.Rows[0]
		if i > 0 && (r.Pos != r0.Pos+i || r.Slot == r0.Slot || fmt.Sprint(tables[r.Slot]) != fmt.Sprint(tables[r0.Slot])) {
			one = false
		}
	}
	if b.OneRowBits != one {
		m.t.Fatalf("a step of %d rows (one request's verify rows alone: %v) asks for one-row bits: %v", len(b.Rows), one, b.OneRowBits)
	}
	if one {
		m.oneRowSteps++
	}
	if b.Key.Stage == runtime.Draft {
		if len(b.Rows) > b.Key.Rows || m.draftAccept == 0 {
			m.t.Fatalf("a draft step of %d rows on a model with draft variant %v (%s)", len(b.Rows), m.draftAccept > 0, b.Key)
		}
	}
	for _, r := range b.Rows {
		if b.Key.Stage == runtime.Draft {
			if m.drafted == nil {
				m.drafted = map[int]int32{}
			}
			next := simNext(r.Token, r.Pos)
			if m.draftRng.Float64() >= m.draftAccept {
				next = 3 + (next-3+1+int32(m.draftRng.IntN(simVocab-4)))%(simVocab-3)
			}
			m.drafted[r.Slot] = next
		} else {
			delete(m.drafted, r.Slot)
		}
		if r.Pos >= len(tables[r.Slot])*kernels.KVPageTokens {
			m.t.Fatalf("row at position %d of slot %d beyond its %d pages", r.Pos, r.Slot, len(tables[r.Slot]))
		}
		if pg := tables[r.Slot][r.Pos/kernels.KVPageTokens]; mappers[pg] > 1 {
			m.t.Fatalf("slot %d writes position %d into page %d, which another slot maps", r.Slot, r.Pos, pg)
		}
		if r.Logits {
			m.last[r.Slot] = r.Token*7 + int32(r.Pos)
		}
		if m.kv != nil {
			e := m.kv[tables[r.Slot][r.Pos/kernels.KVPageTokens]][r.Pos%kernels.KVPageTokens*simEntry:]
			binary.LittleEndian.PutUint32(e, uint32(r.Token))
			binary.LittleEndian.PutUint32(e[4:], uint32(r.Pos+1))
		}
	}
	m.batch = b
	return nil
}

func (m *scripted) Logits(slot int, dst []float32) []float32 {
	dst = append(dst[:0], make([]float32, simVocab)...)
	dst[3+int(m.last[slot]%(simVocab-3))] = 1 // ids 3.. ; 2 is EOS, picked when the sum hits it below
	if m.last[slot]%29 == 0 {
		dst[2] = 2
	}
	return dst
}

func (m *scripted) Greedy(slot int) int32 {
	if t, ok := m.drafted[slot]; ok {
		return t
	}
	l := m.Logits(slot, nil)
	best := 0
	for i, v := range l {
		if v > l[best] {
			best = i
		}
	}
	return int32(best)
}

// simTokenizer is a vocabulary of simVocab single-letter tokens.
func simTokenizer(t testing.TB) *tokenizer.Tokenizer {
	v := &vocab.Vocab{Model: "llama", BOS: 1, EOS: 2, EOT: -1, UNK: 0, PAD: -1, SEP: -1, NL: -1, EOM: -1, MASK: -1,
		FIMPre: -1, FIMSuf: -1, FIMMid: -1, FIMPad: -1, FIMRep: -1, FIMSep: -1}
	for i := range simVocab {
		v.Tokens = append(v.Tokens, map[int]string{0: "<unk>", 1: "<s>", 2: "</s>"}[i])
		if i > 2 {
			v.Tokens[i] = string(rune('A' + i))
		}
	}
	tok, err := tokenizer.New(v)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestSimulation drives the engine through many randomized steps of
// arrivals, cancellations, slow consumers, tenant limits and failed steps,
// and checks the invariants after every step: no page leaked or held
// twice, every request holding just the pages its tokens fill, every
// running decode served each step, no tenant above its caps, no
// interactive request preempted, every greedy stream the tokens it
// would produce alone (none lost or repeated across preemptions), every
// request ending exactly once with its usage adding up. Seeds 1-3 have a
// roomy pool; in seeds 4-6 it runs dry, and requests give up their pages.
//
// Seeds 7-12 run the same with speculative decoding: every decoding
// request proposes up to 3 draft tokens a step, each the model's next
// greedy token with a probability the seed draws (n-gram drafts from
// simDrafter on even seeds, the model's draft variant on odd ones), and
// the same invariants hold — the draft rows' pages go back when the draft is
// rejected, and every greedy stream is still its model chain.
//
// Seeds 13-15 run a dry pool with the prefix cache's host tier: evicted
// pages keep their bytes in host memory and come back into fresh pages
// when a prompt's prefix finds them there; the tier holds 24 pages in
// seeds 13 and 14, and 3 in seed 15, so it is full and pushes pages out.
// Seed 14 copies pages in batches that land late (asyncPager): a page's
// copy-out is queued before anything writes it again, a batch's buffers
// are neither read nor reused before it lands, and every buffer and
// batch is back at the end.
// In every seed the model's KV holds each position's token, and every
// request's pages hold exactly its tokens after every step, so a page
// copied to the host and back must come back byte for byte, and so must
// a choice's copy of its group's partial prompt page (seeds 3 and 6 run
// a model that cannot copy pages, whose choices compute that page).
//
// In every seed a third of the greedy requests go under a constraint that
// forces a third of their tokens (chainForcer), which the engine takes
// ahead of the model into spare slots (fast-forward): their streams must
// still be the model's chain.
func TestSimulation(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15} {
		pages, host := 100, int64(0)
		if (seed-1)%6 > 2 || seed > 12 {
			pages = 40
		}
		switch seed {
		case 13, 14:
			host = 24 * kernels.KVPageTokens * simEntry
		case 15:
			host = 3 * kernels.KVPageTokens * simEntry
		}
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { simulate(t, seed, 3500, pages, seed > 6 && seed <= 12, host) })
	}
}

// simDrafter proposes the scripted model's greedy chain after a
// history, each token right with probability accept and otherwise a
// wrong one, drawn from its seeded source.
type simDrafter struct {
	rng    *rand.Rand
	accept float64
}

func (d *simDrafter) Draft(history []int32, k int) []int32 {
	var out []int32
	prev, pos := history[len(history)-1], len(history)-1
	for range k {
		next := simNext(prev, pos)
		if d.rng.Float64() >= d.accept {
			next = 3 + (next-3+1+int32(d.rng.IntN(simVocab-4)))%(simVocab-3) // any other but EOS
		}
		out = append(out, next)
		prev, pos = next, pos+1
	}
	return out
}

// chainForcer is a constraint that allows, at every third position, the
// scripted model's own greedy token alone (unless that is EOS), and every
// token elsewhere: the greedy stream of a request under it is still the
// model's chain, and a third of its tokens are forced, which the engine
// takes ahead of the model (fastForward).
type chainForcer struct {
	prev int32 // the last token, at position pos
	pos  int
}

func (c *chainForcer) Mask(allowed []uint64) {
	if next := simNext(c.prev, c.pos); c.pos%3 == 0 && next != 2 {
		clear(allowed)
		allowed[next/64] |= 1 << (next % 64)
		return
	}
	for i := range allowed {
		allowed[i] = ^uint64(0)
	}
}

func (c *chainForcer) Accept(tok int32) error {
	c.prev, c.pos = tok, c.pos+1
	return nil
}

func (c *chainForcer) Done() bool { return false }

// simNext is the token the scripted model's greedy choice gives after
// token prev at position pos, or 2 (EOS).
func simNext(prev int32, pos int) int32 {
	last := prev*7 + int32(pos)
	if last%29 == 0 {
		return 2
	}
	return 3 + last%(simVocab-3)
}

func simulate(t *testing.T, seed uint64, steps, kvPages int, speculate bool, hostKV int64) {
	rng := rand.New(rand.NewPCG(seed, seed))
	// Seeds 3 and 6 run a model that cannot copy pages: their choices
	// compute their prompt's partial page.
	m := &scripted{t: t, slots: 8, maxPages: 16, kvPages: kvPages, last: map[int]int32{}, noCopy: seed == 3 || seed == 6}
	m.kv = make([][]byte, kvPages)
	for i := range m.kv {
		m.kv[i] = make([]byte, m.KVPageBytes())
	}
	var sp Speculation
	var drafter *simDrafter
	if speculate {
		// The model has slots beyond the engine's, which draft rows
		// borrow too.
		m.slots = 10
		sp = Speculation{Kind: "ngram", K: 3, Fixed: true}
		drafter = &simDrafter{rng: rand.New(rand.NewPCG(seed, 7)), accept: 0.3 + 0.6*rng.Float64()}
		if seed%2 == 1 {
			// Odd seeds draft with the model's draft variant.
			sp.Kind = "self"
			m.draftAccept, m.draftRng = drafter.accept, rand.New(rand.NewPCG(seed, 8))
		}
	} else if testHookSpeculative != nil {
		sp, _ = testHookSpeculative()
		if sp.Kind == "self" {
			m.draftAccept, m.draftRng = 0.6, rand.New(rand.NewPCG(seed, 9))
		}
	}
	limits := map[string]sched.Limits{"a": {MaxSlots: 3, DecodeTokensPerSecond: 200}, "b": {MaxPages: 12}, "c": {PrefillTokensPerSecond: 1000}}
	clock := time.Unix(1_700_000_000, 0) // moved forward by each step
	timed := seed%3 == 0
	if timed {
		// Seeds 3, 6, … run a model whose steps take time, a variant's
		// own and a little a row, so that the engine times its variants
		// and sizes the prompts' prefill by them (planPrefill), and its
		// interactive latency budget takes effect.
		m.clock = &clock
		m.cost = func(k runtime.ShapeKey) time.Duration {
			base := map[runtime.Stage]time.Duration{runtime.Decode: 8 * time.Millisecond, runtime.Prefill: 9 * time.Millisecond}[k.Stage]
			return base + time.Duration(k.Rows)*300*time.Microsecond
		}
	}
	policy := Policy{Tenants: map[string]TenantPolicy{}}
	for tn, lim := range limits {
		policy.Tenants[tn] = TenantPolicy{MaxSlots: lim.MaxSlots, MaxPages: lim.MaxPages,
			DecodeTokensPerSecond: lim.DecodeTokensPerSecond, PrefillTokensPerSecond: lim.PrefillTokensPerSecond}
	}
	c := policy.Tenants["c"]
	c.ReservedPages = 6
	policy.Tenants["c"] = c
	cfg := Config{Slots: 8, ChunkCap: 64, EventBuffer: 8,
		Policy: NewLivePolicy(policy), Now: func() time.Time { return clock }, Speculative: sp, HostKVBytes: hostKV}
	if drafter != nil {
		cfg.Drafter = drafter
	}
	var model Model = m
	if hostKV > 0 && seed%2 == 0 {
		// Even seeds copy pages to and from the host tier in batches
		// that land late.
		m.async = rand.New(rand.NewPCG(seed, 10))
		model = asyncPager{m}
	}
	e, err := New(model, simTokenizer(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if u := e.pool.Unreserved()["c"]; u != 6 {
		t.Fatalf("tenant c's policy reserves 6 pages; the pool holds back %d", u)
	}
	type client struct {
		events <-chan Event
		cancel context.CancelFunc
		slow   bool // never reads until the end
		got    int  // token events read
		ended  bool
		qos    sched.QoS
		// greedy streams are checked token by token at their end.
		greedy bool
		prompt []int32
		toks   []int32
	}
	var clients []*client
	read := func(c *client, all bool) {
		for !c.ended {
			select {
			case ev, ok := <-c.events:
				if !ok {
					t.Fatalf("seed %d: channel closed without a last event", seed)
				}
				if ev.Preempted && c.qos == sched.Interactive {
					t.Fatalf("seed %d: an interactive request was preempted", seed)
				}
				if ev.Token >= 0 {
					c.toks = append(c.toks, ev.Token)
				}
				if c.greedy && ev.Finish != "" && ev.Finish != ClientTooSlow { // (which drops an event)
					prev, pos := c.prompt[len(c.prompt)-1], len(c.prompt)-1
					for _, tok := range c.toks {
						if want := simNext(prev, pos); tok != want {
							t.Fatalf("seed %d: greedy stream %v of prompt %v: token %d at position %d, want %d", seed, c.toks, c.prompt, tok, pos+1, want)
						}
						prev, pos = tok, pos+1
					}
					if ev.Finish == "eog" && simNext(prev, pos) != 2 {
						t.Fatalf("seed %d: a greedy request ended at position %d where the model does not give EOS", seed, pos)
					}
				}
				if ev.Finish != "" {
					c.ended = true
					if ev.Finish != ClientTooSlow && ev.Finish != Cancelled && ev.Finish != Failed && ev.CompletionTokens != c.got+btoi(ev.Token >= 0) {
						t.Fatalf("seed %d: %d token events, usage says %d (%s)", seed, c.got, ev.CompletionTokens, ev.Finish)
					}
					if _, open := <-c.events; open {
						t.Fatalf("seed %d: event after the last one", seed)
					}
					continue
				}
				if ev.Token >= 0 {
					c.got++
				}
			default:
				if !all {
					return
				}
			}
			if !all {
				return
			}
		}
	}
	ctx := context.Background()
	mostRunning, sized := 0, 0
	// A third of the greedy requests go under a constraint that forces
	// a third of their tokens (chainForcer), drawn from a source of
	// their own.
	crng := rand.New(rand.NewPCG(seed, 11))
	for step := 0; step < steps; step++ {
		clock = clock.Add(time.Duration(1+rng.IntN(30)) * time.Millisecond)
		if rng.IntN(3) == 0 {
			cctx, cancel := context.WithCancel(ctx)
			t.Cleanup(cancel)
			tenant := []string{"a", "b", "c"}[rng.IntN(3)]
			// Prompts start with one of a few shared prefixes, so the
			// prefix cache hits, evicts and is shared.
			prompt := make([]int32, 1+rng.IntN(100))
			base := rng.IntN(4)
			for i := range prompt {
				prompt[i] = int32(3 + (base*31+i*7)%(simVocab-3))
				if i > 40+base*10 {
					prompt[i] = int32(3 + rng.IntN(simVocab-3))
				}
			}
			// A quarter of them ask for several choices (OpenAI's n),
			// whose later choices map the first's prompt pages.
			choices := []decode.Params{{MaxTokens: 1 + rng.IntN(60)}}
			if crng.IntN(3) == 0 {
				choices[0].Constraint = &chainForcer{prev: prompt[len(prompt)-1], pos: len(prompt) - 1}
			}
			if rng.IntN(4) == 0 {
				for range 1 + rng.IntN(3) {
					choices = append(choices, decode.Params{MaxTokens: 1 + rng.IntN(60), Sampling: sample.Params{Temperature: 1, Seed: rng.Uint64()}})
				}
			}
			qos := sched.QoS(rng.IntN(3))
			evs, err := e.SubmitN(cctx, Request{Tenant: tenant, QoS: qos, Prompt: prompt}, choices)
			if err != nil {
				cancel()
				if len(prompt)+60 <= 16*16 {
					t.Fatalf("seed %d: a request that fits was refused: %v", seed, err)
				}
				continue
			}
			slow := rng.IntN(10) == 0
			for i, ev := range evs {
				// The choices share one context: cancelling any cancels all.
				clients = append(clients, &client{events: ev, cancel: cancel, slow: slow, qos: qos,
					greedy: i == 0, prompt: prompt})
			}
		}
		if rng.IntN(20) == 0 && len(clients) > 0 {
			clients[rng.IntN(len(clients))].cancel()
		}
		if rng.IntN(200) == 0 {
			m.fail = true
		}
		m.batch = runtime.Batch{}
		running := map[*request]bool{}
		for _, r := range e.reqs {
			if r.slot >= 0 && r.done >= max(len(r.Prompt), r.replay) {
				running[r] = true // decoding before this step: must get a row
			}
		}
		if e.planPrefill().sized {
			sized++
		}
		did, err := e.Step(ctx)
		if err != nil && !strings.HasSuffix(err.Error(), "scripted failure") {
			t.Fatalf("seed %d step %d: %v", seed, step, err)
		}
		if did && err == nil {
			served := map[int]bool{}
			for _, r := range m.batch.Rows {
				served[r.Slot] = true
			}
			for r := range running {
				preempted := r.slot < 0
				if r.events != nil && !preempted && !served[r.slot] && r.ctx.Err() == nil {
					t.Fatalf("seed %d step %d: decoding request %d in slot %d got no row", seed, step, r.id, r.slot)
				}
			}
		}
		check(t, e, limits, seed, step)
		checkKV(t, e, m, seed, step)
		mostRunning = max(mostRunning, e.Stats().Running)
		for _, c := range clients {
			if !c.slow {
				read(c, false)
			}
		}
	}
	for _, c := range clients {
		c.cancel()
	}
	for i := 0; i < 5; i++ {
		e.Step(ctx)
	}
	for _, c := range clients {
		read(c, true)
	}
	check(t, e, limits, seed, steps)
	if e.pool.Free()+e.prefix.Len() != e.pool.Pages() || len(e.reqs) != 0 {
		t.Fatalf("seed %d: after every request ended %d of %d pages are free and %d requests remain", seed, e.pool.Free(), e.pool.Pages(), len(e.reqs))
	}
	s := e.Stats()
	var ended uint64
	for _, n := range s.Finished {
		ended += n
	}
	if ended != uint64(len(clients)) {
		t.Fatalf("seed %d: %d requests, %d ended (%v)", seed, len(clients), ended, s.Finished)
	}
	if s.Preemptions == 0 {
		t.Errorf("seed %d: no preemption happened: the simulation does not exercise it", seed)
	}
	if s.ForcedTokens == 0 {
		t.Errorf("seed %d: no token was forced: the simulation does not exercise fast-forward", seed)
	}
	if kvPages < 50 && s.Released == 0 {
		t.Errorf("seed %d: no request gave up its pages in a pool of %d: the simulation does not run it dry", seed, kvPages)
	}
	if s.PrefixHit == 0 {
		t.Errorf("seed %d: no prefix-cache hit: the simulation does not exercise it", seed)
	}
	if s.ChoiceShared == 0 {
		t.Errorf("seed %d: no choice mapped its group's prompt pages: the simulation does not exercise it", seed)
	}
	if m.noCopy == (m.copied > 0) {
		t.Errorf("seed %d: a model that copies pages: %v; %d partial prompt pages copied", seed, !m.noCopy, m.copied)
	}
	e.landHost(true)
	if err := e.checkHostIdle(); err != nil {
		t.Errorf("seed %d: the host tier's copies, at the end: %v", seed, err)
	}
	if m.pending > 0 {
		t.Errorf("seed %d: %d batches of page copies never landed", seed, m.pending)
	}
	switch {
	case hostKV == 0 && (s.PrefixHostHit > 0 || s.HostStored > 0):
		t.Errorf("seed %d: no host tier, yet %d host hits and %d pages stored", seed, s.PrefixHostHit, s.HostStored)
	case hostKV > 0 && (s.PrefixHostHit == 0 || s.HostStored == 0):
		t.Errorf("seed %d: %d tokens from the host tier, %d pages stored: the simulation does not exercise it", seed, s.PrefixHostHit, s.HostStored)
	case hostKV > 0 && hostKV < 4*int64(m.KVPageBytes()) && s.HostEvicted == 0:
		t.Errorf("seed %d: a host tier of %d pages never pushed one out", seed, hostKV/int64(m.KVPageBytes()))
	case hostKV > 0 && s.HostBytes > hostKV:
		t.Errorf("seed %d: the host tier holds %d bytes, over its %d", seed, s.HostBytes, hostKV)
	}
	if timed != (sized > 0) {
		t.Errorf("seed %d: steps take time: %v; %d steps' prefill sized by the variants' times", seed, timed, sized)
	}
	if speculate {
		if s.SpecDraftTokens == 0 || s.SpecAccepted == 0 || s.SpecAccepted == s.SpecDraftTokens {
			t.Errorf("seed %d: %d draft tokens verified, %d accepted: the simulation does not exercise acceptance and rejection", seed, s.SpecDraftTokens, s.SpecAccepted)
		}
		t.Logf("seed %d: drafts accepted with probability %.2f: %d drafts, %d tokens, %d accepted (mean acceptance length %.2f)",
			seed, drafter.accept, s.SpecDrafts, s.SpecDraftTokens, s.SpecAccepted, 1+float64(s.SpecAccepted)/float64(max(s.SpecDrafts, 1)))
	}
	t.Logf("seed %d (%d pages): %d requests, %d steps computed (%d with the prefill sized), %d preemptions (%d released pages), most running at once %d, prefix cache %d/%d tokens (%d from the host tier: %d pages stored, %d pushed out), %d shared by choices (%d partial pages copied), %d tokens forced, endings %v",
		seed, kvPages, len(clients), s.Steps, sized, s.Preemptions, s.Released, mostRunning, s.PrefixHit, s.PrefixQueried, s.PrefixHostHit, s.HostStored, s.HostEvicted, s.ChoiceShared, m.copied, s.ForcedTokens, s.Finished)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkKV verifies that every request's pages hold its tokens at the
// positions in its KV cache, as the scripted model's rows wrote them
// (or a swap-in copied them back).
func checkKV(t *testing.T, e *Engine, m *scripted, seed uint64, step int) {
	t.Helper()
	for _, r := range e.reqs {
		for pos := range r.done {
			if tok, at := m.kvEntry(r.pages[pos/kernels.KVPageTokens], pos); at != pos+1 || tok != r.tokens[pos] {
				t.Fatalf("seed %d step %d: request %d's page %d holds token %d of position %d at position %d, want token %d",
					seed, step, r.id, r.pages[pos/kernels.KVPageTokens], tok, at-1, pos, r.tokens[pos])
			}
		}
	}
}

// check verifies the engine's invariants between steps.
func check(t *testing.T, e *Engine, limits map[string]sched.Limits, seed uint64, step int) {
	t.Helper()
	if st := e.Stats(); st.Decode.Steps+st.Mixed.Steps != st.Steps || st.Decode.Host < 0 || st.Mixed.Host < 0 || st.Decode.Replay < 0 || st.Mixed.Replay < 0 {
		t.Fatalf("seed %d step %d: step times %+v %+v do not add up to %d steps", seed, step, st.Decode, st.Mixed, st.Steps)
	}
	holders := map[uint32]int{}
	owners := map[uint32]uint64{} // page → the request whose own page it is
	slots, pages := map[string]int{}, map[string]int{}
	for _, r := range e.reqs {
		for i, pg := range r.pages {
			holders[pg]++
			if i < r.mapped || e.cacheRefs(pg) > 0 {
				continue
			}
			// A page past the mapped ones (a choice's copy of its
			// lead's partial page among them) that the prefix cache does
			// not hold (which others may map, and the host tier's
			// pages sit among the mapped ones) is its own: charged to
			// its tenant, and no other request's own.
			if o, ok := owners[pg]; ok || e.pool.Owner(pg) != r.Tenant {
				t.Fatalf("seed %d step %d: request %d's own page %d is charged to %q, and request %d's own too: %v", seed, step, r.id, pg, e.pool.Owner(pg), o, ok)
			}
			owners[pg] = r.id
		}
		if want := (r.done + kernels.KVPageTokens - 1) / kernels.KVPageTokens; len(r.pages) != want {
			t.Fatalf("seed %d step %d: request %d holds %d pages for its %d tokens in the KV cache, want %d", seed, step, r.id, len(r.pages), r.done, want)
		}
		if r.slot >= 0 {
			if e.slots[r.slot] != r {
				t.Fatalf("seed %d step %d: request %d thinks it holds slot %d", seed, step, r.id, r.slot)
			}
			slots[r.Tenant]++
			pages[r.Tenant] += len(r.pages) - r.mapped // mapped cache pages are not its own
		} else if len(r.pages) > 0 && r.QoS == sched.Interactive {
			t.Fatalf("seed %d step %d: interactive request %d waits holding pages: it was preempted", seed, step, r.id)
		}
	}
	if e.prefix != nil {
		e.prefix.Pages(func(pg uint32) { holders[pg]++ })
	}
	if err := e.pool.Check(holders); err != nil {
		t.Fatalf("seed %d step %d: %v", seed, step, err)
	}
	for tn, lim := range limits {
		if (lim.MaxSlots > 0 && slots[tn] > lim.MaxSlots) || (lim.MaxPages > 0 && pages[tn] > lim.MaxPages) {
			t.Fatalf("seed %d step %d: tenant %s holds %d slots and %d pages, limits %+v", seed, step, tn, slots[tn], pages[tn], lim)
		}
	}
	// The reservation: other tenants never take c's last unused pages.
	if free, res := e.pool.Free(), 6-e.pool.Used("c"); res > 0 && free < res {
		t.Fatalf("seed %d step %d: %d free pages, tenant c's unused reservation is %d", seed, step, free, res)
	}
}

// TestSoftRateLimit runs three requests through one slot: a1 and a2 of
// tenant a, then b1 of tenant b. Without limits they run in arrival order;
// with a soft decode rate that a1 pushes tenant a over, b1 goes before a2,
// which still runs once nothing else waits.
func TestSoftRateLimit(t *testing.T) {
	for _, tc := range []struct {
		limit int
		order string
	}{{0, "a1 a2 b1"}, {1, "a1 b1 a2"}} {
		m := &scripted{t: t, slots: 1, maxPages: 16, kvPages: 100, last: map[int]int32{}}
		clock := time.Unix(1_700_000_000, 0)
		e, err := New(m, simTokenizer(t), Config{Slots: 1, ChunkCap: 16,
			Policy: NewLivePolicy(Policy{Tenants: map[string]TenantPolicy{"a": {DecodeTokensPerSecond: tc.limit}}}),
			Now:    func() time.Time { return clock }})
		if err != nil {
			t.Fatal(err)
		}
		names := []string{"a1", "a2", "b1"}
		var streams []<-chan Event
		for _, n := range names {
			ev, err := e.Submit(context.Background(), Request{Tenant: n[:1], Prompt: []int32{1, 5, 6},
				Decode: decode.Params{MaxTokens: 10, IgnoreEOS: true}})
			if err != nil {
				t.Fatal(err)
			}
			streams = append(streams, ev)
		}
		var order []string
		for step := 0; len(order) < len(names); step++ {
			if step > 100 {
				t.Fatalf("limit %d: finished only %v", tc.limit, order)
			}
			clock = clock.Add(10 * time.Millisecond)
			if _, err := e.Step(context.Background()); err != nil {
				t.Fatal(err)
			}
			for i, ch := range streams {
				for range len(ch) {
					if ev := <-ch; ev.Finish != "" {
						order = append(order, names[i])
					}
				}
			}
		}
		if got := fmt.Sprint(order); got != "["+tc.order+"]" {
			t.Errorf("decode limit %d: finished %s, want [%s]", tc.limit, got, tc.order)
		}
	}
}

// TestStepCost checks the latency budget's estimate: decode-only steps
// of 10 ms and steps of 20 ms carrying 50 prefill rows give 0.2 ms a row,
// so a 20% slack allows 10 rows; nothing is limited before both costs are
// known, and at least one row always passes.
func TestStepCost(t *testing.T) {
	var c stepCost
	if n := c.rows(0.2); n != 0 {
		t.Fatalf("no measurements: %d rows", n)
	}
	c.observe(20*time.Millisecond, 50) // no decode-only time yet: ignored
	for range 5 {
		c.observe(10*time.Millisecond, 0)
	}
	if n := c.rows(0.2); n != 0 {
		t.Fatalf("no prefill measured: %d rows", n)
	}
	for range 5 {
		c.observe(20*time.Millisecond, 50)
	}
	if n := c.rows(0.2); n != 10 {
		t.Fatalf("%d rows, want 10", n)
	}
	if n := c.rows(0.0001); n != 1 {
		t.Fatalf("tiny slack: %d rows, want 1", n)
	}
}

// TestPagesOnDemand runs eight requests of 10-token prompts that may
// generate 200 tokens each (14 pages) in a pool of 56 pages: four such
// requests' whole lengths. All eight run at once; the pages in use are
// just those their tokens fill (what kv_cache_usage_perc reports); as they
// grow the pool runs dry, requests give up their pages and recompute them
// later, and every stream still has the tokens it has alone. The step log
// of it reruns step for step, and the pool ends full.
func TestPagesOnDemand(t *testing.T) {
	t.Run("plain", func(t *testing.T) { pagesOnDemand(t, Speculation{}, nil) })
	// With drafts of 3 tokens, right with probability 0.7: draft rows
	// take pages the pool has free and give back those of rejected
	// tokens, and the step log (which holds the drafts) reruns.
	t.Run("speculative", func(t *testing.T) {
		pagesOnDemand(t, Speculation{Kind: "ngram", K: 3, Fixed: true}, &simDrafter{rng: rand.New(rand.NewPCG(1, 2)), accept: 0.7})
	})
	// The same with the model's draft variant making the drafts (right
	// with probability 0.7), which the rerun's model makes again.
	t.Run("self", func(t *testing.T) {
		pagesOnDemand(t, Speculation{Kind: "self", K: 3, Fixed: true}, &simDrafter{rng: rand.New(rand.NewPCG(1, 2)), accept: 0.7})
	})
	// The same with a draft model (a scripted model of its own pages
	// whose greedy token is the target's with probability 0.7): its pages
	// are not the target's, and the step log, which holds its tokens,
	// reruns without it.
	t.Run("draft", func(t *testing.T) {
		pagesOnDemand(t, Speculation{Kind: "draft", K: 3, Fixed: true}, &simDrafter{rng: rand.New(rand.NewPCG(1, 2)), accept: 0.7})
	})
}

// noisyDraft is a scripted draft model whose greedy token is the
// scripted target's with probability accept, another token otherwise.
type noisyDraft struct {
	*scripted
	rng    *rand.Rand
	accept float64
}

func (m *noisyDraft) Greedy(slot int) int32 {
	t := m.scripted.Greedy(slot)
	if m.rng.Float64() >= m.accept {
		t = 3 + (t-3+1+int32(m.rng.IntN(simVocab-4)))%(simVocab-3)
	}
	return t
}

func pagesOnDemand(t *testing.T, sp Speculation, drafter *simDrafter) {
	m := &scripted{t: t, slots: 8, maxPages: 16, kvPages: 56, last: map[int]int32{}}
	var log bytes.Buffer
	clock := time.Unix(1_700_000_000, 0)
	cfg := Config{Slots: 8, ChunkCap: 64, StepLog: &log, Now: func() time.Time { return clock }, Speculative: sp}
	if drafter != nil {
		m.slots = 12
		cfg.Drafter = drafter
		if sp.Kind == "self" {
			m.draftAccept, m.draftRng = drafter.accept, rand.New(rand.NewPCG(5, 6))
		}
		if sp.Kind == "draft" {
			cfg.Drafter = nil
			cfg.DraftModel = &noisyDraft{&scripted{t: t, slots: 12, maxPages: 16, kvPages: 120, last: map[int]int32{}}, rand.New(rand.NewPCG(7, 8)), drafter.accept}
		}
	}
	e, err := New(m, simTokenizer(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		// The requests that run last run alone: their verify steps ask
		// for one-row bits (scripted.Step holds every step to that rule).
		if sp.On() && m.oneRowSteps == 0 {
			t.Error("no step of one request's verify rows alone asked for one-row bits")
		}
	}()
	ctx := context.Background()
	var prompts [][]int32
	var streams []<-chan Event
	for i := range 8 {
		prompt := make([]int32, 10)
		for k := range prompt {
			prompt[k] = int32(3 + (i*13+k*5)%(simVocab-3))
		}
		q := sched.Standard
		if i%3 == 2 {
			q = sched.Batch
		}
		ev, err := e.Submit(ctx, Request{Tenant: "t", QoS: q, Prompt: prompt, Decode: decode.Params{MaxTokens: 200, IgnoreEOS: true}})
		if err != nil {
			t.Fatal(err)
		}
		prompts, streams = append(prompts, prompt), append(streams, ev)
	}
	got := make([][]int32, len(streams))
	most, open := 0, len(streams)
	for step := 0; open > 0; step++ {
		if step > 5000 {
			t.Fatal("the engine did not finish")
		}
		clock = clock.Add(time.Millisecond)
		if _, err := e.Step(ctx); err != nil {
			t.Fatal(err)
		}
		st := e.Stats()
		most = max(most, st.Running)
		filled := 0
		for _, r := range e.reqs {
			filled += (r.done + kernels.KVPageTokens - 1) / kernels.KVPageTokens
		}
		if held := st.PagesTotal - st.PagesFree - st.PrefixIdle; held != filled {
			t.Fatalf("step %d: %d pages in use, the requests' tokens fill %d", step, held, filled)
		}
		for i, ch := range streams {
			for drained := false; ch != nil && !drained; {
				select {
				case ev, ok := <-ch:
					if !ok {
						streams[i], open = nil, open-1
						drained = true
					} else if ev.Token >= 0 {
						got[i] = append(got[i], ev.Token)
					}
				default:
					drained = true
				}
			}
		}
	}
	st := e.Stats()
	t.Logf("%d steps, at most %d running at once, %d preemptions (%d released pages)", st.Steps, most, st.Preemptions, st.Released)
	if most != 8 {
		t.Errorf("at most %d requests ran at once, want all 8 (4 fit whole lengths)", most)
	}
	if st.Released == 0 {
		t.Error("no request gave up its pages: the test does not run the pool dry")
	}
	for i, toks := range got {
		prev, pos := prompts[i][len(prompts[i])-1], len(prompts[i])-1
		for k, tok := range toks {
			want := simNext(prev, pos)
			if want == 2 { // EOS is banned: the largest logit after it
				want = 3 + (prev*7+int32(pos))%(simVocab-3)
			}
			if tok != want {
				t.Fatalf("request %d token %d: %d, want %d", i, k, tok, want)
			}
			prev, pos = tok, pos+1
		}
		if len(toks) != 200 {
			t.Errorf("request %d: %d tokens, want 200", i, len(toks))
		}
	}
	if st.PagesFree+st.PrefixIdle != st.PagesTotal {
		t.Errorf("at the end %d pages free and %d idle in the prefix cache, of %d", st.PagesFree, st.PrefixIdle, st.PagesTotal)
	}
	if sp.On() && (st.SpecAccepted == 0 || st.SpecAccepted == st.SpecDraftTokens) {
		t.Errorf("%d of %d draft tokens accepted: the test does not exercise acceptance and rejection", st.SpecAccepted, st.SpecDraftTokens)
	}
	m2 := &scripted{t: t, slots: m.slots, maxPages: 16, kvPages: 56, last: map[int]int32{}, draftAccept: m.draftAccept, draftRng: rand.New(rand.NewPCG(5, 6))}
	if n, err := Rerun(ctx, m2, simTokenizer(t), &log); err != nil {
		t.Fatalf("rerun: %v", err)
	} else {
		t.Logf("reran %d steps", n)
	}
}

// TestEvictRefillsFreeSlots: once the prefix cache holds every page of the
// pool (a server that has run a while), the requests that find free slots
// are admitted in one step, each with its pages evicted from the cache —
// not one a step.
func TestEvictRefillsFreeSlots(t *testing.T) {
	const slots = 4
	m := &scripted{t: t, slots: slots, maxPages: 4, kvPages: 16, last: map[int]int32{}}
	e, err := New(m, simTokenizer(t), Config{Slots: slots, ChunkCap: 64})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Distinct prompts of 33 tokens with 31 to generate: four pages a
	// request, two of them full prompt pages the cache keeps.
	prompt := func(i int) []int32 {
		p := make([]int32, 33)
		for j := range p {
			p[j] = int32(3 + (i+j*(i+1))%(simVocab-3)) // no two alike from the first token
		}
		return p
	}
	wave := func(first int) []<-chan Event {
		var evs []<-chan Event
		for i := range slots {
			ev, err := e.Submit(ctx, Request{Tenant: "t", Prompt: prompt(first + i), Decode: decode.Params{MaxTokens: 31, IgnoreEOS: true}})
			if err != nil {
				t.Fatal(err)
			}
			evs = append(evs, ev)
		}
		return evs
	}
	drain := func(evs []<-chan Event) {
		for step, open := 0, len(evs); open > 0; step++ {
			if step > 500 {
				t.Fatalf("%d requests still open after %d steps: %+v", open, step, e.Stats())
			}
			if _, err := e.Step(ctx); err != nil {
				t.Fatal(err)
			}
			for i := range evs {
				for more := true; more; {
					select {
					case x := <-evs[i]:
						if x.Finish != "" {
							open--
							evs[i] = nil // closed: a nil channel is never ready
						}
					default:
						more = false
					}
				}
			}
		}
	}
	drain(wave(0))
	drain(wave(slots))
	if s := e.Stats(); s.PagesFree+s.PrefixIdle < slots*4 || s.PrefixPages < slots*2 {
		t.Fatalf("after two waves: %d free, %d cached (%d idle): the test needs a pool full of cached pages", s.PagesFree, s.PrefixPages, s.PrefixIdle)
	}
	evs := wave(2 * slots)
	if _, err := e.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if s := e.Stats(); s.Running != slots {
		t.Errorf("after one step of a wave of %d onto a pool of cached pages: %d running, %d waiting", slots, s.Running, s.Waiting)
	}
	drain(evs)
}

// TestHostTierNeedsPages: a host tier is refused, naming why, on a model
// whose pages cannot be copied and when it cannot hold one page; a model
// without a prefix cache has no use for one and runs without it.
func TestHostTierNeedsPages(t *testing.T) {
	m := &scripted{t: t, slots: 2, maxPages: 16, kvPages: 40, last: map[int]int32{}}
	cfg := Config{Slots: 2, ChunkCap: 64, HostKVBytes: 1 << 20}
	if _, err := New(m, simTokenizer(t), cfg); err == nil || !strings.Contains(err.Error(), "cannot") {
		t.Errorf("pages that cannot be copied: %v", err)
	}
	m.kv = make([][]byte, m.kvPages)
	for i := range m.kv {
		m.kv[i] = make([]byte, m.KVPageBytes())
	}
	cfg.HostKVBytes = int64(m.KVPageBytes() - 1)
	if _, err := New(m, simTokenizer(t), cfg); err == nil || !strings.Contains(err.Error(), "cannot hold one KV page") {
		t.Errorf("a tier smaller than a page: %v", err)
	}
	cfg.HostKVBytes = 1 << 20
	if e, err := New(m, simTokenizer(t), cfg); err != nil || e.host == nil {
		t.Errorf("a tier of 1 MiB: %v", err)
	}
	m.slotState = true
	if e, err := New(m, simTokenizer(t), cfg); err != nil || e.host != nil {
		t.Errorf("a model without a prefix cache: host tier %v, %v", e != nil && e.host != nil, err)
	}
}
