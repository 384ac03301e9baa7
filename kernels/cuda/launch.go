// Package cuda describes T-CUDA's kernels to the Go side: the CUDA C
// sources next to this file (one .cu per catalog instance, written by
// kernels/cuda/gen from the family table in families.go, each including
// its family's source family/<family>.cuh) are compiled to PTX for each
// CUDA architecture by `make ptx` into the archive in ptx/, which zrtc
// embeds in kernel blobs (package ptx). This file holds the launch shapes
// the kernels are written for (each family's Geometry, geometry.go, is
// built from them), shared by zrtc (which records the block size in each
// blob's header) and the CUDA tier (which launches them).
//
// Rows are data: every kernel is launched for the variant's row capacity
// and its blocks for rows at or past the request table's n_rows exit at
// once, so one captured graph serves any number of active rows.
package cuda

import (
	"fmt"
	"strings"
)

// Launch is the shape of one kernel launch.
type Launch struct {
	Grid, Block [3]uint32
	Shared      int // dynamic shared memory bytes
	// Entry is which of the instance's entry points runs.
	Entry EntryPoint
	// Staged is the bytes of device memory the launch reads its activation
	// rows from, quantized once for the whole matrix by the Stage launch
	// (the instance's EntryStage) just before it; 0 and nil when it
	// quantizes its own. Both take that buffer's address as one more
	// parameter, after the others. The split decode attention
	// (EntrySplit) has Staged and no Stage: its blocks leave their
	// partial softmax states there, and its counters lie where split-k's
	// do (the buffer's first mmtCounters words, zero between launches).
	Staged int
	Stage  *Launch
	// Rest, for flash_attn's tensor-core prefill tile, which takes only
	// prompt rows, is the launch (EntryRest) of the same dispatch for the
	// step's other rows: the decode rows a serving step mixes in, each of
	// its own slot, which the tile would take a pass over the keys each.
	Rest *Launch
}

// EntryPoint names one of an instance's entry points: Entry(instance) plus
// its suffix (the integer matrix families have several: family/matmul.cuh).
type EntryPoint uint8

// The entry points.
const (
	EntryMain    EntryPoint = iota // the instance's kernel; for matrices, the matrix-vector one
	EntryTile                      // _tile: the multi-row kernel, on tensor cores where the type has them (and flash_attn's prefill)
	EntryDP4A                      // _dp4a: the dp4a multi-row kernel of a type that has tensor-core tiles (lm_head's prefill, Q8_0 of k not a multiple of 256)
	EntryStage                     // _stage: quantizes the activation rows once for the tensor-core tiles (Launch.Staged)
	EntryTile16                    // _tile16: the tensor-core kernel's 16-row tile, for steps of up to 64 rows (decode)
	EntryTile32                    // _tile32: its 32-row tile, for steps of 33 to 64 rows
	EntryLean                      // _lean: flash_attn's decode kernel for one head a block in fewer registers, for launches of many blocks
	EntryMasked                    // _masked: argmax's choice under a token mask, which the tier launches after a step's graph for constrained rows
	EntryRest                      // _rest: flash_attn's main kernel for the rows that are no prompt's, beside its _tile (Launch.Rest)
	EntryRows                      // _rows: the matrix-vector kernel taking mmvRows rows a block, for steps of a few rows
	EntrySplit                     // _split: the attention families' decode kernel with a long row's keys split over blocks (faSplits), Launch.Staged its partial states
	EntryPeer                      // _peer: matmul's matrix-vector kernel with the one-shot all-reduce after it taken in, which runtime/cuda launches in place of the pair
	EntryRows4                     // _rows4: the matrix-vector kernel taking mmvRowsWide rows a block, for the steps of one-row bits of 3 rows and more (OneRowShape)
	EntrySampled                   // _sampled: argmax's draw at a temperature, which the tier launches after a step's graph for sampled rows
	NumEntries
)

// Suffix is the entry point's suffix to the instance's name.
func (e EntryPoint) Suffix() string {
	return [...]string{"", "_tile", "_dp4a", "_stage", "_tile16", "_tile32", "_lean", "_masked", "_rest", "_rows", "_split", "_peer", "_rows4", "_sampled"}[e]
}

// mmWarps is MM_WARPS in common.cuh: output features per block of the
// matrix kernels, one per warp.
const mmWarps = 8

// BlockSize is the threads per block of a kernel family.
func BlockSize(family string) uint32 { return 256 }

func ceilDiv(a, b uint32) uint32 { return (a + b - 1) / b }

// mmqTypes are the weight types whose matmul and lm_head instances take
// the integer path (mmq.cuh): their block size in elements and the lanes
// that share a block (Fast<T>::TPB). mmqRows is MM_MR there: activation
// rows per block of the multi-row (tile) kernel.
var mmqTypes = map[string]struct{ bs, tpb uint32 }{
	"q8_0": {32, 4}, "q4_0": {32, 4}, "q4_k": {256, 8}, "q6_k": {256, 8},
}

const mmqRows = 8

// mmqMaxBlocks bounds the grid of the multi-row (tile) kernel: two
// blocks of eight warps on each of an H100/H200's 132 multiprocessors, so
// the activation rows are quantized by few blocks (each block quantizes
// its MM_MR rows again, a prologue of sequential block reductions) and
// every warp has several output features to stream. Warps stride over the
// features. Measured on an H100 (zrt-run bench --tier cuda --slots 16,64
// -p 128 -n 128), S_TG at B = 16 / 64 with 1, 2, 3, 4 and 8 blocks per
// multiprocessor: qwen3 0.6B 2 511 / 3 720, 3 015 / 5 038, 2 924 / 4 023,
// 2 950 / 4 556, 2 467 / 3 811; llama 110M 10 301 / 14 960, 12 185 /
// 20 185, 10 073 / 14 999, 10 488 / 16 008, 8 942 / 14 838. Prefill and
// single-row decode do not change.
const mmqMaxBlocks = 2 * 132

// mmqWidth is the grid width for n output features when the grid has
// groups rows of blocks: as few blocks as give every warp the same number
// of features within the bound, shared by the groups.
func mmqWidth(n, groups uint32) uint32 {
	perWarp := ceilDiv(ceilDiv(n, mmWarps), max(mmqMaxBlocks/groups, 1))
	return ceilDiv(n, mmWarps*perWarp)
}

// mmvWarps is MMV_WARPS in mmq.cuh, the warps of a matrix-vector block,
// and mmvMaxBlocks bounds its grid: two such blocks on each of the 132
// multiprocessors, one wave. Fewer, larger blocks than the tile kernel's:
// every block quantizes the activation row again, so each one done per
// multiprocessor instead of four saves L2 reads and prologue latency.
const (
	mmvWarps     = 16
	mmvMaxBlocks = 2 * 132
)

// mmvShape is the launch of the matrix-vector kernel (mmv in mmq.cuh) for
// a single-row variant: blocks of RPB output features × WPR warps each.
// WPR doubles (up to 8) while the whole matrix still fits one pass of
// mmvMaxBlocks blocks and every warp keeps at least a full warp's worth of
// weight blocks, so small matrices spread over more multiprocessors and
// their rows' loads finish sooner.
func mmvShape(typ string, k, n uint32) (grid, block [3]uint32) {
	g := mmqTypes[typ]
	lanes := k / g.bs * g.tpb // lanes one pass over a row keeps busy
	wpr := uint32(1)
	for wpr < 8 && n*wpr*2 <= mmvMaxBlocks*mmvWarps && lanes >= 64*wpr {
		wpr *= 2
	}
	rpb := mmvWarps / wpr
	blocks := ceilDiv(n, rpb)
	if blocks > mmvMaxBlocks {
		blocks = ceilDiv(n, rpb*ceilDiv(blocks, mmvMaxBlocks))
	}
	return [3]uint32{blocks, 1, 1}, [3]uint32{32 * wpr, rpb, 1}
}

// mmtFeatures is MT_N in mmt.cuh: the output features of a block of the
// tensor-core multi-row kernel. Its tiles are mmtWide, mmtMid or
// mmtNarrow rows (mmt's MR, the _tile, _tile32 and _tile16 entries).
// mmtTypes are its weight types, with the bytes of a feature's weights
// for 256 of k in shared memory and of its scales (Tc<T>::WS and WD
// there).
const (
	mmtFeatures = 128
	mmtWide     = 64
	mmtMid      = 32
	mmtNarrow   = 16
	mmtMidK     = 4096 // the least k that takes the mid tile (see integerMatrix)
)

var mmtTypes = map[string]struct{ ws, wd int }{"q4_k": {144, 24}, "q6_k": {212, 24}, "q8_0": {272, 0}}

// mmtStages is mt_stages: the copy buffers of a tile of rows rows.
// Three buffers for Q4_K's 32-row tile too (they fit its two blocks a
// multiprocessor), with every tile copying as many super-blocks ahead as
// it has other buffers, lost on an H100 (same run, the llama 7B shape's
// S_TG at 4 / 16 / 64 slots): 919 / 2 961 / 5 166 → 890 / 2 841 / 5 106.
func mmtStages(typ string, rows uint32) int {
	if rows == mmtNarrow && typ != "q8_0" {
		return 3
	}
	return 2
}

// mmtShared is mt_smem: the copy buffers, each per activation row the
// quantized slice (272 bytes), its scale and 32 bytes of sums or
// block scales, and per feature ws bytes of weights for 256 of k (Q6_K's
// in a window of 53 words); then per feature wd bytes of scales.
func mmtShared(typ string, rows uint32) int {
	t := mmtTypes[typ]
	return mmtStages(typ, rows)*(int(rows)*(272+4+32)+mmtFeatures*t.ws) + mmtFeatures*t.wd
}

// mmtRecord is MT_REC in mmt.cuh: the staged bytes of 256 of one
// activation row (quants, then Q8_K's sums and scale or Q8_0's
// block scales, padding). mmtCounters is MT_COUNTERS: split-k's tile
// counters at the start of the staging buffer.
const (
	mmtRecord   = 304
	mmtCounters = 256
)

// mmtPerSM is how many blocks of mmt's tile of rows rows an H100/H200
// multiprocessor holds: its __launch_bounds__ (3 for the narrow tile, 2
// for the others) or what its shared memory allows (228 KiB, 1 KiB of it
// reserved per block), whichever is fewer. mmtSMs is the multiprocessors.
// A matrix of fewer tiles than fill them splits k into as many parts as
// keep it within that (split-k): the 1024-feature projections back into
// the residual stream of a 512-row prefill of the qwen3 0.6B shape make
// only 64 tiles.
func mmtPerSM(typ string, rows uint32) uint32 {
	bound := uint32(2)
	if rows == mmtNarrow {
		bound = 3
	}
	return min(bound, uint32(228<<10/(mmtShared(typ, rows)+1<<10)))
}

const mmtSMs = 132

// mmtSplits is the parts k is split into for tiles tiles of k/256
// super-blocks, when perSM blocks fit a multiprocessor: as many as fill
// them, then as few as keep the longest part as short, since a tile is
// done when its longest part is and every part adds a partial tile to sum.
// The llama 7B shape's 4096-wide products at 16 rows split 16
// super-blocks into 8 parts of 2 where 12 parts made some of 2 and some
// of 1. On an H100 (zrt-run bench --tier cuda --slots 16,64 -p 128 -n
// 128, each line one run), capping every split at 8 parts took the 7B's
// S_TG at 16 rows from 2 427 / 2 439 to 2 565 / 2 548 (qwen3 0.6B, whose
// 3072-wide down projection it also cut from 12 parts of 1, lost 1.5%);
// this rule, from 2 471 / 2 459 to 2 552, 64 rows and qwen3 unchanged.
// Splitting a launch of a wave and a bit where that shortens the last
// wave (the 7B's gate and up products at 64 rows: 344 tiles of 32 rows,
// 264 at once, in two parts) lost: S_TG at 64 slots 5 179 / 5 179 →
// 5 121 / 5 126, pp128 8 224 → 7 963 (H100, same run); so did fitting
// three such blocks a multiprocessor instead (launch bounds 3, no split:
// 5 102 / 5 097).
// Split launches count their tiles in the mmtCounters counters, which
// bounds their tiles.
func mmtSplits(tiles, kbs, perSM uint32) uint32 {
	if tiles > mmtCounters {
		return 1
	}
	fill := max(1, min(kbs, perSM*mmtSMs/tiles))
	return ceilDiv(kbs, ceilDiv(kbs, fill))
}

// mmtStaged is the staging buffer of mmt (see mmt in mmt.cuh): the
// counters, the records of every row of the grid's tiles, then with
// split-k a partial tile (a float per row and feature) per block.
func mmtStaged(r, k, rows, tiles, splits uint32) int {
	n := 4*mmtCounters + int(ceilDiv(r, rows)*rows)*int(k/256)*mmtRecord
	if splits > 1 {
		n += int(tiles*splits*rows) * mmtFeatures * 4
	}
	return n
}

// stage is the launch that quantizes the activation rows (k wide) of a
// variant of r rows (mt_stage): a warp per 256 of k, blocks of up to
// eight along each row. A block per row left each warp of a 16-row step
// of the llama 7B shape's down projection six records to walk in turn.
func stage(r, k uint32) *Launch {
	warps := min(max(k/256, 1), 8)
	return &Launch{Grid: [3]uint32{r, ceilDiv(max(k/256, 1), warps), 1}, Block: [3]uint32{32 * warps, 1, 1}, Entry: EntryStage}
}

// stageRecords is the record type mt_stage writes for a tensor-core
// weight type (Geom<T>::VT in mmq.cuh).
var stageRecords = map[string]string{"q4_k": "q8_k", "q6_k": "q8_k", "q8_0": "q8_0"}

// SameStage reports whether the stage launches of instances a and b do
// the same work when given the same input rows: both are plain products
// (matmul, matmul_residual: their stage only quantizes, where the fused
// norms' also normalizes by their own weights), with weight types whose
// staged records have one type.
func SameStage(a, b string) bool {
	plain := func(instance string) (string, bool) {
		family, typ, _ := strings.Cut(instance, ".")
		r, ok := stageRecords[typ]
		return r, ok && (family == "matmul" || family == "matmul_residual")
	}
	ra, oka := plain(a)
	rb, okb := plain(b)
	return oka && okb && ra == rb
}

// mmvMaxRows is the most rows the matrix-vector kernel takes: each row's
// blocks stream the whole matrix, which for a few rows mostly comes from
// L2, while the tile kernels pay for quantizing and tiling eight rows
// whether or not they are there. On an H200 at 4 of 64 slots of the qwen3
// 0.6B shape, the dp4a tile kernel's decode step took 4.1 ms against
// 1.55 ms for one row through this kernel; at 16 rows the tile kernel is
// the faster (qwen3 S_TG 2 896 against 2 347 tok/s).
//
// mmvMaxRowsTC is the same for decode variants of the tensor-core types,
// whose 16-row tile reads each weight once for all the rows: on an H100
// (zrt-run bench --tier cuda --slots 1,2,4,16,64 -p 128 -n 128, same run),
// S_TG at 4 rows with the tile against this kernel: llama 7B shape 841 /
// 806 against 476 / 492, qwen3 0.6B 2 473 / 2 458 against 2 043 / 2 043.
// At 2 rows this kernel stays (qwen3: 1 533 / 1 520 tok/s at 2 rows, a
// 1.3 ms step where the tile's at 4 rows took 1.6 ms).
//
// Steps of mmvRows rows (MMV_MR in mmq.cuh) over matrices of k ≥ mmvRowsK
// take the _rows entry, a block per output features for both rows, which
// loads and unpacks each weight block once for them: on an H100, the llama
// 7B shape's S_TG at 2 slots went 478 → 565 tok/s (zrt-run bench --tier
// cuda --slots 1,2,3,4,5,8,16 -p 128 -n 64, same run), a 2-row step 1.64
// → 1.39× a 1-row one, which is what a speculative verify step of one
// draft token costs. The qwen3 0.6B shape's smaller matrices (k of 1 024
// to 3 072) lost with it (1 589 → 1 422 at 2 slots): a block per row keeps
// twice the blocks in flight, and their second reads of the weights come
// from L2. Taking four rows a block lost to the 16-row tile at 4 to 8
// slots (7B: 916 → 772 at 4).
const (
	mmvMaxRows   = 8
	mmvMaxRowsTC = 2
	mmvRows      = 2
	mmvRowsK     = 4096
)

// integerMatrix is the launch of an integer-path matrix kernel (matmul,
// lm_head or a fused norm + projections) for n features of k inputs on a
// variant of r rows: the matrix-vector kernel, a row per blockIdx.y, for
// up to mmvMaxRows rows (mmvMaxRowsTC in decode variants that the
// tensor-core tiles take); for more, the tensor-core tile kernel where the
// type has one, and the dp4a tile kernel otherwise. In prefill variants
// lm_head's tiles skip the row tiles where no row wants logits (a prompt's
// last row alone does, and the decode rows a serving step mixes in); on
// the dp4a kernel, which skips each such row, a step of the qwen3 0.6B
// shape with 64 such rows took 2.4 ms (H100, ZRT_CUDA_PROFILE). The dp4a kernel reads the matrix once per eight rows, the
// tensor-core tiles once per 64 (staged and split over k, they also fill
// the GPU for small matrices). Measured on an H100, zrt-run bench --tier
// cuda --slots 16,32,64 -p 128 -n 128, S_TG with decode matrices on dp4a
// up to 64 rows (16 for those past 16 MiB) against tensor cores past 8
// rows: qwen3 0.6B 3 326 / 4 699 / 5 878 against 3 549 / 5 895 / 9 613;
// llama 110M 12 849 / 18 830 / 19 963 against 12 827 / 22 015 / 40 425;
// llama 7B 854 / 1 664 / 2 232 against 1 191 / 1 997 / 3 287.
func integerMatrix(family, typ string, k, n, r uint32, prefill bool) Launch {
	_, tc := mmtTypes[typ]
	if r <= mmvMaxRows && (prefill || !tc || k%256 != 0 || r <= mmvMaxRowsTC) {
		grid, block := mmvShape(typ, k, n)
		if r == mmvRows && k >= mmvRowsK {
			return Launch{Grid: grid, Block: block, Shared: mmvRows * mmqStride(k), Entry: EntryRows}
		}
		grid[1] = r
		return Launch{Grid: grid, Block: block, Shared: mmqStride(k)}
	}
	block := [3]uint32{256, 1, 1}
	// lm_head's width is one group's: in a prefill step only the last row
	// wants logits, so one group of blocks does all the work.
	groups := ceilDiv(r, mmqRows)
	width := mmqWidth(n, groups)
	if family == "lm_head" {
		width = mmqWidth(n, 1)
	}
	dp4a := Launch{Grid: [3]uint32{width, groups, 1}, Block: block, Shared: int(min(r, mmqRows)) * mmqStride(k), Entry: EntryTile}
	if !tc {
		return dp4a
	}
	dp4a.Entry = EntryDP4A // a tensor-core type's dp4a kernel is its _dp4a entry
	// mmt walks k by 256: a Q8_0 matrix of another width keeps the dp4a
	// tiles.
	if k%256 != 0 {
		return dp4a
	}
	// The activation rows are staged: each of the n/128 blocks of features
	// would otherwise quantize its rows again, reading 4 bytes an element
	// where the staged record has about 1.2. Steps of up to 64 rows (decode)
	// take the narrow tile, whose warps all work on a few rows. S_TG
	// (zrt-run bench --tier cuda --slots 16,32,64 -p 128 -n 128) against
	// the wide tile, same machine: on an H100 at 16 slots, qwen3 0.6B
	// shape 3 760 → 5 042 tok/s, llama 7B 1 389 → 1 867; on an H200 at 32
	// and 64 slots, qwen3 5 965 → 8 285 and 9 185 → 11 325, llama 7B
	// 2 079 → 2 399 and 3 015 → 2 759 (the 7B's large matrices at 64 rows
	// are bound by unpacking weights, which the wide tile does once for 64
	// rows). Past 32 rows, a matrix of k ≥ mmtMidK takes the 32-row tile,
	// which unpacks its weights half as often as the narrow one: llama 7B
	// S_TG at 64 slots 3 150 → 3 466 (H100, same run); the qwen3 0.6B
	// shape, whose matrices are small, lost with it (12 098 → 11 883) and
	// keeps the narrow tile. The wide tile at 64 rows still loses on the
	// 7B (S_TG at 64 slots, averages of three, H100, same run): 5 156 →
	// 5 017 for Q6_K alone, 4 565 for the matrices of n ≤ 4096. The grid's
	// x is the row tiles, so that those of a block of features run side by
	// side and share its weights through L2.
	rows, entry := uint32(mmtWide), EntryTile
	switch {
	case r <= mmtMid || r <= mmtWide && k < mmtMidK:
		rows, entry = mmtNarrow, EntryTile16
	case r <= mmtWide:
		rows, entry = mmtMid, EntryTile32
	}
	grid := [3]uint32{ceilDiv(r, rows), ceilDiv(n, mmtFeatures), 1}
	tiles := grid[0] * grid[1]
	grid[2] = mmtSplits(tiles, k/256, mmtPerSM(typ, rows))
	return Launch{Grid: grid, Block: block, Shared: mmtShared(typ, rows), Entry: entry, Staged: mmtStaged(r, k, rows, tiles, grid[2]), Stage: stage(r, k)}
}

// faGroup is fa_group in fa.cuh: the query heads one block of the
// decode attention kernels serves, which share a KV head and so load its
// rows once: the largest of 4, 3 and 2 that divides the heads a KV head
// serves, at most 2 for heads wider than 128 (a lane's accumulators stay
// within 8 dimension pairs), else 1.
func faGroup(nHead, nHeadKV, headDim uint32) uint32 {
	for _, g := range []uint32{4, 3, 2} {
		if nHead/nHeadKV%g == 0 && (g == 2 || headDim <= 128) {
			return g
		}
	}
	return 1
}

// faShared is fa_smem in fa.cuh: the decode attention kernels' shared
// memory for g heads a block, w warps and heads of d.
func faShared(g, w, d uint32) int { return int(4 * g * ((d+7)&^7 + 3*w + w*d + 1)) }

// faqShared is faq_smem in faq.cuh: faShared's for a quantized (Q8_0)
// cache, whose query is kept rotated in F32 and quantized beside. It
// decides the block's warps (faWarps); the stages come on top
// (faqStaged).
func faqShared(g, w, d uint32) int { return int(4 * g * (d + d/4 + d/32 + 3*w + w*d + 1)) }

// faqStaged is the whole shared memory of a Q8_0 cache's decode block: faqShared's,
// rounded to 16 bytes (faq_stage_at), then for heads of 128 and 256
// (faq_staged) one stage of faqStage bytes a warp (faq.cuh's staged walk:
// a chunk's K and V rows copied into shared memory) where the block stays
// within faqMaxShared, else none (the register walk). The kernel counts
// its stages from the shared memory it is given, and takes two where it
// has them, which gained nothing. One layer's one-row decode attention on
// an H200 (TestDecodeAttentionSpeed, 16 warps; µs without stages / one /
// two): qwen3 0.6B shape at depth 32768 94.2 / 50.1 / 48.7, at 130000
// 303.3 / 138.9 / 141.8; llama 7B shape at 32768 292.6 / 126.4 / 125.7,
// at 130000 1074.2 / 414.3 / 458.5 (F16 cache: 61.5, 192.7, 152.7,
// 540.8). Blocks of 8 warps lost (7B at 32768: 178.1 with one stage,
// 160.4 with two).
func faqStaged(g, w, d uint32) int { return withStage(faqShared(g, w, d), w, d, faqStage) }

// faStagedShared is faqStaged for an F16 cache: faShared's, rounded to
// 16 bytes (fa_stage_at in fa.cuh), then for heads of 128 and 256
// (fa_staged) one stage of faStage bytes a warp (fa.cuh's staged walk,
// faq.cuh's made for F16 rows: a chunk's K and V rows copied into shared
// memory with cp.async) where the block stays within faqMaxShared, else
// none (the register walk). The kernel counts its stages from the shared
// memory it is given; its bits are the register walk's. One layer's
// one-row decode attention on an H200 (TestDecodeAttentionSpeed, run
// 24b; µs without stages / with this one): the qwen3 0.6B shape at depth
// 32768 61.5 / 51.7, at 130000 172.9 / 142.0; the llama 7B shape at 32768
// 165.0 / 167.2, at 130000 599.0 / 561.4. Blocks of 8 warps with twice
// the blocks a head group and a stage did better for the 7B (134.8 and
// 495.8) and worse for the 0.6B (60.9 and 151.4); more stages a warp
// gained nothing at 16 warps and little at 8. End to end (zrt-run bench
// --tier cuda -p 0 -n 128, the qwen3 0.6B shape, Q4_K_M, F16 cache, run
// 24c), tg128 at depth 32768 went 395.80 → 448.03 tok/s, at 130000 to
// 209.86 (llama.cpp on the same machine: 356.27 and 155.20).
func faStagedShared(g, w, d uint32) int { return withStage(faShared(g, w, d), w, d, faStage) }

// withStage is a decode attention block's shared memory of base bytes
// rounded to 16, then one stage of stage bytes for each of its w warps
// where heads of d have a staged walk (128 and 256) and the block stays
// within faqMaxShared.
func withStage(base int, w, d uint32, stage int) int {
	at := (base + 15) &^ 15
	if n := at + int(w)*stage; (d == 128 || d == 256) && n <= faqMaxShared {
		return n
	}
	return at
}

// FitShared is launch l of instance (its specialization values spec)
// within limit bytes of shared memory a block where it can be: a decode
// attention launch (flash_attn's and flash_attn_ext's main, _split and
// _rest entries) past it keeps as many of its stages a warp as fit, none
// at worst, which its kernel counts from the memory it is given (the same
// bits: faqStaged, faStagedShared). The stages are sized for the largest
// of the GPUs the PTX runs on (faqMaxShared); an sm_86 or sm_89 card
// allows 99 KiB a block. Other launches come back as they are.
func FitShared(instance string, spec []uint32, l Launch, limit int) Launch {
	family, typ, _ := strings.Cut(instance, ".")
	if l.Shared <= limit || family != "flash_attn" && family != "flash_attn_ext" || len(spec) < 4 {
		return l
	}
	switch l.Entry {
	case EntryMain, EntrySplit, EntryRest:
	default:
		return l
	}
	w, d := l.Block[0]/32, spec[3]
	base, stage := faShared(faGroup(spec[1], spec[2], d), w, d), faStage
	if typ != "" {
		base, stage = faqShared(faGroup(spec[1], spec[2], d), w, d), faqStage
	}
	at := (base + 15) &^ 15
	for l.Shared > limit && l.Shared-int(w)*stage >= at {
		l.Shared -= int(w) * stage
	}
	return l
}

// AttnShared is the shared memory of a decode attention block (flash_attn's
// and flash_attn_ext's main and _split entries; quant: a Q8_0 cache's
// instances) of warps warps with the given stages a warp (0: the register
// walk; at most AttnMaxStages), for tests that launch the kernel with
// other stages than Shape gives.
func AttnShared(quant bool, nHead, nHeadKV, headDim, warps, stages uint32) int {
	g := faGroup(nHead, nHeadKV, headDim)
	if quant {
		return (faqShared(g, warps, headDim)+15)&^15 + int(warps*stages)*faqStage
	}
	return (faShared(g, warps, headDim)+15)&^15 + int(warps*stages)*faStage
}

// faqStage is FAQ_STAGE in faq.cuh: a warp's stage, a chunk's K and V
// rows (2·32/P2 rows of 68·P2 bytes); faStage FA_STAGE in fa.cuh, an F16
// cache's (2·32/P2 rows of 128·P2 bytes). faqMaxShared bounds a block's
// shared memory with its stages: within an A100's 163 KiB a block (the
// compute_80 PTX runs there too); the qwen3 0.6B and llama 7B shapes'
// one-row steps (16 warps) take 88 and 79 KiB over a Q8_0 cache, 145
// and 137 KiB over an F16 one, four heads a block at 16 warps 106 KiB
// (Q8_0) and, past the bound, none (F16).
const (
	faqStage     = 4352
	faStage      = 8192
	faqMaxShared = 160 << 10
)

// AttnMaxStages is FA_MAX_STAGES in fa.cuh: the stages a warp of the
// decode attention's staged walks takes at most (a ring: the copies of
// the chunk stages − 1 ahead go out before a chunk's arithmetic).
const AttnMaxStages = 4

// faWarps is the warps of a decode attention block (FA_MAX_WARPS in
// fa.cuh at most) for a launch of blocks blocks: 8, doubled while the
// launch has fewer than faBusyWarps warps and the shared memory (shared:
// faShared, or faqShared for a quantized cache) stays within the default
// 48 KiB. A step of few rows then splits each row's
// keys over more warps instead of leaving most of the GPU idle; a block's
// warps take fewer keys each, so its latency falls too.
//
// On an H100 (zrt-run bench --tier cuda --slots 1,16,32,64 -p 128 -n 128,
// same run), against 8 warps and 128 registers: S_TG of the qwen3 0.6B
// shape 616 / 5 043 / 7 869 / 11 388 → 728 / 5 033 / 8 794 / 12 064, of
// the llama 7B shape 250 / 1 840 / 2 409 / 2 731 → 315 / 2 052 / 2 679 /
// 3 089, with up to 32 warps. That held the kernel to 64 registers a
// thread, and its loads of keys and values since then spilled 4.5 KB;
// up to 16 warps (128 registers, 8 bytes of spills), S_TG at 1 / 4 / 16 /
// 64 slots of qwen3 went 925 / 1 979 / 5 039 / 13 481 → 985 / 2 070 /
// 5 024 / 14 654, and of the 7B 316 / 513 / 2 105 / 3 900 → 317 / 503 /
// 2 123 / 3 853 (H100, same run).
func faWarps(blocks, g, d uint32, shared func(g, w, d uint32) int) uint32 {
	w := uint32(8)
	for w < faMaxWarps && blocks*w < faBusyWarps && shared(g, 2*w, d) <= 48<<10 {
		w *= 2
	}
	return w
}

const faBusyWarps = 4096

// faLeanWarps is FA_LEAN_WARPS in family/flash_attn.cuh: flash_attn's _lean entry,
// compiled for four blocks of at most that many warps a multiprocessor,
// takes launches of one head a block (faGroup 1), heads of at most 128
// and blocks that many warps (faWarps gives them to launches of many
// blocks), where the main entry, compiled for every group and width in
// 128 registers, holds two. On an H100 (zrt-run bench --tier cuda
// --slots 16,64 -p 128 -n 128, same run), S_TG of the llama 7B shape
// went 2 910 / 4 927 and 2 900 / 4 904 → 2 944 / 5 143 and 2 952 / 5 139.
// Blocks of 4 warps, a key chunk or two each, lost (H100, same run, the
// 7B's S_TG at 16 / 64 slots, two rounds): 2 967 / 5 128 and 2 947 /
// 5 140 with 8; 2 943 / 5 111 and 2 951 / 5 114 with 4 from 2 048 blocks
// up; 2 931 / 5 096 and 2 890 / 5 117 with 4 from 512 up.
const faLeanWarps = 8

// faSplits is the blocks a decode attention launch of blocks blocks
// (head groups × rows) gives each of them for its keys (the _split entry,
// grid z; fa.cuh's flash decoding across blocks): as many as fill the
// multiprocessors once (a block of up to 16 warps at 128 registers takes
// a whole one), at most faMaxSplit; 1, no split, where that is fewer
// than two. The blocks take a long row's keys in ranges of whole
// faChunk units that the kernel derives from the row's position, so one
// captured graph serves every length; a row of at most faSplitMin keys
// is not split (its bits are the main entry's), and the blocks that get
// no range leave at once, so the grid is sized for the GPU rather than
// for the longest context. The qwen3 0.6B shape's one-row step (8 blocks
// of two heads) walked a 16k cache with 8 of the 132 multiprocessors. On
// an H200 (zrt-run bench --tier cuda, Q4_K_M, same run), tg64 at depth
// 4096 / 16384 / 32000 went 293.9 / 95.0 / 51.7 → 840.2 / 500.1 / 415.2
// tok/s; tg128 from depth 0 (a 512-token prompt first) lost 3%
// (1229 → 1185) with splits from 513 keys, hence faSplitMin (its own
// effect not yet measured; the blocks without a range may cost too).
func faSplits(blocks uint32) uint32 { return faSplitsFor(blocks, mmtSMs) }

// faSplitsFor is faSplits for a GPU of sms multiprocessors.
func faSplitsFor(blocks, sms uint32) uint32 {
	if blocks == 0 {
		return 1
	}
	z := min(faMaxSplit, sms/blocks)
	if z < 2 || blocks > faCounters {
		return 1
	}
	return z
}

// faStaged is the staging buffer of a split launch (fa_part in fa.cuh):
// the counters, then a partial state per block of the grid — per head
// of its group a maximum, a sum and hd accumulators.
func faStaged(rows, nHead, hd, splits uint32) int {
	return 4*faCounters + 4*int(rows*nHead*splits)*int(hd+2)
}

// AttnSplitStaged is faStaged for tests that launch a split decode
// attention with another number of blocks a head group than Shape gives
// (at most 32, fa.cuh's FA_MAX_SPLIT).
func AttnSplitStaged(rows, nHead, hd, splits uint32) int { return faStaged(rows, nHead, hd, splits) }

// faChunk is FA_CHUNK in fa.cuh, the keys of the units a split row's
// ranges are made of; faSplitMin FA_SPLIT_MIN, the most keys a row has
// without being split; faMaxSplit FA_MAX_SPLIT, the most blocks a row's
// head group is split over; faCounters FA_COUNTERS, mmtCounters: the
// split launches' counters, one per (head group, row), where split-k's
// lie.
const (
	faChunk    = 256
	faSplitMin = 1024
	faMaxSplit = 32
	faCounters = mmtCounters
)

// faMaxWarps is FA_MAX_WARPS in fa.cuh, faMaxHead FA_MAX_D.
const (
	faMaxWarps = 16
	faMaxHead  = 256
)

// fatRows is FAT_ROWS in family/flash_attn.cuh: the rows one block of flash_attn's
// tensor-core entry takes (a warp per 16), and the fewest a prefill
// variant needs to take it. Decode variants keep the flash-decoding
// kernel, which spreads each row's keys over a block: the tile kernel
// would take a pass over the keys per slot in a warp's 16 rows.
const fatRows = 64

// fatKeys is FAT_KEYS in family/flash_attn.cuh: the keys of the tiles a
// block of the tensor-core prefill entry shares in shared memory.
// fatShared is fat_smem there: that entry's dynamic shared memory for
// heads of hd, an F16 cache's two buffers of a K and a V tile (rows of
// hd+8 halves), or a quantized cache's one F16 K and V tile and one
// buffer of its raw Q8_0 rows (hd/32 blocks of 34 bytes).
const fatKeys = 64

// fatSplit is FAT_SPLIT in family/flash_attn.cuh: a launch of the
// tensor-core prefill entry with at most fatSplitBlocks blocks (one a
// multiprocessor at most) gives each block fatSplit times the warps, which
// share every tile's keys. The qwen3 0.6B shape's 512-row prefill step
// (16 heads × 8 blocks of rows) otherwise left four warps a
// multiprocessor to the whole attention.
const (
	fatSplit       = 2
	fatSplitBlocks = mmtSMs
)

func fatShared(hd uint32, quant bool) int {
	tile := fatKeys * int(hd+8) * 2
	if quant {
		return 2*tile + 2*fatKeys*int(hd/32*34)
	}
	return 2 * 2 * tile
}

// softcapChunk is SOFTCAP_CHUNK in family/logit_softcap.cuh: the logits one block of
// logit_softcap caps.
const softcapChunk = 4096

// gdnMaxS is 2·GDN_REG_S in family/gated_delta_net.cuh: the widest head gated_delta_net
// takes (its shared q, k and v).
const gdnMaxS = 256

// mmqStride is mm_xstride in mmq.cuh: shared-memory bytes of one
// quantized activation row.
func mmqStride(k uint32) int { return int((k + k/4 + 15) &^ 15) }

// Shape returns the launch of one dispatch of a kernel instance (matmul.q4_k,
// rms_norm), given its push constants and specialization values in ABI
// order, the variant's row capacity and whether it is a prefill variant
// (whose rows are mostly prompt runs of few slots; a decode variant's are
// one a slot): its family's Geometry (families.go) applied to them.
func Shape(instance string, push, spec []uint32, rows int, prefill bool) (Launch, error) {
	family, typ, _ := strings.Cut(instance, ".")
	f, ok := lookupFamily(family)
	if !ok {
		return Launch{}, fmt.Errorf("cuda: no kernel for family %s", family)
	}
	l, err := f.Launch(Dispatch{Family: family, Type: typ, Push: push, Spec: spec, Rows: uint32(rows), Prefill: prefill})
	if err != nil {
		return l, err
	}
	if l.Grid[0] == 0 || l.Grid[1] == 0 {
		return l, fmt.Errorf("cuda: %s: empty grid %v", family, l.Grid)
	}
	return l, nil
}

// Entry is the PTX entry point of a catalog instance: matmul.q4_k →
// matmul_q4_k, flash_attn.kv-q8_0-q8_0-rk64-rv64 →
// flash_attn_kv_q8_0_q8_0_rk64_rv64 (a C identifier).
func Entry(instance string) string { return entryName.Replace(instance) }

var entryName = strings.NewReplacer(".", "_", "-", "_")
