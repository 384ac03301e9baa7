package bundle

import (
	"fmt"
	"math"
	"reflect"

	"github.com/zrtdev/zrt/asm/pm4"
	"github.com/zrtdev/zrt/format/ggml"
)

// Bounds on a graph file's numbers, far above any real model's and far
// below where products of them overflow an int64.
const (
	maxDim        = 1 << 24 // a hyperparameter: width, layers, vocabulary, context
	maxRegionSize = 1 << 50 // 1 PiB
)

// Check validates what the graph file's values mean, beyond the checksums
// and encodings DecodeGraph checks: hyperparameters that describe a
// model, regions whose sizes add up, weights inside their regions with
// the bytes their type and shape take, variants within the hyperparameters,
// relocations inside their streams and symbol tables, liveness rows
// inside the scratch region, hyperparameters that the weights' shapes
// agree with (checkShapes). Every error names the field. The loader
// runs it on every open, so nothing after it indexes with an unchecked
// value from the file.
func (g *Graph) Check() error {
	if err := g.Hparams.check(); err != nil {
		return fmt.Errorf("%w: hyperparameters: %v", ErrFormat, err)
	}
	if err := g.checkRegions(); err != nil {
		return fmt.Errorf("%w: memory plan: %v", ErrFormat, err)
	}
	for i := range g.Weights {
		if err := g.checkWeight(&g.Weights[i]); err != nil {
			return fmt.Errorf("%w: weight %q: %v", ErrFormat, g.Weights[i].Buffer, err)
		}
	}
	if err := g.checkShapes(); err != nil {
		return fmt.Errorf("%w: hyperparameters against the weights: %v", ErrFormat, err)
	}
	for i := range g.Variants {
		if err := g.checkVariant(&g.Variants[i]); err != nil {
			return fmt.Errorf("%w: variant %d: %v", ErrFormat, i, err)
		}
	}
	return nil
}

func (h *Hparams) check() error {
	v := reflect.ValueOf(h).Elem()
	for i := range v.NumField() {
		f, key := v.Field(i), v.Type().Field(i).Tag.Get("kv")
		switch f.Kind() {
		case reflect.Int:
			if f.Int() < 0 || f.Int() > maxDim {
				return fmt.Errorf("%s = %d out of range [0, %d]", key, f.Int(), maxDim)
			}
		case reflect.Float32:
			if x := f.Float(); math.IsNaN(x) || math.IsInf(x, 0) {
				return fmt.Errorf("%s = %v is not finite", key, x)
			}
		}
	}
	for _, f := range []struct {
		key string
		v   int
	}{{"n_vocab", h.NVocab}, {"n_embd", h.NEmbd}, {"n_layer", h.NLayer}, {"n_head", h.NHead}, {"n_head_kv", h.NHeadKV},
		{"head_dim", h.HeadDim}, {"max_slots", h.MaxSlots}, {"prefill_chunk", h.PrefillChunk}, {"context_length", h.ContextLength}} {
		if f.v < 1 {
			return fmt.Errorf("%s = %d, must be at least 1", f.key, f.v)
		}
	}
	switch {
	case !(h.Eps > 0):
		return fmt.Errorf("rms_norm_eps = %v, must be positive", h.Eps)
	case h.NHead%h.NHeadKV != 0:
		return fmt.Errorf("n_head = %d is not a multiple of n_head_kv = %d", h.NHead, h.NHeadKV)
	case h.NRot > h.HeadDim || h.NRot%2 != 0:
		return fmt.Errorf("n_rot = %d does not fit head_dim = %d", h.NRot, h.HeadDim)
	case h.NExpertUsed > h.NExpert:
		return fmt.Errorf("n_expert_used = %d exceeds n_expert = %d", h.NExpertUsed, h.NExpert)
	case h.RecurrentBytes < 0 || h.RecurrentBytes%4 != 0:
		return fmt.Errorf("recurrent_slot_bytes = %d, must be a non-negative multiple of 4", h.RecurrentBytes)
	case h.KVPageBytes < 0 || h.KVPageBytes%64 != 0:
		return fmt.Errorf("kv_page_bytes = %d, must be a non-negative multiple of 64", h.KVPageBytes)
	case h.KVWindowRing < 0 || h.KVWindowRing > h.MaxPages || h.KVWindowPageBytes < 0 || h.KVWindowPageBytes%64 != 0 ||
		(h.KVWindowRing == 0) != (h.KVWindowPageBytes == 0):
		return fmt.Errorf("kv_window_ring = %d, kv_window_page_bytes = %d: want both 0, or a ring of at most max_pages = %d pages of a multiple of 64 bytes",
			h.KVWindowRing, h.KVWindowPageBytes, h.MaxPages)
	case h.MaxPages != (h.ContextLength+15)/16:
		return fmt.Errorf("max_pages = %d, context_length = %d needs %d", h.MaxPages, h.ContextLength, (h.ContextLength+15)/16)
	}
	return nil
}

func (g *Graph) checkRegions() error {
	seen := map[string]bool{}
	var total int64
	for _, r := range g.Regions {
		if seen[r.Name] {
			return fmt.Errorf("region %q appears twice", r.Name)
		}
		seen[r.Name] = true
		if r.Bytes < 0 || r.Bytes > maxRegionSize {
			return fmt.Errorf("region %q of %d bytes (at most %d)", r.Name, r.Bytes, int64(maxRegionSize))
		}
		if r.Align < 1 || r.Align > 1<<30 || r.Align&(r.Align-1) != 0 {
			return fmt.Errorf("region %q alignment %d is not a power of two", r.Name, r.Align)
		}
		if total += r.Bytes; total > maxRegionSize {
			return fmt.Errorf("regions add up to more than %d bytes", int64(maxRegionSize))
		}
	}
	return nil
}

func (g *Graph) checkWeight(w *Weight) error {
	if int(w.Region) >= len(g.Regions) {
		return fmt.Errorf("region %d of %d", w.Region, len(g.Regions))
	}
	r := g.Regions[w.Region]
	if w.Offset < 0 || w.Bytes < 0 || w.Offset > r.Bytes || w.Bytes > r.Bytes-w.Offset {
		return fmt.Errorf("[%d, +%d) outside region %q of %d bytes", w.Offset, w.Bytes, r.Name, r.Bytes)
	}
	t := ggml.Type(w.Type)
	if !t.Known() || len(w.Dims) == 0 || len(w.Dims) > 4 {
		return fmt.Errorf("type %d with %d dims", w.Type, len(w.Dims))
	}
	rows := int64(1)
	for _, d := range w.Dims[1:] {
		if d < 1 || d > maxRegionSize/rows {
			return fmt.Errorf("dims %v", w.Dims)
		}
		rows *= d
	}
	rb, err := t.RowBytes(w.Dims[0])
	if err != nil || w.Dims[0] < 1 || rb > maxRegionSize/rows || rb*rows != w.Bytes {
		// A weight may concatenate several tensors (Tensor "a+b") but
		// always holds exactly its shape's bytes.
		return fmt.Errorf("%d bytes, its %s shape %v takes another size", w.Bytes, t, w.Dims)
	}
	return nil
}

func (g *Graph) checkVariant(v *Variant) error {
	h := &g.Hparams
	switch v.Stage {
	case StagePrefill:
		if v.Rows < 1 || int(v.Rows) > h.PrefillChunk {
			return fmt.Errorf("prefill rows %d outside [1, prefill_chunk = %d]", v.Rows, h.PrefillChunk)
		}
	case StageDecode, StageDraft:
		if v.Rows < 1 || v.Rows > v.Slots {
			return fmt.Errorf("decode rows %d outside [1, slots = %d]", v.Rows, v.Slots)
		}
	default:
		return fmt.Errorf("stage %d, which this reader does not know (1 prefill, 2 decode, 3 draft): rebuild the bundle with this zrtc", v.Stage)
	}
	if v.Slots < 1 || int(v.Slots) > h.MaxSlots {
		return fmt.Errorf("slots %d outside [1, max_slots = %d]", v.Slots, h.MaxSlots)
	}
	for i, r := range v.Relocs {
		if int(r.Word) >= len(v.Words) {
			return fmt.Errorf("relocation %d patches dword %d of a %d-dword stream", i, r.Word, len(v.Words))
		}
		n := map[pm4.Space]int{pm4.SpaceRegion: len(g.Regions), pm4.SpaceKernel: len(g.Kernels)}[r.Sym.Space]
		if int(r.Sym.Index) >= n { // an unknown space has n = 0
			return fmt.Errorf("relocation %d names %v", i, r.Sym)
		}
		if r.Sym.Space == pm4.SpaceRegion && r.Sym.Addend > uint64(g.Regions[r.Sym.Index].Bytes) {
			return fmt.Errorf("relocation %d points %d bytes into region %q of %d", i, r.Sym.Addend, g.Regions[r.Sym.Index].Name, g.Regions[r.Sym.Index].Bytes)
		}
	}
	if v.ScratchBytes < 0 || v.ScratchBytes > maxRegionSize {
		return fmt.Errorf("scratch of %d bytes", v.ScratchBytes)
	}
	for _, l := range v.Liveness {
		if l.Physical < -1 || l.Bytes < 0 || (l.Physical >= 0 && (l.Offset < 0 || l.Offset > v.ScratchBytes || l.Bytes > v.ScratchBytes-l.Offset)) {
			return fmt.Errorf("register %q at [%d, +%d) outside the %d-byte scratch", l.Name, l.Offset, l.Bytes, v.ScratchBytes)
		}
	}
	return nil
}
