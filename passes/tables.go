package passes

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/zrtdev/zrt/compiler/ir"
)

// WriteLiveness writes lv as a table: per register its bytes, defining
// instruction and last read, then the kill set after each instruction that
// has one. Instruction numbers match the text IR's.
func WriteLiveness(w io.Writer, g *ir.Graph, lv *Liveness) error {
	fmt.Fprintf(w, "; liveness of %s: %d registers, %d instructions\n", g.Key, len(g.Regs), len(g.Insts))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "value\tbytes\tdef\tlast\t")
	for r, reg := range g.Regs {
		fmt.Fprintf(tw, "%%%s\t%d\t%d\t%d\t\n", reg.Name, reg.Bytes(), lv.Def[r], lv.RegisterLastRead[r])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\n; dead after each instruction")
	for i, kill := range lv.KillAfterInstruction {
		if len(kill) == 0 {
			continue
		}
		names := make([]string, len(kill))
		for j, r := range kill {
			names[j] = "%" + g.Regs[r].Name
		}
		fmt.Fprintf(w, "%4d  %s\n", i, strings.Join(names, " "))
	}
	_, err := fmt.Fprintf(w, "\n; lower bound (peak live) %d B; one buffer per value %d B\n", lv.PeakBytes, lv.NaiveBytes)
	return err
}

// WritePhysical writes pm as a table: each register's physical buffer, then
// each physical buffer's size and, once memplan has run, its offset in the
// scratch region (-1 before).
func WritePhysical(w io.Writer, g *ir.Graph, pm *PhysicalMap) error {
	fmt.Fprintf(w, "; physical mapping of %s: %d registers onto %d buffers\n", g.Key, len(g.Regs), len(pm.PhysicalSizes))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "value\tbytes\tphys\t")
	for r, reg := range g.Regs {
		fmt.Fprintf(tw, "%%%s\t%d\t%d\t\n", reg.Name, reg.Bytes(), pm.RegisterToPhysical[r])
	}
	fmt.Fprintln(tw, "\t\t\t")
	fmt.Fprintln(tw, "phys\tbytes\toffset\t")
	for p, sz := range pm.PhysicalSizes {
		off := int64(-1)
		if p < len(pm.PhysicalOffsets) {
			off = pm.PhysicalOffsets[p]
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t\n", p, sz, off)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n; scratch %d B (0 before memplan)\n", pm.ScratchBytes)
	return err
}
