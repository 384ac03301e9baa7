package server_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/server"
)

// draftModelConfig is the model config of the draft tests' bundles:
// slots beyond the engine's for the verify rows.
const draftModelConfig = "context_length = 256\ndecode_slots = [1, 2, 4, 8]\nprefill_rows = [16, 64]\n"

// runDraft runs server.Run on target with draft as its draft model
// (zrt-run serve TARGET --draft DRAFT --speculative SPECULATIVE) until ctx ends, returning its
// base URL, or the error Run returned before serving.
func runDraft(ctx context.Context, t *testing.T, target, draft, speculative string) (string, <-chan error, func() string, error) {
	t.Helper()
	bundles, err := server.Locate(ctx, []string{target}, []string{"m"}, []string{draft}, func(_ context.Context, p string) (string, error) { return p, nil })
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(t, "slots = 2\n")
	if err != nil {
		t.Fatal(err)
	}
	said, done := newRunLog(), make(chan error, 1)
	go func() {
		done <- server.Run(ctx, server.Options{Bundles: bundles, Runtime: runtime.Options{Tier: "cpu", Threads: 2}, Config: cfg, Speculative: speculative,
			Listen: "127.0.0.1:0", DrainTimeout: 5 * time.Second, Log: said.log})
	}()
	select {
	case a := <-said.addr:
		return "http://" + a, done, said.String, nil
	case err := <-done:
		return "", done, said.String, err
	}
}

// TestServeDraftModel: zrt-run serve with --draft serves with a draft
// model (TinyStories-656K's F16 file drafting for its Q8_0 file), alone
// meaning draft:4 and with every draft verified (draft:4:fixed): the same
// greedy text as the target alone, a seeded one with draft tokens kept
// (drawn from the draft's distribution: not the same text), drafts counted in
// /metrics; a draft of another vocabulary is refused before serving, and
// --draft given for some of the bundles is a usage error.
func TestServeDraftModel(t *testing.T) {
	target := compileShared(t, "TinyStories-656K.Q8_0.gguf", draftModelConfig)
	draft := compileShared(t, "TinyStories-656K.F16.gguf", draftModelConfig)
	off := serveStories(t, serveOptions{file: "TinyStories-656K.Q8_0.gguf", model: draftModelConfig, config: "speculative = \"off\"\n", slots: 2, chunkCap: 64})
	for _, mode := range []string{"", "draft:4:fixed"} {
		serveDraft(t, target, draft, mode, off.URL)
	}
	other := compileStories(t, draftModelConfig)
	if _, _, _, err := runDraft(context.Background(), t, target, other, ""); err == nil || !strings.Contains(err.Error(), "differ") {
		t.Errorf("a draft model of another vocabulary: %v, want it refused", err)
	}
	if _, err := server.Locate(context.Background(), []string{target, target}, nil, []string{draft}, func(_ context.Context, p string) (string, error) { return p, nil }); err == nil || !strings.Contains(err.Error(), "--draft given 1 times for 2 bundles") {
		t.Errorf("--draft for one of two bundles: %v", err)
	}
}

// serveDraft serves target with draft and --speculative mode and holds
// its completions to those of the server at offURL, which serves target
// alone.
func serveDraft(t *testing.T, target, draft, mode, offURL string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, done, log, err := runDraft(ctx, t, target, draft, mode)
	if err != nil {
		t.Fatalf("serving with a draft model: %v", err)
	}
	con, coff := client(base, ""), client(offURL, "")
	accepted := func() string {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return grepLines(string(body), "vllm:spec_decode_num_accepted_tokens_total")
	}
	for _, temp := range []float64{0, 0.8} {
		params := openai.CompletionNewParams{Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
			MaxTokens: openai.Int(60), Temperature: openai.Float(temp), Seed: openai.Int(5)}
		params.Model = "m"
		before := accepted()
		a, err := con.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		params.Model = "TinyStories-656K.Q8_0"
		b, err := coff.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if temp > 0 {
			// A sampled request's draft tokens are drawn from the draft
			// model's distribution and kept by speculative sampling's
			// rule: the target's distribution, not the same tokens as
			// alone (the engine's TestDraftModelSampledDistribution).
			// Every draft verified, some are kept.
			t.Logf("temperature %g: with the draft model %q (accepted before %s, after %s), alone %q", temp, a.Choices[0].Text, before, accepted(), b.Choices[0].Text)
			if a.Choices[0].Text == "" || mode != "" && accepted() == before {
				t.Errorf("temperature %g: with the draft model %q, no draft token kept (%s)", temp, a.Choices[0].Text, accepted())
			}
			continue
		}
		if a.Choices[0].Text != b.Choices[0].Text {
			t.Errorf("temperature %g: with the draft model %q, alone %q", temp, a.Choices[0].Text, b.Choices[0].Text)
		}
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := "speculative decoding " + mode
	if mode == "" {
		want = "speculative decoding draft:4 "
	}
	if !strings.Contains(log(), want) {
		t.Errorf("Run did not say %q:\n%s", want, log())
	}
	m := grepLines(string(body), "vllm:spec_decode_num_accepted_tokens_total")
	t.Logf("--speculative %q: %s", mode, m)
	if mode != "" && (!strings.Contains(m, "model_name=\"m\"") || strings.HasSuffix(strings.TrimSpace(m), " 0")) {
		t.Errorf("%s: no accepted draft tokens in /metrics:\n%s", mode, grepLines(string(body), "spec_decode"))
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after cancellation: %v", err)
	}
}
