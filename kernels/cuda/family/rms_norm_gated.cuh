// rms_norm_gated.cuh: T-CUDA's kernel family rms_norm_gated: y = rms_norm(x
// per group)·w·silu(z); grid (rows, cols/group).
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"

extern "C" __global__ void __launch_bounds__(256)
    NAME(const float* x, const float* w, const float* z, const u32* io, float* y, u32 cols, u32 group, u32 eps_bits) {
    dep_sync();
    int row = blockIdx.x;
    if (row >= (int)io[IO_ROWS]) return;
    size_t o = (size_t)row * cols + (size_t)blockIdx.y * group;
    float scale = rms_scale(x + o, group, __uint_as_float(eps_bits));
    for (int j = threadIdx.x; j < (int)group; j += blockDim.x) {
        float g = z[o + j];
        float v = (x[o + j] * scale) * w[j];
        y[o + j] = v * (g / (1.f + (float)exp(-(double)g)));
    }
}
