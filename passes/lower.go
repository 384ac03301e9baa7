package passes

import (
	"context"
	"fmt"
	"math"

	"github.com/zrtdev/zrt/asm/pm4"
	"github.com/zrtdev/zrt/compiler/ir"
	"github.com/zrtdev/zrt/kernels"
)

// gridAttr names the attribute that sizes a kernel family's grid; families
// not listed launch one workgroup per row.
var gridAttr = map[string]string{
	"matmul":          "n",
	"matmul_residual": "n",
	"lm_head":         "n_vocab",
	"moe_gate_up":     "f",
	"moe_down_acc":    "n",
	"moe_gate_topk":   "n_expert",
}

func lower(_ context.Context, u *Unit) error {
	u.Streams = make([]Stream, len(u.Graphs))
	for gi, g := range u.Graphs {
		s, err := lowerGraph(u, gi)
		if err != nil {
			return fmt.Errorf("variant %s: %w", g.Key, err)
		}
		u.Streams[gi] = s
	}
	return nil
}

func lowerGraph(u *Unit, gi int) (Stream, error) {
	g, pm, plan := u.Graphs[gi], u.Physical[gi], u.Plan
	weightAt := map[string]Placement{}
	for _, p := range plan.Weights {
		weightAt[p.Buffer] = p
	}
	// locate resolves an operand to its symbol and storage range.
	locate := func(o ir.Operand) (pm4.Symbol, span, error) {
		if o.Kind == ir.RegOperand {
			p := pm.RegisterToPhysical[o.ID]
			off := pm.PhysicalOffsets[p]
			return pm4.Symbol{Space: pm4.SpaceRegion, Index: uint32(plan.Scratch), Addend: uint64(off)},
				span{plan.Scratch, off, off + g.Regs[o.ID].Bytes()}, nil
		}
		b := &g.Buffers[o.ID]
		var region int
		var off int64
		switch b.Class {
		case ir.Weight:
			p, ok := weightAt[b.Name]
			if !ok {
				return pm4.Symbol{}, span{}, fmt.Errorf("weight %s has no placement", b.Name)
			}
			region, off = p.Region, p.Offset
		case ir.KV:
			region = plan.KV
		case ir.Recurrent:
			if plan.Recurrent < 0 {
				return pm4.Symbol{}, span{}, fmt.Errorf("buffer %s: the plan has no recurrent region", b.Name)
			}
			region = plan.Recurrent
		case ir.IO:
			region = plan.IO
		case ir.KVWindow, ir.IOWindow:
			region = plan.KVWindow
			if b.Class == ir.IOWindow {
				region = plan.IOWindow
			}
			if region < 0 {
				return pm4.Symbol{}, span{}, fmt.Errorf("buffer %s: the plan has no window ring", b.Name)
			}
		case ir.Out:
			switch b.Name {
			case "out.logits":
				region = plan.Logits
			case "out.tokens":
				region = plan.Tokens
			default:
				return pm4.Symbol{}, span{}, fmt.Errorf("unknown output buffer %s", b.Name)
			}
		default:
			return pm4.Symbol{}, span{}, fmt.Errorf("buffer %s has class %s", b.Name, b.Class)
		}
		return pm4.Symbol{Space: pm4.SpaceRegion, Index: uint32(region), Addend: uint64(off)},
			span{region, 0, math.MaxInt64}, nil
	}

	var bld pm4.Builder
	s := Stream{Key: g.Key}
	var dirty, readSince []span
	for ii := range g.Insts {
		in := &g.Insts[ii]
		ki := u.InstKernel[gi][ii]
		abi, _, err := kernels.SplitInstance(u.Kernels[ki].Name)
		if err != nil {
			return s, fmt.Errorf("inst %d (%s): %w", ii, in.Op, err)
		}

		// Dependences: read-after-write, write-after-write and
		// write-after-read on overlapping storage need a barrier.
		var reads, writes []span
		var userData []pm4.Value
		for _, role := range abi.Bufs {
			o, ok := in.Operand(role)
			if !ok {
				userData = append(userData, pm4.C(0), pm4.C(0)) // optional buffer: null
				continue
			}
			sym, st, err := locate(o)
			if err != nil {
				return s, fmt.Errorf("inst %d (%s): %w", ii, in.Op, err)
			}
			a := pm4.Addr(sym)
			userData = append(userData, a[0], a[1])
			for _, w := range in.Writes {
				if w.Role == role {
					writes = append(writes, st)
				}
			}
			for _, r := range in.Reads {
				if r.Role == role {
					reads = append(reads, st)
				}
			}
		}
		for _, p := range abi.Push {
			userData = append(userData, pm4.C(encodeParam(p, in.Attrs[p.Name])))
		}
		if anyOverlap(reads, dirty) || anyOverlap(writes, dirty) || anyOverlap(writes, readSince) {
			bld.Barrier()
			s.Barriers++
			dirty, readSince = nil, nil
		}
		dirty = append(dirty, writes...)
		readSince = append(readSince, reads...)

		grid := uint32(g.Key.Rows)
		if a, ok := gridAttr[abi.Name]; ok {
			grid = uint32(in.Attrs[a])
		}
		pgm := pm4.Addr(pm4.Symbol{Space: pm4.SpaceKernel, Index: uint32(ki)})
		bld.SetShReg(pm4.COMPUTE_PGM_LO, pgm[0], pgm[1])
		bld.SetShReg(pm4.COMPUTE_USER_DATA_0, userData...)
		bld.DispatchDirect(grid, 1, 1)
		s.Dispatches++
	}
	bld.Barrier()
	s.Barriers++
	bld.ReleaseMem(pm4.Symbol{Space: pm4.SpaceRegion, Index: uint32(plan.Fence)}, 1)
	s.Words, s.Relocs = bld.Words, bld.Relocs
	return s, nil
}

func encodeParam(p kernels.Param, v float64) uint32 {
	if p.Kind == kernels.F32 {
		return math.Float32bits(float32(v))
	}
	return uint32(int64(v))
}
