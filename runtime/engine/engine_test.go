package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/build"
	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/bundleset"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/internal/testmodel"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
	"github.com/zrtdev/zrt/runtime/decode"
	"github.com/zrtdev/zrt/runtime/engine"
	"github.com/zrtdev/zrt/runtime/engine/sched"
	"github.com/zrtdev/zrt/runtime/sample"
	"github.com/zrtdev/zrt/runtime/sequence"
)

// stories compiles the trained stories260K model of ../shared with the
// model config text and opens it on T-CPU (skipping without ../shared).
func stories(t *testing.T, config string) *runtime.Program {
	t.Helper()
	return storiesOn(t, config, tiers[0])
}

// tier is where an engine test runs: a compile target and the tier that
// runs it.
type tier struct{ target, name string }

// tiers are T-CPU, the oracle, and T-CUDA where a GPU is present.
var tiers = []tier{{"cpu", "cpu"}, {"cuda:sm_90", "cuda"}}

// storiesOn is stories on tier tr, skipping T-CUDA without a GPU.
func storiesOn(t *testing.T, config string, tr tier) *runtime.Program {
	t.Helper()
	return sharedOn(t, "stories260K.gguf", config, tr)
}

// sharedOn compiles the model file of ../shared/models with the config
// text for tier tr and opens it (skipping without the file, or T-CUDA
// without a GPU).
func sharedOn(t *testing.T, file, config string, tr tier) *runtime.Program {
	t.Helper()
	if tr.name == "cuda" {
		if _, err := driver.Probe(); err != nil {
			t.Skipf("no GPU: %v", err)
		}
	}
	model := testmodel.Shared(t, file)
	return compileOn(t, model, config, tr)
}

// compileOn compiles model with the model config text for tier tr and
// opens it there, closing it when the test ends.
func compileOn(t *testing.T, model, config string, tr tier) *runtime.Program {
	t.Helper()
	dir := t.TempDir()
	cfg, out := filepath.Join(dir, "m.toml"), filepath.Join(dir, "b")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := compiler.Compile(context.Background(), model, out, compiler.Options{ConfigPath: cfg, Target: tr.target, PTXDir: os.Getenv("ZRT_PTX_DIR")}); err != nil {
		t.Fatal(err)
	}
	p, err := runtime.Open(out, runtime.Options{Tier: tr.name, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestServesLikeAlone runs requests of mixed prompt lengths through the
// engine — all submitted at once, so decodes and prefill chunks share
// steps — and requires each one's tokens to equal its solo run's, greedy
// and seeded, on the trained stories260K model. On T-CPU a row's
// arithmetic does not depend on its batch, so this holds exactly; T-CUDA
// is held to the same test, with the tokens of its own solo runs.
func TestServesLikeAlone(t *testing.T) {
	for _, tr := range tiers {
		t.Run(tr.name, func(t *testing.T) { servesLikeAlone(t, storiesOn(t, servesConfig, tr)) })
	}
}

// servesConfig is the model config of the servesLikeAlone tests.
const servesConfig = "context_length = 256\ndecode_slots = [1, 2, 4, 8]\nprefill_rows = [16, 64]\nkv_pages = 80\n"

// TestServesLikeAloneTP is TestServesLikeAlone on a tensor-parallel set
// of 2 ranks (zrtc build --tp 2), opened as one model: the engine's
// slots, KV pages (each rank's holding its heads, at the page numbers
// rank 0's request table gives every rank), preemption and prefix
// cache work on the set as on one bundle. T-CUDA runs it on two GPUs
// (skipping with fewer), a rank each.
func TestServesLikeAloneTP(t *testing.T) {
	for _, tr := range tiers {
		t.Run(tr.name, func(t *testing.T) { servesLikeAlone(t, setOn(t, "stories260K.gguf", servesConfig, tr, 2)) })
	}
}

// setOn is sharedOn for a tensor-parallel set of n ranks, skipping
// T-CUDA with fewer than n GPUs.
func setOn(t *testing.T, file, config string, tr tier, n int) *runtime.Program {
	t.Helper()
	if tr.name == "cuda" {
		info, err := driver.Probe()
		if err != nil {
			t.Skipf("no GPU: %v", err)
		}
		if info.Devices < n {
			t.Skipf("%d GPU(s) here, a set of %d ranks needs %d", info.Devices, n, n)
		}
	}
	model := testmodel.Shared(t, file)
	dir := t.TempDir()
	cfg, out := filepath.Join(dir, "m.toml"), filepath.Join(dir, "set")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := build.Run(context.Background(), build.Options{Model: model, Targets: []string{tr.target}, TP: n, Out: out,
		Compiler: compiler.Options{ConfigPath: cfg, PTXDir: os.Getenv("ZRT_PTX_DIR")}}); err != nil {
		t.Fatal(err)
	}
	x, err := bundleset.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := x.Rank(tr.target, 0)
	if !ok {
		t.Fatalf("set %s has no rank 0 of %s", out, tr.target)
	}
	p, err := runtime.Open(m.Path(out), runtime.Options{Tier: tr.name, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if p.Hparams.TPRanks != n {
		t.Fatalf("opened a bundle of %d ranks, want %d", p.Hparams.TPRanks, n)
	}
	return p
}

// TestServesLikeAloneHybrid is TestServesLikeAlone on a Qwen3.5-shaped
// hybrid (synthetic weights): its DeltaNet layers keep per-slot state,
// which a preempted request loses with its slot and the engine rebuilds
// by recomputing the request's tokens on resume.
func TestServesLikeAloneHybrid(t *testing.T) {
	dir := t.TempDir()
	model := testmodel.Write(t, dir, "m.gguf", synth.Shape{Arch: "qwen35", Layers: 4, Embd: 64, Heads: 4, HeadsKV: 2, HeadDim: 32, FF: 128, Vocab: 512,
		Context: 256, Type: ggml.Q8_0, Seed: 9})
	cfg, out := filepath.Join(dir, "m.toml"), filepath.Join(dir, "b")
	os.WriteFile(cfg, []byte(servesConfig), 0o644)
	if err := compiler.Compile(context.Background(), model, out, compiler.Options{ConfigPath: cfg}); err != nil {
		t.Fatal(err)
	}
	p, err := runtime.Open(out, runtime.Options{Tier: "cpu", Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if !p.SlotState() {
		t.Fatal("the hybrid has no recurrent state")
	}
	servesLikeAlone(t, p)
}

// TestWindowRing builds a Gemma 4-shaped model (synthetic weights, an
// 8-token window, every fifth layer global, experts beside each dense
// FFN as in 26B-A4B) twice: with its window layers
// in per-slot rings of pages and with swa_full. Sequences far longer
// than the window and the ring, prompted in chunks, must give the same
// logits bit for bit on both (the ring changes where K and V live, not
// what the kernels compute); then the ringed one serves like alone,
// preemption included. On every tier.
func TestWindowRing(t *testing.T) {
	for _, tr := range tiers {
		t.Run(tr.name, func(t *testing.T) { windowRing(t, tr) })
	}
}

func windowRing(t *testing.T, tr tier) {
	if tr.name == "cuda" {
		if _, err := driver.Probe(); err != nil {
			t.Skipf("no GPU: %v", err)
		}
	}
	model := testmodel.Write(t, t.TempDir(), "m.gguf", synth.Shape{Arch: "gemma4", Layers: 5, Embd: 64, Heads: 4, HeadsKV: 1, HeadDim: 32, FF: 128, Vocab: 512,
		Context: 256, Type: ggml.Q8_0, Window: 8, PerLayer: 32, Experts: 4, ExpertsUsed: 2, ExpertFF: 64, Seed: 13})
	ringed, full := compileOn(t, model, servesConfig, tr), compileOn(t, model, servesConfig+"swa_full = true\n", tr)
	// A ring of a window and a 64-row chunk: ceil((8-1+64)/16) + 1 pages.
	if r := ringed.Hparams.KVWindowRing; r != 6 || !ringed.SlotState() || full.Hparams.KVWindowRing != 0 || full.SlotState() {
		t.Fatalf("ring of %d pages (slot state %v); swa_full: ring %d", r, ringed.SlotState(), full.Hparams.KVWindowRing)
	}
	if ringed.KVPages() != full.KVPages() || ringed.Hparams.KVPageBytes >= full.Hparams.KVPageBytes {
		t.Errorf("shared pages: %d of %d bytes with the ring, %d of %d without", ringed.KVPages(), ringed.Hparams.KVPageBytes,
			full.KVPages(), full.Hparams.KVPageBytes)
	}
	ctx := context.Background()
	for _, n := range []int{5, 70, 150} {
		prompt := make([]int32, n)
		for i := range prompt {
			prompt[i] = int32(3 + (i*37)%500)
		}
		var logits [2][][]float32
		for k, p := range []*runtime.Program{ringed, full} {
			pool, err := sequence.New(p, sequence.PrefillBatched, nil)
			if err != nil {
				t.Fatal(err)
			}
			s, err := pool.NewSequence()
			if err != nil {
				t.Fatal(err)
			}
			l, err := s.Prefill(ctx, prompt)
			for step := 0; err == nil && step < 40; step++ {
				logits[k] = append(logits[k], slices.Clone(l))
				l, err = s.Decode(ctx, int32(3+step*11))
			}
			if err != nil {
				t.Fatal(err)
			}
			s.Release()
		}
		for step := range logits[0] {
			if !slices.Equal(logits[0][step], logits[1][step]) {
				t.Fatalf("prompt of %d: step %d: the ringed model's logits differ from swa_full's", n, step)
			}
		}
	}
	servesLikeAlone(t, ringed)
}

func servesLikeAlone(t *testing.T, p *runtime.Program) {
	servesLikeAloneWith(t, p, engine.Speculation{}, nil)
}

// servesLikeAloneWith is servesLikeAlone with the engine speculating as
// sp says; it returns the engine's stats at the end.
func servesLikeAloneWith(t *testing.T, p *runtime.Program, sp engine.Speculation, draft engine.Model) engine.Stats {
	solo, err := sequence.New(p, sequence.PrefillBatched, nil)
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"Once upon a time", "The little dog", "Lily and Ben went to the park to play with a big red ball. They",
		"One day", "Tom had a toy car that he loved very much. He played with it every day, and", "A bird", "She was happy", "The sun"}
	type job struct {
		prompt []int32
		params decode.Params
		want   []int32
	}
	var jobs []job
	for i, text := range texts {
		for _, sp := range []sample.Params{{}, {Temperature: 0.8, TopK: 40, TopP: 0.95, Seed: uint64(i + 1)}} {
			jobs = append(jobs, job{prompt: p.Tok.Encode(text, true, false), params: decode.Params{MaxTokens: 24 + 3*i, Sampling: sp}})
		}
	}
	ctx := context.Background()
	for i := range jobs {
		j := &jobs[i]
		for _, st := range alone(t, solo, j.prompt, decode.Params{MaxTokens: j.params.MaxTokens, Sampling: j.params.Sampling, ContextLength: 256}) {
			j.want = append(j.want, st.Token)
		}
	}

	e, err := engine.New(p, p.Tok, engine.Config{Slots: 8, ChunkCap: 64, Speculative: sp, DraftModel: draft})
	if err != nil {
		t.Fatal(err)
	}
	// The first half as batch requests fill every slot; a few steps later
	// the second half arrives as interactive and preempts them, which
	// resume afterwards where they stopped.
	streams := make([]<-chan engine.Event, len(jobs))
	submit := func(i int, q sched.QoS) {
		ev, err := e.Submit(ctx, engine.Request{Tenant: "t", QoS: q, Prompt: jobs[i].prompt, Decode: jobs[i].params})
		if err != nil {
			t.Fatal(err)
		}
		streams[i] = ev
	}
	for i := range len(jobs) / 2 {
		submit(i, sched.Batch)
	}
	got := make([][]int32, len(jobs))
	preempted := 0
	open := len(jobs)
	for steps := 0; open > 0; steps++ {
		if steps > 10000 {
			t.Fatal("the engine did not finish")
		}
		if steps == 3 {
			for i := len(jobs) / 2; i < len(jobs); i++ {
				submit(i, sched.Interactive)
			}
		}
		if _, err := e.Step(ctx); err != nil {
			t.Fatal(err)
		}
		open -= drain(streams, func(i int, x engine.Event) {
			if x.Token >= 0 {
				got[i] = append(got[i], x.Token)
			}
			if x.Preempted {
				if i >= len(jobs)/2 {
					t.Errorf("interactive request %d was preempted", i)
				}
				preempted++
			}
		})
	}
	for i, j := range jobs {
		if draft != nil && j.params.Sampling.Temperature > 0 {
			// A draft model's tokens for a sampled request are drawn from
			// its distribution and kept by speculative sampling's rule:
			// the target's distribution (TestDraftModelSampledDistribution),
			// not the solo run's tokens for the seed.
			if len(got[i]) == 0 || len(got[i]) > j.params.MaxTokens {
				t.Errorf("request %d (%q, %+v): %d tokens with the draft model, of at most %d", i, texts[i/2], j.params.Sampling, len(got[i]), j.params.MaxTokens)
			}
			continue
		}
		if !slices.Equal(got[i], j.want) {
			t.Errorf("request %d (%q, %+v): engine %v, alone %v", i, texts[i/2], j.params.Sampling, got[i], j.want)
		}
	}
	s := e.Stats()
	t.Logf("%d requests in %d steps, %d preemptions; pages free %d/%d; endings %v", len(jobs), s.Steps, preempted, s.PagesFree, s.PagesTotal, s.Finished)
	if preempted == 0 {
		t.Error("no batch request was preempted: the test does not exercise resuming")
	}
	if s.PagesFree+s.PrefixPages != s.PagesTotal {
		t.Errorf("%d pages still in use besides the %d the prefix cache keeps", s.PagesTotal-s.PagesFree-s.PrefixPages, s.PrefixPages)
	}
	return s
}

// TestSpeculativeLikeAlone is TestServesLikeAlone with the engine
// speculating, for each kind of draft: n-gram drafts, and the bundle's
// draft variant (four of its five layers and its head, self-speculation),
// and a draft model (the TinyStories-656K's F16 file drafting for its
// Q8_0 file, which shares its vocabulary), of up to 4 tokens verified at every step that has free slots for their rows
// (the bundle has 16 slots, the engine runs 8 requests), batched with
// the other requests' decode rows and prefill chunks. Every request's
// tokens, greedy and sampled, must still equal its solo run's without
// speculation — bit for bit on T-CPU — except a sampled request's with a
// draft model, whose draft tokens are drawn from the draft's distribution
// (the same distribution, not the same tokens: speculative sampling).
func TestSpeculativeLikeAlone(t *testing.T) {
	for _, tr := range tiers {
		for _, kind := range []string{"ngram", "self", "draft"} {
			t.Run(tr.name+"/"+kind, func(t *testing.T) {
				const config = "context_length = 256\ndecode_slots = [1, 2, 4, 8, 16]\nprefill_rows = [16, 64]\nkv_pages = 80\ndraft_layers = 4\n"
				var p, draft *runtime.Program
				if kind == "draft" {
					two := strings.Replace(config, "draft_layers = 4", "draft_layers = 1", 1) // TinyStories-656K has 2 layers
					p, draft = sharedOn(t, "TinyStories-656K.Q8_0.gguf", two, tr), sharedOn(t, "TinyStories-656K.F16.gguf", two, tr)
				} else {
					p = storiesOn(t, config, tr)
				}
				var dm engine.Model
				if draft != nil {
					dm = draft
				}
				s := servesLikeAloneWith(t, p, engine.Speculation{Kind: kind, K: 4, Fixed: true}, dm)
				t.Logf("%d drafts, %d draft tokens, %d accepted", s.SpecDrafts, s.SpecDraftTokens, s.SpecAccepted)
				if s.SpecDraftTokens == 0 || s.SpecAccepted == 0 {
					t.Errorf("%d draft tokens verified, %d accepted: the test does not exercise speculation", s.SpecDraftTokens, s.SpecAccepted)
				}
			})
		}
	}
}

// TestPrefixCache: a second request with the same long prompt maps the
// first one's prompt pages and skips their prefill (counted), with the
// same tokens; a tenant in another scope gets no hit.
func TestPrefixCache(t *testing.T) {
	p := stories(t, "context_length = 256\ndecode_slots = [1, 2]\nprefill_rows = [64]\nkv_pages = 40\n")
	e, err := engine.New(p, p.Tok, engine.Config{Slots: 2, ChunkCap: 64})
	if err != nil {
		t.Fatal(err)
	}
	prompt := p.Tok.Encode("Lily and Ben went to the park to play with a big red ball. They ran and laughed all day, and when the sun went down they went home", true, false)
	if len(prompt) < 33 {
		t.Fatalf("prompt of %d tokens is too short for two cached pages", len(prompt))
	}
	ctx := context.Background()
	run := func(tenant string) ([]int32, engine.Event) {
		ev, err := e.Submit(ctx, engine.Request{Tenant: tenant, Prompt: prompt, Decode: decode.Params{MaxTokens: 20}})
		if err != nil {
			t.Fatal(err)
		}
		var toks []int32
		for {
			if _, err := e.Step(ctx); err != nil {
				t.Fatal(err)
			}
			for {
				select {
				case x := <-ev:
					if x.Token >= 0 {
						toks = append(toks, x.Token)
					}
					if x.Finish != "" {
						return toks, x
					}
					continue
				default:
				}
				break
			}
		}
	}
	first, a := run("t1")
	again, b := run("t1")
	other, c := run("t2")
	full := (len(prompt) - 1) / 16 * 16
	if a.CachedTokens != 0 || b.CachedTokens != full || c.CachedTokens != 0 {
		t.Errorf("cached tokens %d, %d, %d; want 0, %d, 0", a.CachedTokens, b.CachedTokens, c.CachedTokens, full)
	}
	if !slices.Equal(first, again) || !slices.Equal(first, other) {
		t.Errorf("tokens differ with the cache: %v / %v / %v", first, again, other)
	}
	if s := e.Stats(); s.PrefixHit != uint64(full) || s.PrefixQueried != uint64(3*len(prompt)) {
		t.Errorf("prefix stats %d/%d", s.PrefixHit, s.PrefixQueried)
	}
	// Idle, every cached page is evictable; while a request maps the
	// cached pages, those are not.
	if s := e.Stats(); s.PrefixPages != 2*full/16 || s.PrefixIdle != s.PrefixPages {
		t.Errorf("idle: %d cached pages, %d of them idle; want %d, all idle", s.PrefixPages, s.PrefixIdle, 2*full/16)
	}
	ev, err := e.Submit(ctx, engine.Request{Tenant: "t1", Prompt: prompt, Decode: decode.Params{MaxTokens: 4}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if s := e.Stats(); s.PrefixIdle != s.PrefixPages-full/16 {
		t.Errorf("a request maps t1's %d cached pages: %d of %d cached pages idle, want %d", full/16, s.PrefixIdle, s.PrefixPages, s.PrefixPages-full/16)
	}
	for done := false; !done; {
		if _, err := e.Step(ctx); err != nil {
			t.Fatal(err)
		}
		for more := true; more && !done; {
			select {
			case x := <-ev:
				done = x.Finish != ""
			default:
				more = false
			}
		}
	}
}

// TestTrace runs a few requests — batch ones that interactive ones preempt
// — with a trace, and checks the Chrome trace-event file it leaves: valid
// JSON after Close, one complete event per step with its plan, three
// counters per step, and one admission and one finish per request.
func TestTrace(t *testing.T) {
	p := stories(t, "context_length = 256\ndecode_slots = [1, 2]\nprefill_rows = [16, 64]\nkv_pages = 80\n")
	var buf bytes.Buffer
	e, err := engine.New(p, p.Tok, engine.Config{Slots: 2, ChunkCap: 16, Trace: &buf})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	prompts := []string{"Once upon a time", "Lily and Ben went to the park to play with a big red ball. They", "The little dog", "One day"}
	var streams []<-chan engine.Event
	submit := func(i int, q sched.QoS) {
		ev, err := e.Submit(ctx, engine.Request{Tenant: fmt.Sprintf("t%d", i%2), QoS: q, Prompt: p.Tok.Encode(prompts[i], true, false), Decode: decode.Params{MaxTokens: 12}})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, ev)
	}
	submit(0, sched.Batch)
	submit(1, sched.Batch)
	for steps := 0; ; steps++ {
		if steps > 1000 {
			t.Fatal("the engine did not finish")
		}
		if steps == 3 {
			submit(2, sched.Interactive)
			submit(3, sched.Interactive)
		}
		if _, err := e.Step(ctx); err != nil {
			t.Fatal(err)
		}
		if s := e.Stats(); steps > 3 && s.Waiting == 0 && s.Running == 0 {
			break
		}
	}
	for _, ev := range streams {
		for range ev {
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []struct {
			Name string         `json:"name"`
			Ph   string         `json:"ph"`
			TS   *float64       `json:"ts"`
			Dur  *float64       `json:"dur"`
			PID  int            `json:"pid"`
			TID  int            `json:"tid"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("the trace is not valid JSON: %v\n%s", err, buf.Bytes())
	}
	s := e.Stats()
	count := map[string]int{}
	admitted := map[float64]bool{}
	for _, ev := range doc.TraceEvents {
		count[ev.Ph+" "+ev.Name]++
		if ev.TS == nil || *ev.TS < 0 || ev.PID == 0 {
			t.Errorf("event %s %s without a timestamp or pid", ev.Ph, ev.Name)
		}
		switch ev.Ph {
		case "X":
			rows, dec, pre := ev.Args["rows"].(float64), ev.Args["decode_rows"].(float64), ev.Args["prefill_rows"].(float64)
			if ev.Dur == nil || *ev.Dur < 0 || rows == 0 || rows != dec+pre || ev.Args["variant"] == "" {
				t.Errorf("step event %v: want a duration, rows = decode + prefill rows, and a variant", ev.Args)
			}
			// The step's parts: each there, none negative, together its
			// duration.
			sum := 0.0
			for _, k := range []string{"schedule_us", "replay_us", "advance_us", "sample_us"} {
				v, ok := ev.Args[k].(float64)
				if !ok || v < 0 {
					t.Errorf("step event %v: part %s missing or negative", ev.Args, k)
				}
				sum += v
			}
			if ev.Dur != nil && math.Abs(sum-*ev.Dur) > 0.01 {
				t.Errorf("step event %v: parts add up to %.3f µs, the step took %.3f", ev.Args, sum, *ev.Dur)
			}
		case "i":
			if ev.Args["tenant"] == nil || ev.Args["id"] == nil {
				t.Errorf("%s event without a request id or tenant: %v", ev.Name, ev.Args)
			}
			if ev.Name == "admit" {
				id := ev.Args["id"].(float64)
				if admitted[id] {
					t.Errorf("request %v admitted twice", id)
				}
				admitted[id] = true
			}
		}
	}
	t.Logf("%d steps, %d preemptions; events %v", s.Steps, s.Preemptions, count)
	want := map[string]int{
		"X step": int(s.Steps), "C slots": int(s.Steps), "C kv_pages": int(s.Steps), "C queue": int(s.Steps),
		"i admit": len(prompts), "i finish": len(prompts),
		"i preempt": int(s.Preemptions), "i resume": int(s.Preemptions),
	}
	for k, n := range want {
		if count[k] != n {
			t.Errorf("%d %q events, want %d", count[k], k, n)
		}
	}
	if s.Preemptions == 0 {
		t.Error("no preemption: the test does not exercise the preempt and resume events")
	}
	// Steps after Close are not traced, and the file stays valid.
	if _, err := e.Submit(ctx, engine.Request{Tenant: "t0", Prompt: p.Tok.Encode("A bird", true, false), Decode: decode.Params{MaxTokens: 2}}); err != nil {
		t.Fatal(err)
	}
	n := buf.Len()
	if _, err := e.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != n {
		t.Errorf("a step after Close wrote %d bytes of trace", buf.Len()-n)
	}
}

// TestRerun records a step log of requests greedy and seeded, one of them
// cancelled midway and some preempted, reruns it on a fresh engine (every
// step's tokens match), then changes one sampled token in the log and
// requires the rerun to fail at that step, naming the request.
func TestRerun(t *testing.T) {
	p := stories(t, "context_length = 256\ndecode_slots = [1, 2]\nprefill_rows = [16, 64]\nkv_pages = 80\n")
	var log bytes.Buffer
	// A clock that moves on each reading, and a soft decode rate for t0
	// that it exceeds: the scheduler reads the tenants' rates at each
	// step's time, which the log records for the rerun's clock.
	clock := time.Unix(1_700_000_000, 0)
	e, err := engine.New(p, p.Tok, engine.Config{Slots: 2, ChunkCap: 16, StepLog: &log,
		Now:    func() time.Time { clock = clock.Add(7 * time.Millisecond); return clock },
		Policy: engine.NewLivePolicy(engine.Policy{Tenants: map[string]engine.TenantPolicy{"t0": {DecodeTokensPerSecond: 20}}})})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	prompts := []string{"Once upon a time", "Lily and Ben went to the park to play with a big red ball. They", "The little dog", "One day", "A bird"}
	var streams []<-chan engine.Event
	var cancelLast context.CancelFunc
	submit := func(i int, q sched.QoS) {
		rctx, cancel := context.WithCancel(ctx)
		t.Cleanup(cancel)
		cancelLast = cancel
		sp := sample.Params{Temperature: 0.8, TopK: 40, Seed: uint64(i + 1)}
		if i%2 == 0 {
			sp = sample.Params{}
		}
		choices := []decode.Params{{MaxTokens: 16, Sampling: sp}}
		if i == 1 {
			// Two choices of the long prompt: the second maps the
			// first's prompt pages, which the rerun must do alike.
			sp.Seed += 100
			choices = append(choices, decode.Params{MaxTokens: 16, Sampling: sp})
		}
		ev, err := e.SubmitN(rctx, engine.Request{Tenant: fmt.Sprintf("t%d", i%2), QoS: q, Prompt: p.Tok.Encode(prompts[i], true, false)}, choices)
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, ev...)
	}
	submit(0, sched.Batch)
	submit(1, sched.Batch)
	for steps := 0; ; steps++ {
		if steps > 1000 {
			t.Fatal("the engine did not finish")
		}
		switch steps {
		case 3:
			submit(2, sched.Interactive)
			submit(3, sched.Interactive)
		case 5:
			submit(4, sched.Standard)
		case 8:
			cancelLast()
		}
		if _, err := e.Step(ctx); err != nil {
			t.Fatal(err)
		}
		for _, ev := range streams {
			for drained := false; !drained; {
				select {
				case _, ok := <-ev:
					drained = !ok
				default:
					drained = true
				}
			}
		}
		if s := e.Stats(); steps > 8 && s.Waiting == 0 && s.Running == 0 {
			break
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	s := e.Stats()
	if s.ChoiceShared == 0 {
		t.Fatal("the second choice mapped none of the first's pages: the test does not exercise a group")
	}
	if s.Preemptions == 0 || s.Finished[engine.Cancelled] != 1 {
		t.Fatalf("%d preemptions, endings %v: the test wants a preemption and a cancellation", s.Preemptions, s.Finished)
	}

	n, err := engine.Rerun(ctx, p, p.Tok, bytes.NewReader(log.Bytes()))
	if err != nil {
		t.Fatalf("rerun of an unchanged log: %v", err)
	}
	t.Logf("reran %d steps (the engine ran %d)", n, s.Steps)

	// Change one token, halfway through the log.
	lines := bytes.Split(bytes.TrimSuffix(log.Bytes(), []byte("\n")), []byte("\n"))
	var wantStep int
	var wantID uint64
	for i := len(lines) / 2; i < len(lines) && wantStep == 0; i++ {
		var rec engine.StepRecord
		if err := json.Unmarshal(lines[i], &rec); err != nil {
			t.Fatal(err)
		}
		if len(rec.Sampled) == 0 {
			continue
		}
		rec.Sampled[0].Token++
		wantStep, wantID = rec.Step, rec.Sampled[0].ID
		if lines[i], err = json.Marshal(rec); err != nil {
			t.Fatal(err)
		}
	}
	if wantStep == 0 {
		t.Fatal("no step with sampled tokens in the second half of the log")
	}
	_, err = engine.Rerun(ctx, p, p.Tok, bytes.NewReader(bytes.Join(lines, []byte("\n"))))
	var re *engine.RerunError
	if !errors.As(err, &re) || re.Step != wantStep || re.Request != wantID {
		t.Fatalf("rerun of a log with a changed token at step %d, request %d: %v", wantStep, wantID, err)
	}
	t.Logf("changed log: %v", err)
}

// TestSixtyFourLikeAlone is batch invariance at the scale of a serving
// engine (#13): 64 requests of prompts from 4 to about 200 tokens, greedy
// and seeded, all submitted at once to 16 slots with a step budget of 64
// rows (so long prompts are cut into chunks whose sizes depend on what
// else runs) and some cancelled midway. Each survivor's tokens and the
// log-probabilities of its tokens and its top 3 alternatives — functions
// of the full logit vector — equal its solo run's, bit for bit. The model
// is TinyStories-656K Q8_0: its 16-wide heads can take T-CPU's tiled
// attention path (stories260K's 8-wide ones cannot), so a path chosen by
// the step's rows instead of the request's fails this test, and its
// quantized matrices go through the one-, four- and eight-row kernels,
// whose results per row must agree bit for bit.
func TestSixtyFourLikeAlone(t *testing.T) {
	p := sharedOn(t, "TinyStories-656K.Q8_0.gguf", "context_length = 512\ndecode_slots = [1, 2, 4, 8, 16]\nprefill_rows = [16, 64]\nkv_pages = 512\n", tiers[0])
	solo, err := sequence.New(p, sequence.PrefillBatched, nil)
	if err != nil {
		t.Fatal(err)
	}
	base := []string{"Once upon a time", "The little dog", "Lily and Ben went to the park to play with a big red ball.", "One day",
		"Tom had a toy car that he loved very much. He played with it every day, and", "A bird sang", "She was happy", "The sun was hot."}
	type job struct {
		prompt []int32
		params decode.Params
		want   []decode.Step
	}
	var jobs []job
	for i := range 64 {
		text := base[i%len(base)]
		for range 2 * (i % 9) { // up to ~200 tokens
			text += " " + base[(i+3)%len(base)]
		}
		sp := sample.Params{}
		if i%2 == 1 {
			sp = sample.Params{Temperature: 0.8, TopK: 40, TopP: 0.95, Seed: uint64(i + 1)}
		}
		jobs = append(jobs, job{prompt: p.Tok.Encode(text, true, false),
			params: decode.Params{MaxTokens: 8 + i%13, Sampling: sp, Logprobs: true, TopLogprobs: 3}})
	}
	ctx := context.Background()
	long := 0
	for i := range jobs {
		j := &jobs[i]
		if len(j.prompt) >= 64 {
			long++
		}
		params := j.params
		params.ContextLength = 512
		j.want = alone(t, solo, j.prompt, params)
	}
	if long < 8 {
		t.Fatalf("only %d prompts of 64 tokens or more: the test would not chunk long prompts", long)
	}

	e, err := engine.New(p, p.Tok, engine.Config{Slots: 16, ChunkCap: 64})
	if err != nil {
		t.Fatal(err)
	}
	streams := make([]<-chan engine.Event, len(jobs))
	cancels := make([]context.CancelFunc, len(jobs))
	for i := range jobs {
		rctx, cancel := context.WithCancel(ctx)
		cancels[i] = cancel
		ev, err := e.Submit(rctx, engine.Request{Tenant: "t", QoS: sched.Standard, Prompt: jobs[i].prompt, Decode: jobs[i].params})
		if err != nil {
			t.Fatal(err)
		}
		streams[i] = ev
	}
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	got := make([][]engine.Event, len(jobs))
	cancelled := map[int]bool{}
	open := len(jobs)
	for steps := 0; open > 0; steps++ {
		if steps > 20000 {
			t.Fatal("the engine did not finish")
		}
		if steps == 5 || steps == 40 {
			for i := steps % 7; i < len(jobs); i += 11 { // a few, running or waiting
				if !cancelled[i] {
					cancels[i]()
					cancelled[i] = true
				}
			}
		}
		if _, err := e.Step(ctx); err != nil {
			t.Fatal(err)
		}
		open -= drain(streams, func(i int, x engine.Event) {
			if x.Token >= 0 {
				got[i] = append(got[i], x)
			}
		})
	}
	same := func(a *decode.Logprobs, b *decode.Logprobs) bool {
		if a == nil || b == nil || math.Float64bits(a.Logprob) != math.Float64bits(b.Logprob) || len(a.Top) != len(b.Top) {
			return false
		}
		for k := range a.Top {
			if a.Top[k].Token != b.Top[k].Token || math.Float64bits(a.Top[k].Logprob) != math.Float64bits(b.Top[k].Logprob) {
				return false
			}
		}
		return true
	}
	survivors := 0
	for i, j := range jobs {
		if cancelled[i] {
			if len(got[i]) > len(j.want) {
				t.Errorf("cancelled request %d produced more tokens than it would alone", i)
			}
			continue
		}
		survivors++
		if len(got[i]) != len(j.want) {
			t.Errorf("request %d: %d tokens, alone %d", i, len(got[i]), len(j.want))
			continue
		}
		for k, x := range got[i] {
			if x.Token != j.want[k].Token || !same(x.Logprobs, j.want[k].Logprobs) {
				t.Errorf("request %d token %d: engine %d %+v, alone %d %+v", i, k, x.Token, x.Logprobs, j.want[k].Token, j.want[k].Logprobs)
				break
			}
		}
	}
	s := e.Stats()
	t.Logf("%d requests (%d prompts of 64+ tokens), %d cancelled, %d compared; %d steps; pages free %d/%d",
		len(jobs), long, len(cancelled), survivors, s.Steps, s.PagesFree, s.PagesTotal)
	if s.PagesFree+s.PrefixPages != s.PagesTotal {
		t.Errorf("%d pages still in use besides the %d the prefix cache keeps", s.PagesTotal-s.PagesFree-s.PrefixPages, s.PrefixPages)
	}
}

// TestChoicesLikeAlone submits one prompt with four seeded choices
// (SubmitN, OpenAI's n) and requires choice i's tokens to equal a request
// of its own with choice i's parameters, on a fresh engine each (so no
// prefix cache helps), while the later choices map the first's full
// prompt pages and copy its partial last page into a page of their own:
// the prompt's tokens are computed once, and each later choice computes
// only its last token's row, whose logits it samples. On a model that
// cannot copy pages (copy off) the later choices compute the partial
// page's tokens, with the same tokens out.
func TestChoicesLikeAlone(t *testing.T) {
	for _, tr := range tiers {
		t.Run(tr.name, func(t *testing.T) {
			p := storiesOn(t, "context_length = 256\ndecode_slots = [1, 2, 4]\nprefill_rows = [16, 64]\nkv_pages = 60\n", tr)
			if !p.CopiesKVPages() {
				t.Fatalf("tier %s cannot copy KV pages", tr.name)
			}
			choicesLikeAlone(t, p)
		})
	}
}

// rowCounter is a model that counts the rows its steps compute at
// positions below prompt; copyOff turns its page copies off.
type rowCounter struct {
	*runtime.Program
	prompt  int
	rows    atomic.Int64
	copyOff bool
}

func (m *rowCounter) Step(ctx context.Context, b runtime.Batch) error {
	for _, r := range b.Rows {
		if r.Pos < m.prompt {
			m.rows.Add(1)
		}
	}
	return m.Program.Step(ctx, b)
}

func (m *rowCounter) CopiesKVPages() bool { return !m.copyOff && m.Program.CopiesKVPages() }

func choicesLikeAlone(t *testing.T, p *runtime.Program) {
	prompt := p.Tok.Encode("Lily and Ben went to the park to play with a big red ball. They ran and laughed all day, and when the sun went down they went home", true, false)
	full := (len(prompt) - 1) / 16 * 16
	if full < 32 || len(prompt)-1 == full {
		t.Fatalf("prompt of %d tokens has not two full pages and a partial one", len(prompt))
	}
	var choices []decode.Params
	for i := range 4 {
		choices = append(choices, decode.Params{MaxTokens: 24, Sampling: sample.Params{Temperature: 0.9, TopP: 0.95, Seed: 7 + uint64(i)}})
	}
	run := func(m *rowCounter, submit func(e *engine.Engine) ([]<-chan engine.Event, error)) ([][]int32, *engine.Engine) {
		e, err := engine.New(m, p.Tok, engine.Config{Slots: 4, ChunkCap: 64})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		chs, err := submit(e)
		if err != nil {
			t.Fatal(err)
		}
		go e.Run(ctx)
		out := make([][]int32, len(chs))
		for i, ch := range chs {
			for ev := range ch {
				if ev.Err != nil {
					t.Fatal(ev.Err)
				}
				if ev.Token >= 0 {
					out[i] = append(out[i], ev.Token)
				}
			}
		}
		return out, e
	}
	var alone [][]int32
	for _, c := range choices {
		out, _ := run(&rowCounter{Program: p}, func(e *engine.Engine) ([]<-chan engine.Event, error) {
			ch, err := e.Submit(context.Background(), engine.Request{Prompt: prompt, Decode: c})
			return []<-chan engine.Event{ch}, err
		})
		alone = append(alone, out[0])
	}
	for _, copyOff := range []bool{false, true} {
		m := &rowCounter{Program: p, prompt: len(prompt), copyOff: copyOff}
		got, e := run(m, func(e *engine.Engine) ([]<-chan engine.Event, error) {
			return e.SubmitN(context.Background(), engine.Request{Prompt: prompt}, choices)
		})
		shared, rows := 3*(len(prompt)-1), len(prompt)+3
		if copyOff {
			shared, rows = 3*full, len(prompt)+3*(len(prompt)-full)
		}
		if s := e.Stats(); s.ChoiceShared != uint64(shared) {
			t.Errorf("copy off %v: the later choices mapped or copied %d prompt tokens, want %d", copyOff, s.ChoiceShared, shared)
		}
		if n := m.rows.Load(); n != int64(rows) {
			t.Errorf("copy off %v: %d rows computed at the prompt's %d positions, want %d", copyOff, n, len(prompt), rows)
		}
		distinct := map[string]bool{}
		for i := range choices {
			if !slices.Equal(got[i], alone[i]) {
				t.Errorf("copy off %v: choice %d: %v\nalone:    %v", copyOff, i, got[i], alone[i])
			}
			distinct[fmt.Sprint(got[i])] = true
		}
		if len(distinct) < 2 {
			t.Errorf("the four seeds gave one sequence: the test does not tell the choices apart")
		}
	}
}

// TestHostTier: more conversations than the KV pool holds come back for a
// second turn (their first turn's prompt and reply, then a new message).
// Without a host tier the pool has evicted most of their pages and they
// compute their history again; with one, the evicted pages' bytes come
// back from host memory. The second turns' greedy tokens are the same
// either way, and with the tier fewer prompt tokens are computed and
// more are cached, some of them from the host tier.
func TestHostTier(t *testing.T) {
	for _, tr := range tiers {
		t.Run(tr.name, func(t *testing.T) {
			p := storiesOn(t, "context_length = 256\ndecode_slots = [1, 2]\nprefill_rows = [64]\nkv_pages = 24\n", tr)
			if p.KVLayout() == "" {
				t.Fatalf("tier %s cannot copy KV pages", tr.name)
			}
			openers := []string{
				"Lily and Ben went to the park to play with a big red ball. They ran and laughed all day long",
				"Once upon a time there was a little cat who lived in a small house near the woods with her mom",
				"Tom had a toy truck that he loved very much. Every day he took it outside to play in the sand",
				"The sun was shining and the birds were singing when Sue found a shiny stone under the old tree",
				"A big dog named Max wanted to find a bone. He looked in the garden and under the bed and the car",
				"Mia liked to paint pictures of flowers. One day her friend asked her to paint a picture of a bird",
			}
			type result struct {
				toks             [][]int32
				stats            engine.Stats
				computed, cached int
			}
			var log bytes.Buffer
			converse := func(hostKV int64) result {
				cfg := engine.Config{Slots: 2, ChunkCap: 64, HostKVBytes: hostKV}
				if hostKV > 0 {
					cfg.StepLog = &log
				}
				e, err := engine.New(p, p.Tok, cfg)
				if err != nil {
					t.Fatal(err)
				}
				var res result
				prompts := make([][]int32, len(openers))
				for i, o := range openers {
					// Long enough that both turns' prompts are long ones
					// (kernels.LongPromptRows), whose pages a short prompt
					// never shares.
					prompts[i] = p.Tok.Encode(o+". "+openers[(i+1)%len(openers)], true, false)
				}
				for turn := range 2 {
					toks, last := runAll(t, e, prompts, 12)
					for i := range prompts {
						if turn == 1 {
							res.toks = append(res.toks, toks[i])
							res.computed += last[i].PromptTokens - last[i].CachedTokens
							res.cached += last[i].CachedTokens
						}
						// The next turn: the history, then a new message.
						prompts[i] = append(append(prompts[i], toks[i]...), p.Tok.Encode(" Then they said hello to a friend.", false, false)...)
					}
				}
				res.stats = e.Stats()
				return res
			}
			page := int64(p.KVPageBytes())
			off, on := converse(0), converse(64*page)
			for i := range off.toks {
				if !slices.Equal(off.toks[i], on.toks[i]) {
					t.Errorf("conversation %d's second turn: %v without the host tier, %v with it", i, off.toks[i], on.toks[i])
				}
			}
			t.Logf("second turns: without the host tier %d prompt tokens computed, %d cached (%d hit of %d queried); with it %d computed, %d cached (%d hit on the device, %d from the host; %d pages stored)",
				off.computed, off.cached, off.stats.PrefixHit, off.stats.PrefixQueried, on.computed, on.cached, on.stats.PrefixHit, on.stats.PrefixHostHit, on.stats.HostStored)
			if off.stats.PrefixHostHit != 0 || on.stats.PrefixHostHit == 0 || on.stats.HostStored == 0 {
				t.Errorf("host hits %d without the tier, %d with it (%d pages stored)", off.stats.PrefixHostHit, on.stats.PrefixHostHit, on.stats.HostStored)
			}
			if on.computed >= off.computed || on.cached <= off.cached {
				t.Errorf("with the host tier %d prompt tokens computed and %d cached, without it %d and %d: the tier saved nothing", on.computed, on.cached, off.computed, off.cached)
			}
			// The step log replays with the host tier's swap-ins alike.
			if n, err := engine.Rerun(context.Background(), p, p.Tok, &log); err != nil || n == 0 {
				t.Errorf("rerun of the host tier's step log: %d steps, %v", n, err)
			}
		})
	}
}

// runAll submits every prompt at once and steps e until all have ended,
// returning each one's greedy tokens and last event.
func runAll(t *testing.T, e *engine.Engine, prompts [][]int32, maxTokens int) ([][]int32, []engine.Event) {
	t.Helper()
	ctx := context.Background()
	evs := make([]<-chan engine.Event, len(prompts))
	for i, pr := range prompts {
		ev, err := e.Submit(ctx, engine.Request{Tenant: "t", Prompt: pr, Decode: decode.Params{MaxTokens: maxTokens, IgnoreEOS: true}})
		if err != nil {
			t.Fatal(err)
		}
		evs[i] = ev
	}
	toks := make([][]int32, len(prompts))
	last := make([]engine.Event, len(prompts))
	for done, steps := 0, 0; done < len(prompts); steps++ {
		if steps > 10000 {
			t.Fatalf("%d of %d requests ended after %d steps", done, len(prompts), steps)
		}
		if _, err := e.Step(ctx); err != nil {
			t.Fatal(err)
		}
		for i, ev := range evs {
			for more := ev != nil; more; {
				select {
				case x := <-ev:
					if x.Token >= 0 {
						toks[i] = append(toks[i], x.Token)
					}
					if x.Finish != "" {
						if x.Finish != engine.Length {
							t.Fatalf("request %d ended %s: %v", i, x.Finish, x.Err)
						}
						last[i], evs[i], more = x, nil, false
						done++
					}
				default:
					more = false
				}
			}
		}
	}
	return toks, last
}

// drain passes every event ready on streams to each, without waiting for
// more, and sets each stream that has closed to nil, returning how many
// did.
func drain(streams []<-chan engine.Event, each func(i int, x engine.Event)) (closed int) {
	for i, ev := range streams {
		for ev != nil {
			select {
			case x, ok := <-ev:
				if !ok {
					streams[i], ev = nil, nil
					closed++
					continue
				}
				each(i, x)
			default:
				ev = nil
			}
		}
	}
	return closed
}

// alone decodes prompt with params on a sequence of its own in solo, the
// reference a request served beside others must match, and returns the
// steps that took a token.
func alone(t *testing.T, solo *sequence.Pool, prompt []int32, params decode.Params) []decode.Step {
	t.Helper()
	ctx := context.Background()
	s, err := solo.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	var out []decode.Step
	d := decode.New(solo.Tok, params)
	logits, err := s.Prefill(ctx, prompt)
	for err == nil {
		st := d.Next(logits, s.Tokens, s.Pos())
		if st.Token >= 0 {
			out = append(out, st)
		}
		if st.Finish != decode.Running {
			break
		}
		logits, err = s.Decode(ctx, st.Token)
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}
