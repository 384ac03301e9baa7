package cuda

import (
	"fmt"
	"slices"
	"strings"

	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/kernels"
)

// What the megakernel pass (passes/megakernel.go) takes from the launch
// geometry: the output features one block of a matrix family's launch
// makes, so that a persistent kernel's tiles are the graph path's blocks
// (docs/design/megakernel.md), and the multiprocessors a target's queues
// are balanced for.

// MatrixFamily reports whether family is a matrix product whose outputs
// the megakernel splits into tiles of features: matmul, matmul_residual,
// lm_head and the fused norm + projections.
func MatrixFamily(family string) bool {
	switch family {
	case "matmul", "matmul_residual", "lm_head", "rms_norm_qkv", "rms_norm_gate_up":
		return true
	}
	return false
}

// BlockFeatures returns, for a dispatch of a matrix family's instance
// (push constants and specialization values in ABI order, a decode
// variant of rows rows), its output features n (of the fused projections,
// all of them, concatenated) and the features one block of its launch in
// the persistent kernel (MegakernelShape) makes: MT_N for the tensor-core
// tiles, n over the grid's width for the matrix-vector and dp4a kernels
// (in whole warps' worth, MM_WARPS), and a block's MM_WARPS on the float
// path.
func BlockFeatures(instance string, push, spec []uint32, rows int) (n, perBlock uint32, err error) {
	family, typ, _ := strings.Cut(instance, ".")
	if !MatrixFamily(family) {
		return 0, 0, fmt.Errorf("cuda: %s is not a matrix family", family)
	}
	_, n, err = matrixKN(family, typ, push, spec, rows)
	if err != nil {
		return 0, 0, err
	}
	if n == 0 {
		return 0, 0, fmt.Errorf("cuda: %s: no output features", instance)
	}
	l, err := MegakernelShape(instance, push, spec, rows)
	if err != nil {
		return 0, 0, err
	}
	switch l.Entry {
	case EntryTile, EntryTile16, EntryTile32:
		return n, min(mmtFeatures, n), nil
	}
	perBlock = ceilDiv(n, l.Grid[0])
	if _, ok := mmqTypes[typ]; ok && l.Entry == EntryDP4A {
		perBlock = ceilDiv(perBlock, mmWarps) * mmWarps
	}
	if rpb := l.Block[1]; (l.Entry == EntryMain || l.Entry == EntryRows) && rpb > 1 {
		// The persistent kernel runs the matrix-vector kernel one pass
		// of RPB features a block: a tile is whole passes (a lm_head of
		// 151 669 features over the launch's 264 blocks is 575 a block).
		perBlock = ceilDiv(perBlock, rpb) * rpb
	}
	return n, min(max(perBlock, 1), n), nil
}

// matrixKN is a matrix family's inputs k and output features n (of the
// fused projections, all of them).
func matrixKN(family, typ string, push, spec []uint32, rows int) (k, n uint32, err error) {
	d := Dispatch{Family: family, Type: typ, Push: push, Spec: spec, Rows: uint32(rows)}
	switch family {
	case "rms_norm_qkv":
		return qkvKN(d)
	case "rms_norm_gate_up":
		return gateUpKN(d)
	case "rms_norm_matmul":
		return normMMKN(d)
	}
	return pushKN(d)
}

// MegakernelShape is the launch whose blocks the persistent kernel's
// tasks run for a dispatch of a decode variant of rows rows: the graph
// path's (Shape), but for the integer matrix products of 3 to mmvMaxRows
// rows that the graph path gives the tensor-core or dp4a tiles — with a
// stage launch before them and k split over blocks, which a task's box
// of blocks cannot be — the matrix-vector kernel's _rows entry, mmvRows
// rows a block and ⌈rows/mmvRows⌉ blocks down the grid's y. Each weight
// block is then unpacked once for two rows, and a task's rows after the
// first find its weights in L2. Its sums are the matrix-vector kernel's,
// not the tiles': such a step's bits differ from the graph path's, within
// the parity tolerance of both against T-CPU.
//
// Decode attention keeps its main entry, never the _split one: a split
// head group's blocks along z run as tasks of their own, and on rows of
// up to FA_SPLIT_MIN keys all but the first return at once, which on an
// H200 (the qwen3 0.6B shape's one-row step, ZRT_CUDA_PROFILE's trace)
// still took 4.2 µs a task, 120 such tasks a layer. The first block of a
// split row runs the unsplit kernel's arithmetic, so the bits stay the
// graph path's up to that length; a longer row takes one multiprocessor
// a head group (and its own bits) until the schedule splits attention
// over keys itself. Over an F16 cache it takes no stages (fa.cuh's
// staged walk, the register walk's bits): the persistent block would
// hold a step's largest shared memory for every task.
func MegakernelShape(instance string, push, spec []uint32, rows int) (Launch, error) {
	l, err := Shape(instance, push, spec, rows, false)
	family, typ, _ := strings.Cut(instance, ".")
	if err == nil && (family == "flash_attn" || family == "flash_attn_ext") && typ == "" && l.Entry != EntryLean {
		l.Shared = faShared(faGroup(spec[1], spec[2], spec[3]), l.Block[0]/32, spec[3])
	}
	if err == nil && l.Entry == EntrySplit {
		l.Grid[2], l.Entry, l.Staged = 1, EntryMain, 0
		return l, nil
	}
	if err != nil || rows <= mmvRows || rows > mmvMaxRows {
		return l, err
	}
	switch l.Entry {
	case EntryTile, EntryTile16, EntryTile32, EntryDP4A:
	default:
		return l, nil
	}
	if _, ok := mmqTypes[typ]; !ok || !MatrixFamily(family) {
		return l, nil
	}
	k, n, err := matrixKN(family, typ, push, spec, rows)
	if err != nil {
		return l, err
	}
	grid, block := mmvShape(typ, k, n)
	grid[1] = ceilDiv(uint32(rows), mmvRows)
	return Launch{Grid: grid, Block: block, Shared: mmvRows * mmqStride(k), Entry: EntryRows}, nil
}

// Multiprocessors is the multiprocessors of the GPU a CUDA target's
// megakernel queues are balanced for: an H100's or H200's 132 for
// sm_90, an A100's 108 for sm_80 (Ada's parts have fewer; the runtime
// reassigns the queues for the GPU it finds). 0 for other targets.
func Multiprocessors(target string) int {
	t, ok := kernels.LookupTarget(target)
	if !ok || t.Tier != kernels.TierCUDA {
		return 0
	}
	if major, _, _ := t.ComputeCapability(); major >= 9 {
		return mmtSMs
	}
	return 108
}

// MegakernelModule is the PTX module of the persistent decode kernel
// (megakernel.cu, written by gen from MegakernelOps) and its entry point:
// ptx.Source(arch, MegakernelModule, dir) finds it like an instance's.
const MegakernelModule = kernels.PersistentKernel

// MegakernelThreads is the persistent block's threads (MK_THREADS in
// mk_begin.cuh): the largest block a family it serves uses.
const MegakernelThreads = 512

// MegakernelOp is a dispatch the persistent kernel can run as tasks: an
// instance's entry point, compiled into the kernel as a device function of
// a virtual block (mk_begin.cuh).
type MegakernelOp struct {
	Instance string
	Entry    EntryPoint
}

// Func is the op's device function in megakernel.cu: mk_matmul_q4_k,
// mk_flash_attn_lean.
func (o MegakernelOp) Func() string { return "mk_" + Entry(o.Instance) + o.Entry.Suffix() }

// megakernelTypes are the weight types of the matrix families the
// persistent kernel serves: Q4_K_M's two and Q8_0, the integer
// matrix-vector path's (mmv). Q4_K comes first: the typed sources'
// shared macros (typed.cuh's STAGE_PARAM) are those of the first type
// included, which must be a tensor-core type.
var megakernelTypes = []ggml.Type{ggml.Q4_K, ggml.Q6_K, ggml.Q8_0}

// megakernelTyped and megakernelPlain are the families it serves: their
// main entry (matrix-vector for the matrix families, whose _rows entry
// for two-row steps too), and flash_attn's lean one. The F16 KV cache's
// instances only.
var (
	megakernelTyped = []string{"embed", "matmul", "matmul_residual", "lm_head", "rms_norm_qkv", "rms_norm_gate_up"}
	megakernelPlain = []string{"rms_norm", "rope_kv_write", "rms_norm_rope_kv_write", "flash_attn", "swiglu", "add", "argmax"}
)

// MegakernelFamily reports whether the persistent kernel serves a kernel
// family (its tasks run the family's dispatches).
func MegakernelFamily(family string) bool {
	return slices.Contains(megakernelTyped, family) || slices.Contains(megakernelPlain, family)
}

// MegakernelOps lists the ops of the persistent kernel in code order: op
// i has code i+1 in megakernel.cu's mk_run (0 is no op).
func MegakernelOps() []MegakernelOp {
	var out []MegakernelOp
	for _, f := range megakernelTyped {
		for _, t := range megakernelTypes {
			out = append(out, MegakernelOp{Instance: f + "." + strings.ToLower(t.String()), Entry: EntryMain})
			if MatrixFamily(f) {
				out = append(out, MegakernelOp{Instance: f + "." + strings.ToLower(t.String()), Entry: EntryRows})
			}
		}
	}
	for _, f := range megakernelPlain {
		out = append(out, MegakernelOp{Instance: f, Entry: EntryMain})
		if f == "flash_attn" {
			out = append(out, MegakernelOp{Instance: f, Entry: EntryLean}, MegakernelOp{Instance: f, Entry: EntrySplit})
		}
	}
	return out
}

// RowsPerBlock is the activation rows one block of a matrix family's
// matrix-vector entry takes: MMV_MR for _rows, else one.
func RowsPerBlock(e EntryPoint) uint32 {
	if e == EntryRows {
		return mmvRows
	}
	return 1
}

// MegakernelCode returns the persistent kernel's code for an instance's
// entry point, false where the kernel does not serve it.
func MegakernelCode(instance string, e EntryPoint) (uint32, bool) {
	for i, o := range MegakernelOps() {
		if o.Instance == instance && o.Entry == e {
			return uint32(i + 1), true
		}
	}
	return 0, false
}

// MegakernelInstances lists the instances whose sources megakernel.cu
// includes, in the order it includes them.
func MegakernelInstances() ([]Instance, error) {
	all, err := Instances()
	if err != nil {
		return nil, err
	}
	var out []Instance
	for _, o := range MegakernelOps() {
		if len(out) > 0 && out[len(out)-1].Name == o.Instance {
			continue
		}
		i := slices.IndexFunc(all, func(in Instance) bool { return in.Name == o.Instance })
		if i < 0 {
			return nil, fmt.Errorf("cuda: the megakernel's op %s is no instance", o.Instance)
		}
		out = append(out, all[i])
	}
	return out, nil
}
