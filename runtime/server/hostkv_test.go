package server_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/bench/loadtest"
)

// TestHostKVMetrics runs zrt-run loadtest's multi-turn chat load against
// a server whose KV pool holds fewer conversations than come back, with
// host_kv_mib and without: with it the second turns find their history in
// the host tier, and /metrics counts those hits apart from the device's
// (zrt_prefix_cache_host_hits_total), as the report's rows show.
func TestHostKVMetrics(t *testing.T) {
	hits := regexp.MustCompile(`\| 2 \| 6/6 \| \d+ \| [^|]+ \| [\d.]+% \((\d+) device \+ (\d+) host of (\d+)\) \|`)
	for _, tc := range []struct {
		config string
		host   bool
	}{{"", false}, {"host_kv_mib = 1\n", true}} {
		ts := serveStories(t, serveOptions{model: "context_length = 256\ndecode_slots = [1, 2]\nprefill_rows = [16, 64]\nkv_pages = 24\n",
			config: tc.config, slots: 2, chunkCap: 64})
		var out strings.Builder
		opt := loadtest.Options{URL: ts.URL, Concurrency: 2, Requests: 6, PromptTokens: 70, MaxTokens: 8, Seed: 3, Turns: 2, TurnTokens: 8}
		if err := loadtest.Run(context.Background(), opt, &out); err != nil {
			t.Fatal(err)
		}
		m := hits.FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("host tier %v: no second-turn row with hits in the report:\n%s", tc.host, out.String())
		}
		host, _ := strconv.Atoi(m[2])
		if tc.host != (host > 0) {
			t.Errorf("host tier %v: the second turns found %s prompt tokens in the host tier (%s on the device, of %s)", tc.host, m[2], m[1], m[3])
		}
		t.Logf("host tier %v: second turns' prefix hits: %s device + %s host of %s prompt tokens", tc.host, m[1], m[2], m[3])
	}
}
