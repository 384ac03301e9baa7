// Package megakernel is the reference executor of megakernel schedules
// (format/bundle's Schedule, written by the compiler's megakernel pass):
// it runs a decode variant's tasks one at a time, in an order drawn from a
// seed among the tasks whose counters are reached, each with T-CPU's
// kernel for its dispatch over that task's rows, feature tile or KV
// heads. T-CPU's kernels give every row and output feature the same bits
// whatever else the call computes, so a schedule whose counters are
// enough gives, in every order, exactly the bits of replaying the
// variant's stream, which the Machine also does: a schedule that lacks a
// dependency shows up as a difference for some seed. No GPU is involved;
// this is how the schedules are proven before a persistent kernel runs
// them (docs/design/megakernel.md).
package megakernel

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/ggml"
	"github.com/zrtdev/zrt/kernels"
	kcpu "github.com/zrtdev/zrt/kernels/cpu"
	"github.com/zrtdev/zrt/kernels/quant"
	"github.com/zrtdev/zrt/runtime/replay"
)

// regionShift spaces the regions in the Machine's address map, as
// T-CPU's: region i lives at (i+1)<<regionShift.
const regionShift = 40

// Machine is a bundle's memory plan in host memory, with each variant's
// stream walked into calls of T-CPU's kernels.
type Machine struct {
	g       *bundle.Graph
	regions [][]byte
	mem     *replay.Memory
	pool    *kcpu.Pool
	work    []byte
	io      map[int]bool // the request tables' regions
	calls   [][]call     // per variant
}

// call is one dispatch bound to its kernel.
type call struct {
	name string
	abi  *kernels.ABI
	typ  ggml.Type
	fn   kcpu.Func
	args kcpu.Args
	// regions is each buffer argument's region (-1 for null).
	regions []int
}

// New lays out b's regions (weights copied from its pack, the others
// zeroed) and binds every dispatch of every variant to T-CPU's kernel
// for its instance, whatever target b was built for: the catalog's
// instances mean the same on every tier. threads ≤ 0 is one per CPU.
func New(b *bundle.Bundle, threads int) (*Machine, error) {
	g := b.Graph
	m := &Machine{g: g, mem: &replay.Memory{}, pool: kcpu.NewPool(threads), io: map[int]bool{}}
	fence := -1
	for i, r := range g.Regions {
		buf := make([]byte, r.Bytes)
		if w, ok := b.Weights[r.Name]; ok {
			copy(buf, w)
		}
		m.regions = append(m.regions, buf)
		m.mem.Base = append(m.mem.Base, uint64(i+1)<<regionShift)
		m.mem.Size = append(m.mem.Size, uint64(r.Bytes))
		switch r.Name {
		case kernels.RegionFence:
			fence = i
		case kernels.RegionIO, kernels.RegionIOWindow:
			m.io[i] = true
		}
	}
	if fence < 0 {
		m.Close()
		return nil, fmt.Errorf("megakernel: memory plan has no fence region")
	}
	fns, err := kcpu.BindBlobs(b.Blobs)
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("megakernel: %w", err)
	}
	for vi := range g.Variants {
		s, err := replay.Walk(&g.Variants[vi], b.Blobs, m.mem, fence)
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("megakernel: variant %s: %w", g.Variants[vi].Key(), err)
		}
		var cs []call
		for _, d := range s.Dispatches {
			_, typ, err := kernels.SplitInstance(d.Name)
			if err != nil {
				m.Close()
				return nil, err
			}
			c := call{name: d.Name, abi: d.ABI, typ: typ, fn: fns[d.Kernel], regions: d.Regions}
			c.args.Bufs = make([][]byte, len(d.Bufs))
			for i, addr := range d.Bufs {
				if r := d.Regions[i]; r >= 0 {
					c.args.Bufs[i] = m.regions[r][addr-m.mem.Base[r]:]
				}
			}
			c.args.Push, c.args.Spec, c.args.Grid = d.Push, d.Spec, d.Grid
			c.args.Pool, c.args.Work = m.pool, &m.work
			cs = append(cs, c)
		}
		m.calls = append(m.calls, cs)
	}
	return m, nil
}

// Close stops the worker pool.
func (m *Machine) Close() { m.pool.Close() }

// Region returns region i's bytes, which the caller may read and write
// (the request table before a step, the outputs after it).
func (m *Machine) Region(i int) []byte { return m.regions[i] }

// Replay runs variant vi's stream: every dispatch in order.
func (m *Machine) Replay(ctx context.Context, vi int) error {
	for i := range m.calls[vi] {
		if err := ctx.Err(); err != nil {
			return err
		}
		c := &m.calls[vi][i]
		if err := c.fn(&c.args); err != nil {
			return fmt.Errorf("megakernel: dispatch %d (%s): %w", i, c.name, err)
		}
	}
	return nil
}

// Order is how Run picks the next task among those it may run.
type Order struct {
	// Seed draws the order.
	Seed uint64
	// Queues runs each multiprocessor's queue in order, as the persistent
	// kernel does, picking among the queues whose head may run; otherwise
	// any task whose waits are met may run next. Either way a task runs
	// only once its counters are reached.
	Queues bool
}

// Run executes schedule s (of one of the Machine's variants) one task at
// a time in the order o draws. It fails when no task may run before all
// have: a deadlock, which a valid schedule run on its queues cannot have.
func (m *Machine) Run(ctx context.Context, s *bundle.Schedule, o Order) error {
	if int(s.Variant) >= len(m.calls) {
		return fmt.Errorf("megakernel: schedule for variant %d of %d", s.Variant, len(m.calls))
	}
	v := &m.g.Variants[s.Variant]
	if err := s.Validate(len(m.calls[s.Variant]), int(v.Rows)); err != nil {
		return fmt.Errorf("megakernel: variant %s: %w", v.Key(), err)
	}
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	counters := make([]uint32, len(s.Counters))
	pending := make([]int, len(s.Tasks)) // waits not yet met
	waiters := make([][]int, len(s.Counters))
	for i := range s.Tasks {
		for _, w := range s.TaskWaits(i) {
			pending[i]++
			waiters[w.Counter] = append(waiters[w.Counter], i)
		}
	}
	// ready holds tasks (any order) or multiprocessors (queues) that may
	// run now.
	var ready []int
	head := make([]int, s.SMs)
	isHead := func(t int) bool {
		sm := s.Tasks[t].SM
		return head[sm] < len(s.Queues[sm]) && int(s.Queues[sm][head[sm]]) == t
	}
	mayRun := func(t int) {
		switch {
		case !o.Queues:
			ready = append(ready, t)
		case isHead(t):
			ready = append(ready, int(s.Tasks[t].SM))
		}
	}
	for i := range s.Tasks {
		if pending[i] == 0 {
			mayRun(i)
		}
	}
	for done := 0; done < len(s.Tasks); done++ {
		if done%64 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if len(ready) == 0 {
			return fmt.Errorf("megakernel: variant %s: deadlock after %d of %d tasks (seed %d)", v.Key(), done, len(s.Tasks), o.Seed)
		}
		j := rng.IntN(len(ready))
		pick := ready[j]
		ready[j] = ready[len(ready)-1]
		ready = ready[:len(ready)-1]
		t := pick
		if o.Queues {
			t = int(s.Queues[pick][head[pick]])
		}
		if err := m.task(s, t); err != nil {
			return fmt.Errorf("megakernel: variant %s: task %d: %w", v.Key(), t, err)
		}
		if o.Queues {
			head[pick]++
			if next := head[pick]; next < len(s.Queues[pick]) && pending[s.Queues[pick][next]] == 0 {
				ready = append(ready, pick)
			}
		}
		c := s.Tasks[t].Signal
		counters[c]++
		if counters[c] == s.Counters[c] {
			for _, wt := range waiters[c] {
				// A wait's count is its counter's whole count (the
				// compiler waits for all of a counter's tasks); a
				// smaller one is met here too, at the latest.
				pending[wt]--
				if pending[wt] == 0 {
					mayRun(wt)
				}
			}
		}
	}
	return nil
}

// task runs task t of s.
func (m *Machine) task(s *bundle.Schedule, t int) error {
	tk := s.Tasks[t]
	c := &m.calls[s.Variant][tk.Op]
	switch tk.Kind {
	case bundle.TaskWhole:
		return c.fn(&c.args)
	case bundle.TaskRows:
		a, n, err := m.rows(s, c, tk)
		if err != nil || n == 0 {
			return err // n 0: rows past the step's active ones, nothing to do
		}
		return c.fn(&a)
	case bundle.TaskTile:
		if !matrixFamily(c.abi.Name) {
			return m.cols(s, c, tk)
		}
		return m.tile(s, c, tk)
	case bundle.TaskHeads:
		return m.heads(s, c, tk)
	}
	return fmt.Errorf("task kind %s", tk.Kind)
}

// rows returns the call's arguments for rows [RowLo, RowHi) of the
// step: per-row arguments moved on RowLo rows, request tables replaced by
// copies whose rows start at RowLo; n is how many of the rows are active.
func (m *Machine) rows(s *bundle.Schedule, c *call, tk bundle.Task) (a kcpu.Args, n int, err error) {
	a = c.args
	a.Bufs = append([][]byte(nil), c.args.Bufs...)
	strides := s.Ops[tk.Op].Strides
	n = int(tk.RowHi - tk.RowLo) // unless a request table says fewer are active
	for i, b := range a.Bufs {
		switch {
		case b == nil:
		case m.io[c.regions[i]]:
			w, k := shiftTable(b, int(tk.RowLo), int(tk.RowHi))
			if k == 0 {
				return a, 0, nil
			}
			a.Bufs[i], n = w, k
		case i < len(strides) && strides[i] > 0:
			off := int(tk.RowLo) * int(strides[i])
			if off > len(b) {
				return a, 0, fmt.Errorf("%s: row %d of %d bytes lies past its buffer's %d", c.abi.Bufs[i], tk.RowLo, strides[i], len(b))
			}
			a.Bufs[i] = b[off:]
		}
	}
	return a, n, nil
}

// shiftTable copies request table b with rows [lo, hi) (of those active)
// as its rows from 0, and says how many they are.
func shiftTable(b []byte, lo, hi int) ([]byte, int) {
	le := binary.LittleEndian
	n := int(le.Uint32(b[4*kernels.IOWordRows:]))
	hi = min(hi, n)
	if lo >= hi {
		return nil, 0
	}
	out := append([]byte(nil), b...)
	const rec = 4 * kernels.IORowWords
	base := 4 * kernels.IOWordRowBase
	copy(out[base:base+(hi-lo)*rec], b[base+lo*rec:base+hi*rec])
	le.PutUint32(out[4*kernels.IOWordRows:], uint32(hi-lo))
	return out, hi - lo
}

// matrixFamily says whether a family's tiles are of output features.
func matrixFamily(family string) bool {
	switch family {
	case "matmul", "matmul_residual", "lm_head", "rms_norm_qkv", "rms_norm_gate_up":
		return true
	}
	return false
}

// cols runs an elementwise call of a one-row step for its columns
// [Lo, Hi): every per-row argument moved on Lo columns, and the columns
// (push "cols", the first) the tile's.
func (m *Machine) cols(s *bundle.Schedule, c *call, tk bundle.Task) error {
	strides := s.Ops[tk.Op].Strides
	if m.g.Variants[s.Variant].Rows != 1 || len(c.args.Push) == 0 || c.abi.Push[0].Name != "cols" || tk.Hi > c.args.Push[0] || tk.Lo >= tk.Hi {
		return fmt.Errorf("%s: columns [%d, %d) of a step of %d rows", c.abi.Name, tk.Lo, tk.Hi, m.g.Variants[s.Variant].Rows)
	}
	a := c.args
	a.Bufs = append([][]byte(nil), c.args.Bufs...)
	a.Push = append([]uint32(nil), c.args.Push...)
	for i, b := range a.Bufs {
		if b != nil && i < len(strides) && strides[i] > 0 {
			if strides[i] != 4*c.args.Push[0] {
				return fmt.Errorf("%s: %s rows of %d bytes, not %d columns", c.abi.Name, c.abi.Bufs[i], strides[i], c.args.Push[0])
			}
			a.Bufs[i] = b[4*tk.Lo:]
		}
	}
	a.Push[0] = tk.Hi - tk.Lo
	return c.fn(&a)
}

// column maps feature j of a matrix call's concatenated outputs to its
// output argument, that output's width (a row's stride) and j's column in
// it.
type column func(j int) (buf, width, col int)

// repackWindow widens the features [lo, hi) of a matrix that T-CPU
// computes in ggml's repacked order (quant.Repacked: whole groups of
// quant.RepackRows weight rows) to whole groups, so the window's product
// takes that order too and keeps the stream's bits: the order follows
// the matrix's feature count, which a ragged window would change.
func repackWindow(lo, hi int) (start, win int) {
	g := quant.RepackRows
	start = lo / g * g
	return start, (hi+g-1)/g*g - start
}

// tile runs a matrix call for the output features [Lo, Hi) of every row:
// the kernel computes a window of features from the rows of the weight
// matrix that make them into scratch outputs (gathered from the real
// ones), and the window's features in [Lo, Hi) are copied back.
func (m *Machine) tile(s *bundle.Schedule, c *call, tk bundle.Task) error {
	a := c.args
	a.Bufs = append([][]byte(nil), c.args.Bufs...)
	a.Push = append([]uint32(nil), c.args.Push...)
	a.Spec = append([]uint32(nil), c.args.Spec...)
	lo, hi := int(tk.Lo), int(tk.Hi)
	width := hi - lo
	rows := int(m.g.Variants[s.Variant].Rows)
	var k, start, win, total int // inputs, the window's first feature and size, the features
	var outs []int               // the scratch outputs' arguments
	var col column
	w, bias := -1, -1
	switch c.abi.Name {
	case "matmul", "matmul_residual", "lm_head":
		n := int(a.Push[1])
		k, start, win, total = int(a.Push[0]), lo, width, n
		out := len(a.Bufs) - 1
		outs, w = []int{out}, 1
		if c.abi.Name != "lm_head" {
			bias = 2
		} else {
			// logits are by slot: as many rows as the region holds
			rows = len(a.Bufs[out]) / 4 / n
		}
		if quant.Repacked(c.typ, n) {
			start, win = repackWindow(lo, hi)
		}
		a.Push[1] = uint32(win)
		col = func(j int) (int, int, int) { return out, n, j }
	case "rms_norm_qkv":
		nq, nkv := int(a.Spec[1]), int(a.Spec[2])
		k, start, win, total = int(a.Spec[0]), lo, width, nq+2*nkv
		if quant.Repacked(c.typ, nq) && quant.Repacked(c.typ, nkv) {
			start, win = repackWindow(lo, hi)
		}
		outs, w, bias = []int{5}, 2, 3
		// One output of the window's width: every feature goes to q.
		a.Spec[1], a.Spec[2] = uint32(win), 0
		a.Bufs[6], a.Bufs[7] = nil, nil
		col = func(j int) (int, int, int) {
			switch {
			case j < nq:
				return 5, nq, j
			case j < nq+nkv:
				return 6, nkv, j - nq
			}
			return 7, nkv, j - nq - nkv
		}
	case "rms_norm_gate_up":
		f := int(a.Spec[1])
		// The kernel makes f' gate then f' up features from 2·f'
		// consecutive weight rows: a window of 2·f' features, placed
		// within the matrix.
		half := (width + 1) / 2
		if quant.Repacked(c.typ, f) {
			half = (half + quant.RepackRows - 1) / quant.RepackRows * quant.RepackRows
		}
		k, start, win, total = int(a.Spec[0]), min(lo, 2*f-2*half), 2*half, 2*f
		outs, w = []int{4, 5}, 2
		a.Spec[1] = uint32(half)
		col = func(j int) (int, int, int) {
			if j < f {
				return 4, f, j
			}
			return 5, f, j - f
		}
	default:
		return fmt.Errorf("%s is not a matrix family", c.abi.Name)
	}
	if lo >= hi || hi > total || start < 0 || lo < start || hi > start+win {
		return fmt.Errorf("features [%d, %d) of %d, window [%d, +%d)", lo, hi, total, start, win)
	}
	rb, err := c.typ.RowBytes(int64(k))
	if err != nil {
		return err
	}
	a.Bufs[w] = a.Bufs[w][start*int(rb):]
	if bias >= 0 && a.Bufs[bias] != nil {
		a.Bufs[bias] = a.Bufs[bias][4*start:]
	}
	// The window's feature jj is column jj%per of scratch output jj/per.
	per := win / len(outs)
	temps := make([][]byte, len(outs))
	for i := range temps {
		temps[i] = make([]byte, 4*rows*per)
	}
	at := func(jj, r int) []byte { return temps[jj/per][4*(r*per+jj%per):][:4] }
	real := func(j, r int) []byte {
		ob, ow, oc := col(j)
		return c.args.Bufs[ob][4*(r*ow+oc):][:4]
	}
	// Gather, so that what the kernel leaves alone (inactive rows, an
	// in-place output's old values) is what it was.
	for jj := 0; jj < win; jj++ {
		for r := 0; r < rows; r++ {
			copy(at(jj, r), real(start+jj, r))
		}
	}
	for i, out := range outs {
		a.Bufs[out] = temps[i]
	}
	if err := c.fn(&a); err != nil {
		return err
	}
	for j := lo; j < hi; j++ {
		for r := 0; r < rows; r++ {
			copy(real(j, r), at(j-start, r))
		}
	}
	return nil
}

// heads runs attention for rows [RowLo, RowHi) into a scratch output and
// keeps the columns of KV heads [Lo, Hi)'s query heads: T-CPU attends each
// head on its own, so the other heads' columns (from query heads this
// task may not read yet) are dropped.
func (m *Machine) heads(s *bundle.Schedule, c *call, tk bundle.Task) error {
	a, rows, err := m.rows(s, c, tk)
	if err != nil || rows == 0 {
		return err
	}
	y := -1
	for i, role := range c.abi.Bufs {
		if role == "y" {
			y = i
		}
	}
	if y < 0 || !strings.HasPrefix(c.abi.Name, "flash_attn") || len(a.Spec) < 4 {
		return fmt.Errorf("%s has no heads to split", c.abi.Name)
	}
	nh, nkv, hd := int(a.Spec[1]), int(a.Spec[2]), int(a.Spec[3])
	if nkv == 0 || nh%nkv != 0 || tk.Hi > uint32(nkv) || y >= len(s.Ops[tk.Op].Strides) {
		return fmt.Errorf("KV heads [%d, %d) of %d (%d query heads)", tk.Lo, tk.Hi, nkv, nh)
	}
	stride := int(s.Ops[tk.Op].Strides[y])
	if stride != 4*nh*hd {
		return fmt.Errorf("output rows of %d bytes for %d heads of %d", stride, nh, hd)
	}
	tmp := make([]byte, rows*stride)
	real := a.Bufs[y]
	a.Bufs[y] = tmp
	if err := c.fn(&a); err != nil {
		return err
	}
	lo, hi := 4*int(tk.Lo)*nh/nkv*hd, 4*int(tk.Hi)*nh/nkv*hd
	for r := 0; r < rows; r++ {
		copy(real[r*stride+lo:r*stride+hi], tmp[r*stride+lo:r*stride+hi])
	}
	return nil
}
