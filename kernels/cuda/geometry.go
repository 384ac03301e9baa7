package cuda

import (
	"fmt"

	"github.com/zrtdev/zrt/kernels"
)

// Dispatch is what the launch of one dispatch follows from: its push
// constants and specialization values in ABI order, the variant's row
// capacity and whether it is a prefill variant.
type Dispatch struct {
	Family, Type string // the catalog family and, for a typed one, the weight type (q4_k)
	Push, Spec   []uint32
	Rows         uint32
	Prefill      bool
}

// Geometry is how a family's launches are shaped: its row of the family
// table names one, built from the few shapes below, so that a family's
// launch is part of its row rather than a case elsewhere. It returns an
// error naming the family when the dispatch's values do not fit the
// kernel.
type Geometry func(d Dispatch) (Launch, error)

// need checks that a dispatch has at least n values of a kind.
func (d Dispatch) need(p []uint32, n int, what string) error {
	if len(p) < n {
		return fmt.Errorf("cuda: %s: %d %s values, want %d", d.Family, len(p), what, n)
	}
	return nil
}

// base is the launch every shape starts from: a block of 256 threads a
// row.
func (d Dispatch) base() Launch {
	return Launch{Grid: [3]uint32{d.Rows, 1, 1}, Block: [3]uint32{BlockSize(d.Family), 1, 1}}
}

// perRow is a block of threads threads per row, grid (rows).
func perRow(threads uint32) Geometry {
	return func(d Dispatch) (Launch, error) {
		l := d.base()
		l.Block[0] = threads
		return l, nil
	}
}

// elementwise is a thread per element of the active rows, in blocks of
// 256: a row has the product of the first n push values elements (cols;
// heads·width).
func elementwise(n int) Geometry {
	return func(d Dispatch) (Launch, error) {
		l := d.base()
		if err := d.need(d.Push, n, "push"); err != nil {
			return l, err
		}
		elems := d.Rows
		for _, v := range d.Push[:n] {
			elems *= v
		}
		l.Grid = [3]uint32{ceilDiv(elems, 256), 1, 1}
		return l, nil
	}
}

// PeerBlocks and PeerThreads are the launch of the one-shot collectives
// (peer.cuh's PEER_BLOCKS, PEER_THREADS).
const (
	PeerBlocks  = 16
	PeerThreads = 512
)

// peerReduceFloats is the floats a block of the one-shot all-reduce sums
// in one pass: a thread's ALL_REDUCE_U (family/all_reduce_sum.cuh) in
// flight together.
const peerReduceFloats = PeerThreads * 8

// PeerReduceLaunch is the one-shot all-reduce's launch for rows × cols
// floats on a GPU of sms multiprocessors: PeerBlocks blocks while they
// sum it in one pass, past that a block per pass's worth up to one a
// multiprocessor (a decode step of 64 rows of a 4096-wide model, 1 MiB,
// took 32 µs on 16 blocks of an H200; its pushes and polls need the
// multiprocessors' loads in flight). Every block of the grid is then
// resident at once, which the blocks' waits on each other's ranks need.
func PeerReduceLaunch(rows, cols, sms int) Launch {
	blocks := (rows*cols + peerReduceFloats - 1) / peerReduceFloats
	return Launch{Grid: [3]uint32{uint32(max(PeerBlocks, min(blocks, sms))), 1, 1}, Block: [3]uint32{PeerThreads, 1, 1}}
}

// peer is the one-shot collectives' launch: PeerBlocks blocks whatever
// the rows, since every block of every rank meets every other at their
// barrier and each block counts the collectives it ran.
func peer(Dispatch) (Launch, error) {
	return Launch{Grid: [3]uint32{PeerBlocks, 1, 1}, Block: [3]uint32{PeerThreads, 1, 1}}, nil
}

// rowsBy is a block per (row, y) with y from the dispatch's values:
// grid (rows, y).
func rowsBy(y func(d Dispatch) (uint32, error)) Geometry {
	return func(d Dispatch) (Launch, error) {
		l := d.base()
		v, err := y(d)
		if err != nil {
			return l, err
		}
		l.Grid[1] = v
		return l, nil
	}
}

// matrix is a matrix family's launch for the k inputs and n outputs kn
// reads: the integer path's (integerMatrix) for the types that have one,
// else the float path's, grid (n/MM_WARPS, rows) with floatShared(k)
// bytes of shared memory.
func matrix(kn func(d Dispatch) (k, n uint32, err error), floatShared func(k uint32) int) Geometry {
	return func(d Dispatch) (Launch, error) {
		l := d.base()
		k, n, err := kn(d)
		if err != nil {
			return l, err
		}
		if _, ok := mmqTypes[d.Type]; ok {
			return integerMatrix(d.Family, d.Type, k, n, d.Rows, d.Prefill), nil
		}
		l.Grid = [3]uint32{ceilDiv(n, mmWarps), d.Rows, 1}
		l.Shared = floatShared(k)
		return l, nil
	}
}

// The shapes of the families with more to them than the above.

// pushKN: push k, n (matmul, matmul_residual, lm_head).
func pushKN(d Dispatch) (uint32, uint32, error) {
	err := d.need(d.Push, 2, "push")
	if err != nil {
		return 0, 0, err
	}
	return d.Push[0], d.Push[1], nil
}

// qkvKN: spec k, n_q, n_kv, eps (rms_norm_qkv): n_q + 2·n_kv outputs.
func qkvKN(d Dispatch) (uint32, uint32, error) {
	if err := d.need(d.Spec, 3, "spec"); err != nil {
		return 0, 0, err
	}
	return d.Spec[0], d.Spec[1] + 2*d.Spec[2], nil
}

// gateUpKN: spec k, f, eps (rms_norm_gate_up): 2·f outputs.
func gateUpKN(d Dispatch) (uint32, uint32, error) {
	if err := d.need(d.Spec, 3, "spec"); err != nil {
		return 0, 0, err
	}
	return d.Spec[0], 2 * d.Spec[1], nil
}

// normMMKN: spec k, n, n2, eps (rms_norm_matmul): n + n2 outputs.
func normMMKN(d Dispatch) (uint32, uint32, error) {
	if err := d.need(d.Spec, 3, "spec"); err != nil {
		return 0, 0, err
	}
	return d.Spec[0], d.Spec[1] + d.Spec[2], nil
}

// oneRowFamilies are the families whose kernels serve one-row decode
// steps only (the fuse pass forms rms_norm_gate_up_swiglu nowhere else);
// their rows' Launch is oneRow's.
var oneRowFamilies = map[string]bool{"rms_norm_gate_up_swiglu": true, "rms_norm_qkv_rope_kv_write": true}

// oneRow is g for a family of oneRowFamilies.
func oneRow(g Geometry) Geometry {
	return func(d Dispatch) (Launch, error) {
		if d.Rows != 1 || d.Prefill {
			return d.base(), fmt.Errorf("cuda: %s serves one-row decode steps, not %d rows (prefill %v)", d.Family, d.Rows, d.Prefill)
		}
		return g(d)
	}
}

// adjacentPairs is g for rms_norm_qkv_rope_kv_write, whose epilogue
// rotates pairs of adjacent features: spec neox (the tenth) must be 0.
func adjacentPairs(g Geometry) Geometry {
	return func(d Dispatch) (Launch, error) {
		if err := d.need(d.Spec, 10, "spec"); err != nil {
			return d.base(), err
		}
		if d.Spec[9] != 0 {
			return d.base(), fmt.Errorf("cuda: %s rotates adjacent pairs, not NeoX's", d.Family)
		}
		return g(d)
	}
}

// floats is the float path's shared row: k floats.
func floats(k uint32) int { return 4 * int(k) }

// normedFloats is the fused norms' float path: the normalized row and its
// rounding.
func normedFloats(k uint32) int { return 8 * int(k) }

// ropeHeads: spec n_layer, n_head, n_head_kv, head_dim, …: a block per
// (row, 8 heads), a warp a head (rope_kv_write, rms_norm_rope_kv_write).
func ropeHeads(d Dispatch) (uint32, error) {
	if err := d.need(d.Spec, 4, "spec"); err != nil {
		return 0, err
	}
	if d.Spec[3] > 512 { // the kernels' shared tables
		return 0, fmt.Errorf("cuda: %s: head_dim %d over the kernel's 512", d.Family, d.Spec[3])
	}
	return ceilDiv(d.Spec[1]+d.Spec[2], BlockSize(d.Family)/32), nil
}

// moeGateTopk: push k, n_expert, n_used, norm, gating; grid (rows), the
// row and the logits in shared memory.
func moeGateTopk(d Dispatch) (Launch, error) {
	l := d.base()
	if err := d.need(d.Push, 2, "push"); err != nil {
		return l, err
	}
	l.Shared = 4 * int(d.Push[0]+d.Push[1])
	return l, nil
}

// moeGateUp: spec k, f, n_used; grid (f/MM_WARPS, rows·n_used).
func moeGateUp(d Dispatch) (Launch, error) {
	l := d.base()
	if err := d.need(d.Spec, 3, "spec"); err != nil {
		return l, err
	}
	l.Grid = [3]uint32{ceilDiv(d.Spec[1], mmWarps), d.Rows * d.Spec[2], 1}
	l.Shared = 4 * int(d.Spec[0])
	return l, nil
}

// moeDownAcc: push f, n, n_used; grid (n/MM_WARPS, rows).
func moeDownAcc(d Dispatch) (Launch, error) {
	l := d.base()
	if err := d.need(d.Push, 3, "push"); err != nil {
		return l, err
	}
	l.Grid = [3]uint32{ceilDiv(d.Push[1], mmWarps), d.Rows, 1}
	l.Shared = 4 * int(d.Push[0]*d.Push[2])
	return l, nil
}

// attention: spec n_layer, n_head, n_head_kv, head_dim, …: a block per
// (head group, row) of faWarps warps; flash_attn takes its lean entry for
// launches of many one-head blocks and its tensor-core entry in prefill
// (with Launch.Rest for the rows that are no prompt's). Decode launches of
// few blocks take the _split entry, with the geometry (warps, blocks per
// head group and row along z, stages) attnGeometry gives: attnTable's
// measured row for the shape, else the warps the unsplit launch would
// have (so a row short enough not to be split gets the main entry's
// bits), faSplits blocks and a stage where it fits. The instances
// of a quantized cache (Dispatch.Type kv-…) have no lean entry, and their
// decode kernel's shared memory is faqStaged's; an F16 cache's decode
// kernel (but the lean entry) takes faStagedShared's.
func attention(d Dispatch) (Launch, error) {
	l := d.base()
	spec := d.Spec
	if err := d.need(spec, 4, "spec"); err != nil {
		return l, err
	}
	if spec[2] == 0 || spec[1]%spec[2] != 0 {
		return l, fmt.Errorf("cuda: %s: %d heads do not share %d KV heads evenly", d.Family, spec[1], spec[2])
	}
	g := faGroup(spec[1], spec[2], spec[3])
	l.Grid = [3]uint32{spec[1] / g, d.Rows, 1}
	quant := d.Type != "" // a quantized cache's instance (flash_attn.kv-q8_0-q8_0…): faq.cuh's kernels
	shared := faShared
	if quant {
		// The cache's blocks: 32 values of Q8_0, 64 of FP8 (whose kernels
		// would leave the outputs of other heads unwritten).
		what, block := "Q8_0", uint32(32)
		if kv, err := kernels.InstanceKV(d.Family + "." + d.Type); err == nil && kv.K == kernels.FP8E4M3 {
			what, block = "FP8", 64
		}
		if spec[3]%block != 0 || spec[3] > faMaxHead {
			return l, fmt.Errorf("cuda: %s: heads of %d: a %s cache's attention takes whole blocks of %d, at most %d", d.Family, spec[3], what, block, faMaxHead)
		}
		shared = faqShared
	}
	w := faWarps(l.Grid[0]*d.Rows, g, spec[3], shared)
	l.Block[0], l.Shared = 32*w, shared(g, w, spec[3])
	if quant {
		l.Shared = faqStaged(g, w, spec[3])
	}
	if d.Family == "flash_attn" && !quant && g == 1 && spec[3] <= 128 && w <= faLeanWarps {
		l.Entry = EntryLean
	}
	if !quant && l.Entry != EntryLean {
		l.Shared = faStagedShared(g, w, spec[3])
	}
	if z := faSplits(l.Grid[0] * d.Rows); !d.Prefill && l.Entry == EntryMain && z > 1 {
		k := AttnKey{Quant: quant, HeadDim: spec[3], Group: g, Blocks: l.Grid[0] * d.Rows, SMs: mmtSMs}
		l = splitAttention(l, k, attnGeometry(k, w), d.Rows, spec[1])
	}
	if hd := spec[3]; d.Family == "flash_attn" && d.Prefill && d.Rows >= fatRows && (hd == 64 || hd == 128) {
		// Prefill on tensor cores: a warp per 16 rows of a head (two
		// for launches of few blocks: fatSplit), for the prompt rows; the
		// others take the decode kernel.
		rest := l
		rest.Entry = EntryRest
		l = Launch{Grid: [3]uint32{spec[1], ceilDiv(d.Rows, fatRows), 1}, Block: [3]uint32{32 * fatRows / 16, 1, 1},
			Shared: fatShared(hd, quant), Entry: EntryTile, Rest: &rest}
		if l.Grid[0]*l.Grid[1] <= fatSplitBlocks {
			l.Block[0] *= fatSplit
		}
	}
	return l, nil
}

// softcapChunks: push n_vocab; blocks of softcapChunk logits per row.
func softcapChunks(d Dispatch) (uint32, error) {
	if err := d.need(d.Push, 1, "push"); err != nil {
		return 0, err
	}
	return ceilDiv(d.Push[0], softcapChunk), nil
}

// convChannels: push cols, off; spec k, slot_bytes: a block per (row, 256
// channels) (ssm_conv; a slot's first row's runs it).
func convChannels(d Dispatch) (uint32, error) {
	if err := d.need(d.Push, 1, "push"); err != nil {
		return 0, err
	}
	if err := d.need(d.Spec, 1, "spec"); err != nil {
		return 0, err
	}
	if d.Spec[0] < 2 {
		return 0, fmt.Errorf("cuda: ssm_conv: window %d, want at least 2", d.Spec[0])
	}
	return ceilDiv(d.Push[0], 256), nil
}

// deltaHeads: spec h_k, h_v, s, eps, slot_bytes, grouped: a block per
// (row, v head) (gated_delta_net; a slot's first row's runs it).
func deltaHeads(d Dispatch) (uint32, error) {
	spec := d.Spec
	if err := d.need(spec, 3, "spec"); err != nil {
		return 0, err
	}
	if spec[2] > gdnMaxS {
		return 0, fmt.Errorf("cuda: gated_delta_net: head width %d over the kernel's %d", spec[2], gdnMaxS)
	}
	if spec[0] == 0 || spec[1]%spec[0] != 0 {
		return 0, fmt.Errorf("cuda: gated_delta_net: %d v heads over %d k heads", spec[1], spec[0])
	}
	return spec[1], nil
}

// normGroups: push cols, group: a block per (row, group) (rms_norm_gated).
func normGroups(d Dispatch) (uint32, error) {
	if err := d.need(d.Push, 2, "push"); err != nil {
		return 0, err
	}
	if d.Push[1] == 0 || d.Push[0]%d.Push[1] != 0 {
		return 0, fmt.Errorf("cuda: rms_norm_gated: %d columns in groups of %d", d.Push[0], d.Push[1])
	}
	return d.Push[0] / d.Push[1], nil
}
