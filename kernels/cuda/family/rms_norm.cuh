// rms_norm.cuh: T-CUDA's kernel family rms_norm: the block normalizes each
// group of a row in turn (w may be null); grid (rows).
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"

extern "C" __global__ void __launch_bounds__(256)
    NAME(const float* x, const float* w, const u32* io, float* y, u32 cols, u32 group, u32 eps_bits) {
    dep_sync();
    int row = blockIdx.x;
    if (row >= (int)io[IO_ROWS]) return;
    float eps = __uint_as_float(eps_bits);
    int n = group, nt = blockDim.x;
    for (int g = 0; g < (int)(cols / group); g++) {
        const float* xs = x + (size_t)row * cols + (size_t)g * group;
        float* ys = y + (size_t)row * cols + (size_t)g * group;
        float scale = rms_scale(xs, n, eps);
        for (int i0 = threadIdx.x; i0 < n; i0 += 8 * nt) {
            float v[8], wv[8];
#pragma unroll
            for (int u = 0; u < 8; u++) {
                int i = i0 + u * nt;
                v[u] = i < n ? xs[i] : 0.f;
                wv[u] = i < n ? (w ? w[i] : 1.f) : 0.f; // no weight: ×1, exact
            }
#pragma unroll
            for (int u = 0; u < 8; u++)
                if (i0 + u * nt < n) ys[i0 + u * nt] = (v[u] * scale) * wv[u];
        }
        __syncthreads(); // y may alias x
    }
}
