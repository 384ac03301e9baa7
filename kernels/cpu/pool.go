package cpu

import (
	"fmt"
	"runtime"
	"sync"
)

// Pool is a fixed set of worker goroutines that run parallel loops. A loop
// is split into one contiguous chunk per worker; the caller's goroutine
// runs the first chunk, so a pool of one thread never switches goroutines.
type Pool struct {
	n     int
	tasks []chan task
	wg    sync.WaitGroup
	mu    sync.Mutex // serializes loops; dispatches are sequential anyway
	errMu sync.Mutex
	err   error
}

type task struct {
	fn     func(worker, lo, hi int)
	lo, hi int
	worker int
}

// NewPool starts threads-1 workers (threads ≤ 0 means one per CPU).
func NewPool(threads int) *Pool {
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	p := &Pool{n: threads}
	for i := 1; i < threads; i++ {
		ch := make(chan task, 1)
		p.tasks = append(p.tasks, ch)
		go p.work(ch)
	}
	return p
}

// Threads is the pool size.
func (p *Pool) Threads() int { return p.n }

func (p *Pool) work(ch chan task) {
	for t := range ch {
		p.run(t)
		p.wg.Done()
	}
}

// run executes one chunk, turning a panic (an out-of-range index from a
// corrupt request table, say) into the loop's error instead of a crash.
func (p *Pool) run(t task) {
	defer func() {
		if r := recover(); r != nil {
			p.errMu.Lock()
			if p.err == nil {
				p.err = fmt.Errorf("kernel fault: %v", r)
			}
			p.errMu.Unlock()
		}
	}()
	t.fn(t.worker, t.lo, t.hi)
}

// For runs fn over [0, n) split into at most Threads chunks of at least
// grain items, and returns the first fault.
func (p *Pool) For(n, grain int, fn func(worker, lo, hi int)) error {
	if n <= 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	chunks := min(p.n, max(1, n/max(grain, 1)))
	per := (n + chunks - 1) / chunks
	p.err = nil
	for c := 1; c < chunks; c++ {
		lo := c * per
		if lo >= n {
			break
		}
		p.wg.Add(1)
		p.tasks[c-1] <- task{fn, lo, min(n, lo+per), c}
	}
	p.run(task{fn, 0, min(n, per), 0})
	p.wg.Wait()
	return p.err
}

// Close stops the workers.
func (p *Pool) Close() {
	for _, ch := range p.tasks {
		close(ch)
	}
	p.tasks = nil
}
