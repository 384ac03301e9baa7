// megakernel.cuh: the persistent decode kernel's task loop and its
// dependency counters (docs/design/megakernel.md). No instance includes
// it yet, so it is in no PTX of the archive: the loop's entries come with
// the families' device functions that take a virtual block (the design's
// §3.1), written by kernels/cuda/gen like the other instances.
//
// A schedule (format/bundle's Schedule, from the compiler's megakernel
// pass) is uploaded by the tier as the arrays below: the tasks of one
// decode variant, their waits, and each block's queue (offsets into one
// array of task indices). The counters are a u32 per schedule counter in
// device memory, zeroed once at load: step e (from 1) waits for a counter
// to reach e·count, so nothing is reset between steps (§3.2).
#pragma once
#include "common.cuh"

// MkTask is a task as the tier uploads it (bundle.Task less what only the
// host uses: its bytes and multiprocessor).
struct MkTask {
    u32 op;             // the dispatch: an index into the tier's op table
    u32 kind;           // MK_WHOLE, MK_ROWS, MK_TILE, MK_HEADS (bundle.TaskKind)
    u32 row_lo, row_hi; // activation rows
    u32 lo, hi;         // output features (MK_TILE) or KV heads (MK_HEADS)
    u32 wait_off, wait_len;
    u32 signal;         // the counter this task adds one to when done
};
#define MK_WHOLE 1
#define MK_ROWS 2
#define MK_TILE 3
#define MK_HEADS 4

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

// mk_add_release adds one to a counter with release semantics at GPU
// scope: every write the thread made before it, and (through the barrier
// that precedes it in mk_signal) every write of its block, is visible to
// a block that acquires the new value.
__device__ __forceinline__ void mk_add_release(u32* p) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p) : "memory");
}

// mk_wait blocks the whole block until every wait of a task is met:
// thread 0 spins on each counter (backing off, so that the spinning does
// not take the memory system from the blocks doing work), then the
// barrier hands what it acquired to the other threads, as cooperative
// groups' grid sync does.
__device__ __forceinline__ void mk_wait(const u32* counters, const MkWait* waits, u32 n, u32 epoch) {
    if (threadIdx.x == 0) {
        for (u32 i = 0; i < n; i++) {
            const u32* c = counters + waits[i].counter;
            u32 want = waits[i].count * epoch, ns = 32;
            while ((int)(mk_load_acquire(c) - want) < 0) { // wraps as the tier's reset allows
                __nanosleep(ns);
                if (ns < 1024) ns *= 2;
            }
        }
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

// mk_loop runs block blockIdx.x's queue: for each task, its waits, then
// run(task) (the family's device function for the task's op, with the
// task's rows, features or heads as its virtual block), then its signal.
// run must be entered by every thread of the block and leave no thread
// behind a barrier.
template <typename Run>
__device__ __forceinline__ void mk_loop(const MkTask* tasks, const MkWait* waits, const u32* queue_off, const u32* queue,
    u32* counters, u32 epoch, Run run) {
    u32 q0 = queue_off[blockIdx.x], q1 = queue_off[blockIdx.x + 1];
    for (u32 qi = q0; qi < q1; qi++) {
        const MkTask t = tasks[queue[qi]];
        mk_wait(counters, waits + t.wait_off, t.wait_len, epoch);
        run(t);
        mk_signal(counters, t.signal);
    }
}
