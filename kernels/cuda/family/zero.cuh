// zero.cuh: T-CUDA's kernel family zero: y = 0 over the active rows; grid
// (rows·cols/256).
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"

extern "C" __global__ void __launch_bounds__(256) NAME(float* y, const u32* io, u32 cols) {
    dep_sync();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)io[IO_ROWS] * cols) y[i] = 0.f;
}
