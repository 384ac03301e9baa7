package passes

import (
	"context"
	"fmt"
	"sort"

	"github.com/zrtdev/zrt/compiler/ir"
)

// Liveness is seed 003's LivenessMap for one variant: for each register the
// instruction that first writes it and the last that reads it, and for each
// instruction the registers dead after it.
type Liveness struct {
	Def                  []int   // per register: first writing instruction
	RegisterLastRead     []int   // per register: last reading instruction (Def when never read)
	KillAfterInstruction [][]int // per instruction: registers whose last read it is
	// PeakBytes is the lower bound on scratch: the most register bytes live
	// across any one instruction.
	PeakBytes int64
	// NaiveBytes is one buffer per register.
	NaiveBytes int64
}

func liveness(_ context.Context, u *Unit) error {
	u.Liveness = make([]*Liveness, len(u.Graphs))
	for i, g := range u.Graphs {
		u.Liveness[i] = Analyze(g)
	}
	return nil
}

// Analyze computes the liveness of g's registers.
func Analyze(g *ir.Graph) *Liveness {
	n := len(g.Regs)
	lv := &Liveness{Def: make([]int, n), RegisterLastRead: make([]int, n), KillAfterInstruction: make([][]int, len(g.Insts))}
	for r := range lv.Def {
		lv.Def[r], lv.RegisterLastRead[r] = -1, -1
	}
	for i, in := range g.Insts {
		for _, o := range in.Reads {
			if o.Kind == ir.RegOperand {
				lv.RegisterLastRead[o.ID] = i
			}
		}
		for _, o := range in.Writes {
			if o.Kind == ir.RegOperand && lv.Def[o.ID] < 0 {
				lv.Def[o.ID] = i
			}
		}
	}
	for r := range lv.Def {
		if lv.RegisterLastRead[r] < lv.Def[r] {
			lv.RegisterLastRead[r] = lv.Def[r] // written, never read: dies where it is born
		}
		if lv.Def[r] >= 0 {
			lv.KillAfterInstruction[lv.RegisterLastRead[r]] = append(lv.KillAfterInstruction[lv.RegisterLastRead[r]], r)
			lv.NaiveBytes += g.Regs[r].Bytes()
		}
	}
	live := make([]int64, len(g.Insts)+1)
	for r := range lv.Def {
		if lv.Def[r] < 0 {
			continue
		}
		live[lv.Def[r]] += g.Regs[r].Bytes()
		live[lv.RegisterLastRead[r]+1] -= g.Regs[r].Bytes()
	}
	cur := int64(0)
	for _, d := range live {
		cur += d
		lv.PeakBytes = max(lv.PeakBytes, cur)
	}
	return lv
}

// PhysicalMap is seed 003's PhysicalMapping: registers onto physical scratch
// buffers, each with a size, and their offsets in the scratch region.
type PhysicalMap struct {
	RegisterToPhysical []int
	PhysicalSizes      []int64
	PhysicalOffsets    []int64 // set by memplan
	ScratchBytes       int64   // set by memplan
}

// Scratch buffers are aligned so any kernel can use vector loads on them.
const scratchAlign = 256

func regalloc(_ context.Context, u *Unit) error {
	u.Physical = make([]*PhysicalMap, len(u.Graphs))
	for i, g := range u.Graphs {
		pm, err := Allocate(g, u.Liveness[i])
		if err != nil {
			return fmt.Errorf("variant %s: %w", g.Key, err)
		}
		u.Physical[i] = pm
	}
	return nil
}

// Allocate assigns registers to physical buffers by linear scan over live
// ranges: a buffer is free again after the last read of its register, and
// a new register takes the smallest free buffer that fits, else the largest
// free one (grown), else a new one. A register is never given a buffer
// freed by the instruction that defines it, since an op may read its inputs
// while writing its output.
func Allocate(g *ir.Graph, lv *Liveness) (*PhysicalMap, error) {
	pm := &PhysicalMap{RegisterToPhysical: make([]int, len(g.Regs))}
	order := make([]int, 0, len(g.Regs))
	for r := range g.Regs {
		pm.RegisterToPhysical[r] = -1
		if lv.Def[r] >= 0 {
			order = append(order, r)
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return lv.Def[order[a]] < lv.Def[order[b]] })
	busyUntil := []int{} // per physical: last instruction that reads its current register
	for _, r := range order {
		need := g.Regs[r].Bytes()
		best := -1
		for p, until := range busyUntil {
			if until >= lv.Def[r] {
				continue
			}
			if best < 0 {
				best = p
				continue
			}
			fitsP, fitsB := pm.PhysicalSizes[p] >= need, pm.PhysicalSizes[best] >= need
			switch {
			case fitsP && (!fitsB || pm.PhysicalSizes[p] < pm.PhysicalSizes[best]):
				best = p
			case !fitsP && !fitsB && pm.PhysicalSizes[p] > pm.PhysicalSizes[best]:
				best = p
			}
		}
		if best < 0 {
			best = len(busyUntil)
			busyUntil = append(busyUntil, 0)
			pm.PhysicalSizes = append(pm.PhysicalSizes, 0)
		}
		pm.RegisterToPhysical[r] = best
		busyUntil[best] = lv.RegisterLastRead[r]
		pm.PhysicalSizes[best] = max(pm.PhysicalSizes[best], alignUp(need, scratchAlign))
	}
	return pm, nil
}

func alignUp(x, a int64) int64 { return (x + a - 1) / a * a }
