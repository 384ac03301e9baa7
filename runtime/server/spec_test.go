package server_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/zrtdev/zrt/runtime/engine"
	"github.com/zrtdev/zrt/runtime/server"
)

// speculativeFlag runs the package's tests with servers that speculate
// (go test ./runtime/server/ -args -speculative ngram:4:fixed): every
// test server whose config leaves speculation off drafts as the mode
// says, on a bundle with more slots than the engine runs (so draft rows
// find free slots), and every test must pass as it does without.
var speculativeFlag = flag.String("speculative", "", "run every test server with this speculative mode (off, ngram[:K[:fixed]], self[:K[:fixed]])")

// testSpeculation is the mode of -speculative (off without it).
var testSpeculation engine.Speculation

func TestMain(m *testing.M) {
	flag.Parse()
	sp, err := engine.ParseSpeculation(*speculativeFlag)
	if err != nil {
		fmt.Fprintln(os.Stderr, "-speculative:", err)
		os.Exit(2)
	}
	testSpeculation = sp
	os.Exit(m.Run())
}

// TestSpeculativeServe serves stories260K with the config's speculative
// key on (n-gram drafts of up to 4 tokens, all verified) and off, and
// requires the same greedy and seeded texts from both; the speculating
// server's /metrics count the drafts with vLLM's spec_decode names.
func TestSpeculativeServe(t *testing.T) {
	const model = "context_length = 256\ndecode_slots = [1, 2, 4, 8]\nprefill_rows = [16, 64]\n"
	on := serveStories(t, serveOptions{model: model, config: "speculative = \"ngram:4:fixed\"\n", slots: 2, chunkCap: 64})
	off := serveStories(t, serveOptions{model: model, config: "speculative = \"off\"\n", slots: 2, chunkCap: 64})
	ctx := context.Background()
	con, coff := client(on.URL, ""), client(off.URL, "")
	for _, temp := range []float64{0, 0.8} {
		params := openai.CompletionNewParams{Model: "stories260K",
			Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time, there was a little girl. Once upon a time, there was")},
			MaxTokens: openai.Int(60), Temperature: openai.Float(temp), Seed: openai.Int(5)}
		a, err := con.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		b, err := coff.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if a.Choices[0].Text != b.Choices[0].Text {
			t.Errorf("temperature %g: speculating %q, not %q", temp, a.Choices[0].Text, b.Choices[0].Text)
		}
	}
	resp, err := http.Get(on.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	count := func(name string) float64 {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\{model_name="stories260K"\} (\S+)$`).FindStringSubmatch(string(body))
		if m == nil {
			t.Fatalf("/metrics lacks %s:\n%s", name, grepLines(string(body), "spec_decode"))
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	drafts, tokens, accepted := count("vllm:spec_decode_num_drafts_total"), count("vllm:spec_decode_num_draft_tokens_total"), count("vllm:spec_decode_num_accepted_tokens_total")
	length := count("zrt_spec_decode_mean_acceptance_length")
	t.Logf("%g drafts, %g draft tokens, %g accepted, mean acceptance length %.2f", drafts, tokens, accepted, length)
	if tokens == 0 || accepted == 0 || drafts == 0 {
		t.Errorf("the speculating server verified %g draft tokens and accepted %g", tokens, accepted)
	}
	if want := 1 + accepted/max(drafts, 1); length < want-1e-9 || length > want+1e-9 {
		t.Errorf("mean acceptance length %g, want %g", length, want)
	}
	if !strings.Contains(string(body), `vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="stories260K",position="0"}`) {
		t.Errorf("/metrics lacks the accepted tokens by position:\n%s", grepLines(string(body), "spec_decode"))
	}
}

// TestSpeculativeConfig: the top-level speculative key is every model's,
// a [[model]] table's overrides it for that model, and bad values or
// tables are refused naming the key.
func TestSpeculativeConfig(t *testing.T) {
	cfg, err := loadConfig(t, "speculative = \"ngram:6\"\n[[model]]\nname = \"a\"\nspeculative = \"self:2:fixed\"\n[[model]]\nname = \"b\"\n")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"a": "self:2:fixed", "b": "ngram:6", "other": "ngram:6"} {
		if got := cfg.SpeculationFor(name).String(); got != want {
			t.Errorf("model %s: speculative %s, want %s", name, got, want)
		}
	}
	if got := cfg.SpeculationFor("x"); got != server.NewPolicy(cfg).EngineConfig(cfg).Speculative {
		t.Errorf("the engine config's speculation %v is not the top-level key's %v", server.NewPolicy(cfg).EngineConfig(cfg).Speculative, got)
	}
	for _, bad := range []struct{ text, want string }{
		{"speculative = \"eagle\"\n", "speculative"},
		{"speculative = \"ngram:0\"\n", "speculative"},
		{"[[model]]\nname = \"a\"\nspeculative = \"ngram:x\"\n", "model a: speculative"},
		{"[[model]]\nname = \"a\"\n[[model]]\nname = \"a\"\n", "repeated"},
		{"[[model]]\nspeculative = \"off\"\n", "empty"},
	} {
		if _, err := loadConfig(t, bad.text); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want an error saying %q", bad.text, err, bad.want)
		}
	}
}
