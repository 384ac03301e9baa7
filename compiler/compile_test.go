package compiler_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler"
	"github.com/zrtdev/zrt/compiler/synth"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/format/support"
	"github.com/zrtdev/zrt/internal/testmodel"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/kernels/cuda/ptx"
)

func TestReproducibleBuild(t *testing.T) {
	for _, s := range []synth.Shape{synth.Tiny, {Arch: "qwen2", Layers: 1, Embd: 64, Heads: 2, HeadsKV: 1, FF: 96, Vocab: 300, Context: 64, Type: ggml.Q8_0, Seed: 2},
		{Arch: "qwen3", Layers: 1, Embd: 64, Heads: 4, HeadsKV: 2, HeadDim: 32, FF: 64, Vocab: 300, Context: 64, Type: ggml.F16, Seed: 3}} {
		model := testmodel.New(t, s)
		a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
		for _, out := range []string{a, b} {
			if err := compiler.Compile(context.Background(), model, out, compiler.Options{VerifyEach: true}); err != nil {
				t.Fatalf("%s: %v", s.Arch, err)
			}
		}
		testmodel.SameTree(t, a, b, 3)
	}
}

// TestRebuildReplacesAtomically overwrites an existing bundle and checks a
// failed build leaves the old one untouched.
func TestRebuildReplacesAtomically(t *testing.T) {
	model := testmodel.New(t, synth.Tiny)
	out := filepath.Join(t.TempDir(), "b")
	ctx := context.Background()
	if err := compiler.Compile(ctx, model, out, compiler.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := compiler.Compile(ctx, model, out, compiler.Options{}); err != nil {
		t.Fatalf("rebuild over an existing bundle: %v", err)
	}
	before := testmodel.ReadTree(t, out)
	bad := filepath.Join(t.TempDir(), "bad.gguf")
	os.WriteFile(bad, []byte("GGUF\x03\x00\x00\x00"), 0o644)
	if err := compiler.Compile(ctx, bad, out, compiler.Options{}); err == nil {
		t.Fatal("compiled a truncated GGUF")
	}
	after := testmodel.ReadTree(t, out)
	for k, v := range before {
		if !bytes.Equal(v, after[k]) {
			t.Errorf("%s changed after a failed build", k)
		}
	}
	entries, _ := os.ReadDir(filepath.Dir(out))
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temporary %s left behind", e.Name())
		}
	}
}

// TestHostileModels checks that a model zrtc cannot build is refused with
// an error that names the problem, and that the error says which kind of
// problem it is: valid input zrtc does not support yet (support.Is), or a
// malformed file (anything else).
func TestHostileModels(t *testing.T) {
	good := testmodel.Bytes(t, synth.Tiny)
	f, err := gguf.Parse(good)
	if err != nil {
		t.Fatal(err)
	}
	// edit describes a copy of the model: metadata to change or drop
	// (a nil value drops the key), a tensor to drop, tensors to reshape or
	// retype (their data becomes zeros of the new size).
	type edit struct {
		meta    map[string]*gguf.Value
		drop    string
		reshape map[string][]int64
		retype  map[string]ggml.Type
	}
	rewrite := func(e edit) []byte {
		w := gguf.NewWriter()
		for _, kv := range f.KV {
			v, changed := e.meta[kv.Key]
			if !changed {
				w.Set(kv.Key, kv.Value)
			} else if v != nil {
				w.Set(kv.Key, *v)
			}
		}
		for k, v := range e.meta {
			if _, ok := f.Lookup(k); !ok && v != nil {
				w.Set(k, *v)
			}
		}
		for i := range f.Tensors {
			ti := &f.Tensors[i]
			if ti.Name == e.drop {
				continue
			}
			typ, dims, data := ti.Type, ti.Dims, f.TensorData(ti)
			if d, ok := e.reshape[ti.Name]; ok {
				dims = d
			}
			if nt, ok := e.retype[ti.Name]; ok {
				typ = nt
			}
			if typ != ti.Type || len(e.reshape[ti.Name]) > 0 {
				rb, err := typ.RowBytes(dims[0])
				if err != nil {
					t.Fatal(err)
				}
				data = make([]byte, rb*(elements(dims)/dims[0]))
			}
			if err := w.AddTensor(ti.Name, typ, dims, data); err != nil {
				t.Fatal(err)
			}
		}
		return w.Bytes()
	}
	str := func(s string) *gguf.Value { v := gguf.Str(s); return &v }
	f32 := func(x float32) *gguf.Value { v := gguf.F32(x); return &v }
	u32 := func(x uint32) *gguf.Value { v := gguf.U32(x); return &v }
	strs := func(x []string) *gguf.Value { v := gguf.Strs(x); return &v }
	tv, _ := f.Lookup("tokenizer.ggml.tokens")
	tokens, err := tv.Strings()
	if err != nil || len(tokens) != synth.Tiny.Vocab {
		t.Fatalf("tiny model tokens: %d, %v", len(tokens), err)
	}
	n := len(tokens)
	cases := []struct {
		name, target, want string
		unsupported        bool
		data               []byte
	}{
		{"missing tensor", "", "missing tensor blk.1.ffn_up.weight", false, rewrite(edit{drop: "blk.1.ffn_up.weight"})},
		{"wrong shape", "", "blk.0.attn_q.weight has shape", false, rewrite(edit{reshape: map[string][]int64{"blk.0.attn_q.weight": {64, 32}}})},
		{"missing hparam", "", "llama.embedding_length", false, rewrite(edit{meta: map[string]*gguf.Value{"llama.embedding_length": nil}})},
		{"bad head count", "", "head_count", false, rewrite(edit{meta: map[string]*gguf.Value{"llama.attention.head_count_kv": func() *gguf.Value { v := gguf.U32(3); return &v }()}})},
		{"truncated", "", "truncated", false, good[:len(good)/2]},
		{"unknown rope scaling", "", `unknown rope scaling "wavy"`, false, rewrite(edit{meta: map[string]*gguf.Value{"llama.rope.scaling.type": str("wavy")}})},

		{"NaN epsilon", "", "llama.attention.layer_norm_rms_epsilon NaN must be positive and finite", false,
			rewrite(edit{meta: map[string]*gguf.Value{"llama.attention.layer_norm_rms_epsilon": f32(float32(math.NaN()))}})},
		{"zero epsilon", "", "layer_norm_rms_epsilon 0 must be positive", false,
			rewrite(edit{meta: map[string]*gguf.Value{"llama.attention.layer_norm_rms_epsilon": f32(0)}})},
		{"NaN rope base", "", "rope.freq_base NaN must be positive and finite", false,
			rewrite(edit{meta: map[string]*gguf.Value{"llama.rope.freq_base": f32(float32(math.NaN()))}})},
		{"infinite rope base", "", "rope.freq_base +Inf must be positive and finite", false,
			rewrite(edit{meta: map[string]*gguf.Value{"llama.rope.freq_base": f32(float32(math.Inf(1)))}})},
		{"zero heads", "", "head_count", false, rewrite(edit{meta: map[string]*gguf.Value{"llama.attention.head_count": u32(0)}})},
		{"vocabulary smaller than the embedding", "", fmt.Sprintf("has %d tokens but the embedding has %d rows", n-1, n), false,
			rewrite(edit{meta: map[string]*gguf.Value{"tokenizer.ggml.tokens": strs(tokens[:n-1]), "tokenizer.ggml.scores": nil, "tokenizer.ggml.token_type": nil}})},
		{"duplicate token text", "", fmt.Sprintf("token %d has the same text", n-1), false,
			rewrite(edit{meta: map[string]*gguf.Value{"tokenizer.ggml.tokens": strs(append(tokens[:n-1:n-1], tokens[n-2]))}})},

		{"architecture", "", `unsupported architecture "mamba9" (general.architecture): zrtc builds gemma2, gemma3, gemma4, gpt-oss, llama,`, true,
			rewrite(edit{meta: map[string]*gguf.Value{"general.architecture": str("mamba9")}})},
		{"rope scaling", "", `unsupported rope scaling "longrope" (llama.rope.scaling.type)`, true,
			rewrite(edit{meta: map[string]*gguf.Value{"llama.rope.scaling.type": str("longrope")}})},
		{"tensor type", "", "unsupported tensor type Q8_1 (id 9) in blk.0.ffn_down.weight: target cpu computes F32, F16,", true,
			rewrite(edit{retype: map[string]ggml.Type{"blk.0.ffn_down.weight": ggml.Q8_1}})},
		{"removed layout", "", "unsupported tensor type Q4_0_4_4 (id 31) in blk.1.ffn_gate.weight: ggml has removed this layout; re-quantize as Q4_0", true,
			rewrite(edit{retype: map[string]ggml.Type{"blk.1.ffn_gate.weight": ggml.Q4_0_4_4}})},
		{"type per target", "cuda:sm_90", "unsupported tensor type BF16 (id 30) in blk.0.attn_q.weight: target cuda:sm_90 computes", true,
			rewrite(edit{retype: map[string]ggml.Type{"blk.0.attn_q.weight": ggml.BF16}})},
	}
	for _, c := range cases {
		p := filepath.Join(t.TempDir(), "m.gguf")
		if err := os.WriteFile(p, c.data, 0o644); err != nil {
			t.Fatal(err)
		}
		err := compiler.Compile(context.Background(), p, filepath.Join(t.TempDir(), "out"), compiler.Options{Target: c.target})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
		if support.Is(err) != c.unsupported {
			t.Errorf("%s: support.Is(%v) = %v, want %v", c.name, err, support.Is(err), c.unsupported)
		}
	}
	// The same BF16 model builds for cpu: unsupported is per target.
	p := filepath.Join(t.TempDir(), "bf16.gguf")
	if err := os.WriteFile(p, rewrite(edit{retype: map[string]ggml.Type{"blk.0.attn_q.weight": ggml.BF16}}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := compiler.Compile(context.Background(), p, filepath.Join(t.TempDir(), "out"), compiler.Options{}); err != nil {
		t.Errorf("BF16 weight for cpu: %v", err)
	}
}

// TestIQ3SWeightsPerTarget: a model with an IQ3_S weight builds for cpu,
// whose kernels compute IQ3_S, and is refused as unsupported, naming the
// type and tensor, for cuda, whose kernels do not.
// TestWeightTypesPerTarget: the weight types a target computes with are
// its kernels', so one file builds for one target and is refused, as
// unsupported, for another. IQ3_S now builds for cpu and cuda:sm_90; BF16
// builds for cpu only.
func TestWeightTypesPerTarget(t *testing.T) {
	// IQ3_S blocks hold 256 elements, so the rows must be that long.
	// with writes the model with blk.0.attn_q.weight as all-zero blocks
	// of typ.
	with := func(typ ggml.Type) string {
		return testmodel.Retyped(t, synth.Shape{Arch: "llama", Layers: 1, Embd: 256, Heads: 4, HeadsKV: 2, FF: 256, Vocab: 300, Context: 64, Type: ggml.F32, Seed: 4},
			"blk.0.attn_q.weight", typ)
	}
	ctx := context.Background()
	iq3s := with(ggml.IQ3_S)
	for _, target := range []string{"cpu", "cuda:sm_90"} {
		if err := compiler.Compile(ctx, iq3s, filepath.Join(t.TempDir(), "b"), compiler.Options{Target: target, VerifyEach: true}); err != nil {
			t.Errorf("IQ3_S weight for %s: %v", target, err)
		}
	}
	bf16 := with(ggml.BF16)
	if err := compiler.Compile(ctx, bf16, filepath.Join(t.TempDir(), "cpu"), compiler.Options{VerifyEach: true}); err != nil {
		t.Errorf("BF16 weight for cpu: %v", err)
	}
	err := compiler.Compile(ctx, bf16, filepath.Join(t.TempDir(), "cuda"), compiler.Options{Target: "cuda:sm_90"})
	const want = "unsupported tensor type BF16 (id 30) in blk.0.attn_q.weight: target cuda:sm_90 computes"
	if err == nil || !strings.Contains(err.Error(), want) || !support.Is(err) {
		t.Errorf("BF16 weight for cuda:sm_90: got %v (support.Is %v), want an unsupported error containing %q", err, support.Is(err), want)
	}
}

func elements(dims []int64) int64 {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	return n
}

// buildGraph compiles model with opt (each pass verified) and reads back
// the bundle's graph.
func buildGraph(t *testing.T, model string, opt compiler.Options) *bundle.Graph {
	t.Helper()
	out := filepath.Join(t.TempDir(), "b")
	opt.VerifyEach = true
	if err := compiler.Compile(context.Background(), model, out, opt); err != nil {
		t.Fatal(err)
	}
	g, _, err := bundle.ReadGraph(filepath.Join(out, bundle.GraphFile))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// kvRegionBytes is the size of g's KV cache region.
func kvRegionBytes(t *testing.T, g *bundle.Graph) int64 {
	t.Helper()
	for _, r := range g.Regions {
		if r.Name == kernels.RegionKV {
			return r.Bytes
		}
	}
	t.Fatal("no kv region")
	return 0
}

// TestKVCacheTypes builds one model with an F16 and a q8_0 cache: the q8_0
// bundle's kv region is 17/32 of the F16 one's for the same pages, its
// hyperparameters and kernel instances name the types (and llama.cpp's
// rotation, heads being 64 wide), the F16 bundle's name none, and a
// target without q8_0 kernels refuses it naming the option.
func TestKVCacheTypes(t *testing.T) {
	model := testmodel.New(t, synth.Shape{Arch: "llama", Layers: 2, Embd: 256, Heads: 4, HeadsKV: 2, FF: 256, Vocab: 300, Context: 64, Type: ggml.Q8_0, Seed: 5})
	q8 := filepath.Join(t.TempDir(), "q8.toml")
	if err := os.WriteFile(q8, []byte("cache_type_k = \"q8_0\"\ncache_type_v = \"q8_0\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	build := func(opt compiler.Options) *bundle.Graph { return buildGraph(t, model, opt) }
	kvBytes := func(g *bundle.Graph) int64 { return kvRegionBytes(t, g) }
	f16, q := build(compiler.Options{}), build(compiler.Options{ConfigPath: q8})
	if a, b := kvBytes(f16), kvBytes(q); a*17 != b*32 {
		t.Errorf("kv region: F16 %d bytes, q8_0 %d: want 17/32", a, b)
	}
	if h := f16.Hparams; h.CacheTypeK != "" || h.CacheRotK != 0 {
		t.Errorf("F16 bundle records cache type %q, rotation %d", h.CacheTypeK, h.CacheRotK)
	}
	if h := q.Hparams; h.CacheTypeK != "q8_0" || h.CacheTypeV != "q8_0" || h.CacheRotK != 64 || h.CacheRotV != 64 {
		t.Errorf("q8_0 bundle records %q %q, rotations %d %d", h.CacheTypeK, h.CacheTypeV, h.CacheRotK, h.CacheRotV)
	}
	var attn []string
	for _, k := range q.Kernels {
		if strings.HasPrefix(k.Name, "flash_attn") || strings.Contains(k.Name, "kv_write") {
			attn = append(attn, k.Name)
		}
	}
	if len(attn) == 0 {
		t.Fatal("no attention or KV write kernels")
	}
	for _, n := range attn {
		if !strings.HasSuffix(n, ".kv-q8_0-q8_0-rk64-rv64") {
			t.Errorf("kernel %s does not name the q8_0 cache", n)
		}
	}
	// The loader's check holds the kernels to the recorded layout: a
	// graph file whose types were edited away is refused, not read as F16.
	if _, err := kernels.CheckBundle(q); err != nil {
		t.Errorf("the q8_0 bundle fails CheckBundle: %v", err)
	}
	q.Hparams.CacheTypeK, q.Hparams.CacheTypeV, q.Hparams.CacheRotK, q.Hparams.CacheRotV = "", "", 0, 0
	if _, err := kernels.CheckBundle(q); err == nil || !strings.Contains(err.Error(), "addresses a k=q8_0 v=q8_0") {
		t.Errorf("q8_0 kernels in a bundle recorded as F16: %v", err)
	}
	// T-CUDA builds a q8_0 cache where its PTX archive has the layout's
	// instances (kernels/cuda's KVLayouts, after make ptx), and refuses it
	// as unsupported, saying how to build them, where not.
	err := compiler.Compile(ctx, model, filepath.Join(t.TempDir(), "cuda"), compiler.Options{Target: "cuda:sm_90", ConfigPath: q8})
	want := q.Hparams
	lay := kernels.KVTypes{K: ggml.Q8_0, V: ggml.Q8_0, RotK: want.CacheRotK, RotV: want.CacheRotV}
	if slices.Contains(ptx.KVLayouts("sm_90"), lay) {
		if err != nil {
			t.Errorf("q8_0 cache for cuda:sm_90, whose PTX the archive has: %v", err)
		}
	} else if err == nil || !support.Is(err) || !strings.Contains(err.Error(), "build_ptx.sh") {
		t.Errorf("q8_0 cache for cuda:sm_90 without its PTX: got %v, want an unsupported error saying how to build it", err)
	}
	// A cache of q8_0 K over F16 V has no T-CUDA instance, and the AMD
	// targets address F16 caches only: both refused, naming the option.
	mixed := filepath.Join(t.TempDir(), "mixed.toml")
	if err := os.WriteFile(mixed, []byte("cache_type_k = \"q8_0\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err = compiler.Compile(ctx, model, filepath.Join(t.TempDir(), "cuda-mixed"), compiler.Options{Target: "cuda:sm_90", ConfigPath: mixed})
	if err == nil || !support.Is(err) || !strings.Contains(err.Error(), "cache_type_k") || !strings.Contains(err.Error(), "q8_0 K with q8_0 V") {
		t.Errorf("q8_0 K over F16 V for cuda:sm_90: got %v, want an unsupported error naming cache_type_k and the layout T-CUDA has", err)
	}
	err = compiler.Compile(ctx, model, filepath.Join(t.TempDir(), "amd"), compiler.Options{Target: "amd:gfx1201", ConfigPath: q8})
	if err == nil || !support.Is(err) || !strings.Contains(err.Error(), "cache_type_k") {
		t.Errorf("q8_0 cache for amd:gfx1201: got %v, want an unsupported error naming cache_type_k", err)
	}
}

// TestFP8KVCache builds one model with an fp8_e4m3 cache for cpu: its kv
// region takes 17/32 of the F16 one's bytes for the same pages (68-byte
// blocks of 64 values), its hyperparameters and kernel instances name the
// type without a rotation; cuda:sm_80 and sm_86 refuse it as unsupported,
// naming the option and why, and sm_89 and sm_90 build it.
func TestFP8KVCache(t *testing.T) {
	model := testmodel.New(t, synth.Shape{Arch: "llama", Layers: 2, Embd: 256, Heads: 4, HeadsKV: 2, FF: 256, Vocab: 300, Context: 64, Type: ggml.Q8_0, Seed: 5})
	fp8 := filepath.Join(t.TempDir(), "fp8.toml")
	if err := os.WriteFile(fp8, []byte("cache_type_k = \"fp8_e4m3\"\ncache_type_v = \"fp8_e4m3\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	build := func(opt compiler.Options) *bundle.Graph { return buildGraph(t, model, opt) }
	kvBytes := func(g *bundle.Graph) int64 { return kvRegionBytes(t, g) }
	f16, f8 := build(compiler.Options{}), build(compiler.Options{ConfigPath: fp8})
	if a, b := kvBytes(f16), kvBytes(f8); a*17 != b*32 {
		t.Errorf("kv region: F16 %d bytes, fp8_e4m3 %d: want 17/32", a, b)
	}
	if h := f8.Hparams; h.CacheTypeK != "fp8_e4m3" || h.CacheTypeV != "fp8_e4m3" || h.CacheRotK != 0 || h.CacheRotV != 0 {
		t.Errorf("fp8 bundle records %q %q, rotations %d %d", h.CacheTypeK, h.CacheTypeV, h.CacheRotK, h.CacheRotV)
	}
	n := 0
	for _, k := range f8.Kernels {
		if strings.HasPrefix(k.Name, "flash_attn") || strings.Contains(k.Name, "kv_write") {
			n++
			if !strings.HasSuffix(k.Name, ".kv-fp8_e4m3-fp8_e4m3") {
				t.Errorf("kernel %s does not name the fp8 cache", k.Name)
			}
		}
	}
	if n == 0 {
		t.Fatal("no attention or KV write kernels")
	}
	if _, err := kernels.CheckBundle(f8); err != nil {
		t.Errorf("the fp8 bundle fails CheckBundle: %v", err)
	}
	// Ampere (compute capability 8.0, 8.6) has no FP8: refused, naming the
	// option and why.
	for _, target := range []string{"cuda:sm_80", "cuda:sm_86"} {
		err := compiler.Compile(ctx, model, filepath.Join(t.TempDir(), "cuda"), compiler.Options{Target: target, ConfigPath: fp8})
		if err == nil || !support.Is(err) || !strings.Contains(err.Error(), "cache_type_k") || !strings.Contains(err.Error(), "compute capability 8.9") {
			t.Errorf("fp8 cache for %s: got %v, want an unsupported error naming cache_type_k and compute capability 8.9", target, err)
		}
	}
	// Ada and Hopper build it where this zrtc's archive has the FP8
	// instances' PTX, and otherwise say that the PTX is missing.
	fp8KV := kernels.KVTypes{K: kernels.FP8E4M3, V: kernels.FP8E4M3}
	for _, target := range []string{"cuda:sm_89", "cuda:sm_90"} {
		err := compiler.Compile(ctx, model, filepath.Join(t.TempDir(), "cuda"), compiler.Options{Target: target, ConfigPath: fp8})
		if slices.Contains(ptx.KVLayouts(ptx.TargetArch(target)), fp8KV) {
			if err != nil {
				t.Errorf("fp8 cache for %s: %v", target, err)
			}
		} else if err == nil || !support.Is(err) || !strings.Contains(err.Error(), "PTX") {
			t.Errorf("fp8 cache for %s without its PTX: got %v, want an unsupported error naming the PTX", target, err)
		}
	}
	err := compiler.Compile(ctx, model, filepath.Join(t.TempDir(), "amd"), compiler.Options{Target: "amd:gfx1201", ConfigPath: fp8})
	if err == nil || !strings.Contains(err.Error(), "cache_type_k") {
		t.Errorf("fp8 cache for amd:gfx1201: got %v, want an error naming cache_type_k", err)
	}
}
