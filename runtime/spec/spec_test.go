package spec_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/format/support"
	"github.com/zrtdev/zrt/internal/testmodel"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
	"github.com/zrtdev/zrt/runtime/decode"
	"github.com/zrtdev/zrt/runtime/sample"
	"github.com/zrtdev/zrt/runtime/sequence"
	"github.com/zrtdev/zrt/runtime/spec"
)

// config is the model config of the tests: decode variants up to 8 rows
// (verify steps of up to 8), a short context that the longest test run
// fills, and a draft variant of the first layer for self-speculation.
const config = "context_length = 160\ndecode_slots = [1, 2, 4, 8]\nprefill_rows = [16]\ndraft_layers = 1\n"

// shared compiles a model of ../shared/models for T-CPU and opens it,
// skipping without the file.
func shared(t *testing.T, file string) *sequence.Pool {
	t.Helper()
	return openWith(t, file, config)
}

// openWith is shared with the model config text cfg.
func openWith(t *testing.T, file, cfg string) *sequence.Pool {
	t.Helper()
	out, err := compile(t, file, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := sequence.Open(out, runtime.Options{Tier: "cpu", Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// newSequence returns a fresh sequence of p, released when the test
// ends, and a decoder of four tokens at most over p's vocabulary.
func newSequence(t *testing.T, p *sequence.Pool) (*sequence.Sequence, *decode.Decoder) {
	t.Helper()
	seq, err := p.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(seq.Release)
	return seq, decode.New(p.Tok, decode.Params{MaxTokens: 4})
}

// compile compiles a model of ../shared/models with the model config
// text for T-CPU, skipping without the file, and returns the bundle.
func compile(t *testing.T, file, config string) (string, error) {
	t.Helper()
	return compileFor(t, file, config, "")
}

// compileFor is compile for a target ("" is cpu).
func compileFor(t *testing.T, file, config, target string) (string, error) {
	t.Helper()
	model := testmodel.Shared(t, file)
	dir := t.TempDir()
	cfg, out := filepath.Join(dir, "m.toml"), filepath.Join(dir, "b")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return out, compiler.Compile(context.Background(), model, out, compiler.Options{ConfigPath: cfg, Target: target, PTXDir: os.Getenv("ZRT_PTX_DIR")})
}

// startSequence returns a fresh sequence of p, for the caller to release,
// and a decoder with params over p's context.
func startSequence(t *testing.T, p *sequence.Pool, params decode.Params) (*sequence.Sequence, *decode.Decoder) {
	t.Helper()
	seq, err := p.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	params.ContextLength = p.Hparams.ContextLength
	return seq, decode.New(p.Tok, params)
}

// generate decodes from prompt with params, speculating with mode (off:
// one decode step a token), and returns the tokens taken and why it
// finished.
func generate(t *testing.T, p *sequence.Pool, prompt []int32, params decode.Params, mode spec.Mode) ([]int32, decode.Finish, spec.Stats) {
	t.Helper()
	ctx := context.Background()
	seq, d := startSequence(t, p, params)
	defer seq.Release()
	logits, err := seq.Prefill(ctx, prompt)
	if err != nil {
		t.Fatal(err)
	}
	st := d.Next(logits, seq.Tokens, seq.Pos())
	var out []int32
	if !mode.On() {
		for st.Finish == decode.Running {
			out = append(out, st.Token)
			if logits, err = seq.Decode(ctx, st.Token); err != nil {
				t.Fatal(err)
			}
			st = d.Next(logits, seq.Tokens, seq.Pos())
		}
		return out, st.Finish, spec.Stats{}
	}
	sp, err := spec.New(p, seq, d, mode, params.MaxTokens)
	if err != nil {
		t.Fatal(err)
	}
	out, finish := speculate(t, sp, seq, st, len(prompt))
	return out, finish, sp.Stats
}

// speculate takes tokens from st on with sp's steps until the generation
// finishes, checking after every step that seq holds the prompt's
// promptLen tokens and every token taken.
func speculate(t *testing.T, sp *spec.Decoding, seq *sequence.Sequence, st decode.Step, promptLen int) ([]int32, decode.Finish) {
	t.Helper()
	var out []int32
	for st.Finish == decode.Running {
		out = append(out, st.Token)
		steps, err := sp.Step(context.Background(), st.Token)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range steps[:len(steps)-1] {
			out = append(out, s.Token)
		}
		st = steps[len(steps)-1]
		if want := promptLen + len(out); seq.Pos() != want {
			t.Fatalf("the sequence holds %d tokens after a step, want %d (prompt and tokens taken)", seq.Pos(), want)
		}
	}
	return out, st.Finish
}

// greedyPrompt is the greedy-exactness tests' prompt, and greedyEnds
// their generations' three ends: the context's end, a token limit and a
// stop string.
const greedyPrompt = "Once upon a time, there was a little girl named Lily. Lily"

var greedyEnds = []decode.Params{
	{MaxTokens: 1 << 20},
	{MaxTokens: 37},
	{MaxTokens: 1 << 20, Stops: []string{"Lily was"}},
}

// TestGreedyExact: on every shared model a speculative generation takes
// exactly the tokens of plain greedy decoding, with n-gram drafts of 1, 4
// and 7 tokens, self-speculation's of 3 (the model's first layer and its
// head), and with the adaptive policy's, to the context's end, to a token limit and to a stop string; the
// n-gram drafts are accepted (random-weight greedy generations fall into
// loops, the trained models' stories repeat names).
func TestGreedyExact(t *testing.T) {
	for _, file := range []string{"stories260K.gguf", "TinyStories-656K.Q8_0.gguf", "synthetic/syn-llama-q4km.gguf",
		"synthetic/syn-qwen3-q5km.gguf", "synthetic/syn-phi3-q6k.gguf", "synthetic/syn-qwen2moe-q5km.gguf", "synthetic/syn-mistral3-f16.gguf"} {
		t.Run(filepath.Base(file), func(t *testing.T) {
			p := shared(t, file)
			prompt := p.Tok.Encode(greedyPrompt, true, false)
			for _, params := range greedyEnds {
				want, wantFinish, _ := generate(t, p, prompt, params, spec.Mode{Kind: spec.Off})
				for _, mode := range []spec.Mode{{Kind: spec.NGram, K: 1, Fixed: true}, {Kind: spec.NGram, K: 4, Fixed: true},
					{Kind: spec.NGram, K: 7, Fixed: true}, {Kind: spec.NGram, K: 4},
					{Kind: spec.Self, K: 3, Fixed: true}, {Kind: spec.Self, K: 4}} {
					got, finish, stats := generate(t, p, prompt, params, mode)
					if !slices.Equal(got, want) || finish != wantFinish {
						t.Fatalf("max %d, stops %q, %s: speculation took %d tokens (%s), plain decoding %d (%s); first difference at %d",
							params.MaxTokens, params.Stops, mode, len(got), finish, len(want), wantFinish, firstDiff(got, want))
					}
					if len(got) > 100 && mode.Fixed && mode.Kind == spec.NGram && stats.Accepted == 0 {
						t.Errorf("%s: no draft token of %d was accepted in %d tokens", mode, stats.Drafted, len(got))
					}
					t.Logf("max %d, %s: %d tokens (%s), %d verify steps and %d plain, α = %.2f, %.2f tokens a verify step",
						params.MaxTokens, mode, len(got), finish, stats.Steps, stats.Plain, stats.Acceptance(), stats.TokensPerStep())
				}
			}
		})
	}
}

// TestGreedyCUDA: on T-CUDA a speculative generation of the trained
// stories260K model takes the tokens of plain greedy decoding there, with
// n-gram and self drafts. T-CUDA is not batch invariant bit for bit (a
// verify row may round otherwise than a decode row), so this holds where
// no two logits are within that rounding, as the engine's tests assume
// for the same model. It skips without a GPU.
func TestGreedyCUDA(t *testing.T) {
	if _, err := driver.Probe(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	out, err := compileFor(t, "stories260K.gguf", config, "cuda:sm_90")
	if err != nil {
		t.Fatal(err)
	}
	p, err := sequence.Open(out, runtime.Options{Tier: "cuda"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	prompt := p.Tok.Encode("Once upon a time, there was a little girl named Lily. Lily", true, false)
	params := decode.Params{MaxTokens: 120}
	want, _, _ := generate(t, p, prompt, params, spec.Mode{Kind: spec.Off})
	for _, mode := range []spec.Mode{{Kind: spec.NGram, K: 4, Fixed: true}, {Kind: spec.Self, K: 3, Fixed: true}} {
		got, _, stats := generate(t, p, prompt, params, mode)
		if !slices.Equal(got, want) {
			t.Errorf("%s: speculation took other tokens; first difference at %d of %d", mode, firstDiff(got, want), len(want))
		}
		t.Logf("%s: α = %.2f, %.2f tokens a verify step", mode, stats.Acceptance(), stats.TokensPerStep())
	}
}

// TestSampledExact: sampling with a seed, penalties included, takes the
// same tokens with speculation as without: the sampler draws once per
// token taken, from the target's logits after the same tokens.
func TestSampledExact(t *testing.T) {
	p := shared(t, "stories260K.gguf")
	prompt := p.Tok.Encode("Once upon a time", true, false)
	for _, sp := range []sample.Params{
		{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05, RepeatPenalty: 1, Seed: 7},
		{Temperature: 0.3, TopK: 0, TopP: 1, RepeatPenalty: 1.1, RepeatLastN: 16, Seed: 11},
	} {
		params := decode.Params{MaxTokens: 120, Sampling: sp}
		want, _, _ := generate(t, p, prompt, params, spec.Mode{Kind: spec.Off})
		got, _, stats := generate(t, p, prompt, params, spec.Mode{Kind: spec.NGram, K: 4, Fixed: true})
		if !slices.Equal(got, want) {
			t.Fatalf("%+v: speculation took other tokens; first difference at %d of %d", sp, firstDiff(got, want), len(want))
		}
		t.Logf("temp %.1f: α = %.2f over %d drafted", sp.Temperature, stats.Acceptance(), stats.Drafted)
	}
}

// TestSlotStateRefused: a model with recurrent layers is refused with the
// typed error, not verified wrong, and so is a draft variant of them.
func TestSlotStateRefused(t *testing.T) {
	const file = "synthetic/syn-qwen35-q8_0.gguf"
	var unsupported *support.Error
	if _, err := compile(t, file, config); !errors.As(err, &unsupported) || !strings.Contains(err.Error(), "recurrent") {
		t.Errorf("a draft variant of recurrent layers: %v, want an unsupported-feature error", err)
	}
	p := openWith(t, file, strings.Replace(config, "draft_layers = 1\n", "", 1))
	seq, d := newSequence(t, p)
	if _, err := spec.New(p, seq, d, spec.Mode{Kind: spec.NGram, K: 4}, 4); !errors.Is(err, sequence.ErrSlotState) {
		t.Errorf("spec.New on a recurrent model: %v, want ErrSlotState", err)
	}
	if _, err := seq.Verify(context.Background(), []int32{1, 2}); !errors.Is(err, sequence.ErrSlotState) {
		t.Errorf("a verify step of 2 rows on a recurrent model: %v, want ErrSlotState", err)
	}
}

func firstDiff(a, b []int32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestSelfNeedsDraftVariant: self-speculation on a bundle built with
// draft_layers = 0 (no draft variant) is refused, saying how to build
// one.
func TestSelfNeedsDraftVariant(t *testing.T) {
	p := openWith(t, "stories260K.gguf", strings.Replace(config, "draft_layers = 1\n", "draft_layers = 0\n", 1))
	seq, d := newSequence(t, p)
	if _, err := spec.New(p, seq, d, spec.Mode{Kind: spec.Self, K: 4}, 4); err == nil || !strings.Contains(err.Error(), "draft_layers") {
		t.Errorf("self on a bundle without a draft variant: %v", err)
	}
	if _, err := seq.Draft(context.Background(), 1); err == nil || !strings.Contains(err.Error(), "no draft variant") {
		t.Errorf("a draft step without a draft variant: %v", err)
	}
}
