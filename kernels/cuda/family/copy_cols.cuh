// copy_cols.cuh: T-CUDA's kernel family copy_cols: y[r] = x[r][off..off+cols)
// of rows of stride; grid (rows·cols/256).
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"

extern "C" __global__ void __launch_bounds__(256) NAME(const float* x, const u32* io, float* y, u32 cols, u32 off, u32 stride) {
    dep_sync();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)io[IO_ROWS] * cols) return;
    size_t r = i / cols, c = i % cols;
    y[i] = x[r * stride + off + c];
}
