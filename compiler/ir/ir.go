// Package ir is zrt's intermediate representation: transformer-shaped
// opcodes over named buffers, one static graph per ShapeKey variant.
//
// A Graph has two kinds of storage. Registers are activations that live
// only during one replay (rows × cols, F32 unless stated); register
// allocation maps them onto physical scratch. Buffers are everything with
// an identity outside the step: model weights, the KV cache, the request
// table and the output ring. Instructions name their operands by role
// ("x", "w", "y"…); the roles are the kernel ABI's argument names.
package ir

import (
	"fmt"
	"sort"

	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/ggml"
)

// Stage says which step a variant serves (format/bundle's definition,
// which the runtime shares).
type Stage = bundle.Stage

// Stages.
const (
	Prefill = bundle.StagePrefill
	Decode  = bundle.StageDecode
	// Draft is a decode step through the first layers and the output
	// head only: self-speculation's draft (config.DraftLayers).
	Draft = bundle.StageDraft
)

// ShapeKey identifies a variant exactly (format/bundle's definition).
type ShapeKey = bundle.ShapeKey

// BufClass says where a buffer lives and who owns it.
type BufClass uint8

// Buffer classes.
const (
	Weight BufClass = iota + 1 // read-only model tensor from the weights pack
	KV                         // the paged KV cache
	IO                         // the request table written by the host
	Out                        // the output ring read by the host
	// Recurrent is the fixed-size per-slot state of recurrent layers
	// (convolution windows, linear-attention matrices): not paged, and
	// reset by the kernels at a sequence's position 0.
	Recurrent
	// KVWindow is the KV cache of sliding-window layers kept in per-slot
	// rings of pages, and IOWindow the request table whose page tables
	// map a slot's positions onto its ring (rows and header as IO's).
	KVWindow
	IOWindow
)

var bufClassNames = map[BufClass]string{Weight: "weight", KV: "kv", IO: "io", Out: "out", Recurrent: "recurrent",
	KVWindow: "kv.window", IOWindow: "io.window"}

func (c BufClass) String() string {
	if s, ok := bufClassNames[c]; ok {
		return s
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// Buffer is storage with an identity beyond one step.
type Buffer struct {
	Name  string // logical name: model.attn.q_weight[3], state.kv, request.table, out.logits
	Class BufClass
	// Tensor is the source GGUF tensor of a weight; Type and Dims its layout
	// (ggml order: Dims[0] is the row length).
	Tensor string
	Type   ggml.Type
	Dims   []int64
	// LayerClass groups weights that the memory plan places in one region
	// (all Q projections together, …).
	LayerClass string
	Bytes      int64
	// Sources, when set, makes this a derived weight: the concatenation of
	// these GGUF tensors' bytes in order (a fused QKV matrix, say). Tensor
	// is then empty.
	Sources []string
}

// SourceTensors returns the GGUF tensors whose bytes make up the buffer.
func (b *Buffer) SourceTensors() []string {
	if len(b.Sources) > 0 {
		return b.Sources
	}
	return []string{b.Tensor}
}

// Reg is an activation register: Rows × Cols elements of Elem bytes each.
type Reg struct {
	Name string
	Rows int
	Cols int
	Elem int // bytes per element (4 for F32; 8 for a MoE route pair)
}

// Bytes is the register's size.
func (r *Reg) Bytes() int64 { return int64(r.Rows) * int64(r.Cols) * int64(r.Elem) }

// OperandKind says whether an operand is a register or a buffer.
type OperandKind uint8

// Operand kinds.
const (
	RegOperand OperandKind = iota + 1
	BufOperand
)

// Operand names a register or buffer by index, in a role.
type Operand struct {
	Role string
	Kind OperandKind
	ID   int
}

// Inst is one operation. Reads and writes are listed separately; a role
// that appears in both is updated in place, which the op must allow.
type Inst struct {
	Op     Op
	Reads  []Operand
	Writes []Operand
	Attrs  Attrs
	// Kernel is set by lowering: the kernel instance that runs the op.
	Kernel string
}

// Attrs are an instruction's scalar parameters, by name.
type Attrs map[string]float64

// Keys returns the attribute names in order, for stable printing.
func (a Attrs) Keys() []string {
	ks := make([]string, 0, len(a))
	for k := range a {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Graph is one variant's program.
type Graph struct {
	Key     ShapeKey
	Regs    []Reg
	Buffers []Buffer
	Insts   []Inst

	bufIndex map[string]int
}

// NewGraph returns an empty graph for key.
func NewGraph(key ShapeKey) *Graph { return &Graph{Key: key, bufIndex: map[string]int{}} }

// Buffer returns the index of the named buffer, adding it on first use.
func (g *Graph) Buffer(b Buffer) int {
	if g.bufIndex == nil {
		g.bufIndex = map[string]int{}
		for i, x := range g.Buffers {
			g.bufIndex[x.Name] = i
		}
	}
	if i, ok := g.bufIndex[b.Name]; ok {
		return i
	}
	g.bufIndex[b.Name] = len(g.Buffers)
	g.Buffers = append(g.Buffers, b)
	return len(g.Buffers) - 1
}

// NewReg adds a register.
func (g *Graph) NewReg(name string, rows, cols, elem int) int {
	g.Regs = append(g.Regs, Reg{Name: name, Rows: rows, Cols: cols, Elem: elem})
	return len(g.Regs) - 1
}

// R and B build operands.
func R(role string, id int) Operand { return Operand{Role: role, Kind: RegOperand, ID: id} }

// B builds a buffer operand.
func B(role string, id int) Operand { return Operand{Role: role, Kind: BufOperand, ID: id} }

// Emit appends an instruction.
func (g *Graph) Emit(op Op, reads, writes []Operand, attrs Attrs) {
	g.Insts = append(g.Insts, Inst{Op: op, Reads: reads, Writes: writes, Attrs: attrs})
}

// Operand returns the operand with role in the instruction (reads first).
func (in *Inst) Operand(role string) (Operand, bool) {
	for _, o := range in.Reads {
		if o.Role == role {
			return o, true
		}
	}
	for _, o := range in.Writes {
		if o.Role == role {
			return o, true
		}
	}
	return Operand{}, false
}

// OperandName renders an operand for dumps and errors.
func (g *Graph) OperandName(o Operand) string {
	if o.Kind == RegOperand {
		return "%" + g.Regs[o.ID].Name
	}
	return "@" + g.Buffers[o.ID].Name
}
