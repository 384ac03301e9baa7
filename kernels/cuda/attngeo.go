package cuda

import (
	"fmt"
	"strings"
)

// AttnGeometry is how a split decode attention launch (flash_attn's and
// flash_attn_ext's _split entry, fa.cuh and faq.cuh) spreads a row's keys:
// Warps a block, Splits blocks a (head group, row) along the grid's z,
// each taking a range of the keys, and Stages a warp of the staged walk
// (0: the register walk). The kernels read all three from the launch
// (blockDim, gridDim.z, the dynamic shared memory), so a geometry is data
// of the launch, no PTX of its own. The warps and the splits change the
// order of the softmax's sums (other bits, within the split tests'
// tolerances); the stages never do.
type AttnGeometry struct {
	Warps, Splits, Stages uint32
}

// String is the geometry as ParseAttnGeometry reads it: w8z16st1.
func (g AttnGeometry) String() string { return fmt.Sprintf("w%dz%dst%d", g.Warps, g.Splits, g.Stages) }

// ParseAttnGeometry reads a geometry written as String writes it
// (w8z16st1: 8 warps a block, 16 blocks a head group, 1 stage a warp).
// Whether a launch can take it is AttnSplitLaunch's check.
func ParseAttnGeometry(s string) (AttnGeometry, error) {
	var g AttnGeometry
	if n, err := fmt.Sscanf(s, "w%dz%dst%d", &g.Warps, &g.Splits, &g.Stages); err != nil || n != 3 || g.String() != s {
		return g, fmt.Errorf("cuda: attention geometry %q: want warps, blocks a head group and stages a warp as w8z16st1", s)
	}
	return g, nil
}

// AttnKey is what a split decode attention launch's geometry is chosen
// by: the cache's type (Quant: Q8_0, else F16), the heads' width, the
// query heads a block serves (faGroup), the launch's blocks before the
// split (head groups × rows) and the multiprocessors it is shaped for.
// The row's length is not in it: one captured graph serves every length
// up to the context's (the ranges follow the row's position on the
// device), so a geometry is chosen for the long rows it is measured at.
type AttnKey struct {
	Quant                       bool
	HeadDim, Group, Blocks, SMs uint32
}

// attnTable holds the geometries measured better than attnRule's for
// the shapes named (TestDecodeAttentionSweep -attnsweep in runtime/cuda
// times every candidate at 32768 and 130000 keys). A shape not in it
// takes attnRule's. The sweep on an H200 (round 25a, µs a layer of one
// row's attention, the rule's geometry → the row's):
//
//   - llama 7B shape, F16 cache (32 blocks of one head): 16 warps and 4
//     blocks a head → 8 warps and 8 blocks, two blocks a multiprocessor:
//     153.1 → 133.6 at 32768 keys, 559.2 → 493.8 at 130000.
//   - llama 7B shape, q8_0 cache: the same with two stages a warp: 124.2
//     → 121.5 and 430.7 → 428.9.
//
// The qwen3 0.6B shape (8 blocks of two heads) keeps the rule's 16 warps,
// 16 blocks and a stage: over an F16 cache 8 warps and 32 blocks took
// 47.5 µs against 48.9 at 32768 keys (141.3 against 139.5 at 130000), but
// end to end (zrt-run bench -p 0 -n 128 -d 32768, same run) tg128 fell
// from 458.14 to 453.34 tok/s; over a q8_0 cache the best (8 warps, 32
// blocks, two stages) was 2% and 6% faster in the kernel, not measured
// end to end, and left as it is.
var attnTable = map[AttnKey]AttnGeometry{
	{Quant: false, HeadDim: 128, Group: 1, Blocks: 32, SMs: 132}: {Warps: 8, Splits: 8, Stages: 1},
	{Quant: true, HeadDim: 128, Group: 1, Blocks: 32, SMs: 132}:  {Warps: 8, Splits: 8, Stages: 2},
}

// attnGeometry is the geometry of a split launch of key k whose
// unsplit launch has warps warps (faWarps): attnTable's row for k, else
// attnRule's.
func attnGeometry(k AttnKey, warps uint32) AttnGeometry {
	if g, ok := attnTable[k]; ok {
		return g
	}
	return attnRule(k, warps)
}

// attnRule is the geometry without a measured row: the unsplit launch's
// warps (so that a row too short to split has the main entry's bits),
// as many blocks a head group as fill the multiprocessors once
// (faSplits), and one stage a warp where heads of 128 and 256 have a
// staged walk and the block stays within faqMaxShared (faqStaged,
// faStagedShared).
func attnRule(k AttnKey, warps uint32) AttnGeometry {
	g := AttnGeometry{Warps: warps, Splits: faSplitsFor(k.Blocks, k.SMs)}
	base := faShared(k.Group, warps, k.HeadDim)
	stage := faStage
	if k.Quant {
		base, stage = faqShared(k.Group, warps, k.HeadDim), faqStage
	}
	if withStage(base, warps, k.HeadDim, stage) > (base+15)&^15 {
		g.Stages = 1
	}
	return g
}

// check reports why geometry g cannot run a split launch of key k: the
// block's warps must load a head's query (32·warps ≥ its width), merge
// its group's heads (a warp each) and stay within FA_MAX_WARPS; the
// splits within FA_MAX_SPLIT (a lane each in the merge); the stages
// within AttnMaxStages, none for heads without a staged walk, and the
// block's shared memory within faqMaxShared.
func (g AttnGeometry) check(k AttnKey) error {
	switch {
	case g.Warps < 1 || g.Warps > faMaxWarps || 32*g.Warps < k.HeadDim || g.Warps < k.Group:
		return fmt.Errorf("cuda: split decode attention: %d warps for heads of %d in groups of %d", g.Warps, k.HeadDim, k.Group)
	case g.Splits < 2 || g.Splits > faMaxSplit:
		return fmt.Errorf("cuda: split decode attention: %d blocks a head group, want 2 to %d", g.Splits, faMaxSplit)
	case g.Stages > AttnMaxStages || g.Stages > 0 && k.HeadDim != 128 && k.HeadDim != 256:
		return fmt.Errorf("cuda: split decode attention: %d stages a warp for heads of %d", g.Stages, k.HeadDim)
	case attnShared(k, g) > faqMaxShared:
		return fmt.Errorf("cuda: split decode attention: %d bytes of shared memory a block, over %d", attnShared(k, g), faqMaxShared)
	}
	return nil
}

// attnShared is a block's shared memory under geometry g.
func attnShared(k AttnKey, g AttnGeometry) int {
	if k.Quant {
		return (faqShared(k.Group, g.Warps, k.HeadDim)+15)&^15 + int(g.Warps*g.Stages)*faqStage
	}
	return (faShared(k.Group, g.Warps, k.HeadDim)+15)&^15 + int(g.Warps*g.Stages)*faStage
}

// splitAttention turns a decode attention launch l of rows rows (the
// main entry: a block per head group and row) into its _split launch
// under geometry g: g's warps, shared memory and blocks a head group,
// and the staging buffer of their partial states.
func splitAttention(l Launch, k AttnKey, g AttnGeometry, rows, nHead uint32) Launch {
	l.Block[0] = 32 * g.Warps
	l.Shared = attnShared(k, g)
	l.Grid[2], l.Entry, l.Staged = g.Splits, EntrySplit, faStaged(rows, nHead, k.HeadDim, g.Splits)
	return l
}

// AttnSplitLaunch is the _split launch of a one-row or few-row decode
// attention that Shape splits (instance flash_attn or flash_attn_ext, or
// a Q8_0 cache's; spec its specialization values) under geometry g,
// for tests and the speed sweep that launch geometries other than
// Shape's. It returns an error naming the problem where g cannot run the
// launch.
func AttnSplitLaunch(instance string, spec []uint32, rows int, g AttnGeometry) (Launch, error) {
	l, err := Shape(instance, []uint32{0}, spec, rows, false)
	if err != nil {
		return l, err
	}
	if l.Entry != EntrySplit {
		return l, fmt.Errorf("cuda: %s at %d rows: not split (the %q entry)", instance, rows, l.Entry.Suffix())
	}
	return AttnResplit(l, instance, spec, g)
}

// AttnResplit is split decode attention launch l (of instance and spec,
// as Shape or OneRowShape gave it) under geometry g: g's warps, shared
// memory and blocks a head group, l's head groups and rows, and a staging
// buffer of partial states for as many rows as l's. OneRowShape's launches
// of several rows split as one row does, which Shape at their rows need
// not (Options.AttnGeometry's override takes both).
func AttnResplit(l Launch, instance string, spec []uint32, g AttnGeometry) (Launch, error) {
	if l.Entry != EntrySplit || l.Grid[2] == 0 {
		return l, fmt.Errorf("cuda: %s: not a split launch (the %q entry)", instance, l.Entry.Suffix())
	}
	k := attnKey(instance, spec, l.Grid[1])
	if err := g.check(k); err != nil {
		return l, err
	}
	row := faStaged(1, spec[1], spec[3], l.Grid[2]) - faStaged(0, spec[1], spec[3], l.Grid[2]) // one row's partial states
	return splitAttention(l, k, g, uint32((l.Staged-faStaged(0, spec[1], spec[3], l.Grid[2]))/row), spec[1]), nil
}

// AttnChosen is the geometry Shape gives a split decode attention of
// rows rows (the table's or the rule's), and whether it is a table row.
func AttnChosen(instance string, spec []uint32, rows int) (AttnGeometry, bool, error) {
	l, err := Shape(instance, []uint32{0}, spec, rows, false)
	if err != nil {
		return AttnGeometry{}, false, err
	}
	if l.Entry != EntrySplit {
		return AttnGeometry{}, false, fmt.Errorf("cuda: %s at %d rows: not split (the %q entry)", instance, rows, l.Entry.Suffix())
	}
	_, ok := attnTable[attnKey(instance, spec, uint32(rows))]
	return AttnGeometry{Warps: l.Block[0] / 32, Splits: l.Grid[2], Stages: attnStages(instance, spec, l)}, ok, nil
}

// attnKey is the key of a decode attention launch of instance at rows
// rows, shaped for mmtSMs multiprocessors.
func attnKey(instance string, spec []uint32, rows uint32) AttnKey {
	_, typ, _ := strings.Cut(instance, ".")
	g := faGroup(spec[1], spec[2], spec[3])
	return AttnKey{Quant: typ != "", HeadDim: spec[3], Group: g, Blocks: spec[1] / g * rows, SMs: mmtSMs}
}

// attnStages is the stages a warp launch l of instance gives its warps.
func attnStages(instance string, spec []uint32, l Launch) uint32 {
	k := attnKey(instance, spec, l.Grid[1])
	w := l.Block[0] / 32
	at := attnShared(k, AttnGeometry{Warps: w})
	stage := faStage
	if k.Quant {
		stage = faqStage
	}
	if l.Shared <= at {
		return 0
	}
	return uint32((l.Shared - at) / (int(w) * stage))
}
