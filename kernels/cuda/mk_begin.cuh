// mk_begin.cuh: the virtual launch of the persistent decode kernel
// (megakernel.cu, docs/design/megakernel.md §3.1). megakernel.cu includes
// this first, then the family sources it serves, then megakernel.cuh,
// which ends what this begins.
//
// A family's kernels read their place from the launch: blockIdx,
// gridDim, blockDim, threadIdx, and synchronise with __syncthreads. Here
// those names become the virtual block that a megakernel task runs: the
// block and grid of the graph path's launch of the dispatch (set by the
// task loop in mk_v), the thread's place in that block taken from its
// place in the persistent block of MK_THREADS threads (x fastest, as the
// hardware numbers a block's threads, so warps are made of the same
// threads), and a barrier over the virtual block's threads only (named
// barrier 1; the persistent block's other threads wait at barrier 0 in the
// task loop). __global__ and __launch_bounds__ become an inline device
// function's and nothing, so each family's entries compile unchanged into device
// functions that the task loop calls with a dispatch's parameters: the
// task runs the very code of the graph path's launch, block by block,
// with the same blockDim and gridDim, and so writes the same bits.
//
// What a family must not do for this to hold (every family that
// megakernel.cu includes is checked for it): a barrier after a return
// that not every thread of its block takes (the graph path's exited
// threads leave the barrier; a virtual block's returned threads do not
// reach it), and loads of activations through the read-only path
// (__ldg, const __restrict__), which is not coherent with the other
// blocks' writes during one kernel. Weights and the request table, which
// no task writes, may take it.
#pragma once
#include <stdint.h>
#include <cuda_fp16.h>
#include <utility>

// MK_THREADS is the persistent block's threads: the largest block a family
// the megakernel serves launches (MMV_THREADS, FA_MAX_WARPS warps).
// argmax's 1024-thread blocks run as 512-thread ones, whose first largest
// logit is the same.
#define MK_THREADS 512

// MkVirt is the virtual block a task runs: its place in the dispatch's
// grid, the grid, the block, and the block's threads (a multiple of 32).
struct MkVirt {
    uint3 bid, grid, block;
    unsigned nthreads;
};

// mk_v is the block's current virtual block, written by thread 0 between
// barriers in the task loop.
__shared__ MkVirt mk_v;

__device__ __forceinline__ unsigned mk_flat_tid() {
    unsigned t;
    asm("mov.u32 %0, %%tid.x;" : "=r"(t));
    return t;
}

// mk_tid holds each thread's place in the current virtual block, which
// the task loop writes (each thread its own) before the block runs: one
// shared load where threadIdx is read, not two divisions.
__shared__ uint3 mk_tid[MK_THREADS];

// mk_vtid is the thread's place in the virtual block.
__device__ __forceinline__ uint3 mk_vtid() { return mk_tid[mk_flat_tid()]; }

// mk_vsync is __syncthreads for the virtual block's threads.
__device__ __forceinline__ void mk_vsync() { asm volatile("bar.sync 1, %0;" ::"r"(mk_v.nthreads) : "memory"); }

#pragma push_macro("__global__")
#pragma push_macro("__launch_bounds__")
#undef __global__
#undef __launch_bounds__
#ifdef MK_NOINLINE
// Each entry a function of its own (nvcc -DMK_NOINLINE to try): registers
// are allocated per family instead of for the union of all the inlined
// ones, at the cost of a call per virtual block.
#define __global__ __device__ __noinline__
#else
#define __global__ __device__ inline // an entry no task calls is not even emitted (the tile entries' static shared memory)
#endif
#define __launch_bounds__(...)
#define threadIdx (mk_vtid())
#define blockIdx (mk_v.bid)
#define gridDim (mk_v.grid)
#define blockDim (mk_v.block)
#define __syncthreads() mk_vsync()

#include "common.cuh"
#include "families.cuh"

// mk_call calls a family's entry (now a device function) with a
// dispatch's parameters as the tier lays them out for a launch: an 8-byte
// slot each, a pointer or a u32 in the low half.
template <typename T> struct MkArg {
    static __device__ __forceinline__ T get(unsigned long long v) { return (T)v; }
};
template <typename T> struct MkArg<T*> {
    static __device__ __forceinline__ T* get(unsigned long long v) { return (T*)(uintptr_t)v; }
};
template <typename... A, size_t... I>
__device__ __forceinline__ void mk_call_at(void (*f)(A...), const unsigned long long* p, std::index_sequence<I...>) {
    f(MkArg<A>::get(p[I])...);
}
template <typename... A> __device__ __forceinline__ void mk_call(void (*f)(A...), const unsigned long long* p) {
    mk_call_at(f, p, std::index_sequence_for<A...>{});
}
