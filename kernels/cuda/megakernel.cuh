// megakernel.cuh: the persistent decode kernel's task loop and its
// dependency counters (docs/design/megakernel.md). megakernel.cu (written
// by kernels/cuda/gen) includes mk_begin.cuh, the family sources of the
// dispatches it serves (compiled as device functions of a virtual block),
// its mk_run (a dispatch's code to its function), then this, which ends
// the virtual launch and defines the kernel.
//
// The tier (runtime/cuda/megakernel.go) uploads a decode variant's
// schedule (format/bundle's Schedule, from the compiler's megakernel pass)
// as the arrays below: an op per dispatch (its code, its parameters, and
// the grid and block of its graph-path launch), the tasks as boxes of that
// grid's blocks, their waits, and each block's queue (offsets into one
// array of task indices). The counters are a u32 per schedule counter,
// zeroed before each step; step e waits for a counter to reach e·count
// (§3.2), the tier passing e = 1 after its zeroing.
#pragma once

// The end of mk_begin.cuh's virtual launch: what follows is the persistent
// kernel itself, in the hardware's blocks.
#undef threadIdx
#undef blockIdx
#undef gridDim
#undef blockDim
#undef __syncthreads
#pragma pop_macro("__global__")
#pragma pop_macro("__launch_bounds__")

// MkOp is a dispatch as the tier uploads it: its code (mk_run), where its
// parameters start in the parameter array, and its virtual grid and block
// (the graph path's launch, but a matrix-vector product's grid of one
// chunk of features a block, so that a tile is a range of blocks, and
// argmax's block of MK_THREADS).
struct MkOp {
    u32 code, param_off;
    u32 grid[3], block[3];
};

// MkTask is a task as the tier uploads it: its dispatch and the box of
// that dispatch's virtual blocks it runs ([x0, x1) × [y0, y1) × [z0, z1),
// from the task's rows, features or KV heads), its waits, the counter it
// signals, and the weight bytes it reads (a tile's rows of its matrix, at
// pf_hi:pf_lo; pf_bytes 0 for a task without weights).
struct MkTask {
    u32 op;
    u32 x0, x1, y0, y1, z0, z1;
    u32 wait_off, wait_len;
    u32 signal;
    u32 pf_lo, pf_hi, pf_bytes;
};

// mk_prefetch asks L2 for a task's weights, a 128-byte line a thread at a
// time. Weights never wait on a counter, so their bytes can stream from
// memory while the block waits for the task's inputs or computes the task
// before it: the wait then costs the counter's latency, not the weights'.
// A prefetch is a hint; the task's own loads are as before
// (nvcc -DMK_NO_PREFETCH leaves it out, to measure what it gives).
__device__ __forceinline__ void mk_prefetch(const MkTask& t) {
#ifndef MK_NO_PREFETCH
    const char* base = (const char*)(uintptr_t)(((unsigned long long)t.pf_hi << 32) | t.pf_lo);
    for (u32 o = threadIdx.x * 128u; o < t.pf_bytes; o += MK_THREADS * 128u)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(base + o));
#endif
}

// MkWait: counter `counter` has reached `count` times the step's epoch.
struct MkWait {
    u32 counter, count;
};

// mk_load_acquire reads a counter with acquire semantics at GPU scope:
// the loads the thread makes after it see every write that the signalling
// blocks made before their release (and it does not hit a stale L1 line).
__device__ __forceinline__ u32 mk_load_acquire(const u32* p) {
    u32 v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// mk_load_relaxed reads a counter without ordering (at GPU scope, so not
// from a stale L1 line): nvcc -DMK_RELAXED_POLL polls with it and orders
// once, by a fence after the last wait is met, instead of every poll
// being an acquire.
__device__ __forceinline__ u32 mk_load_relaxed(const u32* p) {
    u32 v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

#ifdef MK_RELAXED_POLL
#define MK_POLL mk_load_relaxed
#else
#define MK_POLL mk_load_acquire
#endif

// mk_add_release adds one to a counter with release semantics at GPU
// scope: every write the thread made before it, and (through the barrier
// that precedes it in mk_signal) every write of its block, is visible to
// a block that acquires the new value.
__device__ __forceinline__ void mk_add_release(u32* p) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p) : "memory");
}

// MK_WAIT_LIMIT_NS bounds a wait (by the GPU's global timer): a schedule
// that cannot complete traps, which the tier reports as the step's error,
// instead of hanging the GPU.
#define MK_WAIT_LIMIT_NS 10000000000ull

__device__ __forceinline__ unsigned long long mk_now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// mk_wait blocks the whole block until every wait of a task is met:
// thread 0 spins on each counter (backing off a little, so that the
// spinning does not take the memory system from the blocks doing work),
// then the barrier hands what it acquired to the other threads, as
// cooperative groups' grid sync does.
__device__ __forceinline__ void mk_wait(const u32* counters, const MkWait* waits, u32 n, u32 epoch) {
    if (threadIdx.x == 0) {
        for (u32 i = 0; i < n; i++) {
            const u32* c = counters + waits[i].counter;
            u32 want = waits[i].count * epoch, ns = 32;
            if ((int)(MK_POLL(c) - want) >= 0) continue;
            unsigned long long t0 = mk_now_ns();
            while ((int)(MK_POLL(c) - want) < 0) { // wraps as the tier's reset allows
#ifndef MK_NO_SLEEP // nvcc -DMK_NO_SLEEP spins without backing off, to measure what the sleeps cost a hop
                __nanosleep(ns);
                if (ns < 256) ns *= 2; // a release is seen within a quarter microsecond or so
#endif
                if (mk_now_ns() - t0 > MK_WAIT_LIMIT_NS) __trap();
            }
        }
#ifdef MK_RELAXED_POLL
        // The relaxed reads saw the releases: this fence makes them
        // acquire (the PTX model's fence-based synchronization).
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
#endif
    }
    __syncthreads();
}

// mk_signal marks a task done once every thread of the block has finished
// its part: the barrier orders the block's writes before thread 0's
// release.
__device__ __forceinline__ void mk_signal(u32* counters, u32 c) {
    __syncthreads();
    if (threadIdx.x == 0) mk_add_release(counters + c);
}

// mk_task runs one task's box of virtual blocks, one after another: thread
// 0 sets the virtual block, and the virtual block's threads run the
// dispatch's function (mk_run) while the others wait at the barrier.
__device__ __forceinline__ void mk_task(const MkTask& t, const MkOp& op, const unsigned long long* params) {
    const u32 nthreads = op.block[0] * op.block[1] * op.block[2];
    if (threadIdx.x < nthreads) { // read by this thread only (mk_vtid), the same in every block of the task
        u32 i = threadIdx.x;
        mk_tid[i] = make_uint3(i % op.block[0], (i / op.block[0]) % op.block[1], i / (op.block[0] * op.block[1]));
    }
    for (u32 z = t.z0; z < t.z1; z++)
        for (u32 y = t.y0; y < t.y1; y++)
            for (u32 x = t.x0; x < t.x1; x++) {
                if (threadIdx.x == 0) {
                    mk_v.bid = make_uint3(x, y, z);
                    mk_v.grid = make_uint3(op.grid[0], op.grid[1], op.grid[2]);
                    mk_v.block = make_uint3(op.block[0], op.block[1], op.block[2]);
                    mk_v.nthreads = nthreads;
                }
                __syncthreads();
                if (threadIdx.x < nthreads && !mk_run(op.code, params + op.param_off)) __trap(); // the tier checked every code
                __syncthreads(); // the virtual block's shared memory and mk_v are the next one's
            }
}

// The step's trace (the tier's profile, Options.Profile): where trace is
// not null, each block adds to its MK_TRACE_WORDS words of it, per step:
// word 0 one (the steps), 1 its cycles from start to end, 3 and 4 (set,
// not added) its start and end on the global timer in ns (2, 5, 6, 7
// unused); then per
// function code c < MK_TRACE_CODES (mk_run's) three words at
// MK_TRACE_HEAD + 3c: its tasks, the cycles thread 0 waited on their
// counters, and the cycles from their waits' end to their signal. The
// block accumulates a step's in shared memory (mk_tr) and adds them to
// the trace once, at its end, so that tracing adds no global memory
// traffic to the step's critical path. runtime/cuda/megakernel.go reads
// the same layout.
#define MK_TRACE_CODES 64
#define MK_TRACE_HEAD 8
#define MK_TRACE_WORDS (MK_TRACE_HEAD + 3 * MK_TRACE_CODES)
__shared__ unsigned long long mk_tr[3 * MK_TRACE_CODES];

// megakernel runs a decode step: block b runs queue b's tasks in order,
// each after its waits, each signalling its counter when done. The tier
// launches exactly as many blocks as queues, no more than the GPU keeps
// resident at once (a block spinning on a counter must not hold the place
// of the block that would release it).
//
// Each task's weights are prefetched into L2 ahead of it (MK_AHEAD
// tasks ahead, below): the first task's before its waits, every later
// one's after the waits of the task MK_AHEAD before it, so they stream
// while the tasks before it compute.
//
// MK_MIN_BLOCKS is the blocks a multiprocessor is to keep (launch bounds):
// 1 lets a thread have 128 registers; 2 caps it at 64 (the graph path's
// matrix-vector kernel's) for twice the warps, if the tier's occupancy
// query then finds room for two (nvcc -DMK_MIN_BLOCKS=2 to try).
#ifndef MK_MIN_BLOCKS
#define MK_MIN_BLOCKS 1
#endif
// MK_AHEAD is how many tasks ahead of the one it runs a block prefetches
// (nvcc -DMK_AHEAD=4 to try): the first MK_AHEAD tasks' weights at the
// start, then task i + MK_AHEAD's after task i's waits.
#ifndef MK_AHEAD
#define MK_AHEAD 1
#endif
extern "C" __global__ void __launch_bounds__(MK_THREADS, MK_MIN_BLOCKS)
    megakernel(const MkTask* tasks, const MkWait* waits, const u32* queue_off, const u32* queue, const MkOp* ops,
        const unsigned long long* params, u32* counters, unsigned long long* trace, u32 epoch) {
    const unsigned long long ns0 = mk_now_ns();
    const long long c0 = clock64();
    if (trace != nullptr) // zero before mk_wait's barrier; thread 0 adds after it
        for (u32 i = threadIdx.x; i < 3 * MK_TRACE_CODES; i += MK_THREADS) mk_tr[i] = 0;
    u32 q0 = queue_off[blockIdx.x], q1 = queue_off[blockIdx.x + 1];
    for (u32 a = 0; a < MK_AHEAD && q0 + a < q1; a++) mk_prefetch(tasks[queue[q0 + a]]);
#ifdef MK_PIPE
    // nvcc -DMK_PIPE: a task's record and op are loaded during the task
    // before it (registers), and its parameters' line asked of L1 before
    // its waits, so that the chain queue → task → op → parameters of
    // dependent loads is off the path from a counter's release to the
    // task's work.
    MkTask tn{};
    MkOp on{};
    if (q0 < q1) {
        tn = tasks[queue[q0]];
        on = ops[tn.op];
    }
#endif
    for (u32 qi = q0; qi < q1; qi++) {
#ifdef MK_PIPE
        const MkTask t = tn;
        const MkOp op = on;
        asm volatile("prefetch.global.L1 [%0];" ::"l"(params + op.param_off));
        if (qi + 1 < q1) tn = tasks[queue[qi + 1]];
#else
        const MkTask t = tasks[queue[qi]];
#endif
        const long long ca = clock64();
        mk_wait(counters, waits + t.wait_off, t.wait_len, epoch);
        const long long cb = clock64();
        if (qi + MK_AHEAD < q1) mk_prefetch(tasks[queue[qi + MK_AHEAD]]);
#ifdef MK_PIPE
        if (qi + 1 < q1) on = ops[tn.op];
#else
        const MkOp op = ops[t.op];
#endif
        mk_task(t, op, params);
        mk_signal(counters, t.signal);
        if (trace != nullptr && threadIdx.x == 0) {
            const u32 c = 3 * (op.code % MK_TRACE_CODES);
            mk_tr[c] += 1;
            mk_tr[c + 1] += (unsigned long long)(cb - ca);
            mk_tr[c + 2] += (unsigned long long)(clock64() - cb);
        }
    }
    if (trace != nullptr) {
        __syncthreads(); // thread 0's last additions
        unsigned long long* p = trace + (size_t)blockIdx.x * MK_TRACE_WORDS;
        if (threadIdx.x == 0) {
            p[0] += 1;
            p[1] += (unsigned long long)(clock64() - c0);
            p[3] = ns0;
            p[4] = mk_now_ns();
        }
        for (u32 i = threadIdx.x; i < 3 * MK_TRACE_CODES; i += MK_THREADS) p[MK_TRACE_HEAD + i] += mk_tr[i];
    }
}
