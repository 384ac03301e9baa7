package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/zrtdev/zrt/runtime/engine"
	"github.com/zrtdev/zrt/runtime/server/ledger"
)

// loadCase is one distinct request of the load test. Greedy cases have
// temperature 0 and sampled ones a seed, so each has exactly one right
// answer however the engine batches it.
type loadCase struct {
	chat        bool
	prompt      string
	maxTokens   int64
	temperature float64 // 0: greedy
	seed        int64
	stop        string
}

// loadCases mix the endpoints, short prompts and prompts of several
// 16-token chunks (which the prefix cache can map), greedy and seeded
// sampling, and a stop string.
var loadCases = []loadCase{
	{prompt: "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. One day,", maxTokens: 48},
	{prompt: "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. One day,", maxTokens: 48, temperature: 0.9, seed: 7},
	{prompt: "The little dog ran to the big tree and barked at the cat. The cat was scared and climbed up the tree. Then", maxTokens: 40, stop: "."},
	{chat: true, prompt: "Tom and Sue went to the beach.", maxTokens: 32},
	{chat: true, prompt: "Tell me a story about a red ball.", maxTokens: 40, temperature: 0.8, seed: 11},
	{prompt: "Once upon a time", maxTokens: 64},
	{prompt: "The little dog ran to the big tree and barked at the cat. The cat was scared and climbed up the tree. Then", maxTokens: 56, temperature: 1, seed: 3},
	{chat: true, prompt: "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. One day,", maxTokens: 24},
}

// outcome is what a client saw of one request.
type outcome struct {
	text       string
	finish     string
	completion int64 // usage.completion_tokens
	cached     int64 // usage.prompt_tokens_details.cached_tokens
	done       bool  // a stream that reached its end rather than being cut
}

func (c loadCase) completionParams() openai.CompletionNewParams {
	p := openai.CompletionNewParams{Model: "stories260K", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(c.prompt)},
		MaxTokens: openai.Int(c.maxTokens), Temperature: openai.Float(c.temperature)}
	if c.temperature > 0 {
		p.Seed = openai.Int(c.seed)
	}
	if c.stop != "" {
		p.Stop = openai.CompletionNewParamsStopUnion{OfString: openai.String(c.stop)}
	}
	return p
}

func (c loadCase) chatParams() openai.ChatCompletionNewParams {
	p := openai.ChatCompletionNewParams{Model: "stories260K", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(c.prompt)},
		MaxTokens: openai.Int(c.maxTokens), Temperature: openai.Float(c.temperature)}
	if c.temperature > 0 {
		p.Seed = openai.Int(c.seed)
	}
	if c.stop != "" {
		p.Stop = openai.ChatCompletionNewParamsStopUnion{OfString: openai.String(c.stop)}
	}
	return p
}

// run sends c without streaming.
func (c loadCase) run(ctx context.Context, cl openai.Client) (outcome, error) {
	if c.chat {
		r, err := cl.Chat.Completions.New(ctx, c.chatParams())
		if err != nil {
			return outcome{}, err
		}
		return outcome{text: r.Choices[0].Message.Content, finish: r.Choices[0].FinishReason, completion: r.Usage.CompletionTokens,
			cached: r.Usage.PromptTokensDetails.CachedTokens, done: true}, nil
	}
	r, err := cl.Completions.New(ctx, c.completionParams())
	if err != nil {
		return outcome{}, err
	}
	return outcome{text: r.Choices[0].Text, finish: string(r.Choices[0].FinishReason), completion: r.Usage.CompletionTokens,
		cached: r.Usage.PromptTokensDetails.CachedTokens, done: true}, nil
}

// stream sends c streaming, with usage, calling first (when not nil) on
// its first chunk of text. After cut chunks of text (0: never) it
// disconnects, as a client that goes away does; the outcome then holds the
// text so far and done is false.
func (c loadCase) stream(ctx context.Context, cl openai.Client, cut int, first func()) (outcome, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var o outcome
	chunks := 0
	// piece takes one choice's text and finish reason; it reports whether
	// the client should now go away.
	piece := func(text, finish string) bool {
		o.text += text
		if finish != "" {
			o.finish = finish
		}
		if text != "" {
			chunks++
			if chunks == 1 && first != nil {
				first()
			}
		}
		return cut > 0 && chunks == cut
	}
	usage := openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	if c.chat {
		p := c.chatParams()
		p.StreamOptions = usage
		s := cl.Chat.Completions.NewStreaming(ctx, p)
		defer s.Close()
		for s.Next() {
			ch := s.Current()
			o.completion += ch.Usage.CompletionTokens
			for _, choice := range ch.Choices {
				if piece(choice.Delta.Content, choice.FinishReason) {
					return o, nil
				}
			}
		}
		o.done = true
		return o, s.Err()
	}
	p := c.completionParams()
	p.StreamOptions = usage
	s := cl.Completions.NewStreaming(ctx, p)
	defer s.Close()
	for s.Next() {
		ch := s.Current()
		o.completion += ch.Usage.CompletionTokens
		for _, choice := range ch.Choices {
			if piece(choice.Text, string(choice.FinishReason)) {
				return o, nil
			}
		}
	}
	o.done = true
	return o, s.Err()
}

// loadTenants are the tenants under load, with the key of each: every QoS
// class (so interactive requests preempt the others), a concurrency limit
// and reserved pages. "ref", which computes the reference answers, is a
// fifth.
var loadTenants = []string{"alpha", "beta", "gamma", "delta"}

const loadConfigText = `
[[tenant]]
id = "ref"
api_keys = ["sk-ref"]
qos = "interactive"
[[tenant]]
id = "alpha"
api_keys = ["sk-alpha"]
qos = "interactive"
[[tenant]]
id = "beta"
api_keys = ["sk-beta"]
qos = "standard"
max_concurrent = 4
[[tenant]]
id = "gamma"
api_keys = ["sk-gamma"]
qos = "standard"
reserved_kv_pages = 8
[[tenant]]
id = "delta"
api_keys = ["sk-delta"]
qos = "batch"
`

// TestLoad puts four tenants' 16 concurrent streaming requests each on one
// engine of 16 slots, whose KV pages hold 16 running requests but not all
// 64 and the prefix cache besides (so slots, not pages, are what the
// interactive tenant lacks, and the engine preempts for it), a quarter of
// the clients going away at a random point (math/rand, seeded: the same
// plan every run). Every stream that completes equals the
// non-streaming answer to the same request (greedy and seeded sampling),
// and a cut one is a prefix of it; a tenant's first request of a prompt
// another tenant has cached gets no cached tokens; the ledger file, the
// usage endpoint and /metrics agree on every tenant's tokens; and at the
// end no slot or KV page is held by a request.
func TestLoad(t *testing.T) {
	const perTenant, seed = 16, 20240611
	ts := serveStories(t, serveOptions{
		model:  "context_length = 256\ndecode_slots = [1, 2, 4, 8, 16]\nprefill_rows = [16, 64]\nkv_pages = 160\n",
		config: loadConfigText, slots: 16, chunkCap: 64})
	ctx := context.Background()
	// A safety net, not a measurement: a hung stream fails the test
	// instead of the package's timeout.
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()

	// The reference answers, one request at a time by their own tenant.
	ref := client(ts.URL, "sk-ref")
	want := make([]outcome, len(loadCases))
	for i, c := range loadCases {
		o, err := c.run(ctx, ref)
		if err != nil {
			t.Fatalf("reference %d: %v", i, err)
		}
		if o.text == "" {
			t.Fatalf("reference %d: no text", i)
		}
		want[i] = o
	}
	requests := map[string]int{"ref": len(loadCases)}

	// Isolation: every tenant's first request of case 0's prompt, which
	// ref and the tenants before it have cached, computes its whole prompt;
	// its second one maps the cached chunks of its own first (so the cache
	// is on, and the zero meant something).
	for _, tenant := range loadTenants {
		c := client(ts.URL, "sk-"+tenant)
		for i, wantCached := range []bool{false, true} {
			o, err := loadCases[0].run(ctx, c)
			requests[tenant]++
			if err != nil {
				t.Fatalf("%s: %v", tenant, err)
			}
			if (o.cached > 0) != wantCached || o.text != want[0].text {
				t.Errorf("%s's request %d of a prompt other tenants cached: %d cached tokens, text %q (want %q)", tenant, i+1, o.cached, o.text, want[0].text)
			}
		}
	}

	// The load: every request decided up front by the seeded generator.
	rng := rand.New(rand.NewPCG(seed, 0))
	type job struct {
		tenant string
		c, cut int
		got    outcome
		err    error
	}
	var jobs []*job
	for _, tenant := range loadTenants {
		for range perTenant {
			j := &job{tenant: tenant, c: rng.IntN(len(loadCases))}
			if rng.IntN(4) == 0 {
				j.cut = 1 + rng.IntN(int(loadCases[j.c].maxTokens)/2)
			}
			jobs = append(jobs, j)
			requests[tenant]++
		}
	}
	t.Logf("plan seeded with %d: %d requests", seed, len(jobs))
	clients := map[string]openai.Client{}
	for _, tenant := range loadTenants {
		clients[tenant] = client(ts.URL, "sk-"+tenant)
	}
	// The standard and batch tenants' requests go at once; the
	// interactive tenant's once 12 of those have streamed a token, so they
	// arrive to find the slots taken by less urgent requests, which the
	// engine preempts for them.
	var wg, others sync.WaitGroup
	var once sync.Once
	interactive := make(chan struct{})
	release := func() { once.Do(func() { close(interactive) }) }
	var streaming atomic.Int32
	first := func() {
		if streaming.Add(1) == 12 {
			release()
		}
	}
	for _, j := range jobs {
		if j.tenant == "alpha" {
			wg.Go(func() {
				<-interactive
				j.got, j.err = loadCases[j.c].stream(ctx, clients[j.tenant], j.cut, nil)
			})
			continue
		}
		others.Add(1)
		wg.Go(func() {
			defer others.Done()
			j.got, j.err = loadCases[j.c].stream(ctx, clients[j.tenant], j.cut, first)
		})
	}
	// Should fewer than 12 ever stream (they failed), alpha goes anyway.
	go func() { others.Wait(); release() }()
	wg.Wait()
	completed, cut := 0, 0
	for i, j := range jobs {
		w := want[j.c]
		switch {
		case j.err != nil:
			t.Errorf("request %d (%s, case %d): %v", i, j.tenant, j.c, j.err)
		case j.got.done:
			completed++
			if j.got.text != w.text || j.got.finish != w.finish || j.got.completion != w.completion {
				t.Errorf("request %d (%s, case %d) streamed %q (%s, %d tokens), not streamed %q (%s, %d tokens)",
					i, j.tenant, j.c, j.got.text, j.got.finish, j.got.completion, w.text, w.finish, w.completion)
			}
		default:
			cut++
			if !strings.HasPrefix(w.text, j.got.text) {
				t.Errorf("request %d (%s, case %d), cut after %d chunks: %q is not a prefix of %q", i, j.tenant, j.c, j.cut, j.got.text, w.text)
			}
		}
	}

	// Every request ends in exactly one ledger record, once the engine has
	// finished it and its handler has seen the end.
	total := 0
	for _, n := range requests {
		total += n
	}
	waitFor(t, "every request to be recorded", func() bool {
		for tenant, n := range requests {
			if usageOf(t, ts.URL, "sk-"+tenant, tenant).Requests != int64(n) {
				return false
			}
		}
		return true
	})
	if err := ts.ledger.Sync(); err != nil {
		t.Fatal(err)
	}
	st := ts.engine.Stats()
	t.Logf("%d streams completed, %d cut by their clients; engine: %d steps, %d preemptions, finished %v, prefix hits %d of %d tokens",
		completed, cut, st.Steps, st.Preemptions, st.Finished, st.PrefixHit, st.PrefixQueried)

	// The ledger as its file holds it, read here independently of package
	// ledger; the usage endpoint; and /metrics: the same tokens.
	fromFile, records, torn := readLedger(t, ts.ledgerPath)
	if torn != 0 || len(records) != total {
		t.Errorf("ledger file: %d records and %d bytes of torn tail, want %d records", len(records), torn, total)
	}
	m := scrape(t, ts.URL)
	var sum ledger.Totals
	cancelled := 0
	for _, r := range records {
		if r.Finish == string(engine.Cancelled) {
			cancelled++
		}
	}
	for tenant, n := range requests {
		f := fromFile[tenant]
		sum.Requests += f.Requests
		sum.Prompt += f.Prompt
		sum.Cached += f.Cached
		sum.Completion += f.Completion
		if u := usageOf(t, ts.URL, "sk-"+tenant, tenant); u != f || f.Requests != int64(n) {
			t.Errorf("%s: usage endpoint %+v, ledger file %+v, %d requests sent", tenant, u, f, n)
		}
		if p, g := m.sum("zrt_tenant_tokens_total", "tenant", tenant, "kind", "prompt"), m.sum("zrt_tenant_tokens_total", "tenant", tenant, "kind", "generated"); p != float64(f.Prompt) || g != float64(f.Completion) {
			t.Errorf("%s: metrics %v prompt and %v generated tokens, ledger %d and %d", tenant, p, g, f.Prompt, f.Completion)
		}
	}
	for _, c := range []struct {
		name string
		got  float64
		want int64
	}{
		{"vllm:prompt_tokens_total", m.sum("vllm:prompt_tokens_total"), sum.Prompt},
		{"vllm:generation_tokens_total", m.sum("vllm:generation_tokens_total"), sum.Completion},
		{"vllm:prefix_cache_hits_total", m.sum("vllm:prefix_cache_hits_total"), sum.Cached},
		{"zrt_requests_finished_total", m.sum("zrt_requests_finished_total"), sum.Requests},
		{"zrt_requests_finished_total{reason=cancelled}", m.sum("zrt_requests_finished_total", "reason", "cancelled"), int64(cancelled)},
		{"vllm:e2e_request_latency_seconds_count", m.sum("vllm:e2e_request_latency_seconds_count"), sum.Requests},
	} {
		if c.got != float64(c.want) {
			t.Errorf("metrics %s = %v, the ledger says %d", c.name, c.got, c.want)
		}
	}

	// Nothing is held at the end: every slot free, and every page free or
	// held by the prefix cache alone (which frees it on demand).
	st = ts.engine.Stats()
	if st.Running != 0 || st.Waiting != 0 || st.PagesFree+st.PrefixPages != st.PagesTotal {
		t.Errorf("at the end: %d running, %d waiting, %d of %d pages free and %d in the prefix cache", st.Running, st.Waiting, st.PagesFree, st.PagesTotal, st.PrefixPages)
	}
	if m.sum("vllm:num_requests_running") != 0 || m.sum("vllm:num_requests_waiting") != 0 ||
		m.sum("zrt_kv_pages", "state", "requests") != 0 {
		t.Errorf("metrics at the end: %v running, %v waiting, %v pages held by requests",
			m.sum("vllm:num_requests_running"), m.sum("vllm:num_requests_waiting"), m.sum("zrt_kv_pages", "state", "requests"))
	}
}

// waitFor polls cond until it holds; the deadline is a safety net for a
// hang, not a measurement.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// usageOf reads a tenant's totals from GET /v1/tenants/{id}/usage.
func usageOf(t *testing.T, url, key, tenant string) ledger.Totals {
	t.Helper()
	code, b := getUsage(t, url, key, tenant)
	var body struct {
		Usage ledger.Totals `json:"usage"`
	}
	if err := json.Unmarshal(b, &body); err != nil || code != http.StatusOK {
		t.Fatalf("usage of %s: %d %v", tenant, code, err)
	}
	return body.Usage
}

// getUsage asks GET /v1/tenants/{id}/usage with key and returns the
// status and the body.
func getUsage(t *testing.T, url, key, tenant string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", url+"/v1/tenants/"+tenant+"/usage", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// readLedger reads a ledger file as its format is documented — per
// record a line of JSON, a tab, and the JSON's CRC-32C in hex — without
// package ledger, so the test checks the file and not the reader against
// itself. It returns the totals per tenant and the records up to the
// first line that is not intact, and how many bytes follow them (a torn
// tail).
func readLedger(t *testing.T, path string) (map[string]ledger.Totals, []ledger.Record, int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	totals := map[string]ledger.Totals{}
	var records []ledger.Record
	good := 0
	for {
		line, _, ok := bytes.Cut(b[good:], []byte("\n"))
		if !ok {
			break
		}
		body, sum, ok := bytes.Cut(line, []byte("\t"))
		crc, err := strconv.ParseUint(string(sum), 16, 32)
		var r ledger.Record
		if !ok || err != nil || uint32(crc) != crc32.Checksum(body, castagnoli) || json.Unmarshal(body, &r) != nil {
			break
		}
		records = append(records, r)
		tt := totals[r.Tenant]
		tt.Requests++
		tt.Prompt += int64(r.Prompt)
		tt.Cached += int64(r.Cached)
		tt.Completion += int64(r.Completion)
		totals[r.Tenant] = tt
		good += len(line) + 1
	}
	return totals, records, len(b) - good
}

// samples are a /metrics scrape.
type samples []sample

type sample struct {
	name   string
	labels map[string]string
	value  float64
}

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// scrape reads GET /metrics in Prometheus' text format.
func scrape(t *testing.T, url string) samples {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out samples
	for _, l := range strings.Split(string(b), "\n") {
		m := sampleLine.FindStringSubmatch(l)
		if m == nil {
			continue // a comment or blank
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", l, err)
		}
		s := sample{name: m[1], labels: map[string]string{}, value: v}
		for _, p := range labelPair.FindAllStringSubmatch(m[2], -1) {
			s.labels[p[1]] = p[2]
		}
		out = append(out, s)
	}
	return out
}

// sum adds the samples of name whose labels include the name/value pairs
// kv.
func (ss samples) sum(name string, kv ...string) float64 {
	total := 0.0
next:
	for _, s := range ss {
		if s.name != name {
			continue
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if s.labels[kv[i]] != kv[i+1] {
				continue next
			}
		}
		total += s.value
	}
	return total
}
