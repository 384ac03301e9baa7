package spec_test

import (
	"context"
	"github.com/zrtdev/zrt/internal/chisq"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/internal/testmodel"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/decode"
	"github.com/zrtdev/zrt/runtime/sample"
	"github.com/zrtdev/zrt/runtime/sequence"
	"github.com/zrtdev/zrt/runtime/spec"
)

// synthShape is the synthetic model of the draft-model tests: matrices
// as wide as a Q4_K block, so that the same weights can be a Q8_0 target
// and a Q4_K draft (synth draws the weights before it quantizes them, so
// one seed gives both).
var synthShape = synth.Shape{Arch: "llama", Layers: 2, Embd: 256, Heads: 4, HeadsKV: 2, FF: 512, Vocab: 320, Context: 256, Type: ggml.Q8_0, Seed: 3}

// openGGUF compiles the GGUF at model with the tests' config for T-CPU
// and opens it.
func openGGUF(t *testing.T, model string) *sequence.Pool {
	t.Helper()
	out := testmodel.Compile(t, model, filepath.Join(t.TempDir(), "b"), config, compiler.Options{})
	p, err := sequence.Open(out, runtime.Options{Tier: "cpu", Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// synthPool opens synthShape with the matrix type typ and seed.
func synthPool(t *testing.T, typ ggml.Type, seed uint64) *sequence.Pool {
	t.Helper()
	s := synthShape
	s.Type, s.Seed = typ, seed
	return openGGUF(t, testmodel.New(t, s))
}

// generateDraft is generate with a draft model (mode's kind draft).
func generateDraft(t *testing.T, p, model *sequence.Pool, prompt []int32, params decode.Params, mode spec.Mode) ([]int32, decode.Finish, spec.Stats) {
	t.Helper()
	ctx := context.Background()
	seq, d := startSequence(t, p, params)
	defer seq.Release()
	sp, err := spec.NewWithDraft(p, model, seq, d, mode, params.MaxTokens)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	logits, err := seq.Prefill(ctx, prompt)
	if err != nil {
		t.Fatal(err)
	}
	if err := sp.Prime(ctx, prompt); err != nil {
		t.Fatal(err)
	}
	out, finish := speculate(t, sp, seq, d.Next(logits, seq.Tokens, seq.Pos()), len(prompt))
	return out, finish, sp.Stats
}

// TestDraftModelGreedyExact: with a draft model — the trained
// TinyStories-656K's F16 file drafting for its Q8_0 file, a synthetic
// Q8_0 model's Q4_K copy of the same weights, and a model drafting for
// itself — a greedy generation takes exactly the tokens of plain
// decoding, to the context's end, to a token limit and to a stop string,
// with drafts of 1, 4 and 7 tokens and the policy's; the lower-precision
// copies agree with their targets on most tokens.
func TestDraftModelGreedyExact(t *testing.T) {
	type pair struct {
		name          string
		target, draft func(t *testing.T) *sequence.Pool
		minAlpha      float64
	}
	shared := func(file string) func(t *testing.T) *sequence.Pool {
		return func(t *testing.T) *sequence.Pool { return openGGUF(t, testmodel.Shared(t, file)) }
	}
	synthetic := func(typ ggml.Type) func(t *testing.T) *sequence.Pool {
		return func(t *testing.T) *sequence.Pool { return synthPool(t, typ, 3) }
	}
	pairs := []pair{
		{"TinyStories Q8_0 by F16", shared("TinyStories-656K.Q8_0.gguf"), shared("TinyStories-656K.F16.gguf"), 0.8},
		{"stories260K by itself", shared("stories260K.gguf"), nil, 0.99},
		{"synthetic Q8_0 by Q4_K", synthetic(ggml.Q8_0), synthetic(ggml.Q4_K), 0.5},
	}
	for _, pr := range pairs {
		t.Run(pr.name, func(t *testing.T) {
			p, model := pr.target(t), (*sequence.Pool)(nil)
			if model = p; pr.draft != nil {
				model = pr.draft(t)
			}
			prompt := p.Tok.Encode(greedyPrompt, true, false)
			for _, params := range greedyEnds {
				want, wantFinish, _ := generate(t, p, prompt, params, spec.Mode{Kind: spec.Off})
				for _, mode := range []spec.Mode{{Kind: spec.Draft, K: 1, Fixed: true}, {Kind: spec.Draft, K: 4, Fixed: true},
					{Kind: spec.Draft, K: 7, Fixed: true}, {Kind: spec.Draft, K: 4}} {
					got, finish, stats := generateDraft(t, p, model, prompt, params, mode)
					if !slices.Equal(got, want) || finish != wantFinish {
						t.Fatalf("max %d, stops %q, %s: speculation took %d tokens (%s), plain decoding %d (%s); first difference at %d",
							params.MaxTokens, params.Stops, mode, len(got), finish, len(want), wantFinish, firstDiff(got, want))
					}
					if mode.Fixed && len(got) > 30 && stats.PerToken() < pr.minAlpha {
						t.Errorf("%s: α = %.2f per token (%d accepted, %d rejected), want ≥ %.2f from this draft", mode, stats.PerToken(), stats.Accepted, stats.Rejected, pr.minAlpha)
					}
					t.Logf("max %d, %s: %d tokens (%s), %d verify steps and %d plain, α = %.2f per token, %.2f tokens a verify step",
						params.MaxTokens, mode, len(got), finish, stats.Steps, stats.Plain, stats.PerToken(), stats.TokensPerStep())
				}
			}
		})
	}
}

// TestDraftModelSampledDistribution: a sampled request's token after a
// verify step of a draft token follows the target's distribution — the
// rejection rule through the whole path (draft model, verify step,
// decoder) — with a draft that disagrees often (another seed's weights)
// and one that mostly agrees (a Q4_K copy): χ² over 3 000 seeded
// requests, where the draft's own proposals are rejected by the same
// statistic.
func TestDraftModelSampledDistribution(t *testing.T) {
	ctx := context.Background()
	target := synthPool(t, ggml.Q8_0, 3)
	for _, c := range []struct {
		name  string
		draft *sequence.Pool
	}{{"other weights", synthPool(t, ggml.Q8_0, 4)}, {"Q4_K copy", synthPool(t, ggml.Q4_K, 3)}} {
		t.Run(c.name, func(t *testing.T) {
			sp := sample.Params{Temperature: 1.5, TopK: 12}
			prompt := target.Tok.Encode("Once upon a time", true, false)
			const pending, n = 70, 3000
			// The target's distribution after prompt and pending.
			seq, err := target.NewSequence()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := seq.Prefill(ctx, append(slices.Clone(prompt), pending)); err != nil {
				t.Fatal(err)
			}
			_, p := sample.New(sp).SampleDist(seq.Logits(), seq.Tokens)
			seq.Release()
			counts, proposed := make([]int, len(p)), make([]int, len(p))
			kept := 0
			for i := range n {
				seq, err := target.NewSequence()
				if err != nil {
					t.Fatal(err)
				}
				ps := sp
				ps.Seed = uint64(i)
				d := decode.New(target.Tok, decode.Params{MaxTokens: 8, Sampling: ps, ContextLength: target.Hparams.ContextLength})
				sd, err := spec.NewWithDraft(target, c.draft, seq, d, spec.Mode{Kind: spec.Draft, K: 1, Fixed: true}, 8)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := seq.Prefill(ctx, prompt); err != nil {
					t.Fatal(err)
				}
				if err := sd.Prime(ctx, prompt); err != nil {
					t.Fatal(err)
				}
				steps, err := sd.Step(ctx, pending)
				if err != nil {
					t.Fatal(err)
				}
				counts[steps[0].Token]++
				if sd.Stats.Accepted > 0 {
					kept++
				}
				proposed[sd.LastDraft()[0]]++
				sd.Close()
				seq.Release()
			}
			x2, df := chisq.Statistic(counts, p, n)
			crit := chisq.Critical(df)
			if x2 > crit {
				t.Errorf("χ² %.1f over %d degrees of freedom, critical %.1f: the tokens do not follow the target", x2, df, crit)
			}
			if px2, _ := chisq.Statistic(proposed, p, n); px2 <= crit && c.name == "other weights" {
				t.Errorf("the draft's own proposals score χ² %.1f ≤ %.1f: the test cannot tell the draft from the target", px2, crit)
			}
			t.Logf("χ² %.1f (df %d, critical %.1f); %d of %d drafts kept", x2, df, crit, kept, n)
		})
	}
}

// TestDraftModelRefused: a draft model whose vocabulary differs from the
// target's is refused naming the difference; kind draft needs a draft
// model, and the other kinds take none.
func TestDraftModelRefused(t *testing.T) {
	target := synthPool(t, ggml.Q8_0, 3)
	s := synthShape
	s.Vocab = 384
	other := openGGUF(t, testmodel.New(t, s))
	seq, d := newSequence(t, target)
	m := spec.Mode{Kind: spec.Draft, K: 4}
	if _, err := spec.NewWithDraft(target, other, seq, d, m, 4); err == nil || !strings.Contains(err.Error(), "vocabulary differs") {
		t.Errorf("a draft of another vocabulary: %v", err)
	}
	if _, err := spec.NewWithDraft(target, nil, seq, d, m, 4); err == nil || !strings.Contains(err.Error(), "--draft") {
		t.Errorf("kind draft without a draft model: %v", err)
	}
	if _, err := spec.NewWithDraft(target, target, seq, d, spec.Mode{Kind: spec.NGram, K: 4}, 4); err == nil || !strings.Contains(err.Error(), "--draft goes with") {
		t.Errorf("ngram with a draft model: %v", err)
	}
	t.Run("stories260K", func(t *testing.T) {
		if err := spec.CheckDraft(target.Program, openGGUF(t, testmodel.Shared(t, "stories260K.gguf")).Program); err == nil || !strings.Contains(err.Error(), "differ") {
			t.Errorf("stories260K drafting for a synthetic model: %v", err)
		}
	})
}
