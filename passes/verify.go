package passes

import (
	"context"
	"fmt"

	"github.com/zrtdev/zrt/compiler/ir"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/kernels"
)

func verifyUnit(_ context.Context, u *Unit) error {
	for _, g := range u.Graphs {
		if err := Verify(g); err != nil {
			return fmt.Errorf("variant %s: %w", g.Key, err)
		}
	}
	return nil
}

// Verify rejects malformed IR: operands out of range, roles the kernel ABI
// does not have or is missing, reads of registers never written, writes to
// weights, undeclared in-place updates and shape mismatches.
func Verify(g *ir.Graph) error {
	if g.Key.Rows < 1 || g.Key.Slots < 1 {
		return fmt.Errorf("shape key %s has no rows or slots", g.Key)
	}
	written := make([]bool, len(g.Regs))
	for i := range g.Regs {
		r := &g.Regs[i]
		if r.Rows != g.Key.Rows || r.Cols < 1 || r.Elem < 1 {
			return fmt.Errorf("register %%%s has shape %dx%d×%dB, want %d rows", r.Name, r.Rows, r.Cols, r.Elem, g.Key.Rows)
		}
	}
	for i := range g.Insts {
		in := &g.Insts[i]
		if err := verifyInst(g, in, written); err != nil {
			return fmt.Errorf("inst %d (%s): %w", i, in.Op, err)
		}
	}
	return nil
}

func verifyInst(g *ir.Graph, in *ir.Inst, written []bool) error {
	info, ok := in.Op.Info()
	if !ok {
		return fmt.Errorf("unknown opcode")
	}
	abi, ok := kernels.Lookup(info.Kernel)
	if !ok {
		return fmt.Errorf("no kernel family %q", info.Kernel)
	}
	roles := map[string]bool{}
	for _, o := range append(append([]ir.Operand(nil), in.Reads...), in.Writes...) {
		switch o.Kind {
		case ir.RegOperand:
			if o.ID < 0 || o.ID >= len(g.Regs) {
				return fmt.Errorf("role %s: register %d out of range", o.Role, o.ID)
			}
		case ir.BufOperand:
			if o.ID < 0 || o.ID >= len(g.Buffers) {
				return fmt.Errorf("role %s: buffer %d out of range", o.Role, o.ID)
			}
		default:
			return fmt.Errorf("role %s: bad operand kind", o.Role)
		}
		roles[o.Role] = true
	}
	for _, r := range abi.Bufs {
		if !roles[r] && !abi.Optional[r] {
			return fmt.Errorf("missing operand %q of kernel %s", r, abi.Name)
		}
		delete(roles, r)
	}
	for r := range roles {
		return fmt.Errorf("operand %q is not an argument of kernel %s", r, abi.Name)
	}
	for _, p := range append(append([]kernels.Param(nil), abi.Push...), abi.Spec...) {
		if _, ok := in.Attrs[p.Name]; !ok {
			return fmt.Errorf("missing attribute %q", p.Name)
		}
	}
	for _, o := range in.Reads {
		if o.Kind == ir.RegOperand && !written[o.ID] {
			return fmt.Errorf("reads %s before any write", g.OperandName(o))
		}
	}
	for _, w := range in.Writes {
		if w.Kind == ir.BufOperand && g.Buffers[w.ID].Class == ir.Weight {
			return fmt.Errorf("writes weight %s", g.OperandName(w))
		}
		for _, r := range in.Reads {
			if r.Kind == w.Kind && r.ID == w.ID && w.Kind == ir.RegOperand && !in.Op.InPlaceAllowed(w.Role) {
				return fmt.Errorf("updates %s in place, which %s does not allow", g.OperandName(w), in.Op)
			}
		}
		if w.Kind == ir.RegOperand {
			written[w.ID] = true
		}
	}
	return verifyShapes(g, in)
}

// verifyShapes checks the register widths an op's attributes imply.
func verifyShapes(g *ir.Graph, in *ir.Inst) error {
	cols := func(role string) int {
		o, ok := in.Operand(role)
		if !ok || o.Kind != ir.RegOperand {
			return -1
		}
		return g.Regs[o.ID].Cols
	}
	dims := func(role string) []int64 {
		o, ok := in.Operand(role)
		if !ok || o.Kind != ir.BufOperand {
			return nil
		}
		return g.Buffers[o.ID].Dims
	}
	want := func(role string, n int) error {
		if c := cols(role); c != n {
			return fmt.Errorf("operand %s has %d columns, want %d", role, c, n)
		}
		return nil
	}
	a := func(k string) int { return int(in.Attrs[k]) }
	// normProjection checks a fused norm and projection whose weight w
	// (and bias, when named and present) concatenate the outputs' rows.
	// Graph builders emit these ops directly where the model file holds
	// the concatenated weight, so they are held to the shapes of the ops
	// they replace.
	normProjection := func(w, bias string, outs []string, widths []int) error {
		n := 0
		for i, o := range outs {
			if err := want(o, widths[i]); err != nil {
				return err
			}
			n += widths[i]
		}
		if err := want("x", a("k")); err != nil {
			return err
		}
		if d := dims("w_norm"); len(d) != 1 || d[0] != int64(a("k")) {
			return fmt.Errorf("norm weight shape %v, want [%d]", d, a("k"))
		}
		if d := dims(w); len(d) != 2 || d[0] != int64(a("k")) || d[1] != int64(n) {
			return fmt.Errorf("weight shape %v, want [%d %d]", d, a("k"), n)
		}
		if d := dims(bias); bias != "" && d != nil && (len(d) != 1 || d[0] != int64(n)) {
			return fmt.Errorf("bias shape %v, want [%d]", d, n)
		}
		return nil
	}
	switch in.Op {
	case ir.MATMUL, ir.LM_HEAD:
		n := a("n")
		if in.Op == ir.LM_HEAD {
			n = a("n_vocab")
		}
		if d := dims("w"); len(d) != 2 || d[0] != int64(a("k")) || d[1] != int64(n) {
			return fmt.Errorf("weight shape %v, want [%d %d]", d, a("k"), n)
		}
		if err := want("x", a("k")); err != nil {
			return err
		}
		if in.Op == ir.MATMUL {
			return want("y", n)
		}
	case ir.RMS_NORM:
		if a("group") < 1 || a("cols")%a("group") != 0 {
			return fmt.Errorf("group %d does not divide cols %d", a("group"), a("cols"))
		}
		if _, weighted := in.Operand("w"); weighted {
			if d := dims("w"); len(d) != 1 || d[0] != int64(a("group")) {
				return fmt.Errorf("norm weight shape %v, want [%d]", d, a("group"))
			}
		}
		if err := want("x", a("cols")); err != nil {
			return err
		}
		return want("y", a("cols"))
	case ir.ZERO:
		return want("y", a("cols"))
	case ir.MUL_VEC:
		if d := dims("w"); len(d) != 1 || d[0] != int64(a("cols")) {
			return fmt.Errorf("vector shape %v, want [%d]", d, a("cols"))
		}
		return want("x", a("cols"))
	case ir.MOE_ROUTE_SCALE:
		if d := dims("s"); len(d) != 1 {
			return fmt.Errorf("expert scales of shape %v, want one per expert", d)
		}
		return want("route", a("n_used"))
	case ir.COPY_COLS:
		if a("off")+a("cols") > a("stride") {
			return fmt.Errorf("columns %d..%d past a row of %d", a("off"), a("off")+a("cols"), a("stride"))
		}
		if err := want("x", a("stride")); err != nil {
			return err
		}
		return want("y", a("cols"))
	case ir.RESIDUAL:
		if err := want("x", a("cols")); err != nil {
			return err
		}
		return want("y", a("cols"))
	case ir.RESIDUAL_GATED:
		for _, c := range []struct {
			role string
			n    int
		}{{"x", a("cols")}, {"y", a("cols")}, {"g", a("k")}} {
			if err := want(c.role, c.n); err != nil {
				return err
			}
		}
		if o, ok := in.Operand("w"); ok && o.Kind == ir.BufOperand {
			if b := &g.Buffers[o.ID]; b.Type != ggml.F32 || len(b.Dims) != 1 || b.Dims[0] != int64(a("k")) {
				return fmt.Errorf("gate weight %s %v, want F32 [%d]", b.Type, b.Dims, a("k"))
			}
		}
	case ir.SWIGLU, ir.MOE_SWIGLU:
		for _, r := range []string{"gate", "up", "y"} {
			if err := want(r, a("cols")); err != nil {
				return err
			}
		}
	case ir.ROPE, ir.ROPE_EXT:
		if err := want("x", a("n_head")*a("head_dim")); err != nil {
			return err
		}
		if a("n_rot") > a("head_dim") {
			return fmt.Errorf("n_rot %d exceeds head_dim %d", a("n_rot"), a("head_dim"))
		}
		if o, ok := in.Operand("freq"); ok && o.Kind == ir.BufOperand {
			if b := &g.Buffers[o.ID]; b.Type != ggml.F32 || len(b.Dims) != 1 || b.Dims[0] != int64(a("n_rot")/2) {
				return fmt.Errorf("frequency factors %s %v, want F32 [%d]", b.Type, b.Dims, a("n_rot")/2)
			}
		}
	case ir.RMS_NORM_FUSED_QKV:
		return normProjection("w_qkv", "b_qkv", []string{"q", "k", "v"}, []int{a("n_q"), a("n_kv"), a("n_kv")})
	case ir.RMS_NORM_FUSED_MLP_GATE_UP:
		return normProjection("w_gate_up", "", []string{"gate", "up"}, []int{a("f"), a("f")})
	case ir.RMS_NORM_FUSED_MLP_SWIGLU:
		// rms_norm_gate_up's shapes, with y (f wide) for gate and up.
		if d := dims("w_norm"); len(d) != 1 || d[0] != int64(a("k")) {
			return fmt.Errorf("norm weight shape %v, want [%d]", d, a("k"))
		}
		if d := dims("w_gate_up"); len(d) != 2 || d[0] != int64(a("k")) || d[1] != int64(2*a("f")) {
			return fmt.Errorf("weight shape %v, want [%d %d]", d, a("k"), 2*a("f"))
		}
		if err := want("x", a("k")); err != nil {
			return err
		}
		return want("y", a("f"))
	case ir.RMS_NORM_FUSED_QKV_ROPE_KV_WRITE:
		if d := dims("w_norm"); len(d) != 1 || d[0] != int64(a("k")) {
			return fmt.Errorf("norm weight shape %v, want [%d]", d, a("k"))
		}
		if d := dims("w_qkv"); len(d) != 2 || d[0] != int64(a("k")) || d[1] != int64(a("n_q")+2*a("n_kv")) {
			return fmt.Errorf("weight shape %v, want [%d %d]", d, a("k"), a("n_q")+2*a("n_kv"))
		}
		if a("n_head")*a("head_dim") != a("n_q") || a("n_head_kv")*a("head_dim") != a("n_kv") {
			return fmt.Errorf("%d and %d heads of %d for %d Q and %d KV features", a("n_head"), a("n_head_kv"), a("head_dim"), a("n_q"), a("n_kv"))
		}
		if err := want("x", a("k")); err != nil {
			return err
		}
		return want("q", a("n_q"))
	case ir.RMS_NORM_FUSED_MATMUL:
		if a("n2") == 0 {
			if _, ok := in.Operand("y2"); ok {
				return fmt.Errorf("y2 given with n2 = 0")
			}
			return normProjection("w", "", []string{"y"}, []int{a("n")})
		}
		return normProjection("w", "", []string{"y", "y2"}, []int{a("n"), a("n2")})
	}
	return nil
}
