// peer.cuh: what T-CUDA's one-shot collectives share (all_reduce_sum and
// all_gather over NVLink peer access, runtime/cuda's peer.go): the
// exchange descriptor the tier writes in device memory and the barrier
// that meets every block of every rank.
//
// Each rank owns an exchange buffer of two halves, each a slot per rank
// (slot_bytes each): a collective's phase 1 pushes this rank's values
// into slot `rank` of every rank's current half (remote stores over
// NVLink, which do not wait for a reply), the barrier waits until every
// block of every rank has pushed, and phase 2 reads the local half only.
// The halves alternate by the collective's epoch: a rank overwrites a
// half two collectives after it last used it, and between the two it has
// passed a barrier every peer reached only after finishing the earlier
// collective (each rank's kernels run in stream order), so no peer still
// reads it. The epoch is counted by every block in device memory
// (epoch[block]), so a captured graph replays with fixed parameters;
// every gather runs PEER_BLOCKS blocks (at most that many: the flags
// have room for no more), so the blocks' counts agree. A large all-reduce
// and a matmul's _peer entry (family/matmul.cuh: a product with the
// all-reduce after it taken in) run more blocks: they all take block 0's
// count, and the last of them to finish (a count of its finished blocks
// in the word past the epochs) stores the next for every block
// (peer_grid_epoch, peer_grid_last, peer_grid_count).
#pragma once
#include "common.cuh"

#define PEER_MAX_RANKS 8
#define PEER_BLOCKS 16
#define PEER_THREADS 512

// peer_comm is runtime/cuda's descriptor (peer.go's connect), byte for
// byte.
struct peer_comm {
    unsigned long long slot_bytes;  // one rank's slot in a half
    u32 rank, ranks;
    float* bufs[PEER_MAX_RANKS];    // each rank's exchange buffer
    u32* flags[PEER_MAX_RANKS];     // each rank's flags: [from rank][block]
    u32* epoch;                     // this rank's per-block epochs, then the _peer entry's finished blocks
};

// PEER_TIMEOUT_NS bounds a barrier's wait for its peers: far longer
// than ranks replaying the same graph side by side ever drift apart.
#define PEER_TIMEOUT_NS 60000000000ull

// peer_clock is the GPU's global timer, in nanoseconds.
__device__ __forceinline__ unsigned long long peer_clock() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// peer is what a block reads of its descriptor. The descriptor does not
// change once the tier has connected the set, so peer_load reads it
// before dep_sync, while the previous kernel still runs; only the epoch,
// which the previous collective counted, waits (peer_epoch).
struct peer {
    u32 R, r;
    size_t floats;                // one slot
    float* bufs[PEER_MAX_RANKS];  // each rank's exchange buffer (0 past R), indexed by constants only
    float* own;                   // this rank's
    u32* signal;                  // the flag this thread releases: this block's on rank threadIdx.x (0 past R)
    const u32* mine;              // this rank's flags
    u32* epoch;                   // this block's epoch counter
};

__device__ __forceinline__ void peer_load(const peer_comm* pc, peer& p) {
    p.R = pc->ranks;
    p.r = pc->rank;
    p.floats = pc->slot_bytes / 4;
#pragma unroll
    for (u32 q = 0; q < PEER_MAX_RANKS; q++) p.bufs[q] = q < p.R ? pc->bufs[q] : (float*)0;
    p.own = pc->bufs[p.r];
    p.signal = threadIdx.x < p.R ? pc->flags[threadIdx.x] + p.r * PEER_BLOCKS + blockIdx.x : (u32*)0;
    p.mine = pc->flags[p.r];
    p.epoch = pc->epoch + blockIdx.x;
}

// peer_epoch is this collective's epoch: one past the block's count,
// which every thread reads (after dep_sync: the previous collective may
// have counted it) and thread 0 stores back in peer_barrier, once every
// thread has read it.
__device__ __forceinline__ u32 peer_epoch(const peer& p) { return *(volatile const u32*)p.epoch + 1; }

// A collective launched with other than PEER_BLOCKS blocks (a large
// all-reduce, spread over the multiprocessors, or a matmul's _peer entry)
// cannot count the epoch a block at a time: its blocks all take block 0's
// count (peer_grid_epoch; every counter holds the same between two
// collectives), and the last of them to finish (peer_grid_last, a count
// of the finished blocks in the word past the counters) stores the next
// for every counter (peer_grid_count).
__device__ __forceinline__ u32 peer_grid_epoch(const peer_comm* pc) { return *(volatile const u32*)pc->epoch + 1; }

// peer_grid_last counts the block in, once its threads have stored what
// they write, and tells the whole block whether it was the grid's last;
// the last sees every other block's stores (read them past L1).
__device__ bool peer_grid_last(const peer_comm* pc) {
    __shared__ int last;
    u32* done = pc->epoch + PEER_BLOCKS;
    __threadfence();
    __syncthreads();
    const u32 tid = threadIdx.y * blockDim.x + threadIdx.x;
    if (tid == 0) {
        last = atomicAdd(done, 1u) == gridDim.x * gridDim.y - 1;
        if (last) *done = 0;
    }
    __syncthreads();
    if (last) __threadfence();
    return last;
}

// peer_grid_count stores epoch e in every block's counter: the grid's
// last block calls it, every block having read the count.
__device__ __forceinline__ void peer_grid_count(const peer_comm* pc, u32 e) {
    if (threadIdx.x == 0 && threadIdx.y == 0)
        for (u32 b = 0; b < PEER_BLOCKS; b++) pc->epoch[b] = e;
}

// peer_slot is slot k of the exchange buffer buf's half for epoch e.
__device__ __forceinline__ float* peer_slot(const peer& p, float* buf, u32 k, u32 e) {
    return buf + ((size_t)(e & 1) * p.R + k) * p.floats;
}

// peer_slots fills dst with slot `rank` of every rank's half for epoch
// e (the places this rank pushes to), 0 past the set's ranks; unrolled
// over PEER_MAX_RANKS so dst stays in registers.
__device__ __forceinline__ void peer_slots(const peer& p, u32 e, float* dst[PEER_MAX_RANKS]) {
#pragma unroll
    for (u32 q = 0; q < PEER_MAX_RANKS; q++) dst[q] = q < p.R ? peer_slot(p, p.bufs[q], p.r, e) : (float*)0;
}

// The all-reduce's exchange is a second area of each rank's buffer,
// after the two halves of slots: two halves again, each a slot per rank,
// each slot a pair of words per float of a plain slot — the value's bits
// and the epoch that wrote it — stored together in one 8-byte store
// (NCCL's LL protocol). A reader polls the pair until its epoch is the
// collective's: the value came with it, so no barrier, fence or flag is
// needed, and each element waits only for its own arrival. A half's
// pairs are rewritten two epochs after they were, under the same
// argument as the slots'; the area is zeroed when allocated and epochs
// start at 1, so no stale pair carries the current epoch.

// peer_ll is slot k of the pair area of buf's half for epoch e.
__device__ __forceinline__ uint2* peer_ll(const peer& p, float* buf, u32 k, u32 e) {
    return (uint2*)(buf + (size_t)2 * p.R * p.floats) + ((size_t)(e & 1) * p.R + k) * p.floats;
}

// peer_ll_put stores value v with epoch e in pair a, one 8-byte store
// (over NVLink where a is a peer's), which no cache keeps.
__device__ __forceinline__ void peer_ll_put(uint2* a, float v, u32 e) {
    asm volatile("st.volatile.global.v2.u32 [%0], {%1, %2};" ::"l"(a), "r"(__float_as_uint(v)), "r"(e) : "memory");
}

// peer_ll_get waits until pair a carries epoch e and returns its value;
// like peer_barrier it traps after PEER_TIMEOUT_NS without it.
__device__ __forceinline__ float peer_ll_get(const uint2* a, u32 e) {
    u32 v, f;
    unsigned long long start = 0, polls = 0;
    for (;;) {
        asm volatile("ld.volatile.global.v2.u32 {%0, %1}, [%2];" : "=r"(v), "=r"(f) : "l"(a) : "memory");
        if (f == e) return __uint_as_float(v);
        if (polls++ == 0) start = peer_clock();
        else if ((polls & 1023) == 0 && peer_clock() - start > PEER_TIMEOUT_NS) __trap();
    }
}

// peer_ll_load reads pair a as it is now, without waiting.
__device__ __forceinline__ uint2 peer_ll_load(const uint2* a) {
    uint2 v;
    asm volatile("ld.volatile.global.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(a) : "memory");
    return v;
}

// peer_ll_sum sets s[u], for the U indices i = i0 + u·step below n, to
// the sum in rank order of the pairs of epoch e at src + i of every
// rank's slot (p.floats pairs apart), waiting for each: a rank's U loads
// are in flight together, and only a pair not yet there is polled again.
template <int U>
__device__ __forceinline__ void peer_ll_sum(const peer& p, const uint2* src, size_t i0, size_t step, size_t n, u32 e, float s[U]) {
    for (u32 k = 0; k < p.R; k++) {
        const uint2* slot = src + (size_t)k * p.floats;
        uint2 a[U];
#pragma unroll
        for (int u = 0; u < U; u++) a[u] = i0 + u * step < n ? peer_ll_load(slot + i0 + u * step) : make_uint2(0, e);
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (a[u].y != e) a[u].x = __float_as_uint(peer_ll_get(slot + i0 + u * step, e));
            const float v = __uint_as_float(a[u].x);
            s[u] = k == 0 ? v : s[u] + v;
        }
    }
}

// peer_barrier returns once every block of every rank has called it for
// epoch e, with their pushes before it visible here. After the block's
// barrier, its first ranks threads release a flag on each rank at system
// scope, which orders the whole block's pushes before it (the barrier
// puts them before the release, and release is cumulative: the pattern
// of a grid-wide sync, one thread fencing for its block); the block's
// threads together acquire every rank's every block's flag on this rank.
__device__ __forceinline__ void peer_barrier(const peer& p, u32 e) {
    __syncthreads();
    if (p.signal) asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p.signal), "r"(e) : "memory");
    for (u32 t = threadIdx.x; t < p.R * gridDim.x; t += blockDim.x) {
        const u32* f = p.mine + t / gridDim.x * PEER_BLOCKS + t % gridDim.x;
        u32 v;
        unsigned long long start = peer_clock(), polls = 0;
        do {
            asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(f) : "memory");
            // A peer that never comes (its rank failed) would hold this
            // GPU forever, and the process with it: trap after
            // PEER_TIMEOUT_NS, so the replay fails instead.
            if ((++polls & 1023) == 0 && peer_clock() - start > PEER_TIMEOUT_NS) __trap();
        } while ((int)(v - e) < 0);
    }
    __syncthreads();
    if (threadIdx.x == 0) *p.epoch = e;
}
