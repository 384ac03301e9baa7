// Package sweep holds T-CPU to llama.cpp over synthetic models of every
// family's options (issue 45): each case is a `zrtc synth` command line
// and llama.cpp's reference outputs for the model it writes (the format
// of ../shared/reference/README.md), compared teacher-forced by the
// spine's criteria — step 0's logits within the weights' tolerance, and
// the argmax agreeing wherever llama.cpp's top logit beats its runner-up
// by more than DecisiveMargin.
//
// Recorded cases live in testdata/sweep and run in every `go test`; the
// full sweep (Layouts × quant types, with llama.cpp run on each model by
// an external reference tool) runs under `make sweep`.
package sweep

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/internal/reference"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/sequence"
)

// Tolerances on step 0's logits, absolute, by weight class: those of
// T-CPU's parity test with llama.cpp (runtime/cpu/parity_test.go says
// what they cover and how they were measured).
const (
	ToleranceFloat     = 2e-2
	ToleranceQuantized = 0.15
)

// DecisiveMargin is the margin of llama.cpp's top logit over its
// runner-up above which T-CPU must pick the same token.
const DecisiveMargin = 0.1

// ReferenceContext is the context llama.cpp's references run with.
const ReferenceContext = 2048

// Case is one recorded sweep case.
type Case struct {
	// Name is the case's name (its file's base name when loaded).
	Name string `json:"name"`
	// Synth is the `zrtc synth` command line that writes the model,
	// without -o.
	Synth []string `json:"synth"`
	// Note says what the case found when it was recorded.
	Note string `json:"note,omitempty"`
	// Open, when set, says why T-CPU does not meet the criteria on this
	// case yet: TestCases skips it, naming the reason, while it still
	// misses, and fails once it passes (so the mark is dropped with the
	// fix).
	Open string `json:"open,omitempty"`
	// Context, when set, is the context length llama.cpp's reference ran
	// with, and T-CPU's bundle is built for (default ReferenceContext).
	Context int `json:"ctx,omitempty"`
	// Tolerance, when set, replaces the weights' step-0 tolerance and
	// also bounds every step's top logits (Result.Top): for cases whose
	// arithmetic is llama.cpp's to float noise, so that a small drift in
	// position-dependent code (RoPE, long-cache attention) shows.
	Tolerance float64 `json:"tolerance,omitempty"`
	// Stream, when set, generates the prompt's tokens (the reference then
	// omits them): a long prompt kept out of the file.
	Stream *Stream `json:"stream,omitempty"`
	// Reference is llama.cpp's output for the model and a prompt.
	Reference reference.File `json:"reference"`
}

// Stream is a generated prompt: N token ids drawn uniformly from
// [First, Vocab) by a PCG seeded with Seed.
type Stream struct {
	N     int    `json:"n"`
	Seed  uint64 `json:"seed"`
	First int    `json:"first"`
	Vocab int    `json:"vocab"`
}

// Tokens returns the stream's token ids.
func (s *Stream) Tokens() ([]int32, error) {
	if s.N < 1 || s.First < 0 || s.Vocab <= s.First {
		return nil, fmt.Errorf("sweep: a stream of %d tokens from [%d, %d)", s.N, s.First, s.Vocab)
	}
	rng := rand.New(rand.NewPCG(s.Seed, 0x70CE))
	out := make([]int32, s.N)
	for i := range out {
		out[i] = int32(s.First + rng.IntN(s.Vocab-s.First))
	}
	return out, nil
}

// LoadCases reads every *.json case under dir (none when dir does not
// exist).
func LoadCases(dir string) ([]*Case, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var out []*Case
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		c := &Case{}
		if err := json.Unmarshal(b, c); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if c.Stream != nil {
			if len(c.Reference.PromptTokens) > 0 {
				return nil, fmt.Errorf("%s: a case has a stream or prompt tokens, not both", p)
			}
			if c.Reference.PromptTokens, err = c.Stream.Tokens(); err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
		}
		if c.Tolerance < 0 || math.IsNaN(c.Tolerance) {
			return nil, fmt.Errorf("%s: tolerance %v", p, c.Tolerance)
		}
		if c.Context < 0 || c.Context > 1<<24 {
			return nil, fmt.Errorf("%s: context %d out of range", p, c.Context)
		}
		if len(c.Synth) == 0 || len(c.Reference.PromptTokens) == 0 || len(c.Reference.Steps) == 0 || len(c.Reference.Steps[0].Logits) != c.Reference.NVocab {
			return nil, fmt.Errorf("%s: a case needs synth flags and a reference with prompt tokens, steps and step 0's %d logits", p, c.Reference.NVocab)
		}
		c.Name = strings.TrimSuffix(filepath.Base(p), ".json")
		c.Reference.Name = filepath.Base(p)
		out = append(out, c)
	}
	return out, nil
}

// WriteModel writes the GGUF of a synth command line to path.
func WriteModel(args []string, path string) error {
	s, err := synth.ParseArgs(args)
	if err != nil {
		return err
	}
	b, err := synth.Write(s)
	if err != nil {
		return err
	}
	return gguf.WriteFileAtomic(path, b)
}

// Tolerance is the step-0 tolerance for the model at path: quantized
// when any tensor is block-quantized.
func Tolerance(path string) (float64, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	for _, ti := range f.Tensors {
		if info, _ := ti.Type.Info(); info.BlockSize > 1 {
			return ToleranceQuantized, nil
		}
	}
	return ToleranceFloat, nil
}

// Flip is a decisive step where T-CPU picked another token than llama.cpp.
type Flip struct {
	Step      int
	Got, Want int32
	Margin    float64 // llama.cpp's top logit over its runner-up
}

// Result is one comparison.
type Result struct {
	Step0     float64 // largest |Δlogit| at step 0
	Tolerance float64
	Steps     int // steps compared
	Decisive  int // steps whose llama.cpp margin exceeds DecisiveMargin
	Flips     []Flip
	// Top is the largest |Δlogit| over the reference's top logits of
	// every step; TopTolerance bounds it when set (Case.Tolerance).
	Top, TopTolerance float64
}

// OK reports whether the result meets the criteria.
func (r Result) OK() bool {
	return r.Step0 <= r.Tolerance && len(r.Flips) == 0 && (r.TopTolerance == 0 || r.Top <= r.TopTolerance)
}

func (r Result) String() string {
	s := fmt.Sprintf("step-0 |Δ| %.3g (tolerance %g), %d/%d decisive steps agree", r.Step0, r.Tolerance, r.Decisive-len(r.Flips), r.Decisive)
	if r.TopTolerance > 0 {
		s += fmt.Sprintf(", top logits of %d steps |Δ| %.3g (tolerance %g)", r.Steps, r.Top, r.TopTolerance)
	}
	for _, f := range r.Flips {
		s += fmt.Sprintf("; step %d: %d, llama.cpp %d (margin %.3f)", f.Step, f.Got, f.Want, f.Margin)
	}
	return s
}

// Compare compiles the GGUF at model for T-CPU into dir and teacher-forces
// ref's tokens through it on threads workers.
func Compare(ctx context.Context, model, dir string, ref *reference.File, threads int) (Result, error) {
	return CompareContext(ctx, model, dir, ref, threads, ReferenceContext)
}

// CompareContext is Compare with a bundle built for nCtx tokens of
// context, as the reference's context was.
func CompareContext(ctx context.Context, model, dir string, ref *reference.File, threads, nCtx int) (Result, error) {
	tol, err := Tolerance(model)
	if err != nil {
		return Result{}, err
	}
	res := Result{Tolerance: tol}
	if err := compiler.Compile(ctx, model, dir, compiler.Options{ContextLength: nCtx}); err != nil {
		return res, fmt.Errorf("compile: %w", err)
	}
	e, err := sequence.Open(dir, runtime.Options{Tier: "cpu", Threads: threads})
	if err != nil {
		return res, err
	}
	defer e.Close()
	seq, err := e.NewSequence()
	if err != nil {
		return res, err
	}
	defer seq.Release()
	logits, err := seq.Prefill(ctx, ref.PromptTokens)
	if err != nil {
		return res, fmt.Errorf("prefill: %w", err)
	}
	if len(logits) != ref.NVocab || len(ref.Steps) == 0 || len(ref.Steps[0].Logits) != ref.NVocab {
		return res, fmt.Errorf("%d logits, the reference has a vocabulary of %d and %d at step 0", len(logits), ref.NVocab, len(ref.Steps[0].Logits))
	}
	for i, v := range ref.Steps[0].Logits {
		res.Step0 = math.Max(res.Step0, math.Abs(float64(v)-float64(logits[i])))
	}
	for i, st := range ref.Steps {
		if i > 0 {
			if logits, err = seq.Decode(ctx, ref.Steps[i-1].Token); err != nil {
				return res, fmt.Errorf("decode step %d: %w", i, err)
			}
		}
		res.Steps++
		for _, tv := range st.Top {
			if id := int(tv[0]); id >= 0 && id < len(logits) {
				res.Top = math.Max(res.Top, math.Abs(tv[1]-float64(logits[id])))
			}
		}
		if len(st.Top) < 2 || st.Top[0][1]-st.Top[1][1] <= DecisiveMargin {
			continue // a near tie: either token is right
		}
		res.Decisive++
		best := 0
		for j, v := range logits {
			if v > logits[best] {
				best = j
			}
		}
		if want := int32(st.Top[0][0]); int32(best) != want {
			res.Flips = append(res.Flips, Flip{Step: i, Got: int32(best), Want: want, Margin: st.Top[0][1] - st.Top[1][1]})
		}
	}
	return res, nil
}
