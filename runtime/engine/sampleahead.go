package engine

import (
	goruntime "runtime"
	"sync"
	"sync/atomic"

	"github.com/zrtdev/zrt/runtime/engine/sched"
)

// LogitsFetcher is a Model that brings several slots' logits to the host
// at once (runtime.Program.FetchLogits), after which its Logits reads
// them from several goroutines at once until the next step.
type LogitsFetcher interface {
	FetchLogits(slots []int) error
}

// sampleAhead samples the next token of the step's rows whose decoders
// read the logits on the host whatever the step's greedy choice
// (decode.Decoder.WantsLogits: sampled rows, rows that want logprobs), on
// several cores at once, before route takes the rows one by one: a
// sampled token costs passes over the whole vocabulary (0.1 ms for 32 000
// tokens and 0.5 ms for 152 000 on one core of this project's EPYC), which
// over 64 rows would outlast a GPU's step. It fetches their logits in as few copies as the
// slots allow first; route then takes each row's token from
// request.next. A model that cannot fetch them at once (no
// LogitsFetcher), or a step with fewer than two such rows, leaves them
// all to route.
func (e *Engine) sampleAhead(plan sched.Plan, byID map[uint64]*request) {
	f, ok := e.m.(LogitsFetcher)
	if !ok {
		return
	}
	var rows []*request
	var pos, slots []int
	for _, c := range plan.Rows {
		if r := byID[c.ID]; r.takes(c) && c.Draft == 0 && r.dec.WantsLogits() {
			rows, pos, slots = append(rows, r), append(pos, r.done+c.N), append(slots, r.slot)
		}
	}
	n := len(rows)
	if n < 2 {
		return
	}
	if f.FetchLogits(slots) != nil {
		return // route's Logits gives NaNs, and the next step the error
	}
	workers := min(goruntime.GOMAXPROCS(0), n)
	for len(e.sampleBufs) < workers {
		e.sampleBufs = append(e.sampleBufs, nil)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	work := func(k int) {
		defer wg.Done()
		for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
			r := rows[i]
			r.next, r.ahead = r.dec.NextFrom(slotSource{e, r.slot, &e.sampleBufs[k]}, r.tokens, pos[i]), true
		}
	}
	wg.Add(workers)
	for k := 1; k < workers; k++ {
		go work(k)
	}
	work(0)
	wg.Wait()
}
