// moe_gate_up.cuh: T-CUDA's kernel family moe_gate_up: gate/up of each row's
// experts; grid (f/MM_WARPS, rows·n_used).
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY, WT and NAME, then includes this file.
#include "../typed.cuh"

extern "C" __global__ void __launch_bounds__(256) NAME(const float* x, const u8* w_gate, const u8* w_up,
    const u32* route, const u32* io, float* gate, float* up, u32 k, u32 f, u32 n_used) {
    dep_sync();
    extern __shared__ float xs[];
    int row = blockIdx.y / n_used, u = blockIdx.y % n_used;
    if (row >= (int)io[IO_ROWS]) return;
    round_x<VT>(x + (size_t)row * k, xs, k);
    int j = blockIdx.x * MM_WARPS + (threadIdx.x >> 5);
    if (j >= (int)f) return;
    size_t e = route[2 * ((size_t)row * n_used + u)];
    size_t off = (e * f + j) * row_bytes<WT>(k);
    float g = dot_row<WT>(w_gate + off, xs, k);
    float p = dot_row<WT>(w_up + off, xs, k);
    if ((threadIdx.x & 31) == 0) {
        size_t item = ((size_t)row * n_used + u) * f + j;
        gate[item] = g;
        up[item] = p;
    }
}
