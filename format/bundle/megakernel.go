package bundle

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// A megakernel schedule (the MEGA section, graph format 2.1) is one decode
// variant's step as tasks for a persistent kernel: each task is a piece of
// one dispatch of the variant's packet stream (a tile of a matrix's output
// features, a range of rows, a row's KV heads), waits until some counters
// reach their counts, runs, and adds one to its own counter. Every
// multiprocessor walks its queue in order. The compiler's megakernel pass
// writes it (docs/design/megakernel.md); a tier that does not run it
// replays the stream, which stays the reference.
//
// The rules Validate checks make a schedule free of deadlock on any
// number of multiprocessors that each hold one queue: a task waits only
// on counters that tasks of lower index signal, and each queue is in
// increasing task order, so the lowest unfinished task is always at the
// head of its queue and has everything it waits for.

// ScheduleVersion is the version of the schedule records inside the MEGA
// section (1: tasks, waits, counters, queues and per-dispatch row
// strides). A reader that meets another version ignores the schedules (the
// stream still runs the variant) rather than refusing the bundle.
const ScheduleVersion = 1

// TaskKind says which piece of its dispatch a task runs.
type TaskKind uint8

// The task kinds.
const (
	// TaskWhole runs the whole dispatch: every row, every output.
	TaskWhole TaskKind = 1
	// TaskRows runs the dispatch for the activation rows [RowLo, RowHi).
	TaskRows TaskKind = 2
	// TaskTile runs a matrix dispatch for the output features [Lo, Hi)
	// (of its outputs concatenated, for the fused projections), every row;
	// or an elementwise dispatch of a one-row step for its columns
	// [Lo, Hi).
	TaskTile TaskKind = 3
	// TaskHeads runs attention for the rows [RowLo, RowHi) and the KV
	// heads [Lo, Hi), with the query heads that share them.
	TaskHeads TaskKind = 4
)

func (k TaskKind) String() string {
	switch k {
	case TaskWhole:
		return "whole"
	case TaskRows:
		return "rows"
	case TaskTile:
		return "tile"
	case TaskHeads:
		return "heads"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Task is one unit of a persistent kernel's work.
type Task struct {
	// Op is the dispatch's index in the variant's stream (its instruction).
	Op           uint32
	Kind         TaskKind
	RowLo, RowHi uint32
	Lo, Hi       uint32 // features (TaskTile) or KV heads (TaskHeads); 0, 0 otherwise
	// Bytes estimates the bytes the task moves (weights, activations, KV),
	// by which the queues are balanced.
	Bytes uint64
	// Waits are Schedule.Waits[WaitOff : WaitOff+WaitLen].
	WaitOff, WaitLen uint32
	// Signal is the counter the task adds one to when done.
	Signal uint32
	// SM is the multiprocessor whose queue holds the task.
	SM uint32
}

// Op is what a task needs to know of its dispatch beyond the stream.
type Op struct {
	// Strides are, per buffer argument in ABI order, the bytes from one
	// activation row to the next: a task of rows [r0, r1) passes the
	// argument r0 strides on (and the request table's rows from r0); 0
	// for an argument that is not per row (weights, KV, outputs by slot).
	Strides []uint32
}

// Wait is a task's condition: counter Counter has reached Count.
type Wait struct{ Counter, Count uint32 }

// Schedule is one variant's megakernel schedule.
type Schedule struct {
	// Variant is the index of the variant in Graph.Variants.
	Variant uint32
	// SMs is the multiprocessors the queues were balanced for.
	SMs uint32
	// Ops describes each dispatch of the stream, in order.
	Ops   []Op
	Tasks []Task
	Waits []Wait
	// Counters are the counts each counter reaches in one step (the
	// tasks that signal it); the kernel zeroes them before the next.
	Counters []uint32
	// Queues holds each multiprocessor's tasks in the order it runs them.
	Queues [][]uint32
}

const taskBytes = 4*9 + 1 + 8 // the encoded record (op kind rows lo hi bytes waits signal sm)

func encodeSchedules(ss []Schedule) []byte {
	var e enc
	e.u32(ScheduleVersion)
	e.u32(uint32(len(ss)))
	for _, s := range ss {
		e.u32(s.Variant)
		e.u32(s.SMs)
		e.u32(uint32(len(s.Ops)))
		for _, o := range s.Ops {
			e.u32(uint32(len(o.Strides)))
			for _, x := range o.Strides {
				e.u32(x)
			}
		}
		e.u32(uint32(len(s.Tasks)))
		for _, t := range s.Tasks {
			e.u32(t.Op)
			e.u8(uint8(t.Kind))
			e.u32(t.RowLo)
			e.u32(t.RowHi)
			e.u32(t.Lo)
			e.u32(t.Hi)
			e.u64(t.Bytes)
			e.u32(t.WaitOff)
			e.u32(t.WaitLen)
			e.u32(t.Signal)
			e.u32(t.SM)
		}
		e.u32(uint32(len(s.Waits)))
		for _, w := range s.Waits {
			e.u32(w.Counter)
			e.u32(w.Count)
		}
		e.u32(uint32(len(s.Counters)))
		for _, c := range s.Counters {
			e.u32(c)
		}
		e.u32(uint32(len(s.Queues)))
		for _, q := range s.Queues {
			e.u32(uint32(len(q)))
			for _, t := range q {
				e.u32(t)
			}
		}
	}
	return e.b
}

// decodeSchedules reads the MEGA section; a version it does not know
// gives no schedules and no error.
func decodeSchedules(b []byte, variants []Variant) ([]Schedule, error) {
	d := &dec{b: b, what: tagMegakernel}
	if v := d.u32(); d.err == nil && v != ScheduleVersion {
		return nil, nil
	}
	ss := make([]Schedule, d.count(16))
	for i := range ss {
		s := &ss[i]
		s.Variant, s.SMs = d.u32(), d.u32()
		s.Ops = make([]Op, d.count(4))
		for j := range s.Ops {
			s.Ops[j].Strides = make([]uint32, d.count(4))
			for k := range s.Ops[j].Strides {
				s.Ops[j].Strides[k] = d.u32()
			}
		}
		s.Tasks = make([]Task, d.count(taskBytes))
		for j := range s.Tasks {
			t := &s.Tasks[j]
			t.Op, t.Kind = d.u32(), TaskKind(d.u8())
			t.RowLo, t.RowHi, t.Lo, t.Hi = d.u32(), d.u32(), d.u32(), d.u32()
			t.Bytes = d.u64()
			t.WaitOff, t.WaitLen, t.Signal, t.SM = d.u32(), d.u32(), d.u32(), d.u32()
		}
		s.Waits = make([]Wait, d.count(8))
		for j := range s.Waits {
			s.Waits[j] = Wait{d.u32(), d.u32()}
		}
		s.Counters = make([]uint32, d.count(4))
		for j := range s.Counters {
			s.Counters[j] = d.u32()
		}
		s.Queues = make([][]uint32, d.count(4))
		for j := range s.Queues {
			s.Queues[j] = make([]uint32, d.count(4))
			for k := range s.Queues[j] {
				s.Queues[j][k] = d.u32()
			}
		}
		if d.err != nil {
			break
		}
		if int(s.Variant) >= len(variants) {
			return nil, fmt.Errorf("%w: section %s: schedule %d is for variant %d of %d", ErrFormat, tagMegakernel, i, s.Variant, len(variants))
		}
		v := &variants[s.Variant]
		if err := s.Validate(int(v.Dispatches), int(v.Rows)); err != nil {
			return nil, fmt.Errorf("%w: section %s: variant %s: %v", ErrFormat, tagMegakernel, v.Key(), err)
		}
	}
	if err := d.done(); err != nil {
		return nil, err
	}
	return ss, nil
}

// Validate checks a schedule against its variant's dispatches and rows:
// every field in range, every task in exactly one queue (its SM's), each
// queue in task order, each counter's count the number of tasks that
// signal it, and every wait on a counter that only earlier tasks signal,
// for a count it reaches. These make the schedule free of deadlock (see
// above); that the waits are enough for the right result is the
// compiler's to prove (runtime/megakernel runs schedules against the
// stream).
func (s *Schedule) Validate(dispatches, rows int) error {
	n := len(s.Tasks)
	if s.SMs == 0 || int(s.SMs) != len(s.Queues) {
		return fmt.Errorf("%d queues for %d multiprocessors", len(s.Queues), s.SMs)
	}
	if len(s.Ops) != dispatches {
		return fmt.Errorf("%d ops for %d dispatches", len(s.Ops), dispatches)
	}
	signals := make([]uint32, len(s.Counters))
	last := make([]int, len(s.Counters)) // the last task that signals each counter
	for i := range last {
		last[i] = -1
	}
	for i, t := range s.Tasks {
		switch {
		case int(t.Op) >= dispatches:
			return fmt.Errorf("task %d: dispatch %d of %d", i, t.Op, dispatches)
		case t.Kind < TaskWhole || t.Kind > TaskHeads:
			return fmt.Errorf("task %d: %s", i, t.Kind)
		case t.RowLo >= t.RowHi || int(t.RowHi) > rows:
			return fmt.Errorf("task %d: rows [%d, %d) of %d", i, t.RowLo, t.RowHi, rows)
		case (t.Kind == TaskTile || t.Kind == TaskHeads) != (t.Lo < t.Hi), t.Lo > t.Hi:
			return fmt.Errorf("task %d: %s of [%d, %d)", i, t.Kind, t.Lo, t.Hi)
		case uint64(t.WaitOff)+uint64(t.WaitLen) > uint64(len(s.Waits)):
			return fmt.Errorf("task %d: waits [%d, +%d) of %d", i, t.WaitOff, t.WaitLen, len(s.Waits))
		case int(t.Signal) >= len(s.Counters):
			return fmt.Errorf("task %d: signals counter %d of %d", i, t.Signal, len(s.Counters))
		case t.SM >= s.SMs:
			return fmt.Errorf("task %d: multiprocessor %d of %d", i, t.SM, s.SMs)
		}
		for _, w := range s.Waits[t.WaitOff : t.WaitOff+t.WaitLen] {
			if int(w.Counter) >= len(s.Counters) || w.Count == 0 || w.Count > s.Counters[w.Counter] {
				return fmt.Errorf("task %d: waits for counter %d to reach %d", i, w.Counter, w.Count)
			}
		}
		signals[t.Signal]++
		last[t.Signal] = i
	}
	for c, want := range s.Counters {
		if signals[c] != want {
			return fmt.Errorf("counter %d reaches %d, its tasks signal it %d times", c, want, signals[c])
		}
	}
	for i, t := range s.Tasks {
		for _, w := range s.Waits[t.WaitOff : t.WaitOff+t.WaitLen] {
			if last[w.Counter] >= i {
				return fmt.Errorf("task %d waits on counter %d, which task %d signals: waits must be on earlier tasks", i, w.Counter, last[w.Counter])
			}
		}
	}
	seen := make([]bool, n)
	for sm, q := range s.Queues {
		for j, ti := range q {
			if int(ti) >= n || seen[ti] || s.Tasks[ti].SM != uint32(sm) {
				return fmt.Errorf("queue %d: entry %d names task %d twice, out of range or of another queue", sm, j, ti)
			}
			if j > 0 && ti <= q[j-1] {
				return fmt.Errorf("queue %d: task %d after task %d: queues run in task order", sm, ti, q[j-1])
			}
			seen[ti] = true
		}
	}
	for i, ok := range seen {
		if !ok {
			return fmt.Errorf("task %d is in no queue", i)
		}
	}
	return nil
}

// Assign puts the tasks on sms queues: each, in task order, on the
// queue with the fewest estimated bytes so far (the lowest-numbered of
// equals; a task of no bytes counts 256, a task's worth of latency).
// Every queue is then in task order, so the schedule stays free of
// deadlock; the compiler balances for its target's GPU, and a tier on a
// GPU with another number of multiprocessors may call it again.
func (s *Schedule) Assign(sms int) {
	load := make([]uint64, sms)
	s.SMs, s.Queues = uint32(sms), make([][]uint32, sms)
	for i := range s.Tasks {
		best := 0
		for sm := 1; sm < sms; sm++ {
			if load[sm] < load[best] {
				best = sm
			}
		}
		load[best] += max(s.Tasks[i].Bytes, 256)
		s.Tasks[i].SM = uint32(best)
		s.Queues[best] = append(s.Queues[best], uint32(i))
	}
}

// Model is a simple machine to estimate a schedule on: every
// multiprocessor streams its tasks' bytes at an equal share of the
// bandwidth, a task costs Overhead more, and a task that waits starts Hop
// after the last counter it waits for is reached.
type Model struct {
	BytesPerSec   float64
	Hop, Overhead float64 // seconds
}

// H100 is the model the schedules' estimates print with: the 3.0 TB/s an
// H100's copy reaches (issue 41's measurement), a microsecond from a
// release to the acquire that sees it, and a quarter of one a task.
var H100 = Model{BytesPerSec: 3.0e12, Hop: 1e-6, Overhead: 0.25e-6}

// Estimate runs the schedule on m: the step's time, and the share of it
// the multiprocessors spend on tasks (the rest they wait on counters or
// have run out of work). Tasks' estimated bytes count activations that a
// GPU reads from L2 as if from memory, so the time is an upper bound for
// the bytes and a lower one for everything the model leaves out.
func (s *Schedule) Estimate(m Model) (step, busy float64) {
	if s.SMs == 0 {
		return 0, 0
	}
	free := make([]float64, s.SMs)
	reached := make([]float64, len(s.Counters))
	perSM := m.BytesPerSec / float64(s.SMs)
	var work float64
	for i, t := range s.Tasks {
		if t.SM >= s.SMs || int(t.Signal) >= len(reached) || uint64(t.WaitOff)+uint64(t.WaitLen) > uint64(len(s.Waits)) {
			continue // not a valid schedule's task (Validate)
		}
		start := free[t.SM]
		for _, w := range s.TaskWaits(i) {
			if int(w.Counter) < len(reached) {
				start = max(start, reached[w.Counter]+m.Hop)
			}
		}
		d := float64(t.Bytes)/perSM + m.Overhead
		work += d
		free[t.SM] = start + d
		reached[t.Signal] = max(reached[t.Signal], start+d)
		step = max(step, start+d)
	}
	if step > 0 {
		busy = work / (step * float64(s.SMs))
	}
	return step, busy
}

// TaskWaits returns task i's waits.
func (s *Schedule) TaskWaits(i int) []Wait {
	t := s.Tasks[i]
	return s.Waits[t.WaitOff : t.WaitOff+t.WaitLen]
}

// WriteText prints a valid schedule (Validate) for people: a summary, each
// multiprocessor's load, the counters, and every task with its waits.
// ops names each dispatch (its kernel instance); key is the variant's.
func (s *Schedule) WriteText(w io.Writer, key string, ops []string) error {
	var total uint64
	kinds := map[TaskKind]int{}
	for _, t := range s.Tasks {
		total += t.Bytes
		kinds[t.Kind]++
	}
	fmt.Fprintf(w, "; megakernel schedule of %s (format %d): %d tasks (%d whole, %d rows, %d tiles, %d heads), %d counters, %d waits, %d multiprocessors, %d bytes moved\n",
		key, ScheduleVersion, len(s.Tasks), kinds[TaskWhole], kinds[TaskRows], kinds[TaskTile], kinds[TaskHeads], len(s.Counters), len(s.Waits), s.SMs, total)
	step, busy := s.Estimate(H100)
	fmt.Fprintf(w, "; estimate at %.1f TB/s, %.2f µs a counter hop, %.2f µs a task: a step of %.1f µs, multiprocessors busy %.0f%%\n",
		H100.BytesPerSec/1e12, H100.Hop*1e6, H100.Overhead*1e6, step*1e6, 100*busy)
	name := func(op uint32) string {
		if int(op) < len(ops) {
			return ops[op]
		}
		return "?"
	}
	fmt.Fprintln(w, "\n; multiprocessors: tasks, bytes, first and last task")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "sm\ttasks\tbytes\tfirst\tlast\t")
	for sm, q := range s.Queues {
		var b uint64
		for _, ti := range q {
			b += s.Tasks[ti].Bytes
		}
		first, last := "-", "-"
		if len(q) > 0 {
			first, last = fmt.Sprint(q[0]), fmt.Sprint(q[len(q)-1])
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t\n", sm, len(q), b, first, last)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\n; counters: the count each reaches in a step, and the dispatch whose tasks signal it")
	op := make([]int64, len(s.Counters))
	for i := range op {
		op[i] = -1
	}
	for _, t := range s.Tasks {
		op[t.Signal] = int64(t.Op)
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "counter\tcount\top\tkernel\t")
	for c, n := range s.Counters {
		fmt.Fprintf(tw, "c%d\t%d\t%d\t%s\t\n", c, n, op[c], name(uint32(op[c])))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\n; tasks: dispatch, piece, bytes, multiprocessor, the counter it signals and the counts it waits for")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "task\top\tkernel\tkind\trows\tpart\tbytes\tsm\tsignal\twaits")
	for i, t := range s.Tasks {
		part := "-"
		if t.Lo < t.Hi {
			part = fmt.Sprintf("[%d,%d)", t.Lo, t.Hi)
		}
		waits := ""
		for j, wt := range s.TaskWaits(i) {
			if j > 0 {
				waits += " "
			}
			waits += fmt.Sprintf("c%d>=%d", wt.Counter, wt.Count)
		}
		if waits == "" {
			waits = "-"
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t[%d,%d)\t%s\t%d\t%d\tc%d\t%s\n", i, t.Op, name(t.Op), t.Kind, t.RowLo, t.RowHi, part, t.Bytes, t.SM, t.Signal, waits)
	}
	return tw.Flush()
}
