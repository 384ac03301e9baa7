package cuda

import (
	"fmt"
	"strings"

	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/zrt"
	kcuda "github.com/zrtdev/zrt/kernels/cuda"
	"github.com/zrtdev/zrt/runtime/replay"
)

// Launch is one resolved dispatch of a variant: the kernel (an index into
// the bundle's blobs), its launch shape, and its parameter values in the
// kernel-parameter convention — buffer pointers (device addresses, 0 for
// an absent optional buffer), then push constants, then specialization
// values, each in its own 8-byte slot (a u32 in the low half).
type Launch struct {
	Kernel int
	Name   string
	Shape  kcuda.Launch
	// Push and Spec are the dispatch's push constants and specialization
	// values (also in Params), which the megakernel's tables read.
	Push, Spec []uint32
	Params     []uint64
	// Sizes are the byte sizes of the parameters (8 for pointers, 4 for
	// dwords), which is how the kernel reads them.
	Sizes []int
	// Staging is the bytes of the staging buffer (Shape.Staged) a launch
	// and the stage launch before it use; their last parameter is its
	// address, which Walk leaves 0 for Load to fill in (one buffer serves
	// every variant: launches on one stream run one after another).
	Staging int
	// Collective, where not nil, makes the launch a collective that the
	// tier runs through NCCL instead of a kernel (kernels/cuda.Collective);
	// Shape is then zero.
	Collective *Collective
}

// Collective is a tensor-parallel collective as a rank runs it: through
// NCCL, or (Peer) as the one-shot kernel of its blob over NVLink peer
// access (peer.go). NCCL's calls in a captured graph have fixed sizes, so
// they cover every row of the variant, active or not (an inactive row's
// sum or copy is harmless: nothing reads it); the kernels read the
// request table and move the active rows only.
type Collective struct {
	// Gather: all_gather; else all_reduce_sum.
	Gather bool
	// X is the rank's value: Rows × Cols floats to sum in place, or the
	// rank's part of each row (kernels.Part's columns), packed, to gather
	// into Y's Rows × Cols.
	X, Y       uint64
	Rows, Cols int
	// BySlot: a gather of logits, whose rows are the active rows that
	// want logits, each at its slot's row of X and Y; through NCCL it
	// covers SlotRows rows, every slot's row of the logits region, since
	// which slots a step's rows are is in the request table, which a
	// graph's copies cannot read.
	BySlot   bool
	SlotRows int
	// Peer makes the launch the collective's one-shot kernel (set by the
	// tier, which then gives it a kernel's Shape and its exchange
	// descriptor as a last parameter).
	Peer bool
}

// ncclRows is the rows the collective covers through NCCL.
func (c *Collective) ncclRows() int {
	if c.BySlot {
		return c.SlotRows
	}
	return c.Rows
}

// collective resolves dispatch d of a collective family: its buffers,
// and the rows it covers, checked against the regions they lie in.
func collective(d *replay.Dispatch, rows int, mem *Memory) (*Collective, error) {
	family, _, _ := strings.Cut(d.Name, ".")
	c := &Collective{Gather: family == "all_gather", X: d.Bufs[0], Rows: rows}
	if len(d.Push) < 1 || d.Push[0] == 0 {
		return nil, fmt.Errorf("%s without a column count", d.Name)
	}
	c.Cols = int(d.Push[0])
	xr := mem.Region(c.X)
	if xr < 0 {
		return nil, fmt.Errorf("%s: x outside the memory plan", d.Name)
	}
	end := func(r int) uint64 { return mem.Base[r] + mem.Size[r] }
	if !c.Gather {
		if n := uint64(4 * c.Rows * c.Cols); c.X+n > end(xr) {
			return nil, fmt.Errorf("%s: %d rows of %d columns run past x's region", d.Name, c.Rows, c.Cols)
		}
		return c, nil
	}
	if len(d.Bufs) < 3 || len(d.Push) < 2 {
		return nil, fmt.Errorf("%s: want x, io, y and cols, by_slot", d.Name)
	}
	c.Y, c.BySlot = d.Bufs[2], d.Push[1] != 0
	yr := mem.Region(c.Y)
	if yr < 0 {
		return nil, fmt.Errorf("%s: y outside the memory plan", d.Name)
	}
	if c.BySlot {
		c.SlotRows = int((end(yr) - c.Y) / uint64(4*c.Cols))
	}
	if n := c.ncclRows(); n == 0 || c.Y+uint64(4*n*c.Cols) > end(yr) {
		return nil, fmt.Errorf("%s: %d rows of %d columns do not fit y's region", d.Name, n, c.Cols)
	}
	// A rank's part is at most ⌈cols/ranks⌉ wide; the tier checks its own
	// against x's region when it knows its rank.
	return c, nil
}

// Memory is where the walker finds regions: device addresses.
type Memory = replay.Memory

// Walk resolves a variant's stream against device memory (replay.Walk
// checks it as every tier does) and turns each dispatch into a launch.
// Barriers need no translation: launches on one stream (and the graph
// captured from it) already run in order. A dispatch whose shape stages
// its activation rows becomes two launches, the stage then the kernel,
// unless it reuses the records of the launch before it (reusesStage); a
// shape with a staging buffer and no stage launch (the split decode
// attention, which keeps its partial states there) stays one. A
// collective's dispatch becomes a launch with Collective set.
func Walk(v *bundle.Variant, blobs []*zrt.Blob, mem *Memory, fence int) ([]Launch, error) {
	return walk(v, blobs, mem, fence, func(d *replay.Dispatch) (kcuda.Launch, error) {
		return kcuda.Shape(d.Name, d.Push, d.Spec, int(v.Rows), v.Stage == bundle.StagePrefill)
	})
}

// WalkOneRow is Walk for the steps of a decode variant whose every row
// must come out as in a one-row decode step (kcuda.OneRowShape): the
// speculative verify steps (Tier.RunOneRow). wide reports whether kernel
// k (an index into blobs) has the _rows4 entry; unsplit gives the split
// decode attention its main entry instead (kcuda.Unsplit).
func WalkOneRow(v *bundle.Variant, blobs []*zrt.Blob, mem *Memory, fence int, wide func(k int) bool, unsplit bool) ([]Launch, error) {
	return walk(v, blobs, mem, fence, func(d *replay.Dispatch) (kcuda.Launch, error) {
		l, err := kcuda.OneRowShape(d.Name, d.Push, d.Spec, int(v.Rows), wide(d.Kernel))
		if unsplit {
			l = kcuda.Unsplit(l)
		}
		return l, err
	})
}

// WalkMegakernel is Walk for a decode variant's persistent kernel: each
// dispatch shaped as the kernel's tasks run it (kcuda.MegakernelShape),
// which for up to eight rows is one launch a dispatch, no stage.
func WalkMegakernel(v *bundle.Variant, blobs []*zrt.Blob, mem *Memory, fence int) ([]Launch, error) {
	return walk(v, blobs, mem, fence, func(d *replay.Dispatch) (kcuda.Launch, error) {
		return kcuda.MegakernelShape(d.Name, d.Push, d.Spec, int(v.Rows))
	})
}

func walk(v *bundle.Variant, blobs []*zrt.Blob, mem *Memory, fence int, shape func(d *replay.Dispatch) (kcuda.Launch, error)) ([]Launch, error) {
	s, err := replay.Walk(v, blobs, mem, fence)
	if err != nil {
		return nil, err
	}
	out := make([]Launch, 0, len(s.Dispatches))
	for i, d := range s.Dispatches {
		l := Launch{Kernel: d.Kernel, Name: d.Name, Push: d.Push, Spec: d.Spec}
		for _, addr := range d.Bufs {
			l.Params, l.Sizes = append(l.Params, addr), append(l.Sizes, 8)
		}
		for _, x := range append(append([]uint32(nil), d.Push...), d.Spec...) {
			l.Params, l.Sizes = append(l.Params, uint64(x)), append(l.Sizes, 4)
		}
		if family, _, _ := strings.Cut(d.Name, "."); kcuda.Collective(family) {
			if l.Collective, err = collective(&d, int(v.Rows), mem); err != nil {
				return nil, fmt.Errorf("dispatch %d: %w", i, err)
			}
			out = append(out, l)
			continue
		}
		if l.Shape, err = shape(&d); err != nil {
			return nil, fmt.Errorf("dispatch %d: %w", i, err)
		}
		if n := l.Shape.Staged; n > 0 {
			l.Params, l.Sizes, l.Staging = append(l.Params, 0), append(l.Sizes, 8), n
			if l.Shape.Stage != nil && (len(out) == 0 || !reusesStage(out[len(out)-1], l)) {
				stage := l
				stage.Params, stage.Shape = append([]uint64(nil), l.Params...), *l.Shape.Stage
				out = append(out, stage)
			}
		}
		out = append(out, l)
		if l.Shape.Rest != nil {
			rest := l
			rest.Params, rest.Shape = append([]uint64(nil), l.Params...), *l.Shape.Rest
			out = append(out, rest)
		}
	}
	return out, nil
}

// The parameters of the plain products (matmul, matmul_residual) that
// reusesStage compares: x, y, k.
const (
	paramX = 0
	paramY = 4
	paramK = 5
)

// reusesStage reports whether staged launch l may read the activation
// records that prev, the launch just before it, left in the staging
// buffer, instead of staging them again: both are plain products with one
// record type (kcuda.SameStage) of the same input x, k and rows (one stage
// shape), and prev did not write x. A layer whose Q, K and V weights
// differ in type (Q4_K_M's Q6_K V layers) so stages its input once, not
// three times. The records outlive prev: its split-k partial tiles lie
// past them in the buffer.
func reusesStage(prev, l Launch) bool {
	return prev.Staging > 0 && prev.Shape.Stage != nil && prev.Shape.Entry != kcuda.EntryStage && kcuda.SameStage(prev.Name, l.Name) &&
		*prev.Shape.Stage == *l.Shape.Stage && prev.Params[paramX] == l.Params[paramX] &&
		prev.Params[paramK] == l.Params[paramK] && prev.Params[paramY] != prev.Params[paramX]
}
