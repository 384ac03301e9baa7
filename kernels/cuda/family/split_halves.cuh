// split_halves.cuh: T-CUDA's kernel family split_halves: each head's halves to
// a and b; grid (rows·heads·width/256).
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"

extern "C" __global__ void __launch_bounds__(256)
    NAME(const float* x, const u32* io, float* a, float* b, u32 heads, u32 width) {
    dep_sync();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)io[IO_ROWS] * heads * width) return;
    size_t hd = i / width, t = i % width;
    a[i] = x[2 * hd * width + t];
    b[i] = x[(2 * hd + 1) * width + t];
}
