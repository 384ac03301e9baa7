package cuda

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	goruntime "runtime"
	"slices"
	"strings"

	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/kernels"
	kcuda "github.com/zrtdev/zrt/kernels/cuda"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
)

// The persistent decode kernel (docs/design/megakernel.md): a decode
// variant whose bundle carries a megakernel schedule, every dispatch of
// which the kernel serves (kcuda.MegakernelOps), runs as one launch of
// kernels/cuda/megakernel.cu instead of its few hundred, captured in the
// variant's CUDA graph like the launches it replaces (a memset of the
// counters, then the kernel). Each task runs its dispatch's graph-path
// code over a box of that launch's blocks (mk_begin.cuh's virtual launch),
// so the outputs are the graph path's bits. What the kernel does not serve
// (more rows than the matrix-vector kernels take, a quantized KV cache,
// mixtures of experts, …) keeps the graph path, and Tier.Megakernel says
// why.

// mkThreads is MK_THREADS in mk_begin.cuh: the persistent block's threads.
const mkThreads = kcuda.MegakernelThreads

// The records the kernel reads (megakernel.cuh), in u32 words.
const (
	mkTaskWords = 13 // MkTask: op, x0 x1 y0 y1 z0 z1, wait_off, wait_len, signal, pf_lo, pf_hi, pf_bytes
	mkOpWords   = 8  // MkOp: code, param_off, grid[3], block[3]
)

// mkOp is a dispatch's MkOp.
type mkOp struct {
	code, paramOff uint32
	grid, block    [3]uint32
	features       uint32 // a matrix family's output features; 0 otherwise
	matrix         bool
	// w and rowBytes are a matrix family's weights (a feature's row each,
	// rowBytes long, features rows in all), 0 where unknown: a tile's
	// rows are prefetched into L2 while its block waits.
	w, rowBytes uint64
}

// mkTask is a task's MkTask, with the bytes the queues are balanced by.
type mkTask struct {
	op                    uint32
	box                   [6]uint32 // x0 x1 y0 y1 z0 z1
	waitOff, waitLen, sig uint32
	bytes                 uint64
	// pf and pfBytes are the weight bytes the task reads (a tile's rows
	// of its matrix), which the kernel prefetches into L2 before the
	// task's waits and while the task before it in the queue computes;
	// none for other tasks.
	pf      uint64
	pfBytes uint32
}

// mkTables is a decode variant's schedule as the persistent kernel reads
// it, before it is laid out in device memory.
type mkTables struct {
	ops      []mkOp
	params   []uint64
	tasks    []mkTask
	waits    []bundle.Wait
	counters int
	queues   [][]uint32
	shared   int // dynamic shared memory: the most any dispatch's launch takes
}

// buildMkTables turns schedule s of a variant of rows rows, whose
// dispatches walked into launches ls, into the kernel's tables, or says
// why the kernel cannot run it: a dispatch it does not serve, a launch
// that is more than one (a stage, a rest), a task whose piece is no box of
// its launch's blocks. It checks that the tasks of every dispatch cover
// each of its blocks exactly once.
func buildMkTables(s *bundle.Schedule, ls []Launch, rows int) (*mkTables, error) {
	if len(ls) != len(s.Ops) {
		return nil, fmt.Errorf("%d launches for %d dispatches (a stage or rest launch)", len(ls), len(s.Ops))
	}
	m := &mkTables{waits: s.Waits, counters: len(s.Counters)}
	for i := range ls {
		l := &ls[i]
		// The split attention's partial states and their counts lie in
		// the staging buffer, each (head group, row) its own: a heads
		// task runs all of a group's ranges, the last one merging, as
		// the graph path's blocks do.
		split := l.Shape.Entry == kcuda.EntrySplit
		if (l.Staging > 0 && !split) || l.Shape.Rest != nil || l.Shape.Stage != nil {
			return nil, fmt.Errorf("dispatch %d (%s) stages its rows or has a rest launch", i, l.Name)
		}
		code, ok := kcuda.MegakernelCode(l.Name, l.Shape.Entry)
		if !ok {
			return nil, fmt.Errorf("dispatch %d: the megakernel has no task for %s%s", i, l.Name, l.Shape.Entry.Suffix())
		}
		o := mkOp{code: code, paramOff: uint32(len(m.params)), grid: l.Shape.Grid, block: l.Shape.Block}
		family, _, _ := strings.Cut(l.Name, ".")
		if kcuda.MatrixFamily(family) {
			// The matrix-vector kernel's blocks take RPB features a pass,
			// striding by the grid's: a grid of one pass a block makes a
			// tile of features a range of blocks. A feature's sum does not
			// depend on the grid (its warps and their order are the
			// block's), so the bits stay the graph path's.
			n, _, err := kcuda.BlockFeatures(l.Name, l.Push, l.Spec, rows)
			if err != nil {
				return nil, fmt.Errorf("dispatch %d: %w", i, err)
			}
			o.matrix, o.features = true, n
			o.grid[0] = (n + o.block[1] - 1) / o.block[1]
			o.w, o.rowBytes = mkWeights(l)
		}
		if threads := o.block[0] * o.block[1] * o.block[2]; threads > mkThreads && family == "argmax" {
			o.block = [3]uint32{mkThreads, 1, 1} // the first largest logit whatever the block
		}
		if threads := o.block[0] * o.block[1] * o.block[2]; threads > mkThreads || threads%32 != 0 || threads == 0 {
			return nil, fmt.Errorf("dispatch %d (%s): a block of %v threads", i, l.Name, o.block)
		}
		m.params = append(m.params, l.Params...)
		m.shared = max(m.shared, l.Shape.Shared)
		m.ops = append(m.ops, o)
	}
	covered := make([][]uint8, len(m.ops))
	for i, o := range m.ops {
		covered[i] = make([]uint8, o.grid[0]*o.grid[1]*o.grid[2])
	}
	for ti, t := range s.Tasks {
		if int(t.Op) >= len(m.ops) {
			return nil, fmt.Errorf("task %d: no dispatch %d", ti, t.Op)
		}
		o := &m.ops[t.Op]
		box, err := mkBox(o, &ls[t.Op], t, rows)
		if err != nil {
			return nil, fmt.Errorf("task %d (%s %s): %w", ti, ls[t.Op].Name, t.Kind, err)
		}
		for z := box[4]; z < box[5]; z++ {
			for y := box[2]; y < box[3]; y++ {
				for x := box[0]; x < box[1]; x++ {
					c := &covered[t.Op][(z*o.grid[1]+y)*o.grid[0]+x]
					if *c != 0 {
						return nil, fmt.Errorf("task %d (%s): block (%d, %d, %d) is another task's too", ti, ls[t.Op].Name, x, y, z)
					}
					*c = 1
				}
			}
		}
		mt := mkTask{op: t.Op, box: box, waitOff: t.WaitOff, waitLen: t.WaitLen, sig: t.Signal, bytes: t.Bytes}
		if o.matrix && o.rowBytes > 0 {
			// The box's features: whole blocks of block.y, the last
			// cut at the matrix's end, so the range stays inside it.
			lo, hi := uint64(box[0]*o.block[1]), uint64(min(box[1]*o.block[1], o.features))
			if n := (hi - lo) * o.rowBytes; hi > lo && n < 1<<31 {
				mt.pf, mt.pfBytes = o.w+lo*o.rowBytes, uint32(n)
			}
		}
		m.tasks = append(m.tasks, mt)
	}
	for i, c := range covered {
		for b, v := range c {
			if v == 0 {
				return nil, fmt.Errorf("dispatch %d (%s): no task runs block %d", i, ls[i].Name, b)
			}
		}
	}
	m.queues = s.Queues
	for oi := range m.ops {
		m.stride(s, oi)
	}
	if m.spread() {
		m.regroup(len(s.Queues), true)
	}
	return m, nil
}

// stride makes each tile task of matrix op oi one block of a grid of as
// many blocks as the op has tasks, where the schedule gives all of them
// the same waits and rows: the matrix-vector kernel's block then takes
// its features a pass at a time, striding by the grid (features j·RPB +
// k·tasks·RPB), with the activation rows quantized once, not once a pass.
// A feature's sum is its block's warps' whatever the grid, so the bits
// are the same; the tasks write other features than their tiles, which
// is safe because they all wait for the same counters (those of every
// tile's conflicts) and whoever reads or overwrites the product waits for
// all of them. The lm_head's tiles of the qwen3 0.6B shape (152k
// features, 72 passes a tile) took 108 µs each on an H200 as 72 blocks
// in turn, its fused gate/up tiles of two blocks 9 µs where a matmul's of
// one took 5. A task keeps prefetching its tile's rows: all the op's
// tasks wait for the same counters and so run together, and their
// prefetches cover the matrix between them.
func (m *mkTables) stride(s *bundle.Schedule, oi int) {
	o := &m.ops[oi]
	if !o.matrix {
		return
	}
	var idx []int
	for ti, t := range m.tasks {
		if t.op == uint32(oi) {
			idx = append(idx, ti)
		}
	}
	if len(idx) < 2 || uint32(len(idx)) >= o.grid[0] {
		return // a block a tile already
	}
	waits := func(t bundle.Task) []bundle.Wait { return s.Waits[t.WaitOff : t.WaitOff+t.WaitLen] }
	t0 := s.Tasks[idx[0]]
	for _, ti := range idx {
		t := s.Tasks[ti]
		if t.Kind != bundle.TaskTile || t.RowLo != t0.RowLo || t.RowHi != t0.RowHi || !slices.Equal(waits(t), waits(t0)) ||
			m.tasks[ti].box[2] != m.tasks[idx[0]].box[2] || m.tasks[ti].box[3] != m.tasks[idx[0]].box[3] {
			return
		}
	}
	o.grid[0] = uint32(len(idx))
	for j, ti := range idx {
		t := &m.tasks[ti]
		t.box[0], t.box[1] = uint32(j), uint32(j+1)
	}
}

// mkSpreadMax bounds the tasks spread makes of one.
const mkSpreadMax = 32

// spread makes each task of more than one block that is no tile of a
// matrix product (those are sized by the schedule) into tasks of a block
// each, up to mkSpreadMax: the same waits and counter, so each counter's
// count grows by the tasks added and every wait on it with it. A block
// runs its task's blocks one after another, which for a split
// attention's heads task (the _split entry's blocks of a head group along
// z, the first of which takes all the keys of a short row while the
// others return at once) or a one-row step's RoPE and KV write (its head
// chunks) puts them all on the path from the producers to the consumers;
// spread, they run side by side on as many multiprocessors, which a
// launch's blocks are free to (they meet only through their own atomics,
// as the split attention's last block merges). It reports whether it
// changed the tasks (the queues must then be made again), and changes
// nothing where a wait is not for its counter's whole count.
func (m *mkTables) spread() bool {
	count := make([]uint32, m.counters)
	for _, t := range m.tasks {
		if int(t.sig) >= len(count) {
			return false
		}
		count[t.sig]++
	}
	for _, w := range m.waits {
		if int(w.Counter) >= len(count) || w.Count != count[w.Counter] {
			return false
		}
	}
	var out []mkTask
	changed := false
	for _, t := range m.tasks {
		b := t.box
		nx, ny, nz := b[1]-b[0], b[3]-b[2], b[5]-b[4]
		n := nx * ny * nz
		if m.ops[t.op].matrix || n <= 1 {
			out = append(out, t)
			continue
		}
		// Pieces of whole blocks: along z, then y, then x, as many as
		// fit mkSpreadMax (a piece of several blocks past it).
		parts := min(n, mkSpreadMax)
		per := (n + parts - 1) / parts
		for lo := uint32(0); lo < n; lo += per {
			hi := min(lo+per, n)
			// Blocks lo..hi-1 in x-fastest order over the box; a piece
			// must be a box: take whole rows of x unless within one.
			for i := lo; i < hi; {
				x, y, z := i%nx, (i/nx)%ny, i/(nx*ny)
				w := min(hi-i, nx-x) // along x, within the row
				p := t
				p.box = [6]uint32{b[0] + x, b[0] + x + w, b[2] + y, b[2] + y + 1, b[4] + z, b[4] + z + 1}
				p.bytes = max(t.bytes*uint64(w)/uint64(n), 1)
				out = append(out, p)
				i += w
			}
		}
		changed = true
	}
	if !changed {
		return false
	}
	m.tasks = out
	clear(count)
	for _, t := range out {
		count[t.sig]++
	}
	waits := slices.Clone(m.waits)
	for i := range waits {
		waits[i].Count = count[waits[i].Counter]
	}
	m.waits = waits
	return true
}

// mkWeights is a matrix launch's weights and the bytes of one output
// feature's row of them (its k inputs in its weight type), or zeros where
// the launch's kernel names no such buffer.
func mkWeights(l *Launch) (w, rowBytes uint64) {
	abi, typ, err := kernels.SplitInstance(l.Name)
	if err != nil {
		return 0, 0
	}
	wi := slices.IndexFunc(abi.Bufs, func(b string) bool { return b == "w" || b == "w_qkv" || b == "w_gate_up" })
	if wi < 0 || wi >= len(l.Params) {
		return 0, 0
	}
	k, ok := uint32(0), false
	if i := slices.IndexFunc(abi.Push, func(p kernels.Param) bool { return p.Name == "k" }); i >= 0 && i < len(l.Push) {
		k, ok = l.Push[i], true
	} else if i := slices.IndexFunc(abi.Spec, func(p kernels.Param) bool { return p.Name == "k" }); i >= 0 && i < len(l.Spec) {
		k, ok = l.Spec[i], true
	}
	if !ok || l.Params[wi] == 0 {
		return 0, 0
	}
	rb, err := typ.RowBytes(int64(k))
	if err != nil || rb <= 0 {
		return 0, 0
	}
	return l.Params[wi], uint64(rb)
}

// mkBox is the box of o's blocks that task t runs.
func mkBox(o *mkOp, l *Launch, t bundle.Task, rows int) ([6]uint32, error) {
	g := o.grid
	all := [6]uint32{0, g[0], 0, g[1], 0, g[2]}
	rowsIn := func(b [6]uint32, lo, hi uint32) ([6]uint32, error) { // rows [lo, hi) as y
		if lo >= hi || hi > g[1] {
			return b, fmt.Errorf("rows [%d, %d) of a grid of %d", lo, hi, g[1])
		}
		b[2], b[3] = lo, hi
		return b, nil
	}
	switch t.Kind {
	case bundle.TaskWhole:
		return all, nil
	case bundle.TaskRows:
		if family, _, _ := strings.Cut(l.Name, "."); (family == "swiglu" || family == "add") && len(l.Push) > 0 {
			// A thread an element in blocks of block.x: whole rows are
			// whole blocks when a row is.
			cols, b := l.Push[0], o.block[0]
			if cols%b != 0 || g[0] != uint32(rows)*cols/b || t.RowLo >= t.RowHi || t.RowHi > uint32(rows) {
				return all, fmt.Errorf("rows [%d, %d) of %d columns are no whole blocks of %d", t.RowLo, t.RowHi, cols, b)
			}
			all[0], all[1] = t.RowLo*cols/b, t.RowHi*cols/b
			return all, nil
		}
		// A block a row (and as many more as the grid's y): grid.x is the
		// step's rows.
		if o.matrix || g[0] != uint32(rows) || t.RowLo >= t.RowHi || t.RowHi > g[0] {
			return all, fmt.Errorf("rows [%d, %d) of a grid %v", t.RowLo, t.RowHi, g)
		}
		all[0], all[1] = t.RowLo, t.RowHi
		return all, nil
	case bundle.TaskTile:
		if o.matrix {
			rpb := o.block[1]
			if t.Lo%rpb != 0 || (t.Hi%rpb != 0 && t.Hi != o.features) || t.Lo >= t.Hi || t.Hi > o.features {
				return all, fmt.Errorf("features [%d, %d) are no whole blocks of %d of %d", t.Lo, t.Hi, rpb, o.features)
			}
			all[0], all[1] = t.Lo/rpb, (t.Hi+rpb-1)/rpb
			r := kcuda.RowsPerBlock(l.Shape.Entry) // a block's rows
			return rowsIn(all, t.RowLo/r, (t.RowHi+r-1)/r)
		}
		// An elementwise dispatch of a one-row step: a thread a column in
		// blocks of block.x.
		b := o.block[0]
		if rows != 1 || g[1] != 1 || g[2] != 1 || o.block[1] != 1 || o.block[2] != 1 || t.Lo >= t.Hi || t.Lo%b != 0 ||
			(t.Hi%b != 0 && (t.Hi+b-1)/b != g[0]) || (t.Hi+b-1)/b > g[0] {
			return all, fmt.Errorf("columns [%d, %d) are no whole blocks of a grid %v of %d threads", t.Lo, t.Hi, g, b)
		}
		all[0], all[1] = t.Lo/b, (t.Hi+b-1)/b
		return all, nil
	case bundle.TaskHeads:
		// Attention's blocks are (query-head group, row); the KV heads
		// [Lo, Hi) are the groups of their query heads.
		if len(l.Spec) < 3 || l.Spec[2] == 0 || g[0] == 0 || l.Spec[1]%l.Spec[2] != 0 || l.Spec[1]%g[0] != 0 {
			return all, fmt.Errorf("no attention grid %v for spec %v", g, l.Spec)
		}
		perKV, group := l.Spec[1]/l.Spec[2], l.Spec[1]/g[0]
		q0, q1 := t.Lo*perKV, t.Hi*perKV
		if q0%group != 0 || q1%group != 0 || q0 >= q1 || q1 > l.Spec[1] {
			return all, fmt.Errorf("KV heads [%d, %d) are no whole groups of %d query heads", t.Lo, t.Hi, group)
		}
		all[0], all[1] = q0/group, q1/group
		return rowsIn(all, t.RowLo, t.RowHi)
	}
	return all, fmt.Errorf("task kind %s", t.Kind)
}

// regroup reassigns the tasks to n queues, the blocks the GPU keeps
// resident, when that is not the schedule's queues (fewer multiprocessors,
// or more than one block on each) or force: in task order, each to the
// queue with the fewest bytes so far, the rule the compiler balanced by.
// Every queue stays in task order, so the lowest unfinished task is still
// at the head of its queue with its waits met, and no assignment
// deadlocks.
func (m *mkTables) regroup(n int, force bool) {
	if (n == len(m.queues) && !force) || n < 1 {
		return
	}
	qs := make([][]uint32, n)
	load := make([]uint64, n)
	for ti, t := range m.tasks {
		best := 0
		for q := range load {
			if load[q] < load[best] {
				best = q
			}
		}
		qs[best] = append(qs[best], uint32(ti))
		load[best] += max(t.bytes, 1)
	}
	m.queues = qs
}

// mkLayout is where each table lies in the one device allocation.
type mkLayout struct {
	tasks, waits, queueOff, queue, ops, params, counters, size int
}

func (m *mkTables) layout() mkLayout {
	var l mkLayout
	at := 0
	next := func(n int) int {
		p := at
		at += (n + 15) &^ 15
		return p
	}
	total := 0
	for _, q := range m.queues {
		total += len(q)
	}
	l.tasks = next(4 * mkTaskWords * len(m.tasks))
	l.waits = next(8 * len(m.waits))
	l.queueOff = next(4 * (len(m.queues) + 1))
	l.queue = next(4 * total)
	l.ops = next(4 * mkOpWords * len(m.ops))
	l.params = next(8 * len(m.params))
	l.counters = next(4 * max(m.counters, 1))
	l.size = at
	return l
}

// image is the tables' bytes as the kernel reads them (little-endian, as
// the GPU), the counters zero.
func (m *mkTables) image(l mkLayout) []byte {
	b := make([]byte, l.size)
	put := func(at int, v uint32) { binary.LittleEndian.PutUint32(b[at:], v) }
	for i, t := range m.tasks {
		w := []uint32{t.op, t.box[0], t.box[1], t.box[2], t.box[3], t.box[4], t.box[5], t.waitOff, t.waitLen, t.sig,
			uint32(t.pf), uint32(t.pf >> 32), t.pfBytes}
		for j, v := range w {
			put(l.tasks+4*(mkTaskWords*i+j), v)
		}
	}
	for i, w := range m.waits {
		put(l.waits+8*i, w.Counter)
		put(l.waits+8*i+4, w.Count)
	}
	n := 0
	for i, q := range m.queues {
		put(l.queueOff+4*i, uint32(n))
		for _, ti := range q {
			put(l.queue+4*n, ti)
			n++
		}
	}
	put(l.queueOff+4*len(m.queues), uint32(n))
	for i, o := range m.ops {
		w := []uint32{o.code, o.paramOff, o.grid[0], o.grid[1], o.grid[2], o.block[0], o.block[1], o.block[2]}
		for j, v := range w {
			put(l.ops+4*(mkOpWords*i+j), v)
		}
	}
	for i, p := range m.params {
		binary.LittleEndian.PutUint64(b[l.params+8*i:], p)
	}
	return b
}

// mkPlan is a variant's persistent kernel on the device: its tables and
// its launch.
type mkPlan struct {
	mem      driver.DevPtr
	counters driver.DevPtr
	nCounter int
	launch   Launch
	// trace is the kernel's trace (megakernel.cuh's MK_TRACE_WORDS words a
	// block, blocks of them) when the tier profiles, else 0; key is the
	// variant's, for the report.
	trace  driver.DevPtr
	blocks int
	key    string
}

// initMegakernel loads the persistent kernel and builds each decode
// variant's plan where its schedule allows; t.mkWhy says why a variant
// keeps the graph path.
func (t *Tier) initMegakernel(b *bundle.Bundle, mem *Memory, opt Options) error {
	g := b.Graph
	t.mk = make([]*mkPlan, len(g.Variants))
	t.mkWhy = make([]string, len(g.Variants))
	for vi := range g.Variants {
		t.mkWhy[vi] = "no megakernel schedule in the bundle"
	}
	if len(g.Schedules) == 0 {
		return nil
	}
	off := func(why string) error {
		for _, s := range g.Schedules {
			t.mkWhy[s.Variant] = why
		}
		return nil
	}
	switch {
	case opt.NoMegakernel:
		return off("switched off (Options.NoMegakernel)")
	case len(opt.Omit) > 0:
		return off("kernels are omitted from the graph path (ZRT_CUDA_OMIT)")
	}
	n := bytes.IndexByte(t.mkCode, 0)
	if n < 0 {
		return off("the bundle has no megakernel (build it with megakernel = true in the model config)")
	}
	m, err := driver.ModuleLoadData(t.mkCode[:n+1])
	if err != nil {
		return off(fmt.Sprintf("loading the megakernel: %v", err))
	}
	t.modules = append(t.modules, m)
	if t.mkFn, err = m.Function(kcuda.MegakernelModule); err != nil {
		return off(fmt.Sprintf("the megakernel's entry: %v", err))
	}
	sms, err := t.dev.Attribute(driver.AttrMultiprocessorCount)
	if err != nil {
		return err
	}
	limit, err := t.dev.Attribute(driver.AttrMaxSharedMemoryPerBlockOptin)
	if err != nil {
		return err
	}
	for _, s := range g.Schedules {
		vi := int(s.Variant)
		v := &g.Variants[vi]
		if v.Stage == bundle.StagePrefill {
			t.mkWhy[vi] = "a prefill variant"
			continue
		}
		ls, err := WalkMegakernel(v, b.Blobs, mem, t.fence)
		if err != nil {
			return fmt.Errorf("cuda: variant %d: %w", vi, err)
		}
		if err := t.giveStaging(ls); err != nil {
			t.mkWhy[vi] = err.Error()
			continue
		}
		tabs, err := buildMkTables(&s, ls, int(v.Rows))
		if err != nil {
			t.mkWhy[vi] = err.Error()
			continue
		}
		if tabs.shared > limit {
			t.mkWhy[vi] = fmt.Sprintf("%d bytes of shared memory, the device allows %d", tabs.shared, limit)
			continue
		}
		// Always opted in: the default allowance is 48 KiB less the
		// kernel's static shared memory, which is large (every family's).
		if tabs.shared > t.mkShared {
			if err := t.mkFn.SetAttribute(driver.FuncAttrMaxDynamicSharedSize, tabs.shared); err != nil {
				t.mkWhy[vi] = fmt.Sprintf("the megakernel's shared memory: %v", err)
				continue
			}
			t.mkShared = tabs.shared
		}
		occ, err := t.mkFn.MaxActiveBlocks(mkThreads, tabs.shared)
		if err != nil {
			return err
		}
		if occ == 0 {
			t.mkWhy[vi] = fmt.Sprintf("no block of %d threads and %d bytes of shared memory fits a multiprocessor", mkThreads, tabs.shared)
			continue
		}
		tabs.regroup(occ*sms, false)
		p, err := t.uploadMk(tabs, t.prof != nil)
		if err != nil {
			return err
		}
		p.key = v.Key()
		t.mk[vi], t.mkWhy[vi] = p, ""
	}
	return nil
}

// giveStaging gives the persistent kernel's launches that keep state in
// the staging buffer (the split decode attention's partial states) its
// address. The graph path's launch of the same dispatch has the same
// shape, so the buffer (sized for the graph path's launches) holds them;
// a launch it does not hold is refused.
func (t *Tier) giveStaging(ls []Launch) error {
	for i := range ls {
		if n := ls[i].Staging; n > 0 {
			if n > t.stagingBytes {
				return fmt.Errorf("dispatch %d (%s) stages %d bytes, the staging buffer holds %d", i, ls[i].Name, n, t.stagingBytes)
			}
			ls[i].Params[len(ls[i].Params)-1] = uint64(t.staging)
		}
	}
	return nil
}

// uploadMk lays a variant's tables out in device memory and prepares its
// launch: as many blocks as queues, the counters zeroed before each step
// (record), so every step's epoch is 1. With trace, the kernel also adds
// each step's timings to a trace of its own (mkTraceReport).
func (t *Tier) uploadMk(m *mkTables, trace bool) (*mkPlan, error) {
	l := m.layout()
	mem, err := driver.MemAlloc(l.size)
	if err != nil {
		return nil, fmt.Errorf("cuda: the megakernel's tables of %d bytes: %w", l.size, err)
	}
	if err := driver.MemcpyHtoD(mem, m.image(l)); err != nil {
		driver.MemFree(mem)
		return nil, err
	}
	t.mkMem = append(t.mkMem, mem)
	at := func(off int) uint64 { return uint64(mem) + uint64(off) }
	p := &mkPlan{mem: mem, counters: mem + driver.DevPtr(l.counters), nCounter: max(m.counters, 1), blocks: len(m.queues)}
	if trace {
		n := 8 * mkTraceWords * p.blocks
		if p.trace, err = driver.MemAlloc(n); err != nil {
			return nil, fmt.Errorf("cuda: the megakernel's trace of %d bytes: %w", n, err)
		}
		t.mkMem = append(t.mkMem, p.trace)
		if err := driver.MemsetD8(p.trace, 0, n); err != nil {
			return nil, err
		}
	}
	p.launch = Launch{Name: kcuda.MegakernelModule,
		Shape: kcuda.Launch{Grid: [3]uint32{uint32(len(m.queues)), 1, 1}, Block: [3]uint32{mkThreads, 1, 1}, Shared: m.shared},
		Params: []uint64{at(l.tasks), at(l.waits), at(l.queueOff), at(l.queue), at(l.ops), at(l.params), at(l.counters),
			uint64(p.trace), 1},
		Sizes: []int{8, 8, 8, 8, 8, 8, 8, 8, 4}}
	return p, nil
}

// The trace's layout (megakernel.cuh): per block, a head of mkTraceHead
// words (steps, cycles, -, start ns, end ns), then three words per
// function code (tasks, wait cycles, run cycles).
const (
	mkTraceCodes = 64
	mkTraceHead  = 8
	mkTraceWords = mkTraceHead + 3*mkTraceCodes
)

// reportMk prints the trace of every variant that ran on the persistent
// kernel (the tier profiles), for Close.
func (t *Tier) reportMk(w io.Writer) {
	khz := -1
	for _, p := range t.mk {
		if p == nil || p.trace == 0 {
			continue
		}
		if khz < 0 {
			var err error
			if khz, err = t.dev.Attribute(driver.AttrClockRate); err != nil {
				khz = 0
			}
		}
		b := make([]byte, 8*mkTraceWords*p.blocks)
		if err := driver.MemcpyDtoH(b, p.trace); err != nil {
			fmt.Fprintf(w, "megakernel %s: reading the trace: %v\n", p.key, err)
			continue
		}
		tr := make([]uint64, len(b)/8)
		for i := range tr {
			tr[i] = binary.LittleEndian.Uint64(b[8*i:])
		}
		mkTraceReport(w, p.key, tr, p.blocks, khz)
	}
}

// mkTraceReport prints a persistent kernel's trace (p.blocks blocks of
// mkTraceWords words) for variant key, with the GPU's clock in kHz (0:
// unknown, cycles only): the steps, a block's time a step and its shares
// waiting on counters and running tasks, the last step's spread of
// starts and ends over the blocks, and per function its tasks a step and
// its waits' and runs' time, the most time first. It says what the
// schedule's critical path and the tasks' cost are, which the graph
// path's profile cannot.
func mkTraceReport(w io.Writer, key string, tr []uint64, blocks int, khz int) {
	steps := tr[0]
	if steps == 0 || len(tr) < blocks*mkTraceWords {
		fmt.Fprintf(w, "megakernel %s: no step traced\n", key)
		return
	}
	type fn struct {
		code             int
		tasks, wait, run uint64
	}
	fns := make([]fn, mkTraceCodes)
	var cycles, wait, run uint64
	var first, lastStart, firstEnd, last uint64
	for b := range blocks {
		h := tr[b*mkTraceWords:]
		cycles += h[1]
		start, end := h[3], h[4]
		if b == 0 || start < first {
			first = start
		}
		if b == 0 || start > lastStart {
			lastStart = start
		}
		if b == 0 || end < firstEnd {
			firstEnd = end
		}
		if b == 0 || end > last {
			last = end
		}
		for c := range mkTraceCodes {
			f := &fns[c]
			f.code = c
			f.tasks += h[mkTraceHead+3*c]
			f.wait += h[mkTraceHead+3*c+1]
			f.run += h[mkTraceHead+3*c+2]
			wait += h[mkTraceHead+3*c+1]
			run += h[mkTraceHead+3*c+2]
		}
	}
	us := func(c float64) string { // cycles as µs where the clock is known
		if khz <= 0 {
			return fmt.Sprintf("%.0f cy", c)
		}
		return fmt.Sprintf("%.2f µs", c/float64(khz)*1e3)
	}
	per := float64(steps) * float64(blocks) // block steps
	pct := func(c uint64) float64 { return 100 * float64(c) / float64(max(cycles, 1)) }
	fmt.Fprintf(w, "megakernel %s: %d steps, %d blocks; a block's step %s: %.1f%% waiting on counters, %.1f%% in tasks, %.1f%% between\n",
		key, steps, blocks, us(float64(cycles)/per), pct(wait), pct(run), 100-pct(wait)-pct(run))
	fmt.Fprintf(w, "  last step: %.2f µs from the first block's start to the last one's end; starts over %.2f µs, ends over %.2f µs\n",
		float64(last-first)/1e3, float64(lastStart-first)/1e3, float64(last-firstEnd)/1e3)
	slices.SortStableFunc(fns, func(a, b fn) int { return cmpDesc(a.wait+a.run, b.wait+b.run) })
	ops := kcuda.MegakernelOps()
	fmt.Fprintf(w, "  %-34s %10s %12s %12s %7s %7s\n", "function", "tasks/step", "wait/task", "run/task", "wait%", "run%")
	for _, f := range fns {
		if f.tasks == 0 {
			continue
		}
		name := fmt.Sprintf("code %d", f.code)
		if f.code >= 1 && f.code <= len(ops) {
			name = ops[f.code-1].Func()
		}
		n := float64(f.tasks)
		fmt.Fprintf(w, "  %-34s %10.1f %12s %12s %6.1f%% %6.1f%%\n", name, n/float64(steps), us(float64(f.wait)/n),
			us(float64(f.run)/n), pct(f.wait), pct(f.run))
	}
}

// cmpDesc orders larger values first.
func cmpDesc(a, b uint64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

// recordMk records variant vi's step on the persistent kernel: the
// counters zeroed, then the one launch.
func (t *Tier) recordMk(p *mkPlan) error {
	if err := driver.MemsetD32Async(p.counters, 0, p.nCounter, t.stream); err != nil {
		return err
	}
	return t.launchFn(t.mkFn, &p.launch, false)
}

// Megakernel reports whether variant vi's steps run on the persistent
// kernel, and if not, why (for zrt-run bench and --explain).
func (t *Tier) Megakernel(vi int) (bool, string) {
	switch {
	case vi < 0 || vi >= len(t.mk):
		return false, fmt.Sprintf("no variant %d", vi)
	case t.mk[vi] != nil && t.mkOff:
		return false, "switched off (SetMegakernel)"
	}
	return t.mk[vi] != nil, t.mkWhy[vi]
}

// SetMegakernel switches the persistent kernel on (as loaded) or off for
// the variants it runs: their captured graphs are dropped, so the next
// step of each captures the other path. For A/B runs in one process
// (zrt-run bench --megakernel both); not while a step runs.
func (t *Tier) SetMegakernel(on bool) error {
	if t.mkOff == !on {
		return nil
	}
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	if err := t.ctx.SetCurrent(); err != nil {
		return err
	}
	if err := t.stream.Synchronize(); err != nil {
		return err
	}
	t.mkOff = !on
	for vi, g := range t.graphs {
		if t.mk[vi] != nil {
			g.exec.Destroy()
			delete(t.graphs, vi)
		}
	}
	return nil
}
