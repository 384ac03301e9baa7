package cpu

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Pool is a fixed set of worker goroutines that run parallel loops. A loop
// is split into one contiguous chunk per worker; the caller's goroutine
// runs the first chunk, so a pool of one thread never switches goroutines.
//
// Decode issues a few hundred short loops per token, so a dispatch must
// cost well under a microsecond: waking a parked goroutine (a futex and a
// scheduler round trip, tens of microseconds on a busy VM) on every loop
// would cost as much as the loops themselves. Workers therefore wait for
// work by spinning on an atomic job word for up to spinFor, and only then
// park on their channel; the caller waits for the chunks the same way. A
// dispatch publishes the job (function and chunk bounds in the Pool, then
// the job word), allocates nothing, and wakes only workers that parked.
type Pool struct {
	n       int
	workers []*worker
	mu      sync.Mutex // serializes loops; dispatches are sequential anyway

	// The current job: written by For before the job word is published,
	// read by the workers whose chunk index is below the job's count.
	fn func(worker, lo, hi int)
	lo []int // chunk c is [lo[c], lo[c+1])
	// job and pending get cache lines of their own: the workers spin on
	// job, the caller on pending.
	_   [64]byte
	job atomic.Uint64
	_   [56]byte
	// pending counts the workers' chunks not finished yet.
	pending atomic.Int32
	_       [60]byte
	// waiter parks the caller when the workers take longer than spinFor.
	waiter parker

	errMu sync.Mutex
	err   error
}

// The job word is seq<<jobShift | chunks: a new sequence number per loop,
// and the chunk count, so that a worker learns whether it takes part
// without reading the job's other fields (which only participants may
// read: the next loop rewrites them as soon as the participants finish).
// chunks == 0 tells the workers to exit.
const (
	jobShift = 16
	jobMask  = 1<<jobShift - 1
)

// spinFor is how long an idle worker (or the waiting caller) spins before
// it parks. Gaps between a token's dispatches are far shorter; between
// tokens or requests they may be longer, and then the threads sleep.
const spinFor = 200 * time.Microsecond

// worker is one pool goroutine's parking state, padded to its own cache
// lines so that spinning readers of the job word are not disturbed by
// writes to neighbours.
type worker struct {
	parker
	_ [64]byte
}

// parker is a goroutine that may sleep: state is parked while it sleeps
// (or is about to) on wake, and whoever moves it back to running owes it
// one token on wake. The channel has room for that token, so waking never
// blocks.
type parker struct {
	state atomic.Int32
	wake  chan struct{}
}

const (
	running int32 = iota
	parked
)

func newParker() parker { return parker{wake: make(chan struct{}, 1)} }

// unpark wakes the goroutine if it parked (or is about to).
func (k *parker) unpark() {
	if k.state.Load() == parked && k.state.CompareAndSwap(parked, running) {
		k.wake <- struct{}{}
	}
}

// wait returns once done() holds: it polls done for spinFor, then parks,
// re-checking done after announcing it so that an unpark racing with the
// announcement is never lost (all these atomics are sequentially
// consistent: either the waker sees parked, or the waiter sees done).
func (k *parker) wait(done func() bool) {
	if done() {
		return
	}
	start := time.Now()
	for i := 1; ; i++ {
		if done() {
			return
		}
		if i&255 == 0 && time.Since(start) > spinFor {
			break
		}
	}
	for {
		k.state.Store(parked)
		if done() {
			if k.state.CompareAndSwap(parked, running) {
				return
			}
			<-k.wake // the waker got there first and sends a token
			return
		}
		<-k.wake
		if done() {
			return
		}
	}
}

// NewPool starts threads-1 workers (threads ≤ 0 means one per CPU).
func NewPool(threads int) *Pool {
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	threads = min(threads, jobMask)
	p := &Pool{n: threads, lo: make([]int, threads+1), waiter: newParker()}
	for i := 1; i < threads; i++ {
		w := &worker{parker: newParker()}
		p.workers = append(p.workers, w)
		go p.work(w, i)
	}
	return p
}

// Threads is the pool size.
func (p *Pool) Threads() int { return p.n }

// work is worker c's loop: wait for a job word other than the last one
// seen, run chunk c if the job has one, and report it done.
func (p *Pool) work(w *worker, c int) {
	var seen uint64
	for {
		var job uint64
		w.wait(func() bool { job = p.job.Load(); return job != seen })
		seen = job
		chunks := int(job & jobMask)
		if chunks == 0 {
			return
		}
		if c < chunks {
			p.run(c, p.lo[c], p.lo[c+1])
			if p.pending.Add(-1) == 0 {
				p.waiter.unpark()
			}
		}
	}
}

// run executes one chunk, turning a panic (an out-of-range index from a
// corrupt request table, say) into the loop's error instead of a crash.
func (p *Pool) run(worker, lo, hi int) {
	defer func() {
		if r := recover(); r != nil {
			p.errMu.Lock()
			if p.err == nil {
				p.err = fmt.Errorf("kernel fault: %v", r)
			}
			p.errMu.Unlock()
		}
	}()
	p.fn(worker, lo, hi)
}

// For runs fn over [0, n) split into at most Threads chunks of at least
// grain items, and returns the first fault. Chunk c runs as worker c, so
// fn may keep per-worker state indexed by worker.
func (p *Pool) For(n, grain int, fn func(worker, lo, hi int)) error {
	if n <= 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	chunks := min(p.n, max(1, n/max(grain, 1)))
	per := (n + chunks - 1) / chunks
	chunks = (n + per - 1) / per // no empty chunks
	for c := 0; c <= chunks; c++ {
		p.lo[c] = min(n, c*per)
	}
	p.fn = fn
	p.err = nil
	if chunks > 1 {
		p.pending.Store(int32(chunks - 1))
		seq := p.job.Load()>>jobShift + 1
		p.job.Store(seq<<jobShift | uint64(chunks))
		for _, w := range p.workers[:chunks-1] {
			w.unpark()
		}
	}
	p.run(0, 0, p.lo[1])
	if chunks > 1 {
		p.waiter.wait(func() bool { return p.pending.Load() == 0 })
	}
	p.fn = nil
	return p.err
}

// Close stops the workers. The pool must not be used afterwards.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.workers == nil {
		return
	}
	seq := p.job.Load()>>jobShift + 1
	p.job.Store(seq << jobShift) // chunks == 0: exit
	for _, w := range p.workers {
		w.unpark()
	}
	p.workers = nil
}
