package cpu_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/format/support"
	"github.com/zrtdev/zrt/internal/reference"
)

// q8KVConfig is the model config of a q8_0 cache, as llama.cpp's
// -ctk q8_0 -ctv q8_0.
const q8KVConfig = "cache_type_k = \"q8_0\"\ncache_type_v = \"q8_0\"\n"

// q8KVReferences holds llama.cpp's outputs with -ctk q8_0 -ctv q8_0 (made by
// refdump, ../shared/reference's tool, with the cache types as flags; the
// same settings otherwise), as reference.Load reads them.
const q8KVReferences = "testdata/kv-q8_0"

// Against llama.cpp's own q8_0 cache, T-CPU's arithmetic is the F16 path's
// (the same ggml functions: quantize_row_q8_0 for K, V and the query,
// ggml_vec_dot_q8_0_q8_0, dequantize_row_q8_0, ggml_vec_mad_f32), so the
// tolerances are toleranceFor's. Against the F16-cache references, the
// cache's own rounding is added: a q8_0 block keeps 8 bits of each value
// against F16's 11, an error of up to amax/254 per value, which moves the
// scores and the attended values by about 0.4% and, through the layers of
// a random-weight model whose logits are sums of many such values, the
// logits by up to 0.128 (measured, syn-llama-iq3m; 0.124 syn-gpt-oss-mxfp4,
// 0.116 syn-qwen3-q5km; 0.042 and 0.034 on the F16-weight syn-llama-f16 and
// syn-mistral3-f16). So a q8_0 cache still meets the quantized models'
// parity tolerance against the F16 references, and the F16-weight models
// are held to the same 0.15 rather than to toleranceFloat, which the
// cache's own rounding exceeds.
const toleranceQ8VsF16 = toleranceQuantized

// compileQ8KV compiles model for T-CPU with a q8_0 cache at the
// references' context, or returns "" where zrt refuses it as unsupported
// (a head that is no whole number of q8_0 blocks, as llama.cpp refuses).
func compileQ8KV(t *testing.T, model string) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "q8.toml")
	if err := os.WriteFile(cfg, []byte(q8KVConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(model), ".gguf"))
	err := compiler.Compile(context.Background(), model, dir, compiler.Options{ConfigPath: cfg, ContextLength: referenceContext})
	if support.Is(err) {
		t.Logf("%s: skipped: %v", filepath.Base(model), err)
		return ""
	}
	if err != nil {
		t.Fatalf("compile %s with a q8_0 cache: %v", model, err)
	}
	return dir
}

// TestParityQ8KV teacher-forces the shared models, built with a q8_0 KV
// cache, against llama.cpp with -ctk q8_0 -ctv q8_0 (the committed
// references under testdata/kv-q8_0) at the F16 parity's tolerances, and
// against the F16-cache references at toleranceQ8VsF16: step 0's full
// logits, and the argmax of every step whose top two are further apart
// than the tolerance.
func TestParityQ8KV(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles every shared model")
	}
	shared := reference.SharedDir()
	f16Refs, err := reference.Load(shared, "*.json")
	if err != nil {
		t.Fatal(err)
	}
	q8Refs, err := reference.Load(q8KVReferences, "*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(f16Refs) == 0 {
		t.Skipf("no reference files under %s", shared)
	}
	type set struct {
		label string
		refs  []*reference.File
		tol   func(model string) float64
	}
	sets := []set{
		{"llama.cpp q8_0 KV", q8Refs, func(m string) float64 { return toleranceFor(t, m) }},
		{"llama.cpp F16 KV", f16Refs, func(string) float64 { return toleranceQ8VsF16 }},
	}
	bundles := map[string]string{}
	worst := map[string]float64{}
	for _, s := range sets {
		for _, ref := range s.refs {
			name := filepath.Base(ref.Model)
			model := reference.Model(shared, ref)
			if model == "" {
				t.Errorf("%s: model %s not found", ref.Name, name)
				continue
			}
			dir, ok := bundles[name]
			if !ok {
				dir = compileQ8KV(t, model)
				bundles[name] = dir
			}
			if dir == "" {
				continue
			}
			d := checkReference(t, dir, ref, s.label+" "+ref.Name, s.tol(model))
			key := s.label + ": " + name
			worst[key] = math.Max(worst[key], d)
		}
	}
	var keys []string
	for k := range worst {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Logf("%-50s largest step-0 |Δlogit| %.2e", k, worst[k])
	}
}
