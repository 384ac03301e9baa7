// Package cpu holds T-CPU's kernels: one Go function per kernel family of
// the catalog, bound by instance name. They are the oracle the GPU tiers
// are checked against, so each states its arithmetic order where it
// matters for agreement with ggml.
package cpu

// The amd64 assembly (fattn_amd64.s, silu_amd64.s, tinyblas_amd64.s,
// tinyblas_avx2_amd64.s, vecf32_amd64.s) is written by ./gen.
//go:generate go run ./gen -dir .

import (
	"fmt"
	"unsafe"

	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/format/zrt"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/kernels/quant"
)

// Args are one dispatch's arguments, resolved from the packet stream: a
// byte slice per ABI buffer (from the pointer to the end of its region; nil
// for a null optional buffer), the push constants and the specialization
// slot values in ABI order.
type Args struct {
	Bufs [][]byte
	Push []uint32
	Spec []uint32
	Grid [3]uint32
	Pool *Pool
	// Work is scratch memory the executor owns, reused across dispatches.
	Work *[]byte
	// Comm is the tensor-parallel set the tier is a rank of; nil outside
	// one, where a collective kernel fails.
	Comm Comm
	// Packs holds the repacked forms of the tier's weights, derived once
	// and shared by every dispatch; nil: each product reads the weights
	// as stored.
	Packs *Packs
}

// Func is a kernel implementation.
type Func func(a *Args) error

// Bind returns the implementation of a kernel instance.
func Bind(instance string) (Func, error) {
	abi, t, err := kernels.SplitInstance(instance)
	if err != nil {
		return nil, err
	}
	kv, err := kernels.InstanceKV(instance)
	if err != nil {
		return nil, err
	}
	mk, ok := families[abi.Name]
	if !ok {
		return nil, fmt.Errorf("cpu: no implementation of kernel family %s", abi.Name)
	}
	return mk(binding{t, kv})
}

// BindBlobs binds the kernel instance each of a bundle's blobs names, in
// the blobs' order (a dispatch's kernel index).
func BindBlobs(blobs []*zrt.Blob) ([]Func, error) {
	fns := make([]Func, len(blobs))
	for i, blob := range blobs {
		f, err := Bind(blob.Name)
		if err != nil {
			return nil, err
		}
		fns[i] = f
	}
	return fns, nil
}

// binding is what an instance's name fixes: the weight type of a typed
// family, the cache's element types of a KV-typed one.
type binding struct {
	t  ggml.Type
	kv kernels.KVTypes
}

// families builds a kernel for an instance.
var families = map[string]func(binding) (Func, error){
	"embed":           typed(embed),
	"rms_norm":        plain(rmsNorm),
	"matmul":          typed(matmul),
	"rope":            plain(rope),
	"rope_ext":        plain(ropeExt),
	"kv_write":        kvTyped(kvWrite),
	"flash_attn":      kvTyped(flashAttn),
	"flash_attn_ext":  kvTyped(flashAttnExt),
	"add":             plain(add),
	"add_gated":       plain(addGated),
	"swiglu":          plain(swiglu),
	"geglu":           plain(geglu),
	"scale":           plain(scale),
	"logit_softcap":   plain(logitSoftcap),
	"attn_temp":       plain(attnTemp),
	"moe_gate_topk":   typed(moeGateTopK),
	"moe_gate_up":     typed(moeGateUp),
	"moe_down_acc":    typed(moeDownAcc),
	"moe_add_bias":    plain(moeAddBias),
	"ssm_conv":        plain(ssmConv),
	"gdn_gates":       plain(gdnGates),
	"gated_delta_net": plain(gatedDeltaNet),
	"rms_norm_gated":  plain(rmsNormGated),
	"split_halves":    plain(splitHalves),
	"copy_cols":       plain(copyCols),
	"zero":            plain(zero),
	"mul_vec":         plain(mulVec),
	"moe_route_scale": plain(moeRouteScale),
	"mul_sigmoid":     plain(mulSigmoid),
	"swiglu_oai":      plain(swigluOAI),
	"lm_head":         typed(lmHead),
	"argmax":          plain(argmax),
	"all_reduce_sum":  plain(allReduceSum),
	"all_gather":      plain(allGather),

	"rms_norm_qkv":            typed(rmsNormQKV),
	"rms_norm_gate_up":        typed(rmsNormGateUp),
	"rms_norm_matmul":         typed(rmsNormMatmul),
	"rms_norm_gate_up_swiglu": typed(rmsNormGateUpSwiGLU),
	"rms_norm_qkv_rope_kv_write": func(b binding) (Func, error) {
		if !quant.IsWeightType(b.t) {
			return nil, fmt.Errorf("cpu: weight type %s unsupported", b.t)
		}
		c := newKVCache(kernels.F16KV) // the fold stores an F16 cache's rows only
		return func(a *Args) error { return rmsNormQKVRopeKVWrite(b.t, c, a) }, nil
	},
	"residual_rms_norm":      plain(residualRMSNorm),
	"rms_norm_rope_kv_write": kvTyped(rmsNormRopeKVWrite),
	"rope_kv_write":          kvTyped(ropeKVWrite),
	"matmul_residual":        typed(matmulResidual),
}

func plain(f Func) func(binding) (Func, error) {
	return func(binding) (Func, error) { return f, nil }
}

func typed(f func(t ggml.Type, a *Args) error) func(binding) (Func, error) {
	return func(b binding) (Func, error) {
		if !quant.IsWeightType(b.t) {
			return nil, fmt.Errorf("cpu: weight type %s unsupported", b.t)
		}
		return func(a *Args) error { return f(b.t, a) }, nil
	}
}

// kvTyped binds a kernel that reads or writes the KV cache to its
// instance's cache types (InstanceKV has checked that they are ones
// kernels.KVLayout lays out).
func kvTyped(f func(c *kvCache, a *Args) error) func(binding) (Func, error) {
	return func(b binding) (Func, error) {
		c := newKVCache(b.kv)
		return func(a *Args) error { return f(c, a) }, nil
	}
}

// f32s views b as float32s (regions are at least 4-byte aligned).
func f32s(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

func u32s(b []byte) []uint32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(&b[0])), len(b)/4)
}

func u16s(b []byte) []uint16 {
	if len(b) < 2 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2)
}

// request is a read view of the request table.
type request struct{ w []uint32 }

func (r request) rows() int { return int(r.w[kernels.IOWordRows]) }
func (r request) row(i, field int) uint32 {
	return r.w[kernels.IOWordRowBase+i*kernels.IORowWords+field]
}

// page returns the KV page holding position pos of slot.
func (r request) page(slot, pos int) int {
	maxPages := int(r.w[kernels.IOWordMaxPages])
	if pos/kernels.KVPageTokens >= maxPages {
		panic(fmt.Sprintf("position %d beyond the slot's %d pages", pos, maxPages))
	}
	return int(r.w[int(r.w[kernels.IOWordPageTable])+slot*maxPages+pos/kernels.KVPageTokens])
}

func req(b []byte) request { return request{u32s(b)} }

// work returns n bytes of executor scratch (fresh ones where the caller
// gave none).
func (a *Args) work(n int) []byte {
	if a.Work == nil {
		return make([]byte, n)
	}
	if cap(*a.Work) < n {
		*a.Work = make([]byte, n)
	}
	return (*a.Work)[:n]
}
