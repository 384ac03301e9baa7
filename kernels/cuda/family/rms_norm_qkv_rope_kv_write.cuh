// rms_norm_qkv_rope_kv_write.cuh: T-CUDA's kernel families rms_norm_qkv_rope_kv_write.
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY, WT and NAME, then includes this file.
// rms_norm_qkv (no bias) with rope_kv_write in its epilogue, for one-row
// decode steps over an F16 cache with rotation pairs of adjacent
// features (launch.go refuses NeoX pairs and more rows): the Q, K and V
// features of W_qkv·norm(x) come in pairs (2i, 2i+1) to one thread
// (fused_norm_pairs), which rotates a Q pair into q, a K pair into the
// cache, and stores a V pair in the cache, with rope_kv_write's table
// and expressions (rope_table.cuh) and kv_write's rounding: the bits of
// rms_norm_qkv then rope_kv_write, without the second launch. K and V
// themselves are not written (nothing else reads them).
#include "../fused_norm.cuh"
#include "../rope_table.cuh"
#include "../kv.cuh"

struct QkvRopePair {
    float* q;
    u8* kv;
    const u32* io;
    int n_q, n_kv, head_dim, n_rot;
    u32 layer, n_layer;
    float theta_scale, fscale; // rope_table's
    static constexpr bool ON = true;
    __device__ __forceinline__ int row(int j, int) const { return j; }
    __device__ __forceinline__ void pair(const MmOut&, size_t r, int j, float a, float b) const {
        const int seg = j < n_q ? 0 : j < n_q + n_kv ? 1 : 2; // Q, K, V
        const int f = seg == 0 ? j : seg == 1 ? j - n_q : j - n_q - n_kv;
        const int d = f % head_dim, pos = io_row(io, (int)r, ROW_POS);
        if (seg < 2 && d < n_rot) {
            // rope_table's cos and sin of pair d/2, then rope_pair's
            // (rope_elem's) expressions.
            float theta = (float)pos;
            for (int p = 0; p < d / 2; p++) theta *= theta_scale;
            float t = theta * fscale;
            double sd, cd;
            sincos((double)t, &sd, &cd);
            const float c = (float)cd, s = (float)sd, x0 = a, x1 = b;
            a = x0 * c - x1 * s;
            b = x0 * s + x1 * c;
        }
        if (seg == 0) {
            q[r * n_q + f] = a;
            q[r * n_q + f + 1] = b;
            return;
        }
        const int slot = io_row(io, (int)r, ROW_SLOT);
        __half* dst = kv_at(kv, io_page(io, slot, pos), layer, n_layer, n_kv, seg - 1, pos % KV_PAGE_TOKENS) + f;
        dst[0] = __float2half_rn(a);
        dst[1] = __float2half_rn(b);
    }
};

extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMV_BLOCKS)
    NAME(const float* x, const float* w_norm, const u8* w_qkv, const u32* io, float* q, u8* kv, u32 layer, u32 k, u32 n_q, u32 n_kv,
        u32 eps_bits, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 n_rot, u32 neox, u32 base_bits, u32 scale_bits) {
    QkvRopePair pe;
    pe.q = q, pe.kv = kv, pe.io = io;
    pe.n_q = (int)n_q, pe.n_kv = (int)n_kv, pe.head_dim = (int)head_dim, pe.n_rot = (int)n_rot;
    pe.layer = layer, pe.n_layer = n_layer;
    pe.theta_scale = (float)pow((double)__uint_as_float(base_bits), -2.0 / (double)n_rot);
    pe.fscale = __uint_as_float(scale_bits);
    fused_norm_pairs<WT, QkvRopePair>(x, w_norm, w_qkv, io, (int)k, (int)(n_q + 2 * n_kv), mm_out(q, (int)n_q, nullptr), pe,
        __uint_as_float(eps_bits));
}
