package ir

import (
	"fmt"
	"maps"
	"slices"
)

// Op is an IR opcode. The names are the design's (seed 000, Appendix B).
type Op uint16

// The opcodes the llama family needs. Fused forms join as the fuse pass
// learns them.
const (
	OpInvalid Op = iota
	EMBED
	RMS_NORM
	MATMUL
	ROPE
	KV_WRITE
	KV_WRITE_BATCHED
	FLASH_ATTN
	FLASH_ATTN_BATCHED
	RESIDUAL
	SWIGLU
	MOE_GATE_TOPK
	MOE_GATE_UP
	MOE_SWIGLU
	MOE_DOWN_ACC
	LM_HEAD
	ARGMAX
	RMS_NORM_FUSED_QKV
	RMS_NORM_FUSED_MLP_GATE_UP
	RESIDUAL_RMS_NORM
	RMS_NORM_FUSED_ROPE_KV_WRITE
	ROPE_KV_WRITE
	MATMUL_RESIDUAL
	ROPE_EXT
	RESIDUAL_GATED
	FLASH_ATTN_EXT
	GEGLU
	SCALE
	LOGIT_SOFTCAP
	ATTN_TEMP
	MOE_ADD_BIAS
	MOE_SWIGLU_OAI
	SSM_CONV
	GDN_GATES
	GATED_DELTA_NET
	RMS_NORM_GATED
	SPLIT_HALVES
	MUL_SIGMOID
	COPY_COLS
	ZERO
	MUL_VEC
	MOE_ROUTE_SCALE
	// ALL_REDUCE_SUM and ALL_GATHER are tensor parallelism's collectives
	// (passes' shard): every rank of a set meets at them. The first sums
	// a register across the ranks in place; the second assembles a value
	// whose columns the ranks split (a balanced partition of cols) into
	// the full width on every rank.
	ALL_REDUCE_SUM
	ALL_GATHER
	// RMS_NORM_FUSED_MATMUL is a whole-row RMS_NORM with the one or two
	// projections of its output that share a weight type (the fuse pass
	// forms it where RMS_NORM_FUSED_QKV's one type does not hold).
	RMS_NORM_FUSED_MATMUL
	// RMS_NORM_FUSED_MLP_SWIGLU is RMS_NORM_FUSED_MLP_GATE_UP with the
	// SWIGLU of its outputs, in one-row decode variants.
	RMS_NORM_FUSED_MLP_SWIGLU
	// RMS_NORM_FUSED_QKV_ROPE_KV_WRITE is RMS_NORM_FUSED_QKV with the
	// ROPE_KV_WRITE of its outputs, in one-row decode variants.
	RMS_NORM_FUSED_QKV_ROPE_KV_WRITE
)

// OpInfo describes an opcode: its name, the kernel family that implements
// it and which roles it may update in place.
type OpInfo struct {
	Name    string
	Kernel  string
	InPlace []string
	// TypedBy names the weight role whose type selects a typed kernel.
	TypedBy string
}

var opTable = map[Op]OpInfo{
	EMBED:              {Name: "EMBED", Kernel: "embed", TypedBy: "table"},
	RMS_NORM:           {Name: "RMS_NORM", Kernel: "rms_norm", InPlace: []string{"y"}},
	MATMUL:             {Name: "MATMUL", Kernel: "matmul", TypedBy: "w"},
	ROPE:               {Name: "ROPE", Kernel: "rope", InPlace: []string{"x"}},
	ROPE_EXT:           {Name: "ROPE_EXT", Kernel: "rope_ext", InPlace: []string{"x"}},
	KV_WRITE:           {Name: "KV_WRITE", Kernel: "kv_write", InPlace: []string{"kv"}},
	KV_WRITE_BATCHED:   {Name: "KV_WRITE_BATCHED", Kernel: "kv_write", InPlace: []string{"kv"}},
	FLASH_ATTN:         {Name: "FLASH_ATTN", Kernel: "flash_attn"},
	FLASH_ATTN_BATCHED: {Name: "FLASH_ATTN_BATCHED", Kernel: "flash_attn"},
	FLASH_ATTN_EXT:     {Name: "FLASH_ATTN_EXT", Kernel: "flash_attn_ext"},
	RESIDUAL:           {Name: "RESIDUAL", Kernel: "add", InPlace: []string{"x"}},
	RESIDUAL_GATED:     {Name: "RESIDUAL_GATED", Kernel: "add_gated", InPlace: []string{"x"}},
	SWIGLU:             {Name: "SWIGLU", Kernel: "swiglu"},
	GEGLU:              {Name: "GEGLU", Kernel: "geglu"},
	SCALE:              {Name: "SCALE", Kernel: "scale", InPlace: []string{"x"}},
	LOGIT_SOFTCAP:      {Name: "LOGIT_SOFTCAP", Kernel: "logit_softcap", InPlace: []string{"logits"}},
	ATTN_TEMP:          {Name: "ATTN_TEMP", Kernel: "attn_temp", InPlace: []string{"x"}},
	MOE_GATE_TOPK:      {Name: "MOE_GATE_TOPK", Kernel: "moe_gate_topk", TypedBy: "w"},
	MOE_GATE_UP:        {Name: "MOE_GATE_UP", Kernel: "moe_gate_up", TypedBy: "w_gate"},
	MOE_SWIGLU:         {Name: "MOE_SWIGLU", Kernel: "swiglu"},
	MOE_SWIGLU_OAI:     {Name: "MOE_SWIGLU_OAI", Kernel: "swiglu_oai"},
	MOE_ADD_BIAS:       {Name: "MOE_ADD_BIAS", Kernel: "moe_add_bias", InPlace: []string{"x"}},
	SSM_CONV:           {Name: "SSM_CONV", Kernel: "ssm_conv", InPlace: []string{"state"}},
	GDN_GATES:          {Name: "GDN_GATES", Kernel: "gdn_gates", InPlace: []string{"alpha", "beta"}},
	GATED_DELTA_NET:    {Name: "GATED_DELTA_NET", Kernel: "gated_delta_net", InPlace: []string{"state"}},
	RMS_NORM_GATED:     {Name: "RMS_NORM_GATED", Kernel: "rms_norm_gated"},
	SPLIT_HALVES:       {Name: "SPLIT_HALVES", Kernel: "split_halves"},
	MUL_SIGMOID:        {Name: "MUL_SIGMOID", Kernel: "mul_sigmoid", InPlace: []string{"x"}},
	COPY_COLS:          {Name: "COPY_COLS", Kernel: "copy_cols"},
	ZERO:               {Name: "ZERO", Kernel: "zero"},
	MUL_VEC:            {Name: "MUL_VEC", Kernel: "mul_vec", InPlace: []string{"x"}},
	MOE_ROUTE_SCALE:    {Name: "MOE_ROUTE_SCALE", Kernel: "moe_route_scale", InPlace: []string{"route"}},
	MOE_DOWN_ACC:       {Name: "MOE_DOWN_ACC", Kernel: "moe_down_acc", InPlace: []string{"y"}, TypedBy: "w"},
	LM_HEAD:            {Name: "LM_HEAD", Kernel: "lm_head", TypedBy: "w"},
	ARGMAX:             {Name: "ARGMAX", Kernel: "argmax"},
	ALL_REDUCE_SUM:     {Name: "ALL_REDUCE_SUM", Kernel: "all_reduce_sum", InPlace: []string{"x"}},
	ALL_GATHER:         {Name: "ALL_GATHER", Kernel: "all_gather"},

	RMS_NORM_FUSED_QKV:           {Name: "RMS_NORM_FUSED_QKV", Kernel: "rms_norm_qkv", TypedBy: "w_qkv"},
	RMS_NORM_FUSED_MLP_GATE_UP:   {Name: "RMS_NORM_FUSED_MLP_GATE_UP", Kernel: "rms_norm_gate_up", TypedBy: "w_gate_up"},
	RESIDUAL_RMS_NORM:            {Name: "RESIDUAL_RMS_NORM", Kernel: "residual_rms_norm", InPlace: []string{"x"}},
	RMS_NORM_FUSED_ROPE_KV_WRITE: {Name: "RMS_NORM_FUSED_ROPE_KV_WRITE", Kernel: "rms_norm_rope_kv_write", InPlace: []string{"q", "kv"}},
	ROPE_KV_WRITE:                {Name: "ROPE_KV_WRITE", Kernel: "rope_kv_write", InPlace: []string{"q", "kv"}},
	MATMUL_RESIDUAL:              {Name: "MATMUL_RESIDUAL", Kernel: "matmul_residual", InPlace: []string{"y"}, TypedBy: "w"},
	RMS_NORM_FUSED_MATMUL:        {Name: "RMS_NORM_FUSED_MATMUL", Kernel: "rms_norm_matmul", TypedBy: "w"},
	RMS_NORM_FUSED_MLP_SWIGLU:    {Name: "RMS_NORM_FUSED_MLP_SWIGLU", Kernel: "rms_norm_gate_up_swiglu", TypedBy: "w_gate_up"},
	RMS_NORM_FUSED_QKV_ROPE_KV_WRITE: {Name: "RMS_NORM_FUSED_QKV_ROPE_KV_WRITE", Kernel: "rms_norm_qkv_rope_kv_write",
		InPlace: []string{"kv"}, TypedBy: "w_qkv"},
}

// Ops lists every opcode in numeric order.
func Ops() []Op {
	return slices.Sorted(maps.Keys(opTable))
}

// Info returns the opcode's table entry.
func (o Op) Info() (OpInfo, bool) {
	i, ok := opTable[o]
	return i, ok
}

func (o Op) String() string {
	if i, ok := opTable[o]; ok {
		return i.Name
	}
	return fmt.Sprintf("op(%d)", uint16(o))
}

// ParseOp returns the opcode with the given name.
func ParseOp(s string) (Op, bool) {
	for o, i := range opTable {
		if i.Name == s {
			return o, true
		}
	}
	return OpInvalid, false
}

// InPlaceAllowed reports whether role may be both read and written.
func (o Op) InPlaceAllowed(role string) bool {
	for _, r := range opTable[o].InPlace {
		if r == role {
			return true
		}
	}
	return false
}
