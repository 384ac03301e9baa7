// rope_kv_write.cuh: T-CUDA's kernel family rope_kv_write: rope of q in place,
// rope of k into the cache with v; grid (rows, heads/8).
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"
#include "../rope_table.cuh"
#include "../kv.cuh"

// Block (row, y) handles heads 8y..8y+7 of its row, a warp a head, after
// one rope table for them (a block per (row, head) built the table again
// for every head: at 64 rows of the llama 7B shape, 46 µs a call). Head h
// is Q head h for h < n_head, else KV head h-n_head (its K roped, its V as
// is). The arithmetic is rope's (same table, same expressions) and
// kv_write's rounding (or, in a quantized cache's instances, its
// rotation and Q8_0 blocks); k itself is not written.
extern "C" __global__ void __launch_bounds__(256) NAME(float* q, const float* k, const float* v, const u32* io, u8* kv,
    u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 n_rot, u32 neox, u32 base_bits, u32 scale_bits) {
    int row = blockIdx.x, lane = threadIdx.x & 31;
    int pos = io_row(io, row, ROW_POS), slot = io_row(io, row, ROW_SLOT);
    int pairs = n_rot / 2;
    __shared__ float cs[256], sn[256];
#ifdef KV_QUANT
    __shared__ float ks[8][512]; // each warp's roped K head
#endif
    rope_table(pos, n_rot, base_bits, scale_bits, cs, sn); // the request table's: before dep_sync
    dep_sync();
    if (row >= (int)io[IO_ROWS]) return;
    int h = blockIdx.y * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (h >= (int)(n_head + n_head_kv)) return;
    if (h < (int)n_head) {
        float* x = q + ((size_t)row * n_head + h) * head_dim;
        for (int p = lane; p < pairs; p += 32) rope_pair(x, p, pairs, neox, cs[p], sn[p]);
        return;
    }
    h -= n_head;
    u32 kv_dim = n_head_kv * head_dim;
    u32 page = io_page(io, slot, pos);
#ifdef KV_QUANT
    // A quantized cache: the head's roped K into the warp's row of ks,
    // then K and V rotated and quantized as kv_write's (kvq_store).
    if (head_dim > 512 || head_dim % kvq_run(0) != 0 || head_dim % kvq_run(1) != 0) return;
    float* kh = ks[threadIdx.x >> 5];
    const float* xq = k + (size_t)row * kv_dim + h * head_dim;
    for (int d = lane; d < (int)head_dim; d += 32) kh[d] = rope_elem(xq, d, n_rot, neox, cs, sn);
    __syncwarp();
    size_t hofs = (size_t)h * kvq_row_bytes(head_dim);
    kvq_store(kvq_at(kv, page, layer, n_layer, kv_dim, 0, pos % KV_PAGE_TOKENS) + hofs, kh, head_dim, KV_RK);
    kvq_store(kvq_at(kv, page, layer, n_layer, kv_dim, 1, pos % KV_PAGE_TOKENS) + hofs, v + (size_t)row * kv_dim + h * head_dim,
        head_dim, KV_RV);
    return;
#endif
    __half* dk = kv_at(kv, page, layer, n_layer, kv_dim, 0, pos % KV_PAGE_TOKENS) + h * head_dim;
    __half* dv = kv_at(kv, page, layer, n_layer, kv_dim, 1, pos % KV_PAGE_TOKENS) + h * head_dim;
    const float* x = k + (size_t)row * kv_dim + h * head_dim;
    const float* vr = v + (size_t)row * kv_dim + h * head_dim;
    for (int d = lane; d < (int)head_dim; d += 32) {
        dk[d] = __float2half_rn(rope_elem(x, d, n_rot, neox, cs, sn));
        dv[d] = __float2half_rn(vr[d]);
    }
}
