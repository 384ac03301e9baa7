// argmax.cuh: T-CUDA's kernel family argmax: tokens[slot] = first largest
// logit, rows that want logits; grid (rows), 1024 threads.
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"

// argmax_allowed is the first largest of l[0..n_vocab) among the tokens
// whose bit is set in mask (every token where mask is null), -1 where none
// is: a block of 1024 threads a row, so a single-row step's argmax is one
// block, whose loads in flight bound it (a vocabulary of 152k is 600 KB).
// The mask is tested per float4, whose four bits share a word.
__device__ __forceinline__ int argmax_allowed(const float* l, const u32* mask, u32 n_vocab) {
    __shared__ float bv[32];
    __shared__ int bi[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float best = -INFINITY;
    int at = -1, tail = 0;
    if (((size_t)l & 15) == 0) { // float4 loads, several in flight; indices still rise per thread
        int n4 = n_vocab / 4;
        tail = 4 * n4;
        const float4* l4 = (const float4*)l;
#pragma unroll 4
        for (int i = threadIdx.x; i < n4; i += blockDim.x) {
            u32 m = mask ? (mask[i >> 3] >> (4 * (i & 7))) & 15u : 15u;
            if (m == 0) continue;
            float4 v = l4[i];
            if ((m & 1) && (at < 0 || v.x > best)) best = v.x, at = 4 * i;
            if ((m & 2) && (at < 0 || v.y > best)) best = v.y, at = 4 * i + 1;
            if ((m & 4) && (at < 0 || v.z > best)) best = v.z, at = 4 * i + 2;
            if ((m & 8) && (at < 0 || v.w > best)) best = v.w, at = 4 * i + 3;
        }
    }
    for (int j = tail + threadIdx.x; j < (int)n_vocab; j += blockDim.x)
        if ((!mask || (mask[j >> 5] >> (j & 31)) & 1u) && (at < 0 || l[j] > best)) best = l[j], at = j;
    for (int o = 16; o > 0; o >>= 1) {
        float b2 = __shfl_xor_sync(0xffffffffu, best, o);
        int a2 = __shfl_xor_sync(0xffffffffu, at, o);
        if (a2 >= 0 && (at < 0 || b2 > best || (b2 == best && a2 < at))) best = b2, at = a2;
    }
    if (lane == 0) bv[warp] = best, bi[warp] = at;
    __syncthreads();
    if (threadIdx.x != 0) return -1;
    for (int w = 1; w < (int)(blockDim.x >> 5); w++)
        if (bi[w] >= 0 && (at < 0 || bv[w] > best || (bv[w] == best && bi[w] < at))) best = bv[w], at = bi[w];
    return at;
}

extern "C" __global__ void __launch_bounds__(1024) NAME(const float* logits, const u32* io, u32* tokens, u32 n_vocab) {
    dep_sync();
    int row = blockIdx.x;
    if (row >= (int)io[IO_ROWS] || !(io_row(io, row, ROW_FLAGS) & ROW_WANTS_LOGITS)) return;
    int slot = io_row(io, row, ROW_SLOT);
    int at = argmax_allowed(logits + (size_t)slot * n_vocab, nullptr, n_vocab);
    if (threadIdx.x == 0) tokens[slot] = at;
}

// NAME_masked is the greedy choice of constrained rows, launched by the
// tier after a step's graph (not part of it): block b takes slot
// slots[b]'s largest logit among the tokens its mask allows (mask words
// of n_vocab bits, one run of words per block), -1 where none is.
extern "C" __global__ void __launch_bounds__(1024)
    CAT(NAME, _masked)(const float* logits, const u32* slots, const u32* masks, u32* tokens, u32 n_vocab, u32 words) {
    int slot = slots[blockIdx.x];
    int at = argmax_allowed(logits + (size_t)slot * n_vocab, masks + (size_t)blockIdx.x * words, n_vocab);
    if (threadIdx.x == 0) tokens[slot] = at;
}
