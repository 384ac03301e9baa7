package cuda

import (
	"fmt"
	"strings"

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
// all of them, concatenated) and the features one block of its launch
// makes: MT_N for the tensor-core tiles, n over the grid's width for the
// matrix-vector and dp4a kernels (in whole warps' worth, MM_WARPS), and a
// block's MM_WARPS on the float path.
func BlockFeatures(instance string, push, spec []uint32, rows int) (n, perBlock uint32, err error) {
	family, typ, _ := strings.Cut(instance, ".")
	if !MatrixFamily(family) {
		return 0, 0, fmt.Errorf("cuda: %s is not a matrix family", family)
	}
	d := Dispatch{Family: family, Type: typ, Push: push, Spec: spec, Rows: uint32(rows)}
	switch family {
	case "rms_norm_qkv":
		_, n, err = qkvKN(d)
	case "rms_norm_gate_up":
		_, n, err = gateUpKN(d)
	default:
		_, n, err = pushKN(d)
	}
	if err != nil {
		return 0, 0, err
	}
	if n == 0 {
		return 0, 0, fmt.Errorf("cuda: %s: no output features", instance)
	}
	l, err := Shape(instance, push, spec, rows, false)
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
	return n, min(max(perBlock, 1), n), nil
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
