package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	goruntime "runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zrtdev/zrt/internal/testmodel"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/decode"
	"github.com/zrtdev/zrt/runtime/engine"
	"github.com/zrtdev/zrt/runtime/grammar"
	"github.com/zrtdev/zrt/runtime/tokenizer"
)

// maskModel is a model without a model: a step sleeps for the time
// device gives its variant (nothing when nil), so that a load measures
// the engine's host cost per step apart from the device's, and the
// throughput a device of those costs would give. Like T-CUDA it takes a masked row's greedy choice
// under the row's mask "on the device"; its choices look like random
// weights': a pseudo-random token from the row's slot, position and
// token (under the mask: the first allowed token from there on), never
// an end-of-generation token where no mask asks for one.
type maskModel struct {
	slots, nvocab int
	eog           map[int32]bool
	device        func(runtime.ShapeKey) time.Duration // a step's time on the device
	greedy        []int32                              // by slot: the last step's choice

	mu     sync.Mutex
	masked int           // rows that came with a mask
	words  int           // mask words those rows carried
	busy   time.Duration // the steps' device time, summed
	cpu    time.Duration // the steps' CPU time on the caller's thread (its "device" work), summed
}

func (m *maskModel) Key(stage runtime.Stage, rows int) (runtime.ShapeKey, bool) {
	// T-CUDA's default variants for 64 slots.
	caps := map[runtime.Stage][]int{runtime.Decode: {1, 4, 16, 64}, runtime.Prefill: {128, 512, 1024}}[stage]
	for _, c := range caps {
		if rows <= c {
			return runtime.ShapeKey{Stage: stage, Slots: m.slots, Rows: c}, true
		}
	}
	return runtime.ShapeKey{}, false
}
func (m *maskModel) Slots() int          { return m.slots }
func (m *maskModel) MaxPages() int       { return 64 }
func (m *maskModel) KVPages() int        { return 64 * m.slots * 4 }
func (m *maskModel) SlotState() bool     { return false }
func (m *maskModel) MasksOnDevice() bool { return true }

// mix is a 64-bit finalizer (splitmix64's): the "random weights".
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

func (m *maskModel) Step(_ context.Context, b runtime.Batch) error {
	t0 := time.Now() // the forward pass starts; the masks are read after
	c0 := threadCPU()
	defer func() { m.cpu += threadCPU() - c0 }()
	if b.MasksReady != nil {
		b.MasksReady()
	}
	for _, r := range b.Rows {
		if !r.Logits {
			continue
		}
		h := mix(uint64(r.Slot)<<40 ^ uint64(r.Pos)<<20 ^ uint64(r.Token))
		if r.Mask == nil {
			tok := int32(h % uint64(m.nvocab))
			for m.eog[tok] {
				tok = (tok + 1) % int32(m.nvocab)
			}
			m.greedy[r.Slot] = tok
			continue
		}
		m.mu.Lock()
		m.masked++
		m.words += len(r.Mask)
		m.mu.Unlock()
		m.greedy[r.Slot] = firstAllowed(r.Mask, int(h%uint64(m.nvocab)), m.nvocab)
	}
	if m.device != nil {
		m.busy += m.device(b.Key)
		if d := m.device(b.Key) - time.Since(t0); d > 0 {
			time.Sleep(d)
		}
	}
	return nil
}

// firstAllowed is the first token at or after from (cyclically) that
// mask allows; -1 when it allows none.
func firstAllowed(mask []uint64, from, nvocab int) int32 {
	w := from / 64
	if x := mask[w] >> (from % 64) << (from % 64); x != 0 {
		if t := w*64 + bits.TrailingZeros64(x); t < nvocab {
			return int32(t)
		}
	}
	for i := 1; i <= len(mask); i++ {
		k := (w + i) % len(mask)
		if x := mask[k]; x != 0 {
			if t := k*64 + bits.TrailingZeros64(x); t < nvocab {
				return int32(t)
			}
		}
	}
	return -1
}

func (m *maskModel) Logits(slot int, dst []float32) []float32 {
	// Read only when a mask allows nothing: every logit the same.
	return append(dst[:0], make([]float32, m.nvocab)...)
}

func (m *maskModel) Greedy(slot int) int32 { return m.greedy[slot] }

// qwenChatModel is a synthetic model of ../shared/models with the real
// Qwen tokenizer (151 936 tokens).
const qwenChatModel = "synthetic/syn-qwen3-chat-q8_0.gguf"

// loadSchemas compiles the grammar library's test schemas (the loadtest's
// json_schema formats) for tok.
func loadSchemas(tb testing.TB, tok *tokenizer.Tokenizer) []*grammar.Grammar {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join("..", "grammar", "testdata", "schemas", "*.json"))
	if err != nil || len(files) == 0 {
		tb.Fatalf("no schemas: %v", err)
	}
	c := grammar.NewCompiler(tok, grammar.Limits{})
	var gs []*grammar.Grammar
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		g, err := c.Compile(context.Background(), grammar.Spec{JSONSchema: json.RawMessage(raw)})
		if err != nil {
			tb.Fatalf("%s: %v", f, err)
		}
		gs = append(gs, g)
	}
	return gs
}

// h200 is a step's time by variant on T-CUDA for a qwen3 0.6B-shaped
// model (32 000-token vocabulary, Q4_K_M) at 64 slots and a 4096 context,
// as the H200 measured it in sessions 29 and 30 (zrt-run serve's step
// times under loadtest, host excluded): decode steps of up to 1, 4, 16
// and 64 rows 0.8, 1.0, 1.5 and 2.85 ms; the prefill variants of 128,
// 512 and 1024 rows 3.9, 7.1 and 10.6 ms; a variant between them linear
// in its rows.
func h200(k runtime.ShapeKey) time.Duration {
	us := func(f float64) time.Duration { return time.Duration(f * float64(time.Microsecond)) }
	if k.Stage == runtime.Decode {
		switch {
		case k.Rows <= 1:
			return us(800)
		case k.Rows <= 4:
			return us(1000)
		case k.Rows <= 16:
			return us(1500)
		}
		return us(2850)
	}
	if k.Rows <= 512 {
		return us(3900 + (7100-3900)*float64(k.Rows-128)/(512-128))
	}
	return us(7100 + (10600-7100)*float64(k.Rows-512)/(1024-512))
}

// loadResult is what one load did.
type loadResult struct {
	wall       time.Duration
	tokens     int
	stats      engine.Stats
	maskedRows int
	maskWords  int
	busy       time.Duration      // the model's device time
	cpu        time.Duration      // the step loop's own CPU time in steps that computed
	parts      map[string]float64 // the decode steps' mean µs by part (the trace's schedule_us …)
	outputs    map[int]string     // request → its text, for constrained loads
}

// runLoad serves requests greedy requests of a prompt of promptTokens
// and at most maxTokens each, clients at a time, on a fresh engine over
// m (Config.PrefillHold hold): under grammars[j % len] when grammars is set (stopping when the
// output is complete), with ignore_eos otherwise, as bench/loadtest sends
// them.
func runLoad(tb testing.TB, m *maskModel, tok *tokenizer.Tokenizer, grammars []*grammar.Grammar, hold, clients, requests, promptTokens, maxTokens int) loadResult {
	tb.Helper()
	var trace bytes.Buffer // the steps' parts (Config.Trace)
	e, err := engine.New(m, tok, engine.Config{Slots: m.slots, ChunkCap: 512, PrefillHold: hold, Trace: &trace})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	var cpu time.Duration // the step loop's thread CPU time in steps that computed
	go func() {
		// Engine.Run's loop on a thread of its own, whose CPU time is
		// the engine's own work on the step's path: waits (the model's
		// step, which sleeps, masks still being computed, other
		// goroutines) cost it none, so the number holds on a busy
		// machine where wall time does not.
		goruntime.LockOSThread()
		defer goruntime.UnlockOSThread()
		for ctx.Err() == nil {
			t0 := threadCPU()
			did, _ := e.Step(ctx)
			if !did {
				time.Sleep(50 * time.Microsecond)
				continue
			}
			cpu += threadCPU() - t0
		}
		done <- ctx.Err()
	}()
	m.masked, m.words, m.busy, m.cpu = 0, 0, 0, 0
	res := loadResult{outputs: map[int]string{}}
	var mu sync.Mutex
	jobs := make(chan int)
	var wg sync.WaitGroup
	t0 := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				prompt := make([]int32, promptTokens)
				for i := range prompt {
					prompt[i] = int32(mix(uint64(j)<<20^uint64(i)) % 100000)
				}
				p := decode.Params{MaxTokens: maxTokens, ContextLength: 4096}
				if grammars != nil {
					p.Constraint = grammars[j%len(grammars)].NewMatcher()
				} else {
					p.IgnoreEOS = true
				}
				ch, err := e.Submit(ctx, engine.Request{Prompt: prompt, Decode: p})
				if err != nil {
					tb.Error(err)
					return
				}
				text, n := "", 0
				for ev := range ch {
					if ev.Token >= 0 {
						n++
					}
					text += ev.Text
					if ev.Finish != "" {
						if ev.Err != nil {
							tb.Errorf("request %d: %v", j, ev.Err)
						}
						break
					}
				}
				mu.Lock()
				res.tokens += n
				if grammars != nil {
					res.outputs[j] = text
				}
				mu.Unlock()
			}
		}()
	}
	for j := range requests {
		jobs <- j
	}
	close(jobs)
	wg.Wait()
	res.wall = time.Since(t0)
	res.stats = e.Stats()
	res.maskedRows, res.maskWords, res.busy = m.masked, m.words, m.busy
	cancel()
	<-done
	res.cpu = cpu - m.cpu // the model's choices are the device's work
	if err := e.Close(); err != nil {
		tb.Fatal(err)
	}
	res.parts = decodeParts(tb, trace.Bytes())
	return res
}

// BenchmarkHostStep is the engine's host cost per step under the loadtest's
// load (64 clients, 512 requests, 128-token prompts, 64 tokens at most,
// greedy) on a model that costs nothing, on the real Qwen vocabulary:
// unconstrained (ignore_eos) and under the 12 test schemas (strict
// json_schema, masks taken on the device, as on T-CUDA). Every constrained
// step of a T-CUDA server adds this host time to the device's, since the
// device waits for it. The grammars' position caches are warmed by one
// load first, as a server's are after its first requests. The nohold
// runs hold no prompt back (Config.PrefillHold -1).
func BenchmarkHostStep(b *testing.B) {
	tok := testmodel.Tokenizer(b, qwenChatModel)
	grammars := loadSchemas(b, tok)
	eog := map[int32]bool{}
	for _, id := range tok.Vocab().EOGTokens() {
		eog[id] = true
	}
	newModel := func() *maskModel {
		return &maskModel{slots: 64, nvocab: tok.NVocab(), eog: eog, greedy: make([]int32, 64), device: h200}
	}
	const clients, requests, prompt, maxTokens = 64, 512, 128, 64
	runLoad(b, newModel(), tok, grammars, 0, clients, requests, prompt, maxTokens) // warm the position caches
	for _, c := range []struct {
		name string
		gs   []*grammar.Grammar
		hold int
	}{{"unconstrained", nil, 0}, {"json_schema", grammars, 0}, {"unconstrained/nohold", nil, -1}, {"json_schema/nohold", grammars, -1}} {
		b.Run(c.name, func(b *testing.B) {
			var r loadResult
			var agg engine.Stats
			for range b.N {
				r = runLoad(b, newModel(), tok, c.gs, c.hold, clients, requests, prompt, maxTokens)
				agg.Decode.Steps += r.stats.Decode.Steps
				agg.Decode.Host += r.stats.Decode.Host
				agg.Mixed.Steps += r.stats.Mixed.Steps
				agg.Mixed.Host += r.stats.Mixed.Host
				agg.PromptTokens += r.stats.PromptTokens
			}
			b.ReportMetric(1e6*agg.Decode.Host/float64(agg.Decode.Steps), "host-µs/decode-step")
			b.ReportMetric(1e6*agg.Mixed.Host/float64(agg.Mixed.Steps), "host-µs/mixed-step")
			b.ReportMetric(float64(agg.Decode.Steps)/float64(b.N), "decode-steps")
			b.ReportMetric(float64(agg.Mixed.Steps)/float64(b.N), "mixed-steps")
			b.ReportMetric(float64(agg.PromptTokens)/float64(agg.Mixed.Steps), "prompt-rows/mixed-step")
			b.ReportMetric(float64(r.tokens), "tokens")
			// The step loop's CPU time a step (of the last load): the
			// host's work on the step's path without the waits.
			b.ReportMetric(float64(r.cpu.Microseconds())/float64(r.stats.Decode.Steps+r.stats.Mixed.Steps), "cpu-µs/step")
			// Tokens a step: idle slots (replies that ended, prompts held
			// back) lower it.
			b.ReportMetric(float64(r.tokens)/float64(r.stats.Decode.Steps+r.stats.Mixed.Steps), "tokens/step")
			b.ReportMetric(float64(r.tokens)/r.wall.Seconds(), "tok/s")
			// The throughput were the host free: the device's time alone.
			b.ReportMetric(float64(r.tokens)/r.busy.Seconds(), "device-tok/s")
			// Where a decode step's host time goes (wall time, of the
			// last load): scheduling and batching before the model's
			// step, advancing the device-masked rows' constraints after
			// it, then sampling and sending.
			for _, k := range []string{"schedule", "advance", "sample", "mask_wait"} {
				b.ReportMetric(r.parts[k+"_us"], k+"-µs/decode-step")
			}
			if r.maskedRows > 0 {
				b.ReportMetric(float64(8*r.maskWords)/float64(r.maskedRows), "mask-bytes/row")
			}
		})
	}
}

// TestHostStepLoadValid: the constrained load the benchmark runs gives
// outputs that each schema's grammar accepts whole (a fresh matcher takes
// every reply that ended before max_tokens), so the benchmark measures
// real constrained decoding.
func TestHostStepLoadValid(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the Qwen vocabulary")
	}
	tok := testmodel.Tokenizer(t, qwenChatModel)
	grammars := loadSchemas(t, tok)
	m := &maskModel{slots: 16, nvocab: tok.NVocab(), eog: map[int32]bool{}, greedy: make([]int32, 16)}
	for _, id := range tok.Vocab().EOGTokens() {
		m.eog[id] = true
	}
	r := runLoad(t, m, tok, grammars, 0, 16, 48, 32, 400)
	if r.maskedRows == 0 {
		t.Fatal("no row carried a mask")
	}
	complete := 0
	for j, text := range r.outputs {
		mt := grammars[j%len(grammars)].NewMatcher()
		if err := mt.AcceptBytes([]byte(text)); err != nil {
			t.Errorf("request %d: %q: %v", j, text, err)
			continue
		}
		if mt.Complete() {
			complete++
		}
	}
	if complete == 0 {
		t.Errorf("none of %d outputs is a complete match", len(r.outputs))
	}
	t.Logf("%d requests, %d complete, %d tokens, %s", len(r.outputs), complete, r.tokens, fmt.Sprint(r.wall))
}

// threadCPU is the calling thread's CPU time.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// decodeParts reads an engine trace's step events and returns the mean
// of each part (schedule_us, replay_us, advance_us, sample_us, and
// mask_wait_us, the replay's wait for masks, 0 where a step has none)
// over the decode steps (no prompt rows).
func decodeParts(tb testing.TB, trace []byte) map[string]float64 {
	tb.Helper()
	var doc struct {
		TraceEvents []struct {
			Name string         `json:"name"`
			Ph   string         `json:"ph"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(trace, &doc); err != nil {
		tb.Fatalf("the trace: %v", err)
	}
	sum, n := map[string]float64{}, 0
	for _, ev := range doc.TraceEvents {
		if ev.Ph != "X" || ev.Name != "step" || ev.Args["prefill_rows"] != 0.0 {
			continue
		}
		n++
		if w, _ := ev.Args["mask_wait_us"].(float64); w < 0 || w > ev.Args["replay_us"].(float64) {
			tb.Errorf("step %v: the mask wait is no part of the replay", ev.Args)
		}
		for _, k := range []string{"schedule_us", "replay_us", "advance_us", "sample_us", "mask_wait_us"} {
			v, _ := ev.Args[k].(float64)
			sum[k] += v
		}
	}
	for k := range sum {
		sum[k] /= float64(max(n, 1))
	}
	return sum
}

// TestDeviceMasksCancelled: requests under device masks that are
// cancelled while they decode (their next mask still due, computed only
// by the next step) end, as do the others, whose outputs the grammars
// accept; nothing waits forever for a mask no step computes.
func TestDeviceMasksCancelled(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the Qwen vocabulary")
	}
	tok := testmodel.Tokenizer(t, qwenChatModel)
	grammars := loadSchemas(t, tok)
	m := &maskModel{slots: 4, nvocab: tok.NVocab(), eog: map[int32]bool{}, greedy: make([]int32, 4)}
	for _, id := range tok.Vocab().EOGTokens() {
		m.eog[id] = true
	}
	e, err := engine.New(m, tok, engine.Config{Slots: 4, ChunkCap: 128})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go e.Run(ctx)
	var wg sync.WaitGroup
	for j := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			g := grammars[j%len(grammars)]
			ch, err := e.Submit(rctx, engine.Request{Prompt: []int32{int32(100 + j), 7, 9}, Decode: decode.Params{MaxTokens: 200, ContextLength: 4096,
				Constraint: g.NewMatcher()}})
			if err != nil {
				t.Error(err)
				return
			}
			text, n := "", 0
			timeout := time.After(20 * time.Second)
			for {
				select {
				case ev, ok := <-ch:
					if !ok {
						t.Errorf("request %d: events closed without a finish", j)
						return
					}
					if ev.Token >= 0 {
						n++
					}
					text += ev.Text
					if j%3 == 0 && n == 1+j%5 {
						cancel() // while its next mask is due
					}
					if ev.Finish == "" {
						continue
					}
					if j%3 != 0 || ev.Finish != engine.Cancelled {
						mt := g.NewMatcher()
						if err := mt.AcceptBytes([]byte(text)); err != nil {
							t.Errorf("request %d (%s): %q: %v", j, ev.Finish, text, err)
						}
					}
					return
				case <-timeout:
					t.Errorf("request %d: no finish after 20 s (%d tokens)", j, n)
					return
				}
			}
		}()
	}
	wg.Wait()
	if m.masked == 0 {
		t.Fatal("no row carried a mask")
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}
