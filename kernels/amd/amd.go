// Package amd describes the AMD targets' kernels to the Go side. The
// OpenCL C sources next to this file (kernels.cl with the family bodies,
// common.h with the request table and the workgroup reductions, deq.h with
// one block-decode function per weight type) are compiled by `make amd`
// (build_amd.sh, Debian's clang-19 and ld.lld-19) into one AMDGPU code
// object — an HSA code object v5 ELF holding one kernel and its
// descriptor — per catalog instance and target, committed under obj/.
// zrtc embeds them (package obj) and fills each blob's header from the
// code object's kernel descriptor and metadata note (ParseCodeObject).
//
// # Calling convention
//
// Every kernel is an amdgpu_kernel whose arguments, in order, are the
// catalog ABI's buffers (64-bit global pointers, Bufs order), its push
// constants (one 32-bit word each) and then its specialization slots (one
// 32-bit word each, F32 slots as their bits). The kernarg segment is
// therefore exactly the dispatch's user-data dwords (seed 000 §11.3, what
// the packet stream's SET_SH_REG COMPUTE_USER_DATA_* carries) followed by
// the blob's patched slot dwords: a tier writes those words into a kernarg
// buffer and passes its address in s[0:1] (the descriptor enables only the
// kernarg segment pointer among the user SGPRs). This is T-CUDA's design
// (trailing parameters): one code object serves every shape, and the blob
// is specialized, as on every target, by patching the placeholder dwords
// zrtc appends after the code object. A test holds every object's
// metadata (.args offsets and sizes, no hidden arguments) to this.
//
// # Grid
//
// A dispatch is DISPATCH_DIRECT of the packet stream's grid, counted in
// workgroups: one workgroup per row of the variant's capacity (rows at or
// past the request table's n_rows return at once), or for the families
// passes/lower.go sizes by an attribute (matmul, matmul_residual: n;
// lm_head: n_vocab; moe_gate_up: f; moe_down_acc: n; moe_gate_topk:
// n_expert) one workgroup per output feature (per expert for
// moe_gate_topk, whose workgroup g routes rows g, g+n_expert, …).
// Workgroups are WorkgroupSize threads, wave32.
//
// # Correctness
//
// No AMD GPU is at hand where these were written, so the kernels have not
// run. They are written to be reviewed against T-CPU (kernels/cpu, and
// kernels/quant for block decoding) rather than tuned: each family body
// is the CPU loop with its outer index taken from the workgroup id and
// its inner sums split over the workgroup's lanes; every typed family
// decodes weights through the one deq_<type> function of deq.h and pairs
// them with activations rounded as T-CPU quantizes them (Q8_0, Q8_1, Q8_K
// or F16, the weight type's ggml vec-dot partner, per block, in the
// dot-product loop itself). Transcendental functions are float32 here
// where T-CPU takes some in float64, and sums run in another order: the
// results are expected within the parity tolerance, not bit-identical.
// What the tests check is the object files: they disassemble, name every
// kernel symbol, and their descriptors and metadata agree with the blob
// headers zrtc writes.
package amd

//go:generate go run ./gen -dir .

import (
	"fmt"
	"strings"

	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/kernels/quant"
)

// WorkgroupSize is the threads per workgroup of every AMD kernel
// (reqd_work_group_size in kernels.cl); zrtc reads it from each code
// object, and a test holds the objects to it.
const WorkgroupSize = 256

// Targets are the gfx processors objects are built for, as spelled in
// the target names (amd:gfx1201).
var Targets = []string{"gfx1201", "gfx1100"}

// families are the catalog families the AMD kernels implement: every
// family the llama, qwen2, qwen3 and qwen3moe models lower to without
// fusion, and the one fused family the AMD targets list (matmul_residual;
// kernels.Targets).
var families = []string{
	"embed", "rms_norm", "matmul", "rope", "kv_write", "flash_attn", "add", "swiglu",
	"lm_head", "argmax", "moe_gate_topk", "moe_gate_up", "moe_down_acc", "matmul_residual",
}

// instanceTypes are the weight types every typed family is built for.
var instanceTypes = []ggml.Type{
	ggml.F32, ggml.F16, ggml.Q4_0, ggml.Q4_1, ggml.Q5_0, ggml.Q5_1, ggml.Q8_0,
	ggml.Q2_K, ggml.Q3_K, ggml.Q4_K, ggml.Q5_K, ggml.Q6_K, ggml.IQ3_S, ggml.IQ4_NL, ggml.IQ4_XS,
}

// Families returns the catalog families the AMD kernels implement.
func Families() []string { return append([]string(nil), families...) }

// InstanceTypes returns the weight types every typed family is built for.
func InstanceTypes() []ggml.Type { return append([]ggml.Type(nil), instanceTypes...) }

// Entry is an instance's kernel symbol and the base name of its object:
// matmul.q4_k → matmul_q4_k (the descriptor is matmul_q4_k.kd).
func Entry(instance string) string { return strings.ReplaceAll(instance, ".", "_") }

// Instance is one kernel built per target.
type Instance struct {
	ABI  *kernels.ABI
	Type ggml.Type // meaningful only where ABI.Typed
	Name string    // matmul.q4_k
}

// Defines are the preprocessor definitions build_amd.sh compiles the
// instance with: its family, its weight type and that type's activation
// partner (quant.VecDotType), as ggml type ids, and its kernel name.
func (i Instance) Defines() string {
	s := fmt.Sprintf("-DNAME=%s -DFAMILY_%s=1", Entry(i.Name), strings.ToUpper(i.ABI.Name))
	if i.ABI.Typed {
		s += fmt.Sprintf(" -DWTYPE=%d -DVTYPE=%d", uint32(i.Type), uint32(quant.VecDotType(i.Type)))
	}
	return s
}

// Instances lists every instance, by family and then weight type.
func Instances() ([]Instance, error) {
	var out []Instance
	for _, f := range families {
		abi, ok := kernels.Lookup(f)
		if !ok {
			return nil, fmt.Errorf("amd: family %s is not in the kernel catalog", f)
		}
		if !abi.Typed {
			out = append(out, Instance{ABI: abi, Name: kernels.InstanceName(abi, 0)})
			continue
		}
		for _, t := range instanceTypes {
			out = append(out, Instance{ABI: abi, Type: t, Name: kernels.InstanceName(abi, t)})
		}
	}
	return out, nil
}
