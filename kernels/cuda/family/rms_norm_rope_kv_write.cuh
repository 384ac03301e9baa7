// rms_norm_rope_kv_write.cuh: T-CUDA's kernel family rms_norm_rope_kv_write:
// per-head norm and rope of q in place, of k into the cache with v; grid
// (rows, heads/8).
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"
#include "../rope_table.cuh"
#include "../kv.cuh"

// Block (row, y) handles heads 8y..8y+7 of its row, a warp a head, after
// one rope table for them (a block per (row, head) rebuilt it per head,
// and a prefill step's thousands of small blocks, each waiting on its
// barriers, cost more than their arithmetic). A head is normalized with
// its norm weight (q_norm for Q heads, k_norm for K heads): the norm's
// arithmetic is rms_norm's (sum of squares in double, then scale and
// weight), the rotation rope's, the rounding kv_write's (or its Hadamard
// rotation and Q8_0 blocks, in a quantized cache's instances). K is normalized
// and rotated in place (the unfused sequence leaves it so; nothing reads
// it after).
extern "C" __global__ void __launch_bounds__(256) NAME(float* q, float* k, const float* v, const float* wq, const float* wk,
    const u32* io, u8* kv, u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 n_rot, u32 neox,
    u32 base_bits, u32 scale_bits, u32 eps_bits) {
    int row = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int pos = io_row(io, row, ROW_POS), slot = io_row(io, row, ROW_SLOT);
    __shared__ float cs[256], sn[256], xs[8][512];
    rope_table(pos, n_rot, base_bits, scale_bits, cs, sn); // the request table's: before dep_sync
    dep_sync();
    if (row >= (int)io[IO_ROWS] || head_dim > 512) return;
    u32 kv_dim = n_head_kv * head_dim;
    float eps = __uint_as_float(eps_bits);
    float* xn = xs[warp];
    int h = blockIdx.y * (blockDim.x >> 5) + warp;
    if (h < (int)(n_head + n_head_kv)) {
        bool isq = h < (int)n_head;
        float* x = isq ? q + ((size_t)row * n_head + h) * head_dim : k + (size_t)row * kv_dim + (h - n_head) * head_dim;
        const float* w = isq ? wq : wk;
        double ss = 0;
        for (int d = lane; d < (int)head_dim; d += 32) ss += (double)(x[d] * x[d]);
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        float scale = 1.f / sqrtf((float)(ss / (double)head_dim) + eps);
        for (int d = lane; d < (int)head_dim; d += 32) xn[d] = (x[d] * scale) * w[d];
        __syncwarp();
#ifdef KV_QUANT
        // A quantized cache: K normalized and roped in place, then read
        // back by the warp and, with V, rotated and quantized as
        // kv_write's (kvq_store).
        if (head_dim % kvq_run(0) != 0 || head_dim % kvq_run(1) != 0) return;
        for (int d = lane; d < (int)head_dim; d += 32) x[d] = rope_elem(xn, d, n_rot, neox, cs, sn);
        if (isq) return;
        __syncwarp();
        int hk = h - n_head;
        u32 page = io_page(io, slot, pos);
        size_t hofs = (size_t)hk * kvq_row_bytes(head_dim);
        kvq_store(kvq_at(kv, page, layer, n_layer, kv_dim, 0, pos % KV_PAGE_TOKENS) + hofs, x, head_dim, KV_RK);
        kvq_store(kvq_at(kv, page, layer, n_layer, kv_dim, 1, pos % KV_PAGE_TOKENS) + hofs, v + (size_t)row * kv_dim + hk * head_dim,
            head_dim, KV_RV);
        return;
#endif
        __half *dk = nullptr, *dv = nullptr;
        const float* vr = nullptr;
        if (!isq) {
            int hk = h - n_head;
            u32 page = io_page(io, slot, pos);
            dk = kv_at(kv, page, layer, n_layer, kv_dim, 0, pos % KV_PAGE_TOKENS) + hk * head_dim;
            dv = kv_at(kv, page, layer, n_layer, kv_dim, 1, pos % KV_PAGE_TOKENS) + hk * head_dim;
            vr = v + (size_t)row * kv_dim + hk * head_dim;
        }
        for (int d = lane; d < (int)head_dim; d += 32) {
            float o = rope_elem(xn, d, n_rot, neox, cs, sn);
            x[d] = o;
            if (!isq) {
                dk[d] = __float2half_rn(o);
                dv[d] = __float2half_rn(vr[d]);
            }
        }
    }
}
