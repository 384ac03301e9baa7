// embed.cuh: T-CUDA's kernel family embed: y[row] = table[token(row)].
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY, WT and NAME, then includes this file.
#include "../typed.cuh"

extern "C" __global__ void __launch_bounds__(256) NAME(const u8* table, const u32* io, float* y, u32 cols) {
    dep_sync();
    int row = blockIdx.x;
    if (row >= (int)io[IO_ROWS]) return;
    const u8* r = table + (size_t)io_row(io, row, ROW_TOKEN) * row_bytes<WT>(cols);
    for (int c = threadIdx.x; c < (int)cols; c += blockDim.x) y[(size_t)row * cols + c] = deq<WT>(r, c);
}
