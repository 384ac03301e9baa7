package kernels

import (
	"slices"
	"strconv"
	"strings"

	"github.com/zrtdev/zrt/format/zrt"
)

// TierKind is the runtime tier family that runs a target's bundles. The
// compiler keys its kernel templates by it and the runtime its loaders, so
// a new target of an existing kind is one row of targets below.
type TierKind string

// The tier kinds.
const (
	TierCPU  TierKind = "cpu"  // T-CPU: Go kernels compiled into zrt-run
	TierCUDA TierKind = "cuda" // T-CUDA: PTX through the CUDA Driver API
	TierAMD  TierKind = "amd"  // T1: PM4 over /dev/kfd (ZRT_TIER=t1)
)

// Target is everything zrt knows about one compile target.
type Target struct {
	// Name is how users spell it (--target, target = … in the config).
	Name string
	// Code is the .zrt header's gpu_target.
	Code zrt.Target
	// Tier is the tier that runs its bundles.
	Tier TierKind
	// Fused lists the kernel families beyond the base set that its
	// kernels implement: fused ops (the fuse pass forms exactly those
	// whose family is here) and tensor parallelism's collectives
	// (all_reduce_sum, all_gather: the shard pass splits a model only for
	// a target that lists them).
	Fused []string
	// PTX, for a CUDA target, is the architecture whose PTX its bundles
	// carry (the archive directory, sm_80): Ampere's and Ada's targets
	// share compute_80 PTX, which the driver JIT-compiles for the card.
	// The target's own compute capability is what its bundles require
	// of the GPU.
	PTX string
}

// cudaFused is the fused families every CUDA target's kernels implement
// (the collectives are NCCL's or the peer kernels', kernels/cuda.Collective).
var cudaFused = []string{"rms_norm_qkv", "rms_norm_gate_up", "rms_norm_matmul", "rms_norm_gate_up_swiglu", "rms_norm_qkv_rope_kv_write",
	"rms_norm_rope_kv_write", "rope_kv_write", "matmul_residual", "all_reduce_sum", "all_gather"}

// targets is the registry of compile targets, in the order zrtc lists
// them.
var targets = []Target{
	{Name: "cpu", Code: zrt.CPU, Tier: TierCPU,
		Fused: []string{"rms_norm_qkv", "rms_norm_gate_up", "residual_rms_norm", "rms_norm_rope_kv_write", "rope_kv_write", "matmul_residual",
			"all_reduce_sum", "all_gather"}},
	{Name: "cuda:sm_90", Code: zrt.SM90, Tier: TierCUDA, PTX: "sm_90", Fused: cudaFused},
	// Ampere and Ada (sm_80, sm_86, sm_89): compute_80 PTX, which the
	// driver JIT-compiles for any later GPU too. The kernels are sm_90's
	// without programmatic dependent launch (dep_sync in
	// kernels/cuda/common.cuh); the tensor-core tiles' mma.sync and
	// cp.async are Ampere's. cuda:sm_86 and cuda:sm_89 carry the same PTX
	// as cuda:sm_80 and differ only in the GPU they require, so a set
	// that has them runs the bundle built for the card's own capability;
	// FP8 KV is built from compute capability 8.9 (sm_89, sm_90): its
	// kernels code E4M3 in integer operations, which compute_80 runs.
	{Name: "cuda:sm_80", Code: zrt.SM80, Tier: TierCUDA, PTX: "sm_80", Fused: cudaFused},
	{Name: "cuda:sm_86", Code: zrt.SM86, Tier: TierCUDA, PTX: "sm_80", Fused: cudaFused},
	{Name: "cuda:sm_89", Code: zrt.SM89, Tier: TierCUDA, PTX: "sm_80", Fused: cudaFused},
	// The AMD targets' kernels (kernels/amd) implement one fused family.
	{Name: "amd:gfx1201", Code: zrt.GFX1201, Tier: TierAMD, Fused: []string{"matmul_residual"}},
	{Name: "amd:gfx1100", Code: zrt.GFX1100, Tier: TierAMD, Fused: []string{"matmul_residual"}},
}

// Targets lists the compile targets.
func Targets() []Target { return slices.Clone(targets) }

// TargetNames lists the targets' names, for help texts and errors.
func TargetNames() []string {
	names := make([]string, len(targets))
	for i, t := range targets {
		names[i] = t.Name
	}
	return names
}

// LookupTarget returns the target named name.
func LookupTarget(name string) (Target, bool) {
	for _, t := range targets {
		if t.Name == name {
			return t, true
		}
	}
	return Target{}, false
}

// ComputeCapability is the CUDA compute capability a CUDA target's PTX is
// for (cuda:sm_80 → 8, 0), which the driver JIT-compiles for that GPU or
// a later one; ok is false for other targets.
func (t Target) ComputeCapability() (major, minor int, ok bool) {
	_, sm, found := strings.Cut(t.Name, ":sm_")
	n, err := strconv.Atoi(sm)
	if t.Tier != TierCUDA || !found || err != nil || n < 10 {
		return 0, 0, false
	}
	return n / 10, n % 10, true
}

// Fuses reports whether the target implements the fused kernel family.
func (t Target) Fuses(family string) bool { return slices.Contains(t.Fused, family) }
