// swiglu.cuh: T-CUDA's kernel family swiglu: y = silu(gate)·up; grid
// (rows·cols/256).
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"

extern "C" __global__ void __launch_bounds__(256)
    NAME(const float* gate, const float* up, const u32* io, float* y, u32 cols) {
    dep_sync();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)io[IO_ROWS] * cols) return;
    float v = gate[i];
    y[i] = v / (1.f + (float)exp(-(double)v)) * up[i];
}
