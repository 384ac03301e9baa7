package passes

import (
	"context"
	"fmt"
	"math"
	"sort"

	"github.com/zrtdev/zrt/compiler/ir"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/kernels"
	"github.com/zrtdev/zrt/kernels/cuda"
)

// The megakernel pass turns each decode variant's lowered stream into a
// schedule for a persistent kernel (format/bundle's Schedule; the design
// is docs/design/megakernel.md). Every dispatch becomes tasks:
//
//   - a matrix product (matmul, matmul_residual, lm_head, the fused norm +
//     projections) becomes tiles of its output features, each the features
//     of whole blocks of the graph path's launch (cuda.BlockFeatures),
//     blocks taken together so that a product has at most two tiles a
//     multiprocessor (Unit.MegakernelTiles);
//   - attention becomes a task per row and KV head (with the query heads
//     that share it);
//   - the ops that work row by row (norms, RoPE and the KV write, the
//     elementwise ops, embedding, argmax) become a task per row, and the
//     elementwise ones of a one-row step tasks of 256-column blocks;
//   - anything else (mixtures of experts, recurrent layers) stays whole.
//
// Dependencies are counters. Each task adds one to its counter when done:
// a product's tiles share one counter, a row op has one per row, attention
// one per row for its heads. A task waits for a counter to reach its
// count when the storage it reads or writes overlaps what that counter's
// tasks write (or, for a write, read): exactly the hazards lower puts
// barriers for, but per row, feature range and KV layer instead of per
// buffer, and never at a global barrier. Waits another wait already
// implies (its counter's tasks waited for them) are dropped.
//
// It reads what lower read (instructions, kernel instances, physical
// mapping, memory plan) and changes nothing of the streams, so a build's
// packet streams are the same with it or without it.

// scheduleSMs is the multiprocessors to schedule for: Unit.MegakernelSMs
// when set, else the target's (CUDA targets); 0 builds no schedules.
func (u *Unit) scheduleSMs() int {
	if u.MegakernelSMs != 0 {
		return u.MegakernelSMs
	}
	return cuda.Multiprocessors(u.Target)
}

// tilesPerSM is Unit.MegakernelTiles, 2 when unset.
func (u *Unit) tilesPerSM() int {
	if u.MegakernelTiles > 0 {
		return u.MegakernelTiles
	}
	return 2
}

func megakernel(_ context.Context, u *Unit) error {
	u.Schedules = nil
	sms := u.scheduleSMs()
	// A tensor-parallel rank's decode variants meet the other GPUs at
	// their collectives, which no task of a persistent kernel waits for:
	// they keep the graph path.
	if sms <= 0 || u.TP.Split() {
		return nil
	}
	for gi, g := range u.Graphs {
		if g.Key.Stage != ir.Decode {
			continue
		}
		s, err := scheduleGraph(u, gi, sms)
		if err != nil {
			return fmt.Errorf("variant %s: %w", g.Key, err)
		}
		u.Schedules = append(u.Schedules, s)
	}
	return nil
}

// attnTokens is the context attention's bytes are estimated for: the
// queues are balanced for steps at about this many tokens of KV.
const attnTokens = 1024

// span is bytes [lo, hi) of a region, for dependence tracking (lowering's
// barriers, the schedule's counters); a whole region is [0, MaxInt64). In
// the schedule, KV regions are addressed by the layer's place in a page
// instead ([layer, layer+1), the kernels' "layer": its index among the
// layers of its width, so that layers of two widths at one index
// conflict, which is safe).
type span struct {
	region int
	lo, hi int64
}

func (a span) overlaps(b span) bool { return a.region == b.region && a.lo < b.hi && b.lo < a.hi }

// anyOverlap reports whether a span of a overlaps one of b.
func anyOverlap(a, b []span) bool {
	for _, x := range a {
		for _, y := range b {
			if x.overlaps(y) {
				return true
			}
		}
	}
	return false
}

// access is what a task or a counter's tasks read and write.
type access struct{ reads, writes []span }

func (a access) conflicts(b access) bool {
	return anyOverlap(a.reads, b.writes) || anyOverlap(a.writes, b.writes) || anyOverlap(a.writes, b.reads)
}

// merged is a with each list sorted and overlapping or touching spans
// joined: a product's tiles together write whole rows, one span.
func (a access) merged() access { return access{mergeSpans(a.reads), mergeSpans(a.writes)} }

func mergeSpans(sp []span) []span {
	sp = append([]span(nil), sp...)
	sort.Slice(sp, func(i, j int) bool {
		if sp[i].region != sp[j].region {
			return sp[i].region < sp[j].region
		}
		return sp[i].lo < sp[j].lo
	})
	var out []span
	for _, x := range sp {
		if n := len(out); n > 0 && out[n-1].region == x.region && x.lo <= out[n-1].hi {
			out[n-1].hi = max(out[n-1].hi, x.hi)
			continue
		}
		out = append(out, x)
	}
	return out
}

func (a *access) add(b access) {
	a.reads = append(a.reads, b.reads...)
	a.writes = append(a.writes, b.writes...)
}

// rowFamilies are the kernel families whose dispatches compute each
// activation row from that row alone (and the step's KV, request table and
// weights), so a task can take a range of rows.
var rowFamilies = map[string]bool{
	"embed": true, "rms_norm": true, "rope": true, "rope_ext": true, "kv_write": true,
	"rope_kv_write": true, "rms_norm_rope_kv_write": true, "add": true, "add_gated": true,
	"swiglu": true, "geglu": true, "swiglu_oai": true, "scale": true, "attn_temp": true,
	"argmax": true, "flash_attn": true, "flash_attn_ext": true,
}

// colFamilies are the elementwise families whose per-row operands are
// all rows of push "cols" F32 columns: a one-row step splits them into
// tasks of colTile columns, the blocks of their graph-path launch
// (cuda's elementwise geometry), so that a row op is not one
// multiprocessor's alone.
var colFamilies = map[string]bool{"add": true, "swiglu": true, "geglu": true, "swiglu_oai": true, "scale": true}

const colTile = 256

// tileOut is one output of a matrix family: its operand role and the
// features [base, base+width) of the concatenated outputs it holds.
type tileOut struct {
	role        string
	base, width int64
}

func tileOutputs(family string, a ir.Attrs) []tileOut {
	switch family {
	case "matmul", "matmul_residual":
		return []tileOut{{"y", 0, int64(a["n"])}}
	case "lm_head":
		return []tileOut{{"logits", 0, int64(a["n_vocab"])}}
	case "rms_norm_qkv":
		nq, nkv := int64(a["n_q"]), int64(a["n_kv"])
		return []tileOut{{"q", 0, nq}, {"k", nq, nkv}, {"v", nq + nkv, nkv}}
	case "rms_norm_gate_up":
		f := int64(a["f"])
		return []tileOut{{"gate", 0, f}, {"up", f, f}}
	}
	return nil
}

// sched builds one schedule.
type sched struct {
	u     *Unit
	g     *ir.Graph
	gi    int
	rows  int
	out   bundle.Schedule
	acc   []access   // per counter: its tasks' union
	imply [][]uint64 // per counter: the counters its reaching implies have reached
}

func scheduleGraph(u *Unit, gi, sms int) (bundle.Schedule, error) {
	g := u.Graphs[gi]
	s := &sched{u: u, g: g, gi: gi, rows: g.Key.Rows}
	s.out = bundle.Schedule{Variant: uint32(gi)}
	// opAcc is each dispatch's union access, to find the earlier
	// dispatches a task may conflict with before looking at counters.
	var opAcc []access
	opCounters := map[int][]int{}
	for ii := range g.Insts {
		op, err := s.opInfo(ii)
		if err != nil {
			return s.out, fmt.Errorf("inst %d (%s): %w", ii, g.Insts[ii].Op, err)
		}
		s.out.Ops = append(s.out.Ops, op)
		tasks, err := s.split(ii, sms)
		if err != nil {
			return s.out, fmt.Errorf("inst %d (%s): %w", ii, g.Insts[ii].Op, err)
		}
		var union access
		for _, t := range tasks {
			union.add(t.acc)
		}
		var cands []int
		for oi := ii - 1; oi >= 0; oi-- {
			if union.conflicts(opAcc[oi]) {
				cs := opCounters[oi]
				for j := len(cs) - 1; j >= 0; j-- {
					cands = append(cands, cs[j])
				}
			}
		}
		first := len(s.out.Counters)
		for _, t := range tasks {
			c := first + t.counter
			for len(s.out.Counters) <= c {
				s.out.Counters = append(s.out.Counters, 0)
				s.acc = append(s.acc, access{})
			}
			s.out.Counters[c]++
			s.acc[c].add(t.acc)
			// Latest first: a counter implies only earlier ones, so one
			// that none of the waits taken so far implies is needed.
			implied := make([]uint64, (first+63)/64)
			var waits []int
			for _, cc := range cands {
				if implied[cc/64]&(1<<(cc%64)) != 0 || !t.acc.conflicts(s.acc[cc]) {
					continue
				}
				waits = append(waits, cc)
				implied[cc/64] |= 1 << (cc % 64)
				for i, x := range s.imply[cc] {
					implied[i] |= x
				}
			}
			t.task.WaitOff, t.task.WaitLen, t.task.Signal = uint32(len(s.out.Waits)), uint32(len(waits)), uint32(c)
			for j := len(waits) - 1; j >= 0; j-- {
				w := waits[j]
				s.out.Waits = append(s.out.Waits, bundle.Wait{Counter: uint32(w), Count: s.out.Counters[w]})
			}
			s.out.Tasks = append(s.out.Tasks, t.task)
		}
		for c := first; c < len(s.out.Counters); c++ {
			s.acc[c] = s.acc[c].merged()
		}
		// What reaching each new counter implies: its tasks' waits and
		// what those imply.
		words := (len(s.out.Counters) + 63) / 64
		for c := first; c < len(s.out.Counters); c++ {
			s.imply = append(s.imply, make([]uint64, words))
		}
		for ti := len(s.out.Tasks) - len(tasks); ti < len(s.out.Tasks); ti++ {
			t := s.out.Tasks[ti]
			set := s.imply[t.Signal]
			for _, w := range s.out.TaskWaits(ti) {
				set[w.Counter/64] |= 1 << (w.Counter % 64)
				for i, x := range s.imply[w.Counter] {
					set[i] |= x
				}
			}
		}
		opAcc = append(opAcc, union.merged())
		for c := first; c < len(s.out.Counters); c++ {
			opCounters[ii] = append(opCounters[ii], c)
		}
	}
	s.out.Assign(sms)
	if err := s.out.Validate(len(g.Insts), g.Key.Rows); err != nil {
		return s.out, fmt.Errorf("megakernel: built an invalid schedule: %w", err)
	}
	return s.out, nil
}

// opInfo gives dispatch ii's row strides, per ABI buffer: a register's
// row for a register of the variant's rows, else 0.
func (s *sched) opInfo(ii int) (bundle.Op, error) {
	in := &s.g.Insts[ii]
	abi, _, err := kernels.SplitInstance(s.u.Kernels[s.u.InstKernel[s.gi][ii]].Name)
	if err != nil {
		return bundle.Op{}, err
	}
	op := bundle.Op{Strides: make([]uint32, len(abi.Bufs))}
	for i, role := range abi.Bufs {
		if o, ok := in.Operand(role); ok && o.Kind == ir.RegOperand {
			if r := &s.g.Regs[o.ID]; r.Rows == s.rows {
				op.Strides[i] = uint32(r.Cols * r.Elem)
			}
		}
	}
	return op, nil
}

// pending is a task with its access and its counter among its dispatch's.
type pending struct {
	task    bundle.Task
	acc     access
	counter int
}

// split makes dispatch ii's tasks.
func (s *sched) split(ii, sms int) ([]pending, error) {
	in := &s.g.Insts[ii]
	ki := s.u.InstKernel[s.gi][ii]
	inst := s.u.Kernels[ki]
	abi, _, err := kernels.SplitInstance(inst.Name)
	if err != nil {
		return nil, err
	}
	rowsOK := true
	for _, o := range append(append([]ir.Operand(nil), in.Reads...), in.Writes...) {
		if o.Kind == ir.RegOperand && s.g.Regs[o.ID].Rows != s.rows {
			rowsOK = false
		}
	}
	all := bundle.Task{Op: uint32(ii), Kind: bundle.TaskWhole, RowLo: 0, RowHi: uint32(s.rows)}
	switch {
	case cuda.MatrixFamily(abi.Name) && rowsOK:
		return s.tiles(ii, in, abi, inst, sms)
	case (abi.Name == "flash_attn" || abi.Name == "flash_attn_ext") && rowsOK:
		nh, nkv, hd := int64(in.Attrs["n_head"]), int64(in.Attrs["n_head_kv"]), int64(in.Attrs["head_dim"])
		if nkv <= 0 || nh%nkv != 0 {
			return nil, fmt.Errorf("%d heads over %d KV heads", nh, nkv)
		}
		var out []pending
		for r := 0; r < s.rows; r++ {
			for h := int64(0); h < nkv; h++ {
				t := bundle.Task{Op: uint32(ii), Kind: bundle.TaskHeads, RowLo: uint32(r), RowHi: uint32(r + 1), Lo: uint32(h), Hi: uint32(h + 1)}
				cols := [2]int64{h * nh / nkv * hd, (h + 1) * nh / nkv * hd}
				acc, b, err := s.access(in, abi.Name, r, r+1, map[string][2]int64{"q": cols, "y": cols})
				if err != nil {
					return nil, err
				}
				t.Bytes = b + uint64(attnTokens*2*hd*2)
				out = append(out, pending{t, acc, r})
			}
		}
		return out, nil
	case colFamilies[abi.Name] && rowsOK && s.rows == 1 && in.Attrs["cols"] > colTile:
		cols := int64(in.Attrs["cols"])
		per := int64(s.u.tilesPerSM() * sms)
		width := int64(colTile) * ((cols + int64(colTile)*per - 1) / (int64(colTile) * per))
		var out []pending
		for lo := int64(0); lo < cols; lo += width {
			hi := min(lo+width, cols)
			narrow := map[string][2]int64{}
			for _, o := range append(append([]ir.Operand(nil), in.Reads...), in.Writes...) {
				if o.Kind == ir.RegOperand {
					narrow[o.Role] = [2]int64{lo, hi}
				}
			}
			t := bundle.Task{Op: uint32(ii), Kind: bundle.TaskTile, RowLo: 0, RowHi: 1, Lo: uint32(lo), Hi: uint32(hi)}
			acc, b, err := s.access(in, abi.Name, 0, 1, narrow)
			if err != nil {
				return nil, err
			}
			t.Bytes = b
			out = append(out, pending{t, acc, 0})
		}
		return out, nil
	case rowFamilies[abi.Name] && rowsOK && s.rows > 1:
		var out []pending
		for r := 0; r < s.rows; r++ {
			t := bundle.Task{Op: uint32(ii), Kind: bundle.TaskRows, RowLo: uint32(r), RowHi: uint32(r + 1)}
			acc, b, err := s.access(in, abi.Name, r, r+1, nil)
			if err != nil {
				return nil, err
			}
			t.Bytes = b
			out = append(out, pending{t, acc, r})
		}
		return out, nil
	}
	acc, b, err := s.access(in, abi.Name, 0, s.rows, nil)
	if err != nil {
		return nil, err
	}
	all.Bytes = b
	return []pending{{all, acc, 0}}, nil
}

// tiles splits a matrix dispatch into tiles of whole blocks.
func (s *sched) tiles(ii int, in *ir.Inst, abi *kernels.ABI, inst KernelInstance, sms int) ([]pending, error) {
	var push []uint32
	for _, p := range abi.Push {
		push = append(push, encodeParam(p, in.Attrs[p.Name]))
	}
	n, per, err := cuda.BlockFeatures(inst.Name, push, inst.Spec, s.rows)
	if err != nil {
		return nil, err
	}
	outs := tileOutputs(abi.Name, in.Attrs)
	if w := outs[len(outs)-1]; int64(n) != w.base+w.width {
		return nil, fmt.Errorf("%d output features, its outputs hold %d", n, w.base+w.width)
	}
	blocks := (n + per - 1) / per
	tiles := uint32(s.u.tilesPerSM() * sms)
	perTile := per * ((blocks + tiles - 1) / tiles)
	// The weight matrix is the one weight whose rows are the outputs.
	var wBytes int64
	for _, o := range in.Reads {
		if o.Kind == ir.BufOperand && s.g.Buffers[o.ID].Class == ir.Weight && len(s.g.Buffers[o.ID].Dims) == 2 && s.g.Buffers[o.ID].Dims[1] == int64(n) {
			wBytes = s.g.Buffers[o.ID].Bytes
		}
	}
	var out []pending
	for lo := uint32(0); lo < n; lo += perTile {
		hi := min(lo+perTile, n)
		cols := map[string][2]int64{}
		for _, o := range outs {
			a, b := max(int64(lo), o.base), min(int64(hi), o.base+o.width)
			if a >= b {
				a, b = 0, 0 // no columns of this output: no access
			}
			cols[o.role] = [2]int64{a - o.base, b - o.base}
		}
		acc, b, err := s.access(in, abi.Name, 0, s.rows, cols)
		if err != nil {
			return nil, err
		}
		t := bundle.Task{Op: uint32(ii), Kind: bundle.TaskTile, RowLo: 0, RowHi: uint32(s.rows), Lo: lo, Hi: hi}
		t.Bytes = b + uint64(wBytes*int64(hi-lo)/int64(n))
		out = append(out, pending{t, acc, 0})
	}
	return out, nil
}

// access is what dispatch in does for rows [r0, r1), restricted to the
// columns cols gives for some roles (of registers, or of the logits by
// slot), with the bytes of activations and small weights it moves (the
// split matrix's weight is counted by its caller).
func (s *sched) access(in *ir.Inst, family string, r0, r1 int, cols map[string][2]int64) (access, uint64, error) {
	var acc access
	var moved uint64
	pm, plan := s.u.Physical[s.gi], s.u.Plan
	add := func(o ir.Operand, write bool) error {
		var sp []span
		c, narrowed := cols[o.Role]
		if narrowed && c[0] >= c[1] {
			return nil
		}
		if o.Kind == ir.RegOperand {
			reg := &s.g.Regs[o.ID]
			off := pm.PhysicalOffsets[pm.RegisterToPhysical[o.ID]]
			stride := int64(reg.Cols) * int64(reg.Elem)
			lo, hi := int64(r0), int64(r1)
			if reg.Rows != s.rows {
				lo, hi = 0, int64(reg.Rows)
			}
			if !narrowed {
				sp = append(sp, span{plan.Scratch, off + lo*stride, off + hi*stride})
			} else {
				for r := lo; r < hi; r++ {
					sp = append(sp, span{plan.Scratch, off + r*stride + c[0]*int64(reg.Elem), off + r*stride + c[1]*int64(reg.Elem)})
				}
			}
			for _, x := range sp {
				moved += uint64(x.hi - x.lo)
			}
		} else {
			b := &s.g.Buffers[o.ID]
			whole := func(region int) { sp = append(sp, span{region, 0, math.MaxInt64}) }
			switch b.Class {
			case ir.Weight:
				switch {
				case cuda.MatrixFamily(family):
				case family == "embed" && len(b.Dims) == 2 && b.Dims[1] > 0:
					moved += uint64(b.Bytes / b.Dims[1] * int64(r1-r0)) // a row of the table a row
				default:
					moved += uint64(b.Bytes)
				}
				return nil // never written in a step
			case ir.IO, ir.IOWindow:
				return nil // written by the host between steps
			case ir.KV, ir.KVWindow:
				region := plan.KV
				if b.Class == ir.KVWindow {
					region = plan.KVWindow
				}
				if l, ok := in.Attrs["layer"]; ok {
					sp = append(sp, span{region, int64(l), int64(l) + 1})
				} else {
					whole(region)
				}
			case ir.Recurrent:
				whole(plan.Recurrent)
			case ir.Out:
				region := plan.Tokens
				if b.Name == "out.logits" {
					region = plan.Logits
				}
				nv := int64(in.Attrs["n_vocab"])
				if !narrowed || region != plan.Logits {
					whole(region)
					if region == plan.Logits {
						moved += uint64(4 * int64(r1-r0) * nv)
					}
					break
				}
				slots := plan.Regions[region].Bytes / (4 * nv)
				for sl := int64(0); sl < slots; sl++ {
					sp = append(sp, span{region, 4 * (sl*nv + c[0]), 4 * (sl*nv + c[1])})
				}
				moved += uint64(4 * int64(r1-r0) * (c[1] - c[0]))
			default:
				return fmt.Errorf("buffer %s has class %s", b.Name, b.Class)
			}
		}
		if write {
			acc.writes = append(acc.writes, sp...)
		} else {
			acc.reads = append(acc.reads, sp...)
		}
		return nil
	}
	for _, o := range in.Reads {
		if err := add(o, false); err != nil {
			return acc, 0, err
		}
	}
	for _, o := range in.Writes {
		if err := add(o, true); err != nil {
			return acc, 0, err
		}
	}
	return acc, moved, nil
}
