// Package passes is zrtc's pass pipeline: an ordered table of named passes
// over a compilation Unit, from verified IR to lowered packet streams. Each
// pass reads what earlier passes left on the Unit and adds its own result.
package passes

import (
	"context"
	"time"

	"github.com/zrtdev/zrt/asm/pm4"
	"github.com/zrtdev/zrt/compiler/ir"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/zrt"
	"github.com/zrtdev/zrt/kernels"
)

// Unit is one compilation: the variant graphs and everything the passes
// derive from them.
type Unit struct {
	Graphs []*ir.Graph
	// Target is the compile target (cpu, cuda:sm_90…): fuse forms only the
	// fused ops it has kernels for.
	Target string
	// NoFuse turns fusion off (zrtc build --no-fuse), for bisecting.
	NoFuse bool
	// Lacks, where not nil, reports the kernel families the target's
	// templates have no code for (a zrtc whose PTX archive predates a
	// fused family): fuse forms none of their ops.
	Lacks func(family string) bool
	// TP is the tensor-parallel rank the unit is compiled for (zrtc
	// build --tp): the shard pass splits the graphs for it.
	TP TP
	// State sizes the graph builder computed; memplan turns them into regions.
	State StateSizes
	// KV is the KV cache's element types (cache_type_k, cache_type_v):
	// specialize picks the kernel instances that address its layout. The
	// zero value is an F16 cache.
	KV kernels.KVTypes

	Liveness []*Liveness    // per graph, by liveness
	Physical []*PhysicalMap // per graph, by regalloc
	Plan     *MemPlan       // by memplan
	// Templates supplies the target's unpatched kernel blobs.
	Templates Templates
	// Kernels and Blobs are the kernel instances and their patched blobs,
	// and InstKernel each instruction's instance, by specialize.
	Kernels    []KernelInstance
	Blobs      []*zrt.Blob
	InstKernel [][]int
	Streams    []Stream // per graph, by lower
	// MegakernelSMs, when positive, has megakernel schedule the decode
	// variants for that many multiprocessors whatever the target; 0
	// schedules them for a CUDA target's GPU (cuda.Multiprocessors) and
	// not at all for other targets.
	MegakernelSMs int
	// MegakernelTiles is the tiles a multiprocessor that megakernel
	// splits a decode variant's matrix product (and a one-row elementwise
	// op) into at most: fewer, longer tasks a step, or more of them, in
	// flight at once; 0 is 2 (the config's megakernel_tiles).
	MegakernelTiles int
	// Schedules are the decode variants' megakernel schedules, in variant
	// order, by megakernel.
	Schedules []bundle.Schedule
}

// kvTypes is u.KV, the zero value read as F16.
func (u *Unit) kvTypes() kernels.KVTypes {
	if u.KV == (kernels.KVTypes{}) {
		return kernels.F16KV
	}
	return u.KV
}

// StateSizes are the bytes of the buffers that outlive a step.
type StateSizes struct {
	// KV is the whole page pool, KVPageBytes one page of it.
	KV          int64
	KVPageBytes int64
	IO          int64
	Logits      int64
	Tokens      int64
	// Recurrent is every slot's recurrent-layer state; 0: no region.
	Recurrent int64
	// KVWindow is every slot's ring of window-layer KV pages; 0: no
	// region (nor a second request table).
	KVWindow int64
}

// KernelInstance is one kernel blob to emit: a kernel and the values of its
// specialization slots.
type KernelInstance struct {
	Name string
	Spec []uint32
}

// Stream is one variant's lowered packet stream.
type Stream struct {
	Key    ir.ShapeKey
	Words  []uint32
	Relocs []pm4.Reloc
	// Dispatches counts DISPATCH_DIRECT packets; Barriers the barriers.
	Dispatches, Barriers int
}

// Pass is one named step of the pipeline.
type Pass struct {
	Name string
	Run  func(ctx context.Context, u *Unit) error
	// Doc says what the pass does, for `zrtc passes`.
	Doc string
}

// Pipeline is the declared order of passes. Names are stable: they appear
// in flags and dump file names.
var Pipeline = []Pass{
	{"verify", verifyUnit, "check operands, roles, shapes and in-place writes against the opcode and kernel tables"},
	{"shard", shard, "split the graphs for one rank of a tensor-parallel set: heads and FFN columns over the ranks, ALL_REDUCE_SUM after row-parallel projections, a vocabulary-parallel LM head and ALL_GATHER (only with --tp)"},
	{"fuse", fuse, "form the target's fused ops: norm+QKV, norm+projections of one type, norm+gate/up (+SwiGLU in one-row decode), residual+norm, K norm+RoPE+KV write"},
	{"liveness", liveness, "per register: defining instruction, last read, and the kill set after each instruction"},
	{"regalloc", regalloc, "map registers onto physical scratch buffers by live range"},
	{"memplan", memplan, "place weights, KV pages, scratch, request table and output ring in heaps and regions"},
	{"specialize", specialize, "pick each instruction's kernel instance and patch its specialization slots into the target's blob"},
	{"lower", lower, "emit each variant's PM4 stream with relocations, kernels and barriers"},
	{"megakernel", megakernel, "schedule each decode variant's dispatches as tasks with dependency counters for a persistent kernel (CUDA targets)"},
}

// Constraint is an ordering rule between two passes, with its reason.
type Constraint struct {
	Before, After, Why string
}

// Constraints are checked by the pipeline test.
var Constraints = []Constraint{
	{"verify", "fuse", "fusion pattern-matches well-formed IR only"},
	{"verify", "shard", "the split rewrites well-formed IR only"},
	{"shard", "fuse", "the split slices each weight from its file tensor; a fused weight concatenated from several tensors is one it cannot slice per projection"},
	{"shard", "memplan", "a rank's weights and KV pages are sized by its split"},
	{"fuse", "liveness", "fusion removes registers and changes live ranges"},
	{"verify", "liveness", "liveness assumes every read has a reaching write"},
	{"liveness", "regalloc", "registers are packed by their live ranges"},
	{"regalloc", "memplan", "the scratch region is sized from the physical buffers"},
	{"memplan", "lower", "lowering turns operands into region offsets"},
	{"specialize", "lower", "the stream's program addresses are relocations to specialized blobs"},
	{"lower", "megakernel", "a schedule's tasks are pieces of the stream's dispatches, one per instruction"},
}

// Timing is one pass's wall time.
type Timing struct {
	Pass string
	Dur  time.Duration
}

// Run runs the pipeline up to and including stopAfter ("" runs all),
// verifying the IR again after every pass when verifyEach is set. RunWith
// can also resume from text IR and dump after any pass.
func Run(ctx context.Context, u *Unit, stopAfter string, verifyEach bool) ([]Timing, error) {
	return RunWith(ctx, u, RunOptions{StopAfter: stopAfter, VerifyEach: verifyEach})
}
