package synth

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/zrtdev/zrt/compiler/arch"
	"github.com/zrtdev/zrt/compiler/config"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/kernels/quant"
)

// TestEncodersDecode checks each weight encoder against the reference
// decoder: the values come back within half a quantization step.
func TestEncodersDecode(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, 4*256)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 0.05)
	}
	for _, c := range []struct {
		t   ggml.Type
		tol float64 // relative to max|x|
	}{{ggml.Q4_K, 0.08}, {ggml.Q6_K, 0.02}, {ggml.Q8_0, 0.01}, {ggml.F16, 1e-3}} {
		b, err := encode(c.t, x)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := c.t.RowBytes(int64(len(x))); int64(len(b)) != n {
			t.Fatalf("%s: %d bytes, want %d", c.t, len(b), n)
		}
		y := make([]float32, len(x))
		if err := quant.Dequantize(c.t, b, y); err != nil {
			t.Fatal(err)
		}
		amax, worst := 0.0, 0.0
		for i := range x {
			amax = math.Max(amax, math.Abs(float64(x[i])))
			worst = math.Max(worst, math.Abs(float64(x[i]-y[i])))
		}
		if worst > c.tol*amax {
			t.Errorf("%s: worst error %.4g, more than %.2g of max %.4g", c.t, worst, c.tol, amax)
		}
	}
}

func TestMixAndShapes(t *testing.T) {
	s := Tiny
	s.Embd, s.Heads, s.HeadsKV, s.FF, s.Vocab, s.Type, s.Mix = 256, 4, 2, 512, 512, ggml.Q4_K, "Q4_K_M"
	b, err := Write(s)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]ggml.Type{"token_embd.weight": ggml.Q4_K, "output.weight": ggml.Q6_K,
		"blk.0.attn_v.weight": ggml.Q4_K, "blk.1.attn_v.weight": ggml.Q6_K, "blk.0.attn_q.weight": ggml.Q4_K, "blk.1.ffn_down.weight": ggml.Q6_K}
	for name, typ := range want {
		ti, ok := f.Tensor(name)
		if !ok || ti.Type != typ {
			t.Errorf("%s: %v, want %s", name, ti, typ)
		}
	}
	s.Embd = 96 // not a multiple of 256
	if _, err := Write(s); err == nil {
		t.Error("Q4_K with rows of 96 accepted")
	}
}

// TestFamilies writes a model of each family and has its graph builder
// build it: the tensors and metadata Write gives each are those the
// family reads.
func TestFamilies(t *testing.T) {
	for _, s := range []Shape{
		{Arch: "phi3", Layers: 2, Embd: 256, Heads: 4, HeadsKV: 2, FF: 256, Vocab: 300, Context: 64, Type: ggml.Q6_K, Seed: 3},
		{Arch: "phi3", Layers: 1, Embd: 64, Heads: 2, HeadsKV: 1, FF: 64, Vocab: 300, Context: 64, Type: ggml.F16, LongRoPE: true},
		{Arch: "qwen2moe", Layers: 2, Embd: 256, Heads: 4, HeadsKV: 4, FF: 512, Vocab: 300, Context: 64, Mix: "Q4_K_M", Seed: 4},
		{Arch: "qwen3", Layers: 1, Embd: 64, Heads: 2, HeadsKV: 1, FF: 64, Vocab: 300, Context: 64, Type: ggml.F32, Seed: 5},
	} {
		b, err := Write(s)
		if err != nil {
			t.Fatalf("%s: %v", s.Arch, err)
		}
		f, err := gguf.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		c, err := config.Load(f, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := arch.Build(f, c); err != nil {
			t.Errorf("%s: %v", s.Arch, err)
		}
	}
	bad := Shape{Arch: "phi3", Layers: 1, Embd: 64, Heads: 2, HeadsKV: 1, HeadDim: 16, FF: 64, Vocab: 300, Context: 64, Type: ggml.F32}
	if err := bad.Check(); err == nil {
		t.Error("phi3 with heads × head width != embd accepted")
	}
}
