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
// after every launch, and Close prints each kernel's share of GPU time. It
// is for finding the slow kernel, not for measuring end-to-end speed:
// un-captured launches add their own gaps.
type profiler struct {
	events []driver.Event
	ms     map[string]float64
	calls  map[string]int
	out    io.Writer
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
	if err := t.done.Record(t.stream); err != nil {
		return err
	}
	if err := t.wait(ctx, vi); err != nil {
		return err
	}
	for i := range ls {
		ms, err := p.events[i+1].Elapsed(p.events[i])
		if err != nil {
			return err
		}
		name := ls[i].Name
		if e := ls[i].Shape.Entry; e != kcuda.EntryMain {
			name += " (" + strings.TrimPrefix(e.Suffix(), "_") + ")"
		}
		p.ms[name] += float64(ms)
		p.calls[name]++
	}
	return nil
}

// report prints the kernels by total time.
func (p *profiler) report() {
	var names []string
	total := 0.0
	for n, ms := range p.ms {
		names = append(names, n)
		total += ms
	}
	if total == 0 {
		return
	}
	sort.Slice(names, func(a, b int) bool { return p.ms[names[a]] > p.ms[names[b]] })
	fmt.Fprintf(p.out, "%-22s %8s %10s %10s %6s\n", "kernel", "calls", "total ms", "avg µs", "share")
	for _, n := range names {
		fmt.Fprintf(p.out, "%-22s %8d %10.3f %10.2f %5.1f%%\n", n, p.calls[n], p.ms[n], 1000*p.ms[n]/float64(p.calls[n]), 100*p.ms[n]/total)
	}
}

func (p *profiler) close() {
	for _, e := range p.events {
		e.Destroy()
	}
	p.events = nil
}
