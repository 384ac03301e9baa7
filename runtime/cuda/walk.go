package cuda

import (
	"fmt"

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
// attention, which keeps its partial states there) stays one.
func Walk(v *bundle.Variant, blobs []*zrt.Blob, mem *Memory, fence int) ([]Launch, error) {
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
		if l.Shape, err = kcuda.Shape(d.Name, d.Push, d.Spec, int(v.Rows), v.Stage == bundle.StagePrefill); err != nil {
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
