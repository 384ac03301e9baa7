// Package loadtest loads an OpenAI-compatible server (zrt's or
// llama-server) with concurrent completion requests and reports latency
// and throughput: zrt-run loadtest.
package loadtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"
)

// Options are a load test's settings.
type Options struct {
	// URL is the server's base URL; Key its bearer API key ("": none);
	// Model the model requests name ("": the server's default).
	URL, Key, Model string
	// Concurrency clients send Requests requests in all, each a prompt of
	// PromptTokens ids of the server's vocabulary drawn from Seed, asking
	// for MaxTokens.
	Concurrency, Requests, PromptTokens, MaxTokens int
	Seed                                           uint64
	// Stream asks for server-sent events, measuring time to first token
	// and inter-token latency.
	Stream bool
	// Temperature is the requests' sampling temperature: 0 is greedy;
	// above it request j samples with seed Seed+j, so a run repeats.
	Temperature float64
	// Formats are response_format objects: request j carries
	// Formats[j % len(Formats)], and none of them ignore_eos (none: every
	// request ignores end of generation and generates MaxTokens).
	Formats []map[string]any
	// Turns > 1 makes it a multi-turn chat load (turns.go): Requests
	// conversations, each Turns requests long, turn by turn — every
	// conversation's turn k, then every one's turn k+1 — each turn's
	// prompt its conversation's previous prompt and reply and TurnTokens
	// new ids. The report adds a row per turn with the prefix cache's hit
	// rate (from the server's /metrics) and time to first token.
	Turns, TurnTokens int
}

// Run checks opt, runs the load test and writes its report to w.
func Run(ctx context.Context, opt Options, w io.Writer) error {
	if opt.URL == "" {
		return errors.New("--url is required")
	}
	if opt.Concurrency < 1 || opt.Requests < 1 || opt.PromptTokens < 1 || opt.MaxTokens < 1 {
		return errors.New("--concurrency, --requests, --prompt-tokens and --max-tokens must be at least 1")
	}
	if opt.Temperature < 0 {
		return errors.New("--temperature must not be negative")
	}
	if opt.Turns < 0 || opt.Turns > 1 && opt.TurnTokens < 1 {
		return errors.New("--turns must not be negative, and with more than one turn --turn-tokens must be at least 1")
	}
	lt := &loadtest{url: strings.TrimRight(opt.URL, "/"), key: opt.Key, model: opt.Model, maxTokens: opt.MaxTokens, stream: opt.Stream, formats: opt.Formats,
		temperature: opt.Temperature, seed: opt.Seed}
	ids, err := lt.vocabIDs(ctx)
	if err != nil {
		return err
	}
	if opt.Turns > 1 {
		return lt.runTurns(ctx, ids, opt, w)
	}
	before, stepsBefore := lt.maskBuckets(ctx), lt.steps(ctx)
	res := lt.run(ctx, ids, opt.Concurrency, opt.Requests, opt.PromptTokens, opt.Seed)
	res.mask = maskLine(before, lt.maskBuckets(ctx))
	res.steps = stepLines(stepsBefore, lt.steps(ctx), res.wall, res.tokens())
	res.print(w, opt.Concurrency, opt.Requests, opt.PromptTokens, opt.MaxTokens, opt.Stream)
	return nil
}

// loadtest is one run's client.
type loadtest struct {
	url, key, model string
	maxTokens       int
	stream          bool
	formats         []map[string]any // response_format of request j: formats[j % len]; none if empty
	temperature     float64
	seed            uint64
}

// loadClient opens a connection per request: servers differ in when they
// close idle keep-alive connections (llama-server closes them under load),
// and a POST on a connection the server just closed fails with EOF, which
// would count against the server for the client's reuse.
var loadClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

func (lt *loadtest) post(ctx context.Context, path string, body any) (*http.Response, error) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, "POST", lt.url+path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if lt.key != "" {
		req.Header.Set("Authorization", "Bearer "+lt.key)
	}
	return loadClient.Do(req)
}

// vocabIDs asks the server to tokenize some text, for prompt ids that are
// valid in its vocabulary.
func (lt *loadtest) vocabIDs(ctx context.Context) ([]int, error) {
	ids, err := lt.tokenize(ctx, strings.Repeat("Once upon a time, there was a little girl named Lily who loved to play in the park with her friends. ", 8))
	if err == nil && len(ids) == 0 {
		err = fmt.Errorf("%s/tokenize: no tokens", lt.url)
	}
	return ids, err
}

// outcome is one request's measurements.
type outcome struct {
	status   int    // 0: transport error
	err      string // the transport error
	tokens   int
	finish   string // the reply's finish_reason
	text     string // the reply (the next turn's history)
	ttft     time.Duration
	gaps     []time.Duration
	duration time.Duration
}

func (lt *loadtest) one(ctx context.Context, j int, prompt []int) outcome {
	body := map[string]any{"prompt": prompt, "max_tokens": lt.maxTokens, "temperature": lt.temperature, "stream": lt.stream}
	if lt.temperature > 0 {
		body["seed"] = lt.seed + uint64(j)
	}
	if len(lt.formats) == 0 {
		body["ignore_eos"] = true
	} else {
		// A constrained reply ends when its format is complete: the end
		// of generation is what its grammar allows last.
		body["response_format"] = lt.formats[j%len(lt.formats)]
	}
	if lt.stream {
		body["stream_options"] = map[string]any{"include_usage": true}
	}
	if lt.model != "" {
		body["model"] = lt.model
	}
	t0 := time.Now()
	resp, err := lt.post(ctx, "/v1/completions", body)
	if err != nil {
		return outcome{err: err.Error()}
	}
	defer resp.Body.Close()
	o := outcome{status: resp.StatusCode}
	if resp.StatusCode != 200 {
		io.Copy(io.Discard, resp.Body)
		return o
	}
	if !lt.stream {
		var out struct {
			Choices []struct {
				Text         string `json:"text"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		json.NewDecoder(resp.Body).Decode(&out)
		o.tokens, o.duration = out.Usage.CompletionTokens, time.Since(t0)
		if len(out.Choices) > 0 {
			o.text, o.finish = out.Choices[0].Text, out.Choices[0].FinishReason
		}
		return o
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	last, chunks, finish := t0, 0, ""
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var ev struct {
			Choices []struct {
				Text         string `json:"text"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if json.Unmarshal([]byte(line), &ev) != nil {
			continue
		}
		if ev.Usage != nil && ev.Usage.CompletionTokens > 0 {
			o.tokens = ev.Usage.CompletionTokens
		}
		if len(ev.Choices) > 0 && ev.Choices[0].FinishReason != "" {
			finish = ev.Choices[0].FinishReason
		}
		if len(ev.Choices) == 0 || ev.Choices[0].Text == "" {
			continue
		}
		o.text += ev.Choices[0].Text
		now := time.Now()
		if chunks == 0 {
			o.ttft = now.Sub(t0)
		} else {
			o.gaps = append(o.gaps, now.Sub(last))
		}
		last = now
		chunks++
	}
	switch {
	case o.tokens > 0:
	case finish == "length":
		// No usage in the stream (llama-server sends none for some
		// requests), and a chunk may carry several tokens: with
		// ignore_eos, ending on length means all of max_tokens.
		o.tokens = lt.maxTokens
	default:
		o.tokens = chunks
	}
	o.duration, o.finish = time.Since(t0), finish
	return o
}

// loadResult gathers a run.
type loadResult struct {
	wall     time.Duration
	outcomes []outcome
	mask     string // the report's mask-cost row; "" when none was timed
	steps    string // the report's rows of the server's steps; "" when it has no counters
}

func (lt *loadtest) run(ctx context.Context, ids []int, concurrency, requests, promptTokens int, seed uint64) loadResult {
	// each request its own prompt, with no prefix shared with another
	// request
	prompts := make([][]int, requests)
	for j := range prompts {
		prompts[j] = draw(ids, seed, uint64(j), promptTokens)
	}
	return lt.turn(ctx, prompts, concurrency)
}

// tokens are the generated tokens of the requests that succeeded.
func (r loadResult) tokens() int {
	n := 0
	for _, o := range r.outcomes {
		if o.status == 200 {
			n += o.tokens
		}
	}
	return n
}

func percentiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	p := func(q float64) float64 {
		return float64(ds[min(len(ds)-1, int(q*float64(len(ds))))].Microseconds()) / 1000
	}
	return fmt.Sprintf("%.1f / %.1f / %.1f", p(0.5), p(0.95), p(0.99))
}

func (r loadResult) print(w io.Writer, concurrency, requests, promptTokens, maxTokens int, stream bool) {
	var ttft, gaps, e2e []time.Duration
	byStatus, byFinish := map[int]int{}, map[string]int{}
	firstErr := ""
	tokens, ok, least, most := 0, 0, 0, 0
	for _, o := range r.outcomes {
		byStatus[o.status]++
		if o.status != 200 {
			if firstErr == "" {
				firstErr = o.err
			}
			continue
		}
		if ok == 0 || o.tokens < least {
			least = o.tokens
		}
		most = max(most, o.tokens)
		ok++
		byFinish[o.finish]++
		tokens += o.tokens
		e2e = append(e2e, o.duration)
		if stream {
			ttft = append(ttft, o.ttft)
			gaps = append(gaps, o.gaps...)
		}
	}
	fmt.Fprintf(w, "%d requests, %d at once, %d prompt tokens, %d generated each, stream %v\n", requests, concurrency, promptTokens, maxTokens, stream)
	fmt.Fprintln(w, "| metric | value |")
	fmt.Fprintln(w, "| --- | ---: |")
	fmt.Fprintf(w, "| wall time | %.2f s |\n", r.wall.Seconds())
	fmt.Fprintf(w, "| generated tokens | %d |\n", tokens)
	fmt.Fprintf(w, "| aggregate tokens/s | %.1f |\n", float64(tokens)/r.wall.Seconds())
	if ok > 0 {
		// Replies that end before max_tokens (a constrained reply ends
		// when its format is complete) give fewer tokens for the same
		// prompts: the rate above counts only the tokens generated.
		fmt.Fprintf(w, "| generated tokens a request: mean / min / max | %.1f / %d / %d |\n", float64(tokens)/float64(ok), least, most)
		var reasons []string
		for f := range byFinish {
			reasons = append(reasons, f)
		}
		sort.Strings(reasons)
		for i, f := range reasons {
			if f == "" {
				f = "none"
			}
			reasons[i] = fmt.Sprintf("%s %d", f, byFinish[reasons[i]])
		}
		fmt.Fprintf(w, "| finish reasons | %s |\n", strings.Join(reasons, ", "))
	}
	fmt.Fprintf(w, "| TTFT p50 / p95 / p99 ms | %s |\n", percentiles(ttft))
	fmt.Fprintf(w, "| inter-token p50 / p95 / p99 ms | %s |\n", percentiles(gaps))
	fmt.Fprintf(w, "| end-to-end p50 / p95 / p99 ms | %s |\n", percentiles(e2e))
	fmt.Fprint(w, r.mask)
	fmt.Fprint(w, r.steps)
	var statuses []int
	for s := range byStatus {
		statuses = append(statuses, s)
	}
	sort.Ints(statuses)
	for _, s := range statuses {
		name := fmt.Sprint(s)
		if s == 0 {
			name = "transport error (" + firstErr + ")"
		}
		fmt.Fprintf(w, "| status %s | %d |\n", name, byStatus[s])
	}
}
