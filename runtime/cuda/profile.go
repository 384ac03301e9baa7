package cuda

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	kcuda "github.com/zrtdev/zrt/kernels/cuda"
	"github.com/zrtdev/zrt/runtime/cuda/driver"
)

// profiler times kernels: with it on (ZRT_CUDA_PROFILE=1), Run replays the
// launch list directly instead of the captured graph, with a timing event
// after every launch, and Close prints, for each variant run, its steps,
// its GPU time a step and each kernel's share of it. It is for finding the
// slow kernel, not for measuring end-to-end speed: un-captured launches
// add their own gaps, and a small kernel that the graph overlaps with its
// neighbours looks as costly as one it does not. What a kernel costs
// inside the graph is the step time without it (Options.Omit).
type profiler struct {
	events []driver.Event
	runs   map[string]*variantProfile // by variant key ("decode.s16.r16")
	out    io.Writer
}

// variantProfile is one variant's timings: its steps, and each kernel's
// (entry-qualified name's) milliseconds and calls over them.
type variantProfile struct {
	steps int
	ms    map[string]float64
	calls map[string]int
	// seq is the variant's launch list in order (kernel, entry and
	// geometry) and seqMs each launch's milliseconds over the steps: the
	// per-layer sequence a step runs.
	seq   []string
	seqMs []float64
}

func newProfiler(out io.Writer) *profiler {
	return &profiler{runs: map[string]*variantProfile{}, out: out}
}

// add records one launch of kernel name in variant key.
func (p *profiler) add(key, name string, ms float64) {
	v := p.runs[key]
	if v == nil {
		v = &variantProfile{ms: map[string]float64{}, calls: map[string]int{}}
		p.runs[key] = v
	}
	v.ms[name] += ms
	v.calls[name]++
}

func (t *Tier) runProfiled(ctx context.Context, vi int) error {
	p := t.prof
	ls := t.variants[vi]
	for len(p.events) < len(ls)+1 {
		e, err := driver.NewEvent(0)
		if err != nil {
			return err
		}
		p.events = append(p.events, e)
	}
	if err := t.upload(); err != nil {
		return err
	}
	if err := p.events[0].Record(t.stream); err != nil {
		return err
	}
	for i := range ls {
		if err := t.launch(&ls[i]); err != nil {
			return fmt.Errorf("cuda: launch %d (%s): %w", i, ls[i].Name, err)
		}
		if err := p.events[i+1].Record(t.stream); err != nil {
			return err
		}
	}
	for _, ri := range t.copyOut {
		r := &t.regions[ri]
		if err := driver.MemcpyDtoHAsync(r.host, r.dev, t.stream); err != nil {
			return err
		}
	}
	if err := t.deviceChoices(); err != nil {
		return err
	}
	if err := t.done.Record(t.stream); err != nil {
		return err
	}
	if _, err := t.wait(ctx, vi, waitSpin); err != nil {
		return err
	}
	key := t.keys[vi]
	for i := range ls {
		ms, err := p.events[i+1].Elapsed(p.events[i])
		if err != nil {
			return err
		}
		name := ls[i].Name
		if e := ls[i].Shape.Entry; e != kcuda.EntryMain {
			name += " (" + strings.TrimPrefix(e.Suffix(), "_") + ")"
		}
		p.add(key, name, float64(ms))
		p.addSeq(key, i, len(ls), &ls[i], float64(ms))
	}
	if v := p.runs[key]; v != nil {
		v.steps++
	}
	return nil
}

// addSeq records launch i (of n) of variant key's list: its description
// the first time, its time every time.
func (p *profiler) addSeq(key string, i, n int, l *Launch, ms float64) {
	v := p.runs[key]
	if len(v.seq) != n {
		v.seq, v.seqMs = make([]string, n), make([]float64, n)
	}
	if v.seq[i] == "" {
		sh := l.Shape
		v.seq[i] = fmt.Sprintf("%-34s grid %d,%d,%d block %d,%d shared %d", l.Name+sh.Entry.Suffix(), sh.Grid[0], sh.Grid[1], sh.Grid[2],
			sh.Block[0], sh.Block[1], sh.Shared)
		if sh.Stage != nil {
			v.seq[i] += fmt.Sprintf(" (after a stage launch, grid %d,%d,%d)", sh.Stage.Grid[0], sh.Stage.Grid[1], sh.Stage.Grid[2])
		}
		if l.Collective != nil {
			v.seq[i] = fmt.Sprintf("%-34s collective", l.Name)
		}
	}
	v.seqMs[i] += ms
}

// report prints each variant that ran, the most GPU time first: its
// steps and time a step, then its kernels by total time, with their share
// of the variant's, then its launch list in order with each launch's
// geometry and time.
func (p *profiler) report() {
	total := func(v *variantProfile) (ms float64) {
		for _, m := range v.ms {
			ms += m
		}
		return ms
	}
	keys := make([]string, 0, len(p.runs))
	for k := range p.runs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool {
		ta, tb := total(p.runs[keys[a]]), total(p.runs[keys[b]])
		return ta > tb || ta == tb && keys[a] < keys[b]
	})
	for i, k := range keys {
		v, sum := p.runs[k], total(p.runs[k])
		if sum == 0 || v.steps == 0 {
			continue
		}
		if i > 0 {
			fmt.Fprintln(p.out)
		}
		fmt.Fprintf(p.out, "variant %s: %d steps, %.3f ms a step\n", k, v.steps, sum/float64(v.steps))
		names := make([]string, 0, len(v.ms))
		for n := range v.ms {
			names = append(names, n)
		}
		sort.Slice(names, func(a, b int) bool {
			return v.ms[names[a]] > v.ms[names[b]] || v.ms[names[a]] == v.ms[names[b]] && names[a] < names[b]
		})
		fmt.Fprintf(p.out, "%-34s %8s %10s %10s %6s\n", "kernel", "calls", "total ms", "avg µs", "share")
		for _, n := range names {
			fmt.Fprintf(p.out, "%-34s %8d %10.3f %10.2f %5.1f%%\n", n, v.calls[n], v.ms[n], 1000*v.ms[n]/float64(v.calls[n]), 100*v.ms[n]/sum)
		}
		if len(v.seq) == 0 {
			continue
		}
		fmt.Fprintf(p.out, "launch list of %s (%d launches), avg µs a step:\n", k, len(v.seq))
		for i, d := range v.seq {
			fmt.Fprintf(p.out, "%4d %8.2f  %s\n", i, 1000*v.seqMs[i]/float64(v.steps), d)
		}
	}
}

func (p *profiler) close() {
	for _, e := range p.events {
		e.Destroy()
	}
	p.events = nil
}
