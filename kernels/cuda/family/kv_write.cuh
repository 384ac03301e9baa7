// kv_write.cuh: T-CUDA's kernel family kv_write: store each row's K and V as
// F16; grid (rows).
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"
#include "../kv.cuh"

extern "C" __global__ void __launch_bounds__(256)
    NAME(const float* k, const float* v, const u32* io, u8* kv, u32 layer, u32 kv_dim, u32 n_layer) {
    dep_sync();
    int row = blockIdx.x;
    if (row >= (int)io[IO_ROWS]) return;
    int slot = io_row(io, row, ROW_SLOT), pos = io_row(io, row, ROW_POS);
    u32 page = io_page(io, slot, pos);
    __half* dk = kv_at(kv, page, layer, n_layer, kv_dim, 0, pos % KV_PAGE_TOKENS);
    __half* dv = kv_at(kv, page, layer, n_layer, kv_dim, 1, pos % KV_PAGE_TOKENS);
    for (int j = threadIdx.x; j < (int)kv_dim; j += blockDim.x) {
        dk[j] = __float2half_rn(k[(size_t)row * kv_dim + j]);
        dv[j] = __float2half_rn(v[(size_t)row * kv_dim + j]);
    }
}
