package synth

import (
	"fmt"
	"slices"
	"strings"

	"github.com/zrtdev/zrt/format/ggml"
)

// Limits of a shape Write accepts: wide enough for every released model
// shape, narrow enough that no size overflows the GGUF's 32-bit metadata
// or an int on the way.
const (
	maxLayers = 1024
	maxWidth  = 1 << 20 // embd, ffn, heads × head dim
	maxVocab  = 1 << 22
	maxCtx    = 1 << 24
)

// Archs are the architectures Write produces.
var Archs = []string{"llama", "qwen2", "qwen3", "phi3", "qwen2moe", "gemma2", "gemma3", "gemma4", "mistral3", "gpt-oss", "qwen35", "qwen35moe", "qwen3next"}

// Check reports the first field of s outside what Write can produce, by
// its command-line name.
func (s Shape) Check() error {
	s = s.withDefaults()
	if !slices.Contains(Archs, s.Arch) {
		return fmt.Errorf("synth: --arch %q: synth writes %s", s.Arch, strings.Join(Archs, ", "))
	}
	in := func(name string, v, lo, hi int) error {
		if v < lo || v > hi {
			return fmt.Errorf("synth: --%s %d out of range [%d, %d]", name, v, lo, hi)
		}
		return nil
	}
	for _, c := range []struct {
		name      string
		v, lo, hi int
	}{
		{"layers", s.Layers, 1, maxLayers},
		{"embd", s.Embd, 1, maxWidth},
		{"heads", s.Heads, 1, maxWidth},
		{"heads-kv", s.HeadsKV, 1, max(s.Heads, 1)},
		{"head-dim", s.HeadDim, 0, maxWidth},
		{"ffn", s.FF, 1, maxWidth},
		{"vocab", s.Vocab, 259, maxVocab}, // 3 specials + 256 byte tokens
		{"ctx", s.Context, 1, maxCtx},
	} {
		if err := in(c.name, c.v, c.lo, c.hi); err != nil {
			return err
		}
	}
	if !(s.BranchStd >= 0 && s.BranchStd <= 1) {
		return fmt.Errorf("synth: --branch-std %g out of range [0, 1]", s.BranchStd)
	}
	if _, ok := windows[s.Arch]; ok {
		if err := in("window", s.Window, 1, maxCtx); err != nil {
			return err
		}
	}
	if f := s.yarnFactor(); f > 0 && s.Context > maxCtx/f {
		return fmt.Errorf("synth: %s extends --ctx %d by YaRN's %d past %d", s.Arch, s.Context, f, maxCtx)
	}
	if _, ok := mixes[s.Mix]; s.Mix != "" && !ok {
		return fmt.Errorf("synth: mix %q: synth writes %s", s.Mix, strings.Join(Mixes, ", "))
	}
	if s.Type == ggml.MXFP4 && s.Arch != "gpt-oss" {
		return fmt.Errorf("synth: --type MXFP4 is for gpt-oss's experts")
	}
	if s.moe() {
		for _, c := range []struct {
			name      string
			v, lo, hi int
		}{
			{"experts", s.Experts, 1, 1024},
			{"experts-used", s.ExpertsUsed, 1, s.Experts},
			{"expert-ffn", s.ExpertFF, 1, maxWidth},
		} {
			if err := in(c.name, c.v, c.lo, c.hi); err != nil {
				return err
			}
		}
	}
	if s.Arch == "gemma4" {
		if err := s.checkGemma4(in); err != nil {
			return err
		}
	}
	if s.hybrid() {
		for _, c := range []struct {
			name      string
			v, lo, hi int
		}{
			{"ssm-state", s.SSMState, 1, maxWidth},
			{"ssm-groups", s.SSMGroups, 1, maxWidth},
			{"ssm-heads", s.SSMHeads, s.SSMGroups, maxWidth},
		} {
			if err := in(c.name, c.v, c.lo, c.hi); err != nil {
				return err
			}
		}
		if s.SSMHeads%s.SSMGroups != 0 || s.headDim()%4 != 0 {
			return fmt.Errorf("synth: %s needs --ssm-heads a multiple of --ssm-groups and a head width divisible by 4", s.Arch)
		}
	}
	hd := s.headDim()
	switch {
	case s.LongRoPE && (s.Arch != "phi3" || s.Context < 2 || 32*s.Context > maxCtx):
		return fmt.Errorf("synth: LongRoPE is for phi3, with a context in [2, %d]", maxCtx/32)
	case s.Arch == "phi3" && s.Heads*hd != s.Embd:
		return fmt.Errorf("synth: phi3 needs --heads × head width = --embd (%d × %d != %d)", s.Heads, hd, s.Embd)
	case s.HeadDim == 0 && s.Embd%s.Heads != 0:
		return fmt.Errorf("synth: --embd %d is not a multiple of --heads %d (or give --head-dim)", s.Embd, s.Heads)
	case hd%2 != 0:
		return fmt.Errorf("synth: head width %d must be even (RoPE rotates pairs)", hd)
	case s.Heads%s.HeadsKV != 0:
		return fmt.Errorf("synth: --heads %d is not a multiple of --heads-kv %d", s.Heads, s.HeadsKV)
	case s.Heads*hd > maxWidth:
		return fmt.Errorf("synth: --heads × head width = %d exceeds %d", s.Heads*hd, maxWidth)
	}
	block := 1
	if ti, ok := s.matrixType().Info(); ok {
		block = ti.BlockSize
	}
	for _, w := range []struct {
		name string
		v    int
	}{{"embd", s.Embd}, {"ffn", s.FF}, {"heads × head width", s.Heads * hd}, {"expert ffn", s.ExpertFF}, {"per-layer", s.PerLayer},
		{"ssm-heads × ssm-state", s.SSMHeads * s.SSMState}} {
		if w.v%block != 0 {
			return fmt.Errorf("synth: %s %d is not a multiple of %s's block of %d", w.name, w.v, s.matrixType(), block)
		}
	}
	if s.Arch == "gpt-oss" { // MXFP4 experts: rows of embd and expert ffn
		for _, w := range []struct {
			name string
			v    int
		}{{"embd", s.Embd}, {"expert ffn", s.ExpertFF}} {
			if w.v%32 != 0 {
				return fmt.Errorf("synth: %s %d is not a multiple of MXFP4's block of 32", w.name, w.v)
			}
		}
	}
	return nil
}

func (s Shape) headDim() int {
	if s.HeadDim != 0 {
		return s.HeadDim
	}
	return s.Embd / max(s.Heads, 1)
}

func (s Shape) matrixType() ggml.Type {
	if m, ok := mixes[s.Mix]; ok {
		return m.base
	}
	if s.Type == ggml.MXFP4 { // gpt-oss's experts; Q8_0 beside them
		return ggml.Q8_0
	}
	return s.Type
}

// PeakBytes estimates the memory Write needs for s: every tensor's float32
// values of the largest tensor, and the encoded file twice (tensors, then
// the assembled bytes). A shape must Check first.
func (s Shape) PeakBytes() int64 {
	file, largest := s.sizes()
	return 2*file + 4*largest
}

// FileBytes estimates the size of the GGUF Write makes of s, for progress
// reports. A shape must Check first.
func (s Shape) FileBytes() int64 {
	file, _ := s.sizes()
	return file
}

// sizes estimates the encoded file's bytes and the elements of the
// largest tensor.
func (s Shape) sizes() (file, largest int64) {
	E, F, V, L := int64(s.Embd), int64(s.FF), int64(s.Vocab), int64(s.Layers)
	Q, KV := int64(s.Heads*s.headDim()), int64(s.HeadsKV*s.headDim())
	perElem := 4.0
	if ti, ok := s.matrixType().Info(); ok {
		perElem = float64(ti.BlockBytes) / float64(ti.BlockSize)
	}
	elems := 2*E*V + L*(2*E*Q+2*E*KV+3*E*F)
	experts := int64(0)
	if s = s.withDefaults(); s.moe() {
		experts = L * 3 * E * int64(s.ExpertFF) * int64(s.Experts)
	}
	expertElem := perElem
	if s.Arch == "gpt-oss" {
		expertElem = 17.0 / 32 // MXFP4
	}
	file = int64(float64(elems)*perElem+float64(experts)*expertElem) + 64*V // + tokens
	return file, max(E*V, 2*E*F, E*int64(s.ExpertFF)*int64(s.Experts))
}

// checkGemma4 checks a gemma4 shape's per-layer input width and its
// shared-KV layers: llama.cpp points a sharing local layer at the layer
// two before the first sharing one and a global layer at the one just
// before it, so those must be local and global.
func (s Shape) checkGemma4(in func(string, int, int, int) error) error {
	if err := in("per-layer", s.PerLayer, 1, maxWidth); err != nil {
		return err
	}
	if err := in("shared-kv", s.SharedKV, 0, s.Layers-2); err != nil {
		return err
	}
	if s.SharedKV == 0 {
		return nil
	}
	from := s.Layers - s.SharedKV
	if local := s.gemma4().local; local[from-1] || !local[from-2] {
		return fmt.Errorf("synth: gemma4 --shared-kv %d: layer %d must be global (every fifth is) and layer %d local", s.SharedKV, from-1, from-2)
	}
	return nil
}
