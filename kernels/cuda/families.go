package cuda

//go:generate go run ./gen -dir .

import (
	"fmt"
	"sort"
	"strings"

	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/kernels"
)

// Family is a catalog kernel family T-CUDA implements, with the number its
// CUDA sources know it by: an instance .cu defines FAMILY as that number's
// name from families.cuh, and typed.cuh or plain.cuh emits the kernel of
// the family whose number it is.
type Family struct {
	Name string // the catalog family (kernels.Lookup)
	ID   int    // FAMILY_<NAME> in families.cuh
}

// Macro is the family's constant in families.cuh: FAMILY_MATMUL.
func (f Family) Macro() string { return "FAMILY_" + strings.ToUpper(f.Name) }

// families is the one table of T-CUDA's family numbers; kernels/cuda/gen
// writes families.cuh and the instance .cu files from it. The numbers are
// fixed here rather than derived from the catalog's order, so that adding
// or reordering catalog families renumbers none of the others: their
// preprocessed sources, and so their PTX, stay the same (families.cuh
// still changes, so `make ptx` must run and record the new hashes). A new
// family takes the next free number.
//
// T-CUDA implements every catalog family that no target lists as fused
// and the fused families its targets list (kernels.Targets); a test holds
// this table to that. The other fused family (residual_rms_norm) has
// no CUDA kernel, and the fuse pass never forms it for a CUDA target.
var families = []Family{
	{"embed", 1},
	{"matmul", 2},
	{"lm_head", 3},
	{"moe_gate_topk", 4},
	{"moe_gate_up", 5},
	{"moe_down_acc", 6},
	{"rms_norm_qkv", 7},
	{"rms_norm_gate_up", 8},
	{"matmul_residual", 9},
	{"rms_norm", 10},
	{"rope", 11},
	{"kv_write", 12},
	{"flash_attn", 13},
	{"add", 14},
	{"swiglu", 15},
	{"argmax", 16},
	{"rope_kv_write", 17},
	{"rms_norm_rope_kv_write", 18},
	{"rope_ext", 19},
	{"add_gated", 20},
	{"flash_attn_ext", 21},
	{"geglu", 22},
	{"scale", 23},
	{"logit_softcap", 24},
	{"attn_temp", 25},
	{"moe_add_bias", 26},
	{"swiglu_oai", 27},
	{"ssm_conv", 28},
	{"gdn_gates", 29},
	{"gated_delta_net", 30},
	{"rms_norm_gated", 31},
	{"split_halves", 32},
	{"mul_sigmoid", 33},
	{"copy_cols", 34},
	{"zero", 35},
	{"mul_vec", 36},
	{"moe_route_scale", 37},
}

// instanceTypes are the weight types for which every typed family is
// instantiated, in ggml id order. ptx.WeightTypes reports the subset whose
// PTX a given zrtc embeds, which is all of them once `make ptx` has run.
var instanceTypes = []ggml.Type{
	ggml.F32, ggml.F16, ggml.Q4_0, ggml.Q4_1, ggml.Q5_0, ggml.Q5_1, ggml.Q8_0,
	ggml.Q2_K, ggml.Q3_K, ggml.Q4_K, ggml.Q5_K, ggml.Q6_K, ggml.IQ4_NL, ggml.IQ3_S,
	ggml.IQ4_XS, ggml.MXFP4,
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
	Name   string    // the catalog instance name: matmul.q4_k
}

// Entry is the instance's PTX entry point and the base name of its .cu
// and .ptx files: matmul_q4_k.
func (i Instance) Entry() string { return Entry(i.Name) }

// Instances lists every instance T-CUDA compiles, by family number and
// then weight type id. It fails where a family of the table is not in the
// catalog, so that nothing is generated for a kernel zrtc cannot lower to.
func Instances() ([]Instance, error) {
	var out []Instance
	for _, f := range Families() {
		abi, ok := kernels.Lookup(f.Name)
		if !ok {
			return nil, fmt.Errorf("cuda: family %s (%d) is not in the kernel catalog", f.Name, f.ID)
		}
		if !abi.Typed {
			out = append(out, Instance{Family: f, ABI: abi, Name: kernels.InstanceName(abi, 0)})
			continue
		}
		for _, t := range instanceTypes {
			out = append(out, Instance{Family: f, ABI: abi, Type: t, Name: kernels.InstanceName(abi, t)})
		}
	}
	return out, nil
}
