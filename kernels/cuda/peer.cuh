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
// every collective runs PEER_BLOCKS blocks (at most that many: the flags
// have room for no more), so the blocks' counts agree.
#pragma once
#include "common.cuh"

#define PEER_MAX_RANKS 8
#define PEER_BLOCKS 16
#define PEER_THREADS 512

// peer_comm is runtime/cuda's peerDesc, byte for byte.
struct peer_comm {
    unsigned long long slot_bytes;  // one rank's slot in a half
    u32 rank, ranks;
    float* bufs[PEER_MAX_RANKS];    // each rank's exchange buffer
    u32* flags[PEER_MAX_RANKS];     // each rank's flags: [from rank][block]
    u32* epoch;                     // this rank's per-block epochs
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

// peer_begin counts the block's epoch and returns it; the caller has
// passed dep_sync (the previous kernel, maybe the previous collective,
// has finished).
__device__ __forceinline__ u32 peer_begin(const peer_comm* pc) {
    __shared__ u32 e;
    if (threadIdx.x == 0) {
        e = pc->epoch[blockIdx.x] + 1;
        pc->epoch[blockIdx.x] = e;
    }
    __syncthreads();
    return e;
}

// peer_slot is slot k of rank q's half for epoch e.
__device__ __forceinline__ float* peer_slot(const peer_comm* pc, u32 q, u32 k, u32 e) {
    size_t floats = pc->slot_bytes / 4;
    return pc->bufs[q] + ((size_t)(e & 1) * pc->ranks + k) * floats;
}

// peer_slots fills dst with slot `rank` of every rank's half for epoch
// e (the places this rank pushes to), 0 past the set's ranks; unrolled
// over PEER_MAX_RANKS so dst stays in registers.
__device__ __forceinline__ void peer_slots(const peer_comm* pc, u32 e, float* dst[PEER_MAX_RANKS]) {
#pragma unroll
    for (u32 q = 0; q < PEER_MAX_RANKS; q++) dst[q] = q < pc->ranks ? peer_slot(pc, q, pc->rank, e) : (float*)0;
}

// peer_barrier returns once every block of every rank has called it for
// epoch e, with their pushes before it visible here. After the block's
// barrier, its first ranks threads release a flag on each rank at system
// scope, which orders the whole block's pushes before it (the barrier
// puts them before the release, and release is cumulative: the pattern
// of a grid-wide sync, one thread fencing for its block); the block's
// threads together acquire every rank's every block's flag on this rank.
__device__ __forceinline__ void peer_barrier(const peer_comm* pc, u32 e) {
    const u32 R = pc->ranks, r = pc->rank;
    __syncthreads();
    if (threadIdx.x < R) {
        u32* f = pc->flags[threadIdx.x] + r * PEER_BLOCKS + blockIdx.x;
        asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(f), "r"(e) : "memory");
    }
    for (u32 t = threadIdx.x; t < R * gridDim.x; t += blockDim.x) {
        const u32* f = pc->flags[r] + t / gridDim.x * PEER_BLOCKS + t % gridDim.x;
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
}
