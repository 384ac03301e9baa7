package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestLoadtestTemperature: greedy requests say temperature 0 and carry no
// seed; sampled ones carry the temperature and seed Seed+j, each request
// its own.
func TestLoadtestTemperature(t *testing.T) {
	for _, temp := range []float64{0, 0.8} {
		var mu sync.Mutex
		seeds := map[uint64]bool{}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/tokenize":
				json.NewEncoder(w).Encode(map[string]any{"tokens": []int{5, 6, 7}})
				return
			case "/v1/completions":
			default:
				http.NotFound(w, r)
				return
			}
			var body struct {
				Temperature *float64 `json:"temperature"`
				Seed        *uint64  `json:"seed"`
			}
			json.NewDecoder(r.Body).Decode(&body)
			mu.Lock()
			if body.Temperature == nil || *body.Temperature != temp || (body.Seed != nil) != (temp > 0) {
				t.Errorf("temperature %v: a request with temperature %v, seed %v", temp, body.Temperature, body.Seed)
			}
			if body.Seed != nil {
				seeds[*body.Seed] = true
			}
			mu.Unlock()
			json.NewEncoder(w).Encode(map[string]any{"usage": map[string]any{"completion_tokens": 1},
				"choices": []map[string]any{{"text": "x", "finish_reason": "length"}}})
		}))
		var out strings.Builder
		err := Run(context.Background(), Options{URL: srv.URL, Concurrency: 2, Requests: 6, PromptTokens: 2, MaxTokens: 1, Seed: 40, Temperature: temp}, &out)
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		if temp > 0 && len(seeds) != 6 || !seeds[40] && temp > 0 {
			t.Errorf("temperature %v: seeds %v, want 40..45", temp, seeds)
		}
	}
	if err := Run(context.Background(), Options{URL: "http://127.0.0.1:1", Concurrency: 1, Requests: 1, PromptTokens: 1, MaxTokens: 1, Temperature: -1}, io.Discard); err == nil {
		t.Error("a negative temperature ran")
	}
}

// TestLoadtestResponseFormats: with several --response-format objects,
// request j carries object j mod their number, and the tokens the server
// reports are what the run counts; the report gives the tokens a request
// and the replies' finish reasons.
func TestLoadtestResponseFormats(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/tokenize":
			json.NewEncoder(w).Encode(map[string]any{"tokens": []int{5, 6, 7}})
		case "/v1/completions":
			var body struct {
				ResponseFormat map[string]any `json:"response_format"`
			}
			json.NewDecoder(r.Body).Decode(&body)
			mu.Lock()
			seen[body.ResponseFormat["type"].(string)]++
			mu.Unlock()
			// json_object replies stop after 2 tokens, text ones run to 4.
			n, finish := 2, "stop"
			if body.ResponseFormat["type"] == "text" {
				n, finish = 4, "length"
			}
			json.NewEncoder(w).Encode(map[string]any{"usage": map[string]any{"completion_tokens": n},
				"choices": []map[string]any{{"text": "x", "finish_reason": finish}}})
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	lt := &loadtest{url: srv.URL, maxTokens: 8, formats: []map[string]any{{"type": "json_object"}, {"type": "text"}}}
	ids, err := lt.vocabIDs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	res := lt.run(context.Background(), ids, 3, 10, 4, 1)
	if seen["json_object"] != 5 || seen["text"] != 5 {
		t.Errorf("formats sent %v, want 5 of each", seen)
	}
	tokens := 0
	for _, o := range res.outcomes {
		tokens += o.tokens
	}
	if tokens != 30 {
		t.Errorf("counted %d tokens, want 30", tokens)
	}
	var out strings.Builder
	res.print(&out, 3, 10, 4, 8, false)
	for _, want := range []string{"| generated tokens | 30 |", "| generated tokens a request: mean / min / max | 3.0 / 2 / 4 |", "| finish reasons | length 5, stop 5 |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// TestLoadtestMaskCost: the report's mask row is the quantiles of the
// masks the server's histogram counted during the run (the difference of
// two scrapes), interpolated within buckets; a server without the
// histogram gives no row.
func TestLoadtestMaskCost(t *testing.T) {
	scrapes := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		scrapes++
		// Before the run 10 masks under 1 µs; during it 100 more: 50 in
		// (1, 2] µs, 49 in (2, 4] µs, 1 in (4, 8] µs.
		n := []int{10, 10, 10, 10}
		if scrapes > 1 {
			n = []int{10, 60, 109, 110}
		}
		fmt.Fprintf(w, "# TYPE zrt_constraint_mask_seconds histogram\n")
		for i, le := range []string{"1e-06", "2e-06", "4e-06", "8e-06"} {
			fmt.Fprintf(w, "zrt_constraint_mask_seconds_bucket{model_name=\"m\",le=\"%s\"} %d\n", le, n[i])
		}
		fmt.Fprintf(w, "zrt_constraint_mask_seconds_bucket{model_name=\"m\",le=\"+Inf\"} %d\n", n[3])
	}))
	defer srv.Close()
	lt := &loadtest{url: srv.URL}
	before := lt.maskBuckets(context.Background())
	after := lt.maskBuckets(context.Background())
	q, n := maskQuantiles(before, after, 0.5, 0.99, 1)
	if n != 100 || math.Abs(q[0]-2e-6) > 1e-12 || math.Abs(q[1]-4e-6) > 1e-12 || math.Abs(q[2]-8e-6) > 1e-12 {
		t.Errorf("quantiles %v of %v masks, want [2e-06 4e-06 8e-06] of 100", q, n)
	}
	if line := maskLine(before, after); !strings.Contains(line, "2.0 / 4.0 (100 masks") {
		t.Errorf("report row %q", line)
	}
	if line := maskLine(nil, (&loadtest{url: "http://127.0.0.1:1"}).maskBuckets(context.Background())); line != "" {
		t.Errorf("no server: row %q", line)
	}
}

// TestLoadtestTurns: a multi-turn load sends every conversation's turn
// before any next turn, each later prompt its conversation's previous
// prompt, the reply's ids and new ids; the report's rows per turn carry
// the prefix hits the server's counters moved by in that turn.
func TestLoadtestTurns(t *testing.T) {
	var mu sync.Mutex
	var sent [][]int
	queries, hits, host := 0, 0, 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.URL.Path {
		case "/tokenize":
			var body struct {
				Content string `json:"content"`
			}
			json.NewDecoder(r.Body).Decode(&body)
			if body.Content == "reply" {
				json.NewEncoder(w).Encode(map[string]any{"tokens": []int{90, 91}})
				return
			}
			json.NewEncoder(w).Encode(map[string]any{"tokens": []int{5, 6, 7}})
		case "/v1/completions":
			var body struct {
				Prompt []int `json:"prompt"`
			}
			json.NewDecoder(r.Body).Decode(&body)
			sent = append(sent, body.Prompt)
			queries += len(body.Prompt)
			if len(sent) > 3 { // the second turn: its history found, half of it in the host tier
				hits += 2
				host += 2
			}
			json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{"text": "reply"}}, "usage": map[string]any{"completion_tokens": 2}})
		case "/metrics":
			fmt.Fprintf(w, "vllm:prefix_cache_queries_total{model_name=\"m\"} %d\nvllm:prefix_cache_hits_total{model_name=\"m\"} %d\nzrt_prefix_cache_host_hits_total{model_name=\"m\"} %d\n", queries, hits, host)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	var out strings.Builder
	opt := Options{URL: srv.URL, Concurrency: 2, Requests: 3, PromptTokens: 4, MaxTokens: 2, Seed: 1, Turns: 2, TurnTokens: 3}
	if err := Run(context.Background(), opt, &out); err != nil {
		t.Fatal(err)
	}
	if len(sent) != 6 {
		t.Fatalf("%d requests, want 6", len(sent))
	}
	for _, second := range sent[3:] {
		var first []int
		for _, p := range sent[:3] {
			if len(second) == len(p)+5 && fmt.Sprint(second[:len(p)]) == fmt.Sprint(p) {
				first = p
			}
		}
		if first == nil || second[4] != 90 || second[5] != 91 {
			t.Errorf("second turn %v does not continue any first turn %v with the reply [90 91]", second, sent[:3])
		}
	}
	report := out.String()
	for _, want := range []string{"| 1 | 3/3 | 4 |", "| - |", "| 2 | 3/3 | 9 |", "44.4% (6 device + 6 host of 27)"} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
}

// TestStepLines: the step rows are the counters' differences between two
// scrapes, per step, with the wall time no step took as idle, and the
// forced tokens' share of the run's.
func TestStepLines(t *testing.T) {
	scrapes := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scrapes++
		k := float64(scrapes - 1) // the second scrape: 100 decode steps in 0.4 s + 0.05 s, 10 mixed in 0.2 s + 0.01 s
		fmt.Fprintf(w, "zrt_steps_by_kind_total{kind=\"decode\",model_name=\"m\"} %g\n", 7+100*k)
		fmt.Fprintf(w, "zrt_steps_by_kind_total{kind=\"mixed\",model_name=\"m\"} %g\n", 3+10*k)
		fmt.Fprintf(w, "zrt_step_seconds_total{kind=\"decode\",model_name=\"m\",part=\"replay\"} %g\n", 1+0.4*k)
		fmt.Fprintf(w, "zrt_step_seconds_total{kind=\"decode\",model_name=\"m\",part=\"host\"} %g\n", 1+0.05*k)
		fmt.Fprintf(w, "zrt_step_seconds_total{kind=\"mixed\",model_name=\"m\",part=\"replay\"} %g\n", 1+0.2*k)
		fmt.Fprintf(w, "zrt_step_seconds_total{kind=\"mixed\",model_name=\"m\",part=\"host\"} %g\n", 1+0.01*k)
		fmt.Fprintf(w, "zrt_constraint_forced_tokens_total{model_name=\"m\"} %g\n", 5+330*k)
	}))
	defer srv.Close()
	lt := &loadtest{url: srv.URL}
	before := lt.steps(context.Background())
	after := lt.steps(context.Background())
	got := stepLines(before, after, time.Second, 1320)
	for _, want := range []string{"| decode steps: count, replay / host ms a step | 100, 4.000 / 0.500 |", "| mixed steps: count, replay / host ms a step | 10, 20.000 / 1.000 |", "| engine idle (wall time in no step) | 0.34 s |",
		"| generated tokens a step; a second of replay | 12.0; 2200.0 |", "| tokens constraints forced, taken ahead of the model | 330 (25.0% of those generated) |"} {
		if !strings.Contains(got, want) {
			t.Errorf("rows %q lack %q", got, want)
		}
	}
	if rows := stepLines(nil, (&loadtest{url: "http://127.0.0.1:1"}).steps(context.Background()), time.Second, 10); rows != "" {
		t.Errorf("no server: rows %q", rows)
	}
}

// TestStepLinesReplicas: a model served by four engines (zrt-run serve
// --replicas 4) sums their steps' times, so its idle time is over four
// engines' wall time: 3.2 s of steps in a second leave 0.8 s, not -2.2.
func TestStepLinesReplicas(t *testing.T) {
	scrapes := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scrapes++
		k := float64(scrapes - 1)
		fmt.Fprintf(w, "zrt_engines{model_name=\"m\"} 4\n")
		fmt.Fprintf(w, "zrt_steps_by_kind_total{kind=\"decode\",model_name=\"m\"} %g\n", 400*k)
		fmt.Fprintf(w, "zrt_step_seconds_total{kind=\"decode\",model_name=\"m\",part=\"replay\"} %g\n", 3*k)
		fmt.Fprintf(w, "zrt_step_seconds_total{kind=\"decode\",model_name=\"m\",part=\"host\"} %g\n", 0.2*k)
	}))
	defer srv.Close()
	lt := &loadtest{url: srv.URL}
	before := lt.steps(context.Background())
	got := stepLines(before, lt.steps(context.Background()), time.Second, 400)
	if want := "| engine idle (wall time in no step, summed over 4 engines) | 0.80 s |"; !strings.Contains(got, want) {
		t.Errorf("rows %q lack %q", got, want)
	}
}
