// moe_add_bias.cuh: T-CUDA's kernel family moe_add_bias: x[row, u, :] +=
// b[e(row, u), :]; grid (rows·n_used·f/256).
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"

extern "C" __global__ void __launch_bounds__(256)
    NAME(float* x, const float* b, const u32* route, const u32* io, u32 f, u32 n_used) {
    dep_sync();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)io[IO_ROWS] * n_used * f) return;
    size_t item = i / f, j = i % f;
    x[i] += b[(size_t)route[2 * item] * f + j];
}
