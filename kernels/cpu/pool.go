package cpu

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Pool is a fixed set of worker goroutines that run parallel loops. A loop
// is cut into up to chunksPerThread chunks per thread, which the caller's
// goroutine and the workers claim one at a time until none is left, so a
// pool of one thread never switches goroutines.
//
// Chunks are claimed rather than dealt because a thread can be late: on a
// machine whose cores are shared with other processes (or, under a
// hypervisor, with other machines) a worker may sleep through a whole loop.
// With one fixed chunk per thread the loop then waits for it; with claimed
// chunks the threads that run take its share, and the loop waits at most
// for the chunk a late thread already holds. Every kernel computes each
// item of a loop on its own, so which thread takes a chunk never changes a
// result.
//
// Decode issues a few hundred short loops per token, so a dispatch must
// cost well under a microsecond: waking a parked goroutine (a futex and a
// scheduler round trip, tens of microseconds on a busy VM) on every loop
// would cost as much as the loops themselves. Workers therefore wait for
// work by spinning on an atomic job word for up to spinFor, and only then
// park on their channel; the caller waits for the chunks the same way. A
// dispatch publishes the job (function and chunk size in the Pool, then
// the claim and job words), allocates nothing, and wakes only workers that
// parked.
type Pool struct {
	n       int
	workers []*worker
	mu      sync.Mutex // serializes loops; dispatches are sequential anyway

	// The current loop: written by For before the claim and job words are
	// published, read by a thread only after it claims a chunk (the loop
	// cannot end, and the next one rewrite them, before that chunk is done).
	fn        func(worker, lo, hi int)
	size, per int // items, and items a chunk (the last may have fewer)
	// job, claim and pending get cache lines of their own: the workers
	// spin on job, every thread claims from claim, the caller spins on
	// pending.
	_   [64]byte
	job atomic.Uint64
	_   [56]byte
	// claim is seq<<32 | the next unclaimed chunk, seq being the low 32
	// bits of the loop's sequence number: a thread that read an earlier
	// loop's job word fails its claim instead of taking this loop's chunk
	// with that loop's bounds.
	claim atomic.Uint64
	_     [56]byte
	// pending counts the loop's chunks not finished yet.
	pending atomic.Int32
	_       [60]byte
	// waiter parks the caller when the chunks take longer than spinFor.
	waiter parker

	errMu sync.Mutex
	err   error
}

// The job word is seq<<jobShift | chunks: a new sequence number per loop,
// and the chunk count, so that a worker learns whether it takes part (the
// first chunks-1 workers do) without reading the job's other fields.
// chunks == 0 tells the workers to exit.
const (
	jobShift = 16
	jobMask  = 1<<jobShift - 1
)

// chunksPerThread is how finely a loop is cut: enough chunks that a late
// thread's share is spread over the others, few enough that claiming
// (one compare-and-swap a chunk) stays negligible beside the work.
const chunksPerThread = 4

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
	threads = min(threads, jobMask/chunksPerThread)
	p := &Pool{n: threads, waiter: newParker()}
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
// seen, and claim chunks of the job if it takes part.
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
			p.claimAll(c, job)
		}
	}
}

// claimAll runs chunks of the loop published as job, as worker, until
// none is left to claim, and wakes the caller after the loop's last chunk.
func (p *Pool) claimAll(worker int, job uint64) {
	seq, chunks := uint64(uint32(job>>jobShift)), uint64(job&jobMask)
	for {
		cl := p.claim.Load()
		if cl>>32 != seq || cl&(1<<32-1) >= chunks {
			return // another loop's word, or nothing left
		}
		if !p.claim.CompareAndSwap(cl, cl+1) {
			continue
		}
		lo := int(cl&(1<<32-1)) * p.per
		p.run(worker, lo, min(lo+p.per, p.size))
		if p.pending.Add(-1) == 0 && worker != 0 {
			p.waiter.unpark()
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

// For runs fn over [0, n) cut into chunks of at least grain items, and
// returns the first fault. Each chunk runs once, as one call; the worker
// argument names the thread (0 to Threads-1) and no two calls running at
// once share it, so fn may keep per-thread scratch indexed by worker. A
// thread may run several chunks of one loop, and which thread runs a
// chunk varies from loop to loop.
func (p *Pool) For(n, grain int, fn func(worker, lo, hi int)) error {
	if n <= 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	chunks := 1
	if p.n > 1 {
		chunks = min(p.n*chunksPerThread, max(1, n/max(grain, 1)))
	}
	per := (n + chunks - 1) / chunks
	chunks = (n + per - 1) / per // no empty chunks
	p.fn, p.size, p.per = fn, n, per
	p.err = nil
	if chunks == 1 {
		p.run(0, 0, n)
	} else {
		seq := p.job.Load()>>jobShift + 1
		job := seq<<jobShift | uint64(chunks)
		p.pending.Store(int32(chunks))
		p.claim.Store(uint64(uint32(seq)) << 32)
		p.job.Store(job)
		for _, w := range p.workers[:min(chunks, p.n)-1] {
			w.unpark()
		}
		p.claimAll(0, job)
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
