// moe_down_acc.cuh: T-CUDA's kernel family moe_down_acc: y[row] += sum_u
// weight_u · (W_e(u)·h[row,u] + bias_e(u)); grid (n/MM_WARPS, rows).
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY, WT and NAME, then includes this file.
#include "../typed.cuh"

extern "C" __global__ void __launch_bounds__(256) NAME(const float* h, const u8* w, const float* bias, const u32* route,
    const u32* io, float* y, u32 f, u32 n, u32 n_used) {
    dep_sync();
    extern __shared__ float xs[];
    int row = blockIdx.y;
    if (row >= (int)io[IO_ROWS]) return;
    for (int u = 0; u < (int)n_used; u++)
        round_x<VT>(h + ((size_t)row * n_used + u) * f, xs + (size_t)u * f, f);
    int j = blockIdx.x * MM_WARPS + (threadIdx.x >> 5);
    if (j >= (int)n) return;
    float sum = 0.f;
    for (int u = 0; u < (int)n_used; u++) {
        const u32* rr = route + 2 * ((size_t)row * n_used + u);
        float wt = __uint_as_float(rr[1]);
        float d = dot_row<WT>(w + ((size_t)rr[0] * n + j) * row_bytes<WT>(f), xs + (size_t)u * f, f);
        if (bias) d += bias[(size_t)rr[0] * n + j]; // before the weight, as ggml_add_id
        sum += wt * d;
    }
    if ((threadIdx.x & 31) == 0) y[(size_t)row * n + j] += sum;
}
