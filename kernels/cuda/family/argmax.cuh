// argmax.cuh: T-CUDA's kernel family argmax: tokens[slot] = first largest
// logit, rows that want logits; grid (rows), 1024 threads.
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"

// A block of 1024 threads a row: a single-row step's argmax is one block,
// whose loads in flight bound it (a vocabulary of 152k is 600 KB).
extern "C" __global__ void __launch_bounds__(1024) NAME(const float* logits, const u32* io, u32* tokens, u32 n_vocab) {
    dep_sync();
    __shared__ float bv[32];
    __shared__ int bi[32];
    int row = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (row >= (int)io[IO_ROWS] || !(io_row(io, row, ROW_FLAGS) & ROW_WANTS_LOGITS)) return;
    int slot = io_row(io, row, ROW_SLOT);
    const float* l = logits + (size_t)slot * n_vocab;
    float best = -INFINITY;
    int at = -1, tail = 0;
    if (((size_t)l & 15) == 0) { // float4 loads, several in flight; indices still rise per thread
        int n4 = n_vocab / 4;
        tail = 4 * n4;
        const float4* l4 = (const float4*)l;
#pragma unroll 4
        for (int i = threadIdx.x; i < n4; i += blockDim.x) {
            float4 v = l4[i];
            if (at < 0 || v.x > best) best = v.x, at = 4 * i;
            if (v.y > best) best = v.y, at = 4 * i + 1;
            if (v.z > best) best = v.z, at = 4 * i + 2;
            if (v.w > best) best = v.w, at = 4 * i + 3;
        }
    }
    for (int j = tail + threadIdx.x; j < (int)n_vocab; j += blockDim.x)
        if (at < 0 || l[j] > best) best = l[j], at = j;
    for (int o = 16; o > 0; o >>= 1) {
        float b2 = __shfl_xor_sync(0xffffffffu, best, o);
        int a2 = __shfl_xor_sync(0xffffffffu, at, o);
        if (a2 >= 0 && (at < 0 || b2 > best || (b2 == best && a2 < at))) best = b2, at = a2;
    }
    if (lane == 0) bv[warp] = best, bi[warp] = at;
    __syncthreads();
    if (threadIdx.x != 0) return;
    for (int w = 1; w < (int)(blockDim.x >> 5); w++)
        if (bi[w] >= 0 && (at < 0 || bv[w] > best || (bv[w] == best && bi[w] < at))) best = bv[w], at = bi[w];
    tokens[slot] = at;
}
