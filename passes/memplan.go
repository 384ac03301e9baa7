package passes

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/zrtdev/zrt/compiler/ir"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/kernels"
)

// Heap is where a region lives (seed 000 §10.1).
type Heap uint8

// Heaps.
const (
	DeviceLocal Heap = iota + 1 // weights, KV, scratch
	BAR                         // small host-readable device memory: logits, tokens, fence
	HostVisible                 // system memory: the request table
)

var heapNames = map[Heap]string{DeviceLocal: "DEVICE_LOCAL", BAR: "BAR", HostVisible: "HOST_VISIBLE"}

func (h Heap) String() string { return heapNames[h] }

// MarshalText makes heaps readable in the JSON export.
func (h Heap) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// Region is one contiguous allocation of the memory plan.
type Region struct {
	Name  string
	Heap  Heap
	Bytes int64
	Align int64
}

// Placement puts one weight buffer in a weights region.
type Placement struct {
	Buffer  string   // logical name
	Sources []string // GGUF tensors whose bytes, concatenated, fill it
	Type    ggml.Type
	Dims    []int64
	Region  int
	Offset  int64
	Bytes   int64
}

// MemPlan is the static memory map of a compiled model.
type MemPlan struct {
	Regions []Region
	Weights []Placement
	// Well-known regions.
	KV, IO, Logits, Tokens, Fence, Scratch int
	// Recurrent is the recurrent-state region, -1 when the model has none;
	// KVWindow and IOWindow the window layers' ring and its request
	// table, -1 when the model keeps every layer in KV.
	Recurrent, KVWindow, IOWindow int
	// PeakBytes and NaiveBytes summarize scratch over variants: the lower
	// bound and one buffer per register.
	PeakBytes, NaiveBytes int64
	// KVTypeK and KVTypeV are the KV cache's element types (f16, q8_0),
	// KVPageBytes one 16-token page of it and KVPages the pages of the
	// kv region: what its bytes are made of.
	KVTypeK, KVTypeV string
	KVPageBytes      int64
	KVPages          int64
}

// RegionIndex returns the index of the named region.
func (p *MemPlan) RegionIndex(name string) (int, bool) {
	for i, r := range p.Regions {
		if r.Name == name {
			return i, true
		}
	}
	return 0, false
}

// JSON exports the plan.
func (p *MemPlan) JSON() ([]byte, error) { return json.MarshalIndent(p, "", "  ") }

// Alignment of weight tensors inside their region, and of regions in the pack.
const (
	WeightAlign = 256
	PageAlign   = 4096
)

func memplan(_ context.Context, u *Unit) error {
	p := &MemPlan{}
	add := func(name string, heap Heap, bytes int64) int {
		p.Regions = append(p.Regions, Region{Name: name, Heap: heap, Bytes: bytes, Align: PageAlign})
		return len(p.Regions) - 1
	}
	// Weights: one region per layer class, in first-use order over the
	// graphs, each tensor once (variants share weights). Two buffers of
	// the same bytes — a tied LM head, which is the embedding table — get
	// one placement's storage, so the pack holds the table once.
	classRegion := map[string]int{}
	placed := map[string]bool{}
	stored := map[string]Placement{} // the bytes' identity → where they are
	for _, g := range u.Graphs {
		for _, bi := range referencedBuffers(g) {
			b := &g.Buffers[bi]
			if b.Class != ir.Weight || placed[b.Name] {
				continue
			}
			placed[b.Name] = true
			src := b.SourceTensors()
			same := fmt.Sprintf("%s|%d|%d", strings.Join(src, "+"), b.Type, b.Bytes)
			if at, ok := stored[same]; ok {
				p.Weights = append(p.Weights, Placement{Buffer: b.Name, Sources: src, Type: b.Type, Dims: b.Dims,
					Region: at.Region, Offset: at.Offset, Bytes: b.Bytes})
				continue
			}
			ri, ok := classRegion[b.LayerClass]
			if !ok {
				ri = add(kernels.RegionWeights+b.LayerClass, DeviceLocal, 0)
				classRegion[b.LayerClass] = ri
			}
			r := &p.Regions[ri]
			off := alignUp(r.Bytes, WeightAlign)
			p.Weights = append(p.Weights, Placement{Buffer: b.Name, Sources: src, Type: b.Type, Dims: b.Dims,
				Region: ri, Offset: off, Bytes: b.Bytes})
			stored[same] = p.Weights[len(p.Weights)-1]
			r.Bytes = off + b.Bytes
		}
	}
	p.KV = add(kernels.RegionKV, DeviceLocal, u.State.KV)
	kv := u.kvTypes()
	p.KVTypeK, p.KVTypeV, p.KVPageBytes = kernels.KVTypeName(kv.K), kernels.KVTypeName(kv.V), u.State.KVPageBytes
	if p.KVPageBytes > 0 {
		p.KVPages = u.State.KV / p.KVPageBytes
	}
	p.IO = add(kernels.RegionIO, HostVisible, u.State.IO)
	p.Logits = add(kernels.RegionLogits, BAR, u.State.Logits)
	p.Tokens = add(kernels.RegionTokens, BAR, u.State.Tokens)
	p.Fence = add(kernels.RegionFence, BAR, 8)
	// Scratch is shared by the variants: only one replays at a time.
	scratch := int64(0)
	for i, pm := range u.Physical {
		off := int64(0)
		pm.PhysicalOffsets = make([]int64, len(pm.PhysicalSizes))
		for j, sz := range pm.PhysicalSizes {
			pm.PhysicalOffsets[j] = off
			off += sz
		}
		pm.ScratchBytes = off
		scratch = max(scratch, off)
		p.PeakBytes = max(p.PeakBytes, u.Liveness[i].PeakBytes)
		p.NaiveBytes = max(p.NaiveBytes, u.Liveness[i].NaiveBytes)
		if err := CheckNoOverlap(u.Graphs[i], u.Liveness[i], pm); err != nil {
			return fmt.Errorf("variant %s: %w", u.Graphs[i].Key, err)
		}
	}
	p.Scratch = add(kernels.RegionScratch, DeviceLocal, scratch)
	p.Recurrent, p.KVWindow, p.IOWindow = -1, -1, -1
	if u.State.Recurrent > 0 {
		p.Recurrent = add(kernels.RegionRecurrent, DeviceLocal, u.State.Recurrent)
	}
	if u.State.KVWindow > 0 {
		p.KVWindow = add(kernels.RegionKVWindow, DeviceLocal, u.State.KVWindow)
		p.IOWindow = add(kernels.RegionIOWindow, HostVisible, u.State.IO)
	}
	u.Plan = p
	return nil
}

// referencedBuffers lists, in first-use order, the buffers instructions
// use: fusion leaves the weights it concatenated unreferenced, and those
// must not be placed twice.
func referencedBuffers(g *ir.Graph) []int {
	seen := map[int]bool{}
	var out []int
	for _, in := range g.Insts {
		for _, o := range append(append([]ir.Operand(nil), in.Reads...), in.Writes...) {
			if o.Kind == ir.BufOperand && !seen[o.ID] {
				seen[o.ID] = true
				out = append(out, o.ID)
			}
		}
	}
	return out
}

// CheckNoOverlap fails when two registers overlap in both lifetime and
// storage. It always runs: a wrong allocation would corrupt activations
// silently.
func CheckNoOverlap(g *ir.Graph, lv *Liveness, pm *PhysicalMap) error {
	type span struct {
		r, def, last int
		lo, hi       int64
	}
	var spans []span
	for r := range g.Regs {
		if lv.Def[r] < 0 {
			continue
		}
		p := pm.RegisterToPhysical[r]
		if p < 0 {
			return fmt.Errorf("register %%%s has no physical buffer", g.Regs[r].Name)
		}
		lo := pm.PhysicalOffsets[p]
		if g.Regs[r].Bytes() > pm.PhysicalSizes[p] {
			return fmt.Errorf("register %%%s (%d B) does not fit physical %d (%d B)", g.Regs[r].Name, g.Regs[r].Bytes(), p, pm.PhysicalSizes[p])
		}
		spans = append(spans, span{r, lv.Def[r], lv.RegisterLastRead[r], lo, lo + g.Regs[r].Bytes()})
	}
	for i := range spans {
		for j := i + 1; j < len(spans); j++ {
			a, b := spans[i], spans[j]
			if a.def <= b.last && b.def <= a.last && a.lo < b.hi && b.lo < a.hi {
				return fmt.Errorf("registers %%%s [%d,%d] and %%%s [%d,%d] share scratch bytes", g.Regs[a.r].Name, a.def, a.last, g.Regs[b.r].Name, b.def, b.last)
			}
		}
	}
	return nil
}
