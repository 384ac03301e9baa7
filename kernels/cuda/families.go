package cuda

//go:generate go run ./gen -dir .

import (
	"fmt"
	"sort"
	"strings"

	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/kernels"
)

// Family is a catalog kernel family T-CUDA implements: the number its
// CUDA sources know it by, the .cuh that holds its kernels and the shape
// of its launches. An instance .cu defines FAMILY as that number's name
// from families.cuh (and NAME, and WT for a typed family) and includes the
// family's .cuh.
type Family struct {
	Name string // the catalog family (kernels.Lookup)
	ID   int    // FAMILY_<NAME> in families.cuh
	// Source is the family's kernel source under family/ where another
	// family shares it (matmul_residual is matmul.cuh's, which tells the
	// two apart by FAMILY); "" for family/<Name>.cuh.
	Source string
	// Launch shapes the family's dispatches (Shape).
	Launch Geometry
}

// Macro is the family's constant in families.cuh: FAMILY_MATMUL.
func (f Family) Macro() string { return "FAMILY_" + strings.ToUpper(f.Name) }

// File is the family's kernel source, relative to kernels/cuda:
// family/rms_norm.cuh.
func (f Family) File() string {
	if f.Source != "" {
		return "family/" + f.Source
	}
	return "family/" + f.Name + ".cuh"
}

// families is the one table of T-CUDA's kernel families: a family is its
// row (number, source, launch geometry) and its .cuh under family/;
// kernels/cuda/gen writes families.cuh and the instance .cu files from it.
// The numbers are fixed here rather than derived from the catalog's
// order, so that adding or reordering catalog families renumbers none of
// the others: their preprocessed sources, and so their PTX, stay the same
// (families.cuh, which the typed families read, still changes, so `make
// ptx` must run and record the new hashes). A new family takes the next
// free number: its row here, its family/<name>.cuh, then make generate
// and make ptx.
//
// T-CUDA implements every catalog family that no target lists as fused
// and the fused families its targets list (kernels.Targets); a test holds
// this table to that. The other fused family (residual_rms_norm) has
// no CUDA kernel, and the fuse pass never forms it for a CUDA target.
var families = []Family{
	{Name: "embed", ID: 1, Launch: perRow(256)},
	{Name: "matmul", ID: 2, Launch: matrix(pushKN, floats)},
	{Name: "lm_head", ID: 3, Launch: matrix(pushKN, floats)},
	{Name: "moe_gate_topk", ID: 4, Launch: moeGateTopk},
	{Name: "moe_gate_up", ID: 5, Launch: moeGateUp},
	{Name: "moe_down_acc", ID: 6, Launch: moeDownAcc},
	{Name: "rms_norm_qkv", ID: 7, Launch: matrix(qkvKN, normedFloats)},
	{Name: "rms_norm_gate_up", ID: 8, Launch: matrix(gateUpKN, normedFloats)},
	{Name: "matmul_residual", ID: 9, Source: "matmul.cuh", Launch: matrix(pushKN, floats)},
	{Name: "rms_norm", ID: 10, Launch: perRow(256)},
	{Name: "rope", ID: 11, Launch: perRow(256)},
	{Name: "kv_write", ID: 12, Launch: perRow(256)},
	{Name: "flash_attn", ID: 13, Launch: attention},
	{Name: "add", ID: 14, Launch: elementwise(1)},
	{Name: "swiglu", ID: 15, Launch: elementwise(1)},
	{Name: "argmax", ID: 16, Launch: perRow(1024)},
	{Name: "rope_kv_write", ID: 17, Launch: rowsBy(ropeHeads)},
	{Name: "rms_norm_rope_kv_write", ID: 18, Launch: rowsBy(ropeHeads)},
	{Name: "rope_ext", ID: 19, Launch: perRow(256)},
	{Name: "add_gated", ID: 20, Launch: perRow(256)},
	{Name: "flash_attn_ext", ID: 21, Launch: attention},
	{Name: "geglu", ID: 22, Launch: elementwise(1)},
	{Name: "scale", ID: 23, Launch: elementwise(1)},
	{Name: "logit_softcap", ID: 24, Launch: rowsBy(softcapChunks)},
	{Name: "attn_temp", ID: 25, Launch: perRow(256)},
	{Name: "moe_add_bias", ID: 26, Launch: elementwise(2)},
	{Name: "swiglu_oai", ID: 27, Launch: elementwise(1)},
	{Name: "ssm_conv", ID: 28, Launch: rowsBy(convChannels)},
	{Name: "gdn_gates", ID: 29, Launch: elementwise(1)},
	{Name: "gated_delta_net", ID: 30, Launch: rowsBy(deltaHeads)},
	{Name: "rms_norm_gated", ID: 31, Launch: rowsBy(normGroups)},
	{Name: "split_halves", ID: 32, Launch: elementwise(2)},
	{Name: "mul_sigmoid", ID: 33, Launch: elementwise(1)},
	{Name: "copy_cols", ID: 34, Launch: elementwise(1)},
	{Name: "zero", ID: 35, Launch: elementwise(1)},
	{Name: "mul_vec", ID: 36, Launch: elementwise(1)},
	{Name: "moe_route_scale", ID: 37, Launch: elementwise(1)},
	{Name: "all_reduce_sum", ID: 38, Launch: peer},
	{Name: "all_gather", ID: 39, Launch: peer},
	{Name: "rms_norm_matmul", ID: 40, Launch: matrix(normMMKN, normedFloats)},
	{Name: "rms_norm_gate_up_swiglu", ID: 41, Launch: oneRow(matrix(gateUpKN, normedFloats))},
	{Name: "rms_norm_qkv_rope_kv_write", ID: 42, Launch: oneRow(adjacentPairs(matrix(qkvKN, normedFloats)))},
}

// collectives are tensor parallelism's catalog families, all_reduce_sum
// and all_gather. T-CUDA runs them either through NCCL
// (runtime/cuda/nccl) or, for the small messages of a decode step, as
// its own one-shot kernels over NVLink peer access (family/*.cuh,
// peer.cuh); a bundle built while the PTX archive lacked those kernels
// carries a blob of only the collective's name, which the tier runs
// through NCCL.
var collectives = []string{"all_reduce_sum", "all_gather"}

// NCCLBlobPrefix begins the code of a collective's blob that holds no
// PTX (a zrtc whose archive lacked the one-shot kernels): the rest is the
// instance's name, and the tier runs it through NCCL.
const NCCLBlobPrefix = "nccl "

// Collective reports whether the catalog family is a collective.
func Collective(family string) bool {
	for _, c := range collectives {
		if c == family {
			return true
		}
	}
	return false
}

// instanceTypes are the weight types for which every typed family is
// instantiated, in ggml id order. ptx.WeightTypes reports the subset whose
// PTX a given zrtc embeds, which is all of them once `make ptx` has run.
var instanceTypes = []ggml.Type{
	ggml.F32, ggml.F16, ggml.Q4_0, ggml.Q4_1, ggml.Q5_0, ggml.Q5_1, ggml.Q8_0,
	ggml.Q2_K, ggml.Q3_K, ggml.Q4_K, ggml.Q5_K, ggml.Q6_K, ggml.IQ4_NL, ggml.IQ3_S,
	ggml.IQ4_XS, ggml.MXFP4,
}

// kvLayouts are the KV cache layouts, besides F16's, for which every
// KV-typed family (kv_write, the attention families, the fused rope
// writes) is instantiated: Q8_0 K and V (llama.cpp's -ctk q8_0 -ctv
// q8_0), unrotated (heads that are no multiple of 64) and with each
// rotation kernels.KVRotation gives the heads T-CUDA attends over (64,
// 128, 256 wide); and FP8 E4M3 K and V (zrt's, never rotated), which
// zrtc builds for targets of compute capability 8.9 on (the PTX is
// compute_80's, which codes E4M3 in integer operations: kv.cuh). A cache
// of Q8_0 K over F16 V, or the reverse, has no instance: zrtc refuses it
// for a cuda target.
var kvLayouts = []kernels.KVTypes{
	{K: ggml.Q8_0, V: ggml.Q8_0},
	{K: ggml.Q8_0, V: ggml.Q8_0, RotK: 64, RotV: 64},
	{K: ggml.Q8_0, V: ggml.Q8_0, RotK: 128, RotV: 64},
	{K: ggml.Q8_0, V: ggml.Q8_0, RotK: 256, RotV: 64},
	{K: kernels.FP8E4M3, V: kernels.FP8E4M3},
}

// KVLayouts returns the KV cache layouts other than F16's that T-CUDA
// instantiates every KV-typed family for.
func KVLayouts() []kernels.KVTypes { return append([]kernels.KVTypes(nil), kvLayouts...) }

// lookupFamily returns the family table's row for a catalog family.
func lookupFamily(name string) (Family, bool) {
	for _, f := range families {
		if f.Name == name {
			return f, true
		}
	}
	return Family{}, false
}

// Families returns the kernel families T-CUDA implements, in number order.
func Families() []Family {
	out := append([]Family(nil), families...)
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// InstanceTypes returns the weight types T-CUDA instantiates every typed
// family for, in id order.
func InstanceTypes() []ggml.Type { return append([]ggml.Type(nil), instanceTypes...) }

// Instance is one kernel T-CUDA compiles: a catalog instance, its source
// kernels/cuda/<Entry>.cu and its PTX entry point Entry.
type Instance struct {
	Family Family
	ABI    *kernels.ABI
	Type   ggml.Type // the weight type; meaningful only where ABI.Typed
	// KV is the cache layout a KV-typed family's instance addresses
	// (kernels.F16KV for every other instance).
	KV   kernels.KVTypes
	Name string // the catalog instance name: matmul.q4_k, flash_attn.kv-q8_0-q8_0-rk128-rv64
}

// Entry is the instance's PTX entry point and the base name of its .cu
// and .ptx files: matmul_q4_k.
func (i Instance) Entry() string { return Entry(i.Name) }

// Instances lists every instance T-CUDA compiles, by family number and
// then weight type id (a KV-typed family: F16's instance, then
// kvLayouts' in order). It fails where a family of the table is not in the
// catalog, so that nothing is generated for a kernel zrtc cannot lower to.
func Instances() ([]Instance, error) {
	var out []Instance
	for _, f := range Families() {
		abi, ok := kernels.Lookup(f.Name)
		if !ok {
			return nil, fmt.Errorf("cuda: family %s (%d) is not in the kernel catalog", f.Name, f.ID)
		}
		if !abi.Typed {
			out = append(out, Instance{Family: f, ABI: abi, KV: kernels.F16KV, Name: kernels.InstanceName(abi, 0)})
			if abi.KVTyped {
				for _, kv := range kvLayouts {
					out = append(out, Instance{Family: f, ABI: abi, KV: kv, Name: kernels.KVInstanceName(abi, kv)})
				}
			}
			continue
		}
		for _, t := range instanceTypes {
			out = append(out, Instance{Family: f, ABI: abi, Type: t, KV: kernels.F16KV, Name: kernels.InstanceName(abi, t)})
		}
	}
	return out, nil
}
