package arch

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zrtdev/zrt/compiler/config"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/gguf"
	"github.com/zrtdev/zrt/format/support"
	"github.com/zrtdev/zrt/kernels"
)

// openSynthetic opens a synthetic model of ../shared (skipping without
// it), closed when the test ends, and its default config.
func openSynthetic(t *testing.T, name string) (*gguf.File, *config.Config) {
	t.Helper()
	f, err := gguf.Open(filepath.Join("..", "..", "..", "shared", "models", "synthetic", name))
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { f.Close() })
	cfg, err := config.Load(f, "", config.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	return f, cfg
}

// uniformSpec is a small valid spec: n full-attention layers with dense
// FFNs.
func uniformSpec(n int) *Spec {
	s := &Spec{Hparams: Hparams{NLayer: n, NEmbd: 64, NHead: 4, NHeadKV: 4, HeadDim: 16, NRot: 16, NFF: 128, NVocab: 300}}
	for l := range n {
		s.Layers = append(s.Layers, LayerSpec{Mixer: FullAttention{}, Attn: AttnShape{NHead: 4, NHeadKV: 4, HeadDim: 16}, KVFrom: l,
			Rope: Rope{Base: 10000, Scale: 1, NRot: 16}, FFN: DenseFFN{NFF: 128}})
	}
	return s
}

// A layer kind with no block is valid input zrt cannot build yet: it must
// be refused up front, as *support.Error, naming the layer and the kind.
func TestSpecRefusesUnbuiltMixers(t *testing.T) {
	if err := uniformSpec(3).check(); err != nil {
		t.Fatalf("valid spec: %v", err)
	}
	for _, c := range []struct {
		mixer Mixer
		want  string
	}{
		{Recurrent{Kind: "rwkv7"}, `unsupported layer mixer recurrent mixer "rwkv7" in layer 1`},
	} {
		s := uniformSpec(3)
		s.Layers[1].Mixer = c.mixer
		err := s.check()
		if !support.Is(err) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%v: got %v (support %v), want %q", c.mixer, err, support.Is(err), c.want)
		}
		if m, err := buildModel(nil, &config.Config{}, s); m != nil || !support.Is(err) {
			t.Errorf("%v: buildModel gave %v, %v", c.mixer, m, err)
		}
	}
}

// A spec that contradicts itself is the family's bug, not an unsupported
// model: a plain error.
func TestSpecRefusesInconsistentSpecs(t *testing.T) {
	for name, edit := range map[string]func(s *Spec){
		"layer count": func(s *Spec) { s.Layers = s.Layers[:1] },
		"no mixer":    func(s *Spec) { s.Layers[1].Mixer = nil },
		"no ffn":      func(s *Spec) { s.Layers[1].FFN = nil },
		"experts":     func(s *Spec) { s.Layers[1].FFN = MoEFFN{NExpert: 2, NExpertUsed: 4, NFFExpert: 8} },
		"n_rot":       func(s *Spec) { s.Layers[1].Rope.NRot = 18 },
		"window":      func(s *Spec) { s.Layers[1].Mixer = SlidingWindowAttention{} },
		"softcap":     func(s *Spec) { s.Layers[1].Softcap = -1 },
		"temperature": func(s *Spec) { s.Layers[1].Temp = AttnTemp{Scale: 0.1} },
		"embed scale": func(s *Spec) { s.EmbedScale = math.NaN() },
		"kv heads":    func(s *Spec) { s.Layers[1].Attn.NHeadKV = 3 },
		"kv source":   func(s *Spec) { s.Layers[0].KVFrom = 1 },
		"kv shape":    func(s *Spec) { s.Layers[1].KVFrom, s.Layers[1].Attn.HeadDim = 0, 8 },
	} {
		s := uniformSpec(2)
		edit(s)
		if err := s.check(); err == nil || support.Is(err) {
			t.Errorf("%s: got %v, want a plain error", name, err)
		}
	}
}

// Each family reads its models into uniform layers of its own kind, with
// the sizes the model-level hyperparameters record.
func TestFamilySpecs(t *testing.T) {
	for _, c := range []struct {
		model string
		fam   Family
		want  LayerSpec // sizes filled in from Hparams below
	}{
		{"stories260K.gguf", llama, LayerSpec{Mixer: FullAttention{}, FFN: DenseFFN{}}},
		{"synthetic/syn-qwen2-q8_0.gguf", qwen2, LayerSpec{Mixer: FullAttention{}, Rope: Rope{NeoX: true}, QKVBias: true, FFN: DenseFFN{}}},
		{"synthetic/syn-qwen3-q5km.gguf", qwen3, LayerSpec{Mixer: FullAttention{}, Rope: Rope{NeoX: true}, QKNorm: true, FFN: DenseFFN{}}},
		{"synthetic/syn-qwen3moe-q8_0.gguf", qwen3moe, LayerSpec{Mixer: FullAttention{}, Rope: Rope{NeoX: true}, QKNorm: true, FFN: MoEFFN{NormWeights: true}}},
		// LongRoPE: the default context (4096) is within the original
		// one, so the short factors.
		{"synthetic/syn-phi3-q6k.gguf", phi3, LayerSpec{Mixer: FullAttention{}, Rope: Rope{NeoX: true, Factors: "rope_factors_short"},
			FusedQKV: true, FFN: DenseFFN{FusedGateUp: true}}},
		// The shared expert's width is n_ff (expert_shared_feed_forward_length).
		{"synthetic/syn-qwen2moe-q5km.gguf", qwen2moe, LayerSpec{Mixer: FullAttention{}, Rope: Rope{NeoX: true}, QKVBias: true,
			FFN: MoEFFN{SharedGated: true}}},
	} {
		path := filepath.Join("../../../shared/models", c.model)
		f, err := gguf.Open(path)
		if err != nil {
			t.Logf("skip %s: %v", c.model, err)
			continue
		}
		defer f.Close()
		// At most 4096 tokens, the context these specs were written for:
		// phi3 takes its long RoPE factors past its original 4096.
		cfg, err := config.Load(f, "", config.Overrides{ContextLength: 4096})
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.fam(f, cfg)
		if err != nil {
			t.Fatalf("%s: %v", c.model, err)
		}
		h := &s.Hparams
		want := c.want
		want.Rope.Base, want.Rope.Scale, want.Rope.NRot = cfg.Rope.FreqBase, cfg.Rope.FreqScale, h.NRot
		if x, err := f.Float(h.Arch + ".rope.scaling.attn_factor"); err == nil {
			want.Rope.AttnFactor = x
		}
		switch ffn := want.FFN.(type) {
		case DenseFFN:
			ffn.NFF = h.NFF
			want.FFN = ffn
		case MoEFFN:
			ffn.NExpert, ffn.NExpertUsed, ffn.NFFExpert = h.NExpert, h.NExpertUsed, h.NFFExpert
			if ffn.SharedGated {
				ffn.SharedNFF = h.NFF
			}
			want.FFN = ffn
		}
		if len(s.Layers) != h.NLayer || h.NLayer == 0 {
			t.Fatalf("%s: %d layers, n_layer %d", c.model, len(s.Layers), h.NLayer)
		}
		for l, got := range s.Layers {
			want.Attn, want.KVFrom = AttnShape{NHead: h.NHead, NHeadKV: h.NHeadKV, HeadDim: h.HeadDim}, l
			if got != want {
				t.Errorf("%s layer %d: got %+v, want %+v", c.model, l, got, want)
			}
		}
	}
}

// phi3 picks LongRoPE's long factors, as llama.cpp does, once a sequence
// may outgrow the original pre-training context.
func TestPhi3LongFactors(t *testing.T) {
	f, cfg := openSynthetic(t, "syn-phi3-q6k.gguf")
	for ctx, want := range map[int]string{4096: "rope_factors_short", 4097: "rope_factors_long"} {
		cfg.ContextLength = ctx
		s, err := phi3(f, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Layers[0].Rope.Factors; got != want {
			t.Errorf("context %d: factors %q, want %q", ctx, got, want)
		}
	}
}

// placeKV packs the layers that own a cache into a page, widest first,
// each at a multiple of its width; sharing layers read their source's
// place, and widths that do not divide each other are refused.
func TestPlaceKV(t *testing.T) {
	s := uniformSpec(5) // KV width 64
	for _, l := range []int{1, 3} {
		s.Layers[l].Attn = AttnShape{NHead: 4, NHeadKV: 1, HeadDim: 32} // width 32
	}
	s.Layers[4].Attn, s.Layers[4].KVFrom = s.Layers[3].Attn, 3
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
	bytes, ring, err := s.placeKV(false, kernels.F16KV)
	if err != nil {
		t.Fatal(err)
	}
	// Layers 0 and 2 (64 wide) sit at columns 0 and 64, layers 1 and 3 (32
	// wide) at 128 and 160: 192 columns, three regions of 64 or six of 32.
	want := []kvPlace{{0, 3, false}, {4, 6, false}, {1, 3, false}, {5, 6, false}, {5, 6, false}}
	for l, p := range s.kv {
		if p != want[l] {
			t.Errorf("layer %d: place %+v, want %+v", l, p, want[l])
		}
	}
	if bytes != 192*2*16*2 || ring != 0 {
		t.Errorf("page of %d bytes (ring %d), want %d", bytes, ring, 192*2*16*2)
	}
	// A q8_0 cache: 34 bytes per 32 values, the same places (heads of 32,
	// whole blocks).
	for _, l := range []int{0, 2} {
		s.Layers[l].Attn = AttnShape{NHead: 4, NHeadKV: 2, HeadDim: 32}
	}
	q8 := kernels.KVTypes{K: ggml.Q8_0, V: ggml.Q8_0}
	if bytes, _, err = s.placeKV(false, q8); err != nil || bytes != 192/32*34*2*16 {
		t.Errorf("q8_0 page of %d bytes (%v), want %d", bytes, err, 192/32*34*2*16)
	}
	// q8_0 K beside f16 V: K rows, then V rows, padded to 64 bytes.
	mixed := kernels.KVTypes{K: ggml.Q8_0, V: ggml.F16}
	if bytes, _, err = s.placeKV(false, mixed); err != nil || bytes != (192/32*34*16+192*2*16+63)&^63 {
		t.Errorf("q8_0/f16 page of %d bytes (%v)", bytes, err)
	}
	s.Layers[1].Attn = AttnShape{NHead: 4, NHeadKV: 1, HeadDim: 24}
	if _, _, err := s.placeKV(false, kernels.F16KV); !support.Is(err) {
		t.Errorf("widths 64 and 24: got %v, want an unsupported-shape error", err)
	}
	// A head of 16 is no whole q8_0 block.
	s.Layers[1].Attn = AttnShape{NHead: 4, NHeadKV: 2, HeadDim: 16}
	if _, _, err := s.placeKV(false, q8); !support.Is(err) || !strings.Contains(err.Error(), "cache_type_k") {
		t.Errorf("q8_0 with a head of 16: got %v, want an unsupported error naming cache_type_k", err)
	}
}

// gemma4's file says which layers slide (an array), their own head width
// and rotation, the layers that share a cache and the global layers whose
// V is K.
func TestGemma4Spec(t *testing.T) {
	f, cfg := openSynthetic(t, "syn-gemma4-q8_0.gguf")
	s, err := gemma4(f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
	local, global := AttnShape{NHead: 4, NHeadKV: 2, HeadDim: 64}, AttnShape{NHead: 4, NHeadKV: 1, HeadDim: 128}
	for l, want := range []struct {
		attn        AttnShape
		from, nRot  int
		vIsK, slide bool
	}{{local, 0, 64, false, true}, {local, 1, 64, false, true}, {global, 2, 128, true, false},
		{local, 1, 64, false, true}, {local, 1, 64, false, true}, {global, 2, 128, false, false}} {
		ls := &s.Layers[l]
		_, slide := ls.Mixer.(SlidingWindowAttention)
		if ls.Attn != want.attn || ls.KVFrom != want.from || ls.Rope.NRot != want.nRot || ls.VIsK != want.vIsK || slide != want.slide ||
			!ls.QKNorm || !ls.VNorm || ls.QScale != 1 || ls.OutScale == 0 {
			t.Errorf("layer %d: %+v, want %+v", l, *ls, want)
		}
		if factors := ls.Rope.Factors == "rope_freqs"; factors == slide {
			t.Errorf("layer %d: factors %q (sliding %v)", l, ls.Rope.Factors, slide)
		}
	}
	if s.PerLayerInput != 32 || s.LogitSoftcap != 4 || s.EmbedScale != 16 {
		t.Errorf("per-layer input %d, softcap %v, embed scale %v", s.PerLayerInput, s.LogitSoftcap, s.EmbedScale)
	}
}

// windowRing rings the window layers only where that saves pages: not
// with swa_full, not without a window layer or a full one, not when the
// ring would be as long as a sequence. placeKV then puts the window
// layers in ring pages and the others in shared ones.
func TestWindowRing(t *testing.T) {
	spec := func(mixers ...Mixer) *Spec {
		s := uniformSpec(len(mixers))
		s.Hparams.MaxPages = 64 // 1024 tokens
		for l, m := range mixers {
			s.Layers[l].Mixer = m
		}
		return s
	}
	w := SlidingWindowAttention{Window: 100}
	for _, c := range []struct {
		name string
		s    *Spec
		cfg  config.Config
		want int
	}{
		{"mixed", spec(w, w, FullAttention{}), config.Config{PrefillChunk: 128}, (99+128+15)/16 + 1},
		{"swa_full", spec(w, FullAttention{}), config.Config{PrefillChunk: 128, SWAFull: true}, 0},
		{"no window", spec(FullAttention{}, FullAttention{}), config.Config{PrefillChunk: 128}, 0},
		{"all windows", spec(w, w), config.Config{PrefillChunk: 128}, 0},
		{"ring as long as a sequence", spec(w, FullAttention{}), config.Config{PrefillChunk: 1024}, 0},
	} {
		if got := c.s.windowRing(&c.cfg); got != c.want {
			t.Errorf("%s: ring of %d pages, want %d", c.name, got, c.want)
		}
	}
	s := spec(w, FullAttention{}, w)
	page, ring, err := s.placeKV(true, kernels.F16KV)
	if err != nil {
		t.Fatal(err)
	}
	want := []kvPlace{{0, 2, true}, {0, 1, false}, {1, 2, true}}
	for l, p := range s.kv {
		if p != want[l] {
			t.Errorf("layer %d: %+v, want %+v", l, p, want[l])
		}
	}
	if width := 64; page != width*2*16*2 || ring != 2*width*2*16*2 {
		t.Errorf("pages of %d and %d bytes, want one and two regions of width %d", page, ring, width)
	}
}

// TestHeadDim: the K head width defaults where absent, the V width
// defaults to it, and a V width unlike K's is refused naming its key
// (llama's plain keys and gemma4's _swa ones alike).
func TestHeadDim(t *testing.T) {
	for _, c := range []struct {
		suffix string
		keys   map[string]uint32
		want   int
		err    string
	}{
		{"", nil, 48, ""},
		{"", map[string]uint32{"key_length": 64}, 64, ""},
		{"_swa", map[string]uint32{"key_length_swa": 32, "value_length_swa": 32}, 32, ""},
		{"", map[string]uint32{"key_length": 64, "value_length": 32}, 0, "llama.attention.value_length"},
		{"_swa", map[string]uint32{"value_length_swa": 32}, 0, "llama.attention.value_length_swa"},
	} {
		w := gguf.NewWriter()
		for k, v := range c.keys {
			w.Set("llama.attention."+k, gguf.U32(v))
		}
		f, err := gguf.Parse(w.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		got, err := archMeta{f: f, arch: "llama"}.headDim(c.suffix, 48)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s %v: error %v, want one naming %s", c.suffix, c.keys, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s %v: %d, %v; want %d", c.suffix, c.keys, got, err, c.want)
		}
	}
}
