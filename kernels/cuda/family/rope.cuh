// rope.cuh: T-CUDA's kernel family rope: rotate pairs by pos·θ_i; grid (rows).
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"
#include "../rope_table.cuh"

extern "C" __global__ void __launch_bounds__(256) NAME(float* x, const u32* io, u32 n_head, u32 head_dim,
    u32 n_rot, u32 neox, u32 base_bits, u32 scale_bits) {
    int row = blockIdx.x;
    int pairs = n_rot / 2;
    __shared__ float cs[256], sn[256];
    rope_table(io_row(io, row, ROW_POS), n_rot, base_bits, scale_bits, cs, sn); // the request table's: before dep_sync
    dep_sync();
    if (row >= (int)io[IO_ROWS]) return;
    for (int it = threadIdx.x; it < (int)n_head * pairs; it += blockDim.x) {
        int h = it / pairs, p = it % pairs;
        rope_pair(x + ((size_t)row * n_head + h) * head_dim, p, pairs, neox, cs[p], sn[p]);
    }
}
