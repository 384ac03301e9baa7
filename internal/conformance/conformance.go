// Package conformance is the one suite every tier passes against T-CPU, the
// oracle (as wazero runs every engine through one run(t, …)): each shared
// reference prompt of ../shared is teacher-forced through a bundle built
// for the tier and through a T-CPU bundle of the same model, and the tier's
// logits are held to T-CPU's within the tier's stated tolerance. T-CPU
// itself is held to llama.cpp by its own parity test.
package conformance

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/format/support"
	"github.com/zrtdev/zrt/internal/reference"
	"github.com/zrtdev/zrt/runtime"
	"github.com/zrtdev/zrt/runtime/sequence"
)

// Tier is the tier under test and what it promises.
type Tier struct {
	// Target is the compile target of its bundles.
	Target string
	// Options open them (Options.Tier names the tier).
	Options runtime.Options
	// Config, when set, is a model config (TOML) for the tier's bundles,
	// for instance to compile several variants.
	Config string
	// OracleConfig, when set, is the model config of the oracle's T-CPU
	// bundles: the same computation where the config changes what is
	// computed (a q8_0 KV cache, cache_type_k and cache_type_v).
	OracleConfig string
	// OracleThreads are T-CPU's workers for the oracle (default 2). T-CPU
	// splits some reductions by worker count, so the oracle's last bits
	// depend on it: a tier's runner keeps the count its tolerance was
	// measured with.
	OracleThreads int
	// RelTolerance bounds step 0's largest logit difference, relative to
	// the step's largest |logit| (at least 1), and is the argmax margin
	// below which the two may pick different tokens. 0 demands identical
	// logits.
	RelTolerance float64
	// RoutedSpikes is how many decode steps of one prompt of a model with
	// routed experts may pick another token than the oracle beyond the
	// margin. Such a model routes each token to its top experts by the
	// router's logits; where two of them nearly tie, the tiers' last-bit
	// differences can send the token to another expert, which moves that
	// step's logits by far more than rounding does (measured on T-CUDA:
	// single-step spikes of 0.2–0.66 relative on syn-gpt-oss-mxfp4 and
	// syn-qwen3moe-q8_0 between steps within 2–6e-2). Step 0 is held to
	// RelTolerance regardless.
	RoutedSpikes int
}

// Run runs the suite: it skips when ../shared has no references, skips a
// model only when zrtc reports it unsupported (naming it and why), and
// logs each reference's worst difference.
func Run(t *testing.T, tier Tier) {
	shared := reference.SharedDir()
	refs := reference.Shared(t, "*.json")
	writeConfig := func(name, text string) string {
		if text == "" {
			return ""
		}
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg, oracleCfg := writeConfig("tier.toml", tier.Config), writeConfig("oracle.toml", tier.OracleConfig)
	type bundles struct{ oracle, tier string }
	built := map[string]*bundles{}
	report := map[string]string{}
	for _, ref := range refs {
		name := filepath.Base(ref.Model)
		model := reference.Model(shared, ref)
		if model == "" {
			t.Logf("%s: model %s not found, skipped", ref.Name, name)
			continue
		}
		bs, ok := built[name]
		if !ok {
			base := filepath.Join(t.TempDir(), strings.TrimSuffix(name, ".gguf"))
			bs = &bundles{base + ".oracle", base + ".tier"}
			for _, b := range []struct{ dir, target, config string }{{bs.oracle, "cpu", oracleCfg}, {bs.tier, tier.Target, cfg}} {
				err := compiler.Compile(context.Background(), model, b.dir, compiler.Options{Target: b.target, ConfigPath: b.config, PTXDir: os.Getenv("ZRT_PTX_DIR")})
				if support.Is(err) {
					t.Logf("%s: skipped: %v", name, err)
					bs = nil
					break
				}
				if err != nil {
					t.Fatalf("compile %s for %s: %v", name, b.target, err)
				}
			}
			built[name] = bs
		}
		if bs == nil {
			continue
		}
		d, flips, spikes, steps := compare(t, tier, bs.oracle, bs.tier, ref, routed(t, model))
		report[ref.Name] = fmt.Sprintf("step-0 max|Δ| %.2e (rel %.2e), argmax disagreements %d/%d (%d beyond the margin)", d.abs, d.rel, flips, steps, spikes)
	}
	var names []string
	for n := range report {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.Logf("%-34s %s", n, report[n])
	}
}

// routed reports whether the model routes tokens to experts.
func routed(t *testing.T, model string) bool {
	f, err := gguf.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, _ := f.String("general.architecture")
	_, ok := f.Lookup(a + ".expert_count")
	return ok
}

type diff struct{ abs, rel float64 }

func logitDiff(a, b []float32) diff {
	var d, scale float64 = 0, 1
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
		scale = math.Max(scale, math.Abs(float64(a[i])))
	}
	return diff{d, d / scale}
}

func argmax(l []float32) (int, float64) {
	best, second := 0, math.Inf(-1)
	for j, v := range l {
		if v > l[best] {
			second, best = float64(l[best]), j
		} else if j != best && float64(v) > second {
			second = float64(v)
		}
	}
	return best, float64(l[best]) - second
}

// compare teacher-forces ref through both bundles and returns step 0's
// difference, how many steps picked different tokens, and how many of
// those beyond the margin (allowed, up to tier.RoutedSpikes, when
// routed).
func compare(t *testing.T, tier Tier, oracleDir, tierDir string, ref *reference.File, routed bool) (d0 diff, flips, spikes, steps int) {
	label := ref.Name
	ctx := context.Background()
	open := func(dir string, opt runtime.Options) (*sequence.Pool, *sequence.Sequence) {
		p, err := sequence.Open(dir, opt)
		if err != nil {
			t.Fatalf("%s: open %s on %s: %v", label, dir, opt.Tier, err)
		}
		s, err := p.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		return p, s
	}
	threads := tier.OracleThreads
	if threads == 0 {
		threads = 2
	}
	op, oseq := open(oracleDir, runtime.Options{Tier: "cpu", Threads: threads})
	defer op.Close()
	tp, tseq := open(tierDir, tier.Options)
	defer tp.Close()
	ol, err := oseq.Prefill(ctx, ref.PromptTokens)
	if err != nil {
		t.Fatalf("%s: oracle prefill: %v", label, err)
	}
	tl, err := tseq.Prefill(ctx, ref.PromptTokens)
	if err != nil {
		t.Fatalf("%s: %s prefill: %v", label, tier.Options.Tier, err)
	}
	d0 = logitDiff(ol, tl)
	if d0.rel > tier.RelTolerance {
		t.Errorf("%s: step 0 logits differ by %.3g (relative %.3g, tolerance %g)", label, d0.abs, d0.rel, tier.RelTolerance)
	}
	for i := range ref.Steps {
		if i > 0 {
			tok := ref.Steps[i-1].Token
			if ol, err = oseq.Decode(ctx, tok); err != nil {
				t.Fatalf("%s: oracle decode %d: %v", label, i, err)
			}
			if tl, err = tseq.Decode(ctx, tok); err != nil {
				t.Fatalf("%s: %s decode %d: %v", label, tier.Options.Tier, i, err)
			}
		}
		ob, margin := argmax(ol)
		tb, _ := argmax(tl)
		if g := int(tseq.Greedy()); g != tb {
			t.Errorf("%s: step %d: the graph's ARGMAX picked %d, the logits' argmax is %d", label, i, g, tb)
		}
		if ob != tb {
			flips++
			if margin > tier.RelTolerance*math.Max(1, math.Abs(float64(ol[ob]))) {
				spikes++
				if !routed || spikes > tier.RoutedSpikes {
					t.Errorf("%s: step %d: argmax %d, oracle %d (margin %.4f)", label, i, tb, ob, margin)
				}
			}
		}
		if tier.RelTolerance == 0 {
			if d := logitDiff(ol, tl); d.abs != 0 {
				t.Errorf("%s: step %d: logits differ by %.3g, want identical", label, i, d.abs)
			}
		}
	}
	return d0, flips, spikes, len(ref.Steps)
}
