// kv_write.cuh: T-CUDA's kernel family kv_write: store each row's K and V as
// F16, or as Q8_0 or FP8 blocks in a quantized cache's instances (kv.cuh's
// KV_QUANT); grid (rows).
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"
#include "../kv.cuh"

#ifndef KV_QUANT
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
#else
// A quantized cache: warp w of the block rotates (KV_RK, KV_RV) and
// quantizes runs w, w + 8, … of the row's K, then of its V, with T-CPU's
// arithmetic (kvq_store), so the cache holds T-CPU's bytes. A row whose
// width is no whole number of runs (which zrtc never builds) is left
// unwritten rather than overrun.
extern "C" __global__ void __launch_bounds__(256)
    NAME(const float* k, const float* v, const u32* io, u8* kv, u32 layer, u32 kv_dim, u32 n_layer) {
    dep_sync();
    int row = blockIdx.x, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (row >= (int)io[IO_ROWS] || kv_dim % kvq_run(0) != 0 || kv_dim % kvq_run(1) != 0) return;
    int slot = io_row(io, row, ROW_SLOT), pos = io_row(io, row, ROW_POS);
    u32 page = io_page(io, slot, pos);
    u8* dk = kvq_at(kv, page, layer, n_layer, kv_dim, 0, pos % KV_PAGE_TOKENS);
    u8* dv = kvq_at(kv, page, layer, n_layer, kv_dim, 1, pos % KV_PAGE_TOKENS);
    const float* kr = k + (size_t)row * kv_dim;
    const float* vr = v + (size_t)row * kv_dim;
    for (int r = warp * kvq_run(0); r < (int)kv_dim; r += nw * kvq_run(0))
        kvq_store(dk + kvq_row_bytes(r), kr + r, kvq_run(0), KV_RK);
    for (int r = warp * kvq_run(1); r < (int)kv_dim; r += nw * kvq_run(1))
        kvq_store(dv + kvq_row_bytes(r), vr + r, kvq_run(1), KV_RV);
}
#endif
