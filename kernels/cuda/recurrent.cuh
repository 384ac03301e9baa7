// recurrent.cuh: what the recurrent families ssm_conv and
// gated_delta_net share.
#pragma once
#include "common.cuh"

// slot_leader tells whether row is its slot's first row of the step (no
// earlier active row has its slot): the block of that row then runs every
// row of the slot, in order, since a recurrent state advances row by row.
// The whole block calls it (it synchronizes).
__device__ __forceinline__ bool slot_leader(const u32* io, int row, u32 slot) {
    int hit = 0;
    for (int j = threadIdx.x; j < row; j += blockDim.x) hit |= io_row(io, j, ROW_SLOT) == slot;
    return !__syncthreads_or(hit);
}

// silu_f is ggml's SiLU as T-CUDA's swiglu takes it: x/(1 + expf(-x)), the
// exponential in double, rounded (T-CPU takes ggml's 16-lane polynomial
// over whole groups of 16 channels, a few ulp away).
__device__ __forceinline__ float silu_f(float x) { return x / (1.f + (float)exp(-(double)x)); }
