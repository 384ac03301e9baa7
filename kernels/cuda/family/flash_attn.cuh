// flash_attn.cuh: T-CUDA's kernel family flash_attn (its body is fa.cuh's,
// or faq.cuh's for a quantized cache).
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"
#include "../fa.cuh"

#ifndef CAT
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#endif
// The tensor-core prefill tile's constants and fragments (flash_attn_tile,
// below).
#define FAT_WARPS 4
#define FAT_NONE 0x7fffffff // no slot
#define FAT_ROWS (16 * FAT_WARPS) // rows a block; fatRows in launch.go

__device__ __forceinline__ void mma_f16(float* c, const u32* a, u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ u32 h2_bits(__half2 h) { return *(u32*)&h; }

__device__ __forceinline__ u32 pack_f16(float lo, float hi) { return h2_bits(__floats2half2_rn(lo, hi)); }

// ldsm4 loads four 8×8 matrices of halves from shared memory, lane L
// giving the address of row L%8 of matrix L/8 (trans: transposed), as
// mma's B fragments.
__device__ __forceinline__ void ldsm4(u32* r, const __half* p) {
    u32 a = (u32)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void ldsm4t(u32* r, const __half* p) {
    u32 a = (u32)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

#ifdef KV_K
// A quantized cache's instance (kv.cuh's KV_QUANT): faq.cuh's decode
// attention (the main entry, and _rest beside the tile), and a tensor-core
// prefill tile (fatq_warp) over pages dequantized into F16 tiles.
#include "../faq.cuh"
extern "C" __global__ void __launch_bounds__(32 * FA_MAX_WARPS) NAME(const float* q, const u8* kv, const u32* io, float* y,
    u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 scale_bits) {
    faq_run(q, kv, nullptr, io, y, layer, n_layer, n_head, n_head_kv, head_dim, __uint_as_float(scale_bits), 0.f, 0, nullptr);
}

// flash_attn_split: the main kernel with a long row's keys split over
// gridDim.z blocks (fa.cuh's flash decoding across blocks), their partial
// states in the staging buffer stg (launch.go's EntrySplit).
extern "C" __global__ void __launch_bounds__(32 * FA_MAX_WARPS) CAT(NAME, _split)(const float* q, const u8* kv, const u32* io,
    float* y, u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 scale_bits, u8* stg) {
    faq_run(q, kv, nullptr, io, y, layer, n_layer, n_head, n_head_kv, head_dim, __uint_as_float(scale_bits), 0.f, 0, stg);
}

// flash_attn_rest: the main kernel for the rows that are no prompt's,
// beside flash_attn_tile, as the F16 instance's.
extern "C" __global__ void __launch_bounds__(32 * FA_MAX_WARPS) CAT(NAME, _rest)(const float* q, const u8* kv, const u32* io, float* y,
    u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 scale_bits) {
    int row = blockIdx.y;
    if (row < (int)io[IO_ROWS] && (io_row(io, row, ROW_FLAGS) & ROW_PROMPT)) return; // the request table is not written during a replay
    faq_run(q, kv, nullptr, io, y, layer, n_layer, n_head, n_head_kv, head_dim, __uint_as_float(scale_bits), 0.f, 0, nullptr);
}

// q8_deq8 is values o … o+7 of the Q8_0 block at blk (o a multiple of
// 8) as eight halves: each quant times the block's scale
// (dequantize_row_q8_0), rounded to F16 for the tensor cores.
__device__ __forceinline__ uint4 q8_deq8(const u8* blk, int o) {
    float d = __half2float(__ushort_as_half(*(const unsigned short*)blk));
    const unsigned short* qs = (const unsigned short*)(blk + 2 + o);
    u32 w[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        unsigned short b = qs[j];
        w[j] = pack_f16((float)(signed char)(b & 0xff) * d, (float)(signed char)(b >> 8) * d);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// fatq_warp is fat_warp (the F16 instance's tile, below) over a Q8_0
// cache: the warp's 16 query rows are staged in F32 (fs, the tiles'
// memory before and after the keys), each lane's fragment values rotated
// by K's runs (T-CPU's arithmetic) and rounded to F16; each page's K and V
// rows are dequantized into the F16 tiles; the outputs, normalized, are
// staged again and rotated back by V's runs. The scores and values are
// the F16 tile's (Q, P and the dequantized K and V rounded to F16 for
// mma, sums in F32), so it agrees with T-CPU's q8_0 attention as the F16
// tile with T-CPU's F16 one, to a few 1e-3.
template <int D>
__device__ __forceinline__ void fatq_warp(const float* q, const u8* kv, const u32* io, float* y, int row0, u32 layer,
    u32 n_layer, u32 n_head, u32 n_head_kv, float scale, int h, __half* kt, __half* vt, float* fs) {
    constexpr int KS = D / 16, NB = D / 8, RS = D + 8, FS = D + 1; // FS: a staged row's stride in floats, against bank conflicts
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int rows = io[IO_ROWS];
    const int r[2] = {row0 + g, row0 + g + 8};
    int pos[2], slot[2];
    bool live[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        live[i] = r[i] < rows && (io_row(io, r[i], ROW_FLAGS) & ROW_PROMPT); // the others are NAME_rest's
        pos[i] = live[i] ? (int)io_row(io, r[i], ROW_POS) : -1;
        slot[i] = live[i] ? (int)io_row(io, r[i], ROW_SLOT) : FAT_NONE;
    }
    for (int c = lane; c < 16 * D; c += 32) {
        const int rr = c / D, col = c % D, ri = row0 + rr;
        const bool ok = ri < rows && (io_row(io, ri, ROW_FLAGS) & ROW_PROMPT);
        fs[rr * FS + col] = ok ? q[((size_t)ri * n_head + h) * D + col] : 0.f;
    }
    __syncwarp();
    const float hk = KV_RK > 0 ? hadamard_scale(KV_RK) : 0.f;
    auto qv = [&](int rr, int col) -> float {
        const float* x = fs + rr * FS;
        return KV_RK > 0 ? hadamard_out(x + col / kvq_run(0) * kvq_run(0), col % kvq_run(0), KV_RK, hk) : x[col];
    };
    u32 qf[KS][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            const int c0 = 16 * ks + 2 * t;
            qf[ks][i] = pack_f16(qv(g + 8 * i, c0), qv(g + 8 * i, c0 + 1));
            qf[ks][2 + i] = pack_f16(qv(g + 8 * i, c0 + 8), qv(g + 8 * i, c0 + 9));
        }
    __syncwarp(); // fs is the tiles' memory from here on
    const u32 kv_dim = n_head_kv * D;
    const size_t rb = kvq_row_bytes(kv_dim), page_bytes = kvq_page_bytes(n_layer, kv_dim);
    const size_t head_ofs = (size_t)(layer * 2) * KV_PAGE_TOKENS * rb + (size_t)(h / (n_head / n_head_kv)) * kvq_row_bytes(D);
    const size_t vofs = (size_t)KV_PAGE_TOKENS * rb;
    const u32 pt = io[IO_PAGE_TABLE], mp = io[IO_MAX_PAGES];
    float o[NB][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
#pragma unroll
    for (int nb = 0; nb < NB; nb++) o[nb][0] = o[nb][1] = o[nb][2] = o[nb][3] = 0.f;
    for (int done = -1;;) {
        int s = FAT_NONE;
#pragma unroll
        for (int i = 0; i < 2; i++)
            if (slot[i] > done) s = min(s, slot[i]);
        for (int o2 = 16; o2 > 0; o2 >>= 1) s = min(s, __shfl_xor_sync(0xffffffffu, s, o2));
        if (s == FAT_NONE) break;
        int hi = -1;
#pragma unroll
        for (int i = 0; i < 2; i++)
            if (slot[i] == s) hi = max(hi, pos[i]);
        for (int o2 = 16; o2 > 0; o2 >>= 1) hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, o2));
        const u32* ptab = io + pt + (size_t)s * mp;
        for (int t0 = 0; t0 <= hi; t0 += KV_PAGE_TOKENS) {
            const u8* kp = kv + (size_t)ptab[t0 / KV_PAGE_TOKENS] * page_bytes + head_ofs;
            // The page's rows dequantized into the tiles, eight values
            // a lane at a time; V rows past the pass's last position (stale
            // bytes, a NaN scale included) are stored as 0.
            __syncwarp(); // the previous tile's readers are done
#pragma unroll
            for (int c = lane; c < KV_PAGE_TOKENS * (D / 8); c += 32) {
                const int kr = c / (D / 8), col = (c % (D / 8)) * 8;
                const u8* src = kp + (size_t)kr * rb + (size_t)(col / 32) * Q8_BYTES;
                *(uint4*)(kt + kr * RS + col) = q8_deq8(src, col % 32);
                *(uint4*)(vt + kr * RS + col) = t0 + kr <= hi ? q8_deq8(src + vofs, col % 32) : make_uint4(0, 0, 0, 0);
            }
            __syncwarp();
            float sc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
            for (int nb = 0; nb < 2; nb++)
#pragma unroll
                for (int ks = 0; ks < KS; ks += 2) {
                    u32 b[4];
                    ldsm4(b, kt + (8 * nb + (lane & 7)) * RS + 16 * ks + 8 * (lane >> 3));
                    mma_f16(sc[nb], qf[ks], b[0], b[1]);
                    mma_f16(sc[nb], qf[ks + 1], b[2], b[3]);
                }
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int nb = 0; nb < 2; nb++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int i = e >> 1, key = t0 + 8 * nb + 2 * t + (e & 1);
                    bool ok = slot[i] == s && key <= pos[i];
                    sc[nb][e] = ok ? sc[nb][e] * scale : -INFINITY;
                    mx[i] = fmaxf(mx[i], sc[nb][e]);
                }
            float alpha[2], sum[2] = {0.f, 0.f};
#pragma unroll
            for (int i = 0; i < 2; i++) {
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
                float mn = fmaxf(m[i], mx[i]);
                alpha[i] = mn == -INFINITY ? 1.f : expf(m[i] - mn);
                m[i] = mn;
            }
#pragma unroll
            for (int nb = 0; nb < 2; nb++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int i = e >> 1;
                    sc[nb][e] = sc[nb][e] == -INFINITY ? 0.f : expf(sc[nb][e] - m[i]);
                    sum[i] += sc[nb][e];
                }
#pragma unroll
            for (int i = 0; i < 2; i++) {
                sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 1);
                sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 2);
                l[i] = l[i] * alpha[i] + sum[i];
            }
#pragma unroll
            for (int nb = 0; nb < NB; nb++) o[nb][0] *= alpha[0], o[nb][1] *= alpha[0], o[nb][2] *= alpha[1], o[nb][3] *= alpha[1];
            u32 pa[4] = {pack_f16(sc[0][0], sc[0][1]), pack_f16(sc[0][2], sc[0][3]), pack_f16(sc[1][0], sc[1][1]),
                pack_f16(sc[1][2], sc[1][3])};
#pragma unroll
            for (int nb = 0; nb < NB; nb += 2) {
                u32 b[4];
                ldsm4t(b, vt + (8 * ((lane >> 3) & 1) + (lane & 7)) * RS + 8 * (nb + (lane >> 4)));
                mma_f16(o[nb], pa, b[0], b[1]);
                mma_f16(o[nb + 1], pa, b[2], b[3]);
            }
        }
        done = s;
    }
    // The outputs, normalized, staged in fs and rotated back by V's runs.
    __syncwarp(); // the tiles' readers are done
#pragma unroll
    for (int i = 0; i < 2; i++) {
        float inv = l[i] != 0.f ? 1.f / l[i] : 0.f;
        float* fr = fs + (g + 8 * i) * FS;
#pragma unroll
        for (int nb = 0; nb < NB; nb++) fr[8 * nb + 2 * t] = o[nb][2 * i] * inv, fr[8 * nb + 2 * t + 1] = o[nb][2 * i + 1] * inv;
    }
    __syncwarp();
    const float hv = hadamard_scale(kvq_run(1));
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (!live[i]) continue;
        const float* fr = fs + (g + 8 * i) * FS;
        float* out = y + ((size_t)r[i] * n_head + h) * D;
        for (int c = t; c < D; c += 4)
            out[c] = KV_RV > 0 ? hadamard_out(fr + c / kvq_run(1) * kvq_run(1), c % kvq_run(1), kvq_run(1), hv) : fr[c];
    }
}

// flash_attn_tile over a Q8_0 cache: the F16 instance's grid and warps,
// each warp's tiles (2 × 16 rows of 128 + 8 halves) doubling as its F32
// staging of 16 query or output rows.
extern "C" __global__ void __launch_bounds__(32 * FAT_WARPS) CAT(NAME, _tile)(const float* q, const u8* kv, const u32* io,
    float* y, u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 scale_bits) {
    dep_sync();
    int h = blockIdx.x, row0 = (blockIdx.y * FAT_WARPS + (threadIdx.x >> 5)) * 16;
    if (row0 >= (int)io[IO_ROWS] || h >= (int)n_head || head_dim % kvq_run(0) != 0 || head_dim % kvq_run(1) != 0) return;
    __shared__ __align__(16) __half tiles[FAT_WARPS][2 * KV_PAGE_TOKENS * (128 + 8)];
    int w = threadIdx.x >> 5;
    float scale = __uint_as_float(scale_bits);
    __half* kt = tiles[w];
    float* fs = (float*)tiles[w];
    if (head_dim == 64)
        fatq_warp<64>(q, kv, io, y, row0, layer, n_layer, n_head, n_head_kv, scale, h, kt, kt + KV_PAGE_TOKENS * (64 + 8), fs);
    else if (head_dim == 128)
        fatq_warp<128>(q, kv, io, y, row0, layer, n_layer, n_head, n_head_kv, scale, h, kt, kt + KV_PAGE_TOKENS * (128 + 8), fs);
}
#else
extern "C" __global__ void __launch_bounds__(32 * FA_MAX_WARPS) NAME(const float* q, const u8* kv, const u32* io, float* y,
    u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 scale_bits) {
    fa_run(q, kv, nullptr, io, y, layer, n_layer, n_head, n_head_kv, head_dim, __uint_as_float(scale_bits), 0.f, 0, nullptr);
}

// flash_attn_split is the main kernel with a long row's keys split over
// gridDim.z blocks (fa.cuh's flash decoding across blocks), their partial
// states in the staging buffer stg: launch.go's EntrySplit, for decode
// steps of few blocks.
extern "C" __global__ void __launch_bounds__(32 * FA_MAX_WARPS) CAT(NAME, _split)(const float* q, const u8* kv, const u32* io,
    float* y, u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 scale_bits, u8* stg) {
    fa_run(q, kv, nullptr, io, y, layer, n_layer, n_head, n_head_kv, head_dim, __uint_as_float(scale_bits), 0.f, 0, stg);
}

// flash_attn_rest is the main kernel for the rows that are no prompt's
// (ROW_PROMPT clear: decode rows a serving step mixes into a prefill),
// launched beside flash_attn_tile (launch.go's Launch.Rest), which takes
// the prompt rows: its warps of 16 rows take a pass over the keys per
// slot among them, sixteen passes for sixteen decode rows.
extern "C" __global__ void __launch_bounds__(32 * FA_MAX_WARPS) CAT(NAME, _rest)(const float* q, const u8* kv, const u32* io, float* y,
    u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 scale_bits) {
    int row = blockIdx.y;
    if (row < (int)io[IO_ROWS] && (io_row(io, row, ROW_FLAGS) & ROW_PROMPT)) return; // the request table is not written during a replay
    fa_run(q, kv, nullptr, io, y, layer, n_layer, n_head, n_head_kv, head_dim, __uint_as_float(scale_bits), 0.f, 0, nullptr);
}

// flash_attn_lean is the same for one query head a block, heads of at
// most 128 and blocks of at most FA_LEAN_WARPS warps, compiled for four
// such blocks a multiprocessor (64 registers a thread, where the main
// entry's every group and width take 128): launch.go picks it for decode
// steps of many blocks, which then keep twice the keys and values in
// flight.
#define FA_LEAN_WARPS 8
extern "C" __global__ void __launch_bounds__(32 * FA_LEAN_WARPS, 4) CAT(NAME, _lean)(const float* q, const u8* kv, const u32* io,
    float* y, u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 scale_bits) {
    extern __shared__ __align__(16) float fa_sm[];
    fa_block<1, 2>(fa_sm, q, kv, nullptr, io, y, layer, n_layer, n_head, n_head_kv, head_dim, __uint_as_float(scale_bits), 0.f, 0, nullptr);
}

// flash_attn_tile: prefill on tensor cores, for head widths 64 and 128
// (launch.go picks it for prefill variants of at least 64 rows). A warp
// takes 16 consecutive rows of one head; grid (heads, rows/64), FAT_WARPS
// warps a block. Per 16-key tile (one KV page, staged in the warp's shared
// memory) it forms S = Q·Kᵀ with mma.m16n8k16 (Q and K in F16, S in F32),
// keeps the online softmax in
// F32, and adds P·V with P rounded to F16 — flash attention as ggml's
// CUDA kernels do it, which differs from the F32 oracle by those two
// roundings (within the parity test's tolerance). It takes the prompt
// rows (ROW_PROMPT); the step's others are flash_attn_rest's. Rows in a
// warp's 16 that belong to different slots (a step's prompts meet there)
// take one pass over the keys per slot; a row outside the pass's slot
// sees all its scores masked and keeps its state.
template <int D>
__device__ __forceinline__ void fat_warp(const float* q, const u8* kv, const u32* io, float* y, int row0, u32 layer,
    u32 n_layer, u32 n_head, u32 n_head_kv, float scale, int h, __half* kt, __half* vt) {
    constexpr int KS = D / 16, NB = D / 8, RS = D + 8; // RS: a tile row's stride in halves, padded against bank conflicts
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int rows = io[IO_ROWS];
    // This lane's two rows (A and C fragments): row0+g and row0+g+8.
    const int r[2] = {row0 + g, row0 + g + 8};
    int pos[2], slot[2];
    bool live[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        live[i] = r[i] < rows && (io_row(io, r[i], ROW_FLAGS) & ROW_PROMPT); // the others are NAME_rest's
        pos[i] = live[i] ? (int)io_row(io, r[i], ROW_POS) : -1;
        slot[i] = live[i] ? (int)io_row(io, r[i], ROW_SLOT) : FAT_NONE;
    }
    u32 qf[KS][4];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const float* qr = q + ((size_t)min(r[i], rows - 1) * n_head + h) * D;
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            float2 a = live[i] ? *(const float2*)(qr + 16 * ks + 2 * t) : make_float2(0.f, 0.f);
            float2 b = live[i] ? *(const float2*)(qr + 16 * ks + 2 * t + 8) : make_float2(0.f, 0.f);
            qf[ks][i] = pack_f16(a.x, a.y), qf[ks][2 + i] = pack_f16(b.x, b.y);
        }
    }
    const u32 kv_dim = n_head_kv * D;
    const size_t page_bytes = (size_t)n_layer * 2 * KV_PAGE_TOKENS * kv_dim * 2;
    const size_t head_ofs = (size_t)(layer * 2) * KV_PAGE_TOKENS * kv_dim + (size_t)(h / (n_head / n_head_kv)) * D;
    const size_t vofs = (size_t)KV_PAGE_TOKENS * kv_dim;
    const u32 pt = io[IO_PAGE_TABLE], mp = io[IO_MAX_PAGES];
    float o[NB][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
#pragma unroll
    for (int nb = 0; nb < NB; nb++) o[nb][0] = o[nb][1] = o[nb][2] = o[nb][3] = 0.f;
    for (int done = -1;;) {
        // The next slot among the warp's rows, and how far its rows see.
        int s = FAT_NONE;
#pragma unroll
        for (int i = 0; i < 2; i++)
            if (slot[i] > done) s = min(s, slot[i]);
        for (int o2 = 16; o2 > 0; o2 >>= 1) s = min(s, __shfl_xor_sync(0xffffffffu, s, o2));
        if (s == FAT_NONE) break;
        int hi = -1;
#pragma unroll
        for (int i = 0; i < 2; i++)
            if (slot[i] == s) hi = max(hi, pos[i]);
        for (int o2 = 16; o2 > 0; o2 >>= 1) hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, o2));
        const u32* ptab = io + pt + (size_t)s * mp;
        for (int t0 = 0; t0 <= hi; t0 += KV_PAGE_TOKENS) {
            const __half* kp = (const __half*)(kv + (size_t)ptab[t0 / KV_PAGE_TOKENS] * page_bytes) + head_ofs;
            // The page's K and V rows into the warp's tiles, 16 bytes a
            // lane at a time. V rows past the pass's last position may be
            // stale cache bytes, NaN included, which a zero P would not
            // cancel: they are stored as 0. (Stale K only makes scores
            // that the mask replaces.)
            __syncwarp(); // the previous tile's readers are done
#pragma unroll
            for (int c = lane; c < KV_PAGE_TOKENS * (D / 8); c += 32) {
                int kr = c / (D / 8), col = (c % (D / 8)) * 8;
                const __half* src = kp + (size_t)kr * kv_dim + col;
                *(uint4*)(kt + kr * RS + col) = *(const uint4*)src;
                *(uint4*)(vt + kr * RS + col) = t0 + kr <= hi ? *(const uint4*)(src + vofs) : make_uint4(0, 0, 0, 0);
            }
            __syncwarp();
            float sc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
            for (int nb = 0; nb < 2; nb++)
#pragma unroll
                for (int ks = 0; ks < KS; ks += 2) {
                    u32 b[4]; // keys 8nb.., dimensions 16ks.. in four 8-wide pieces
                    ldsm4(b, kt + (8 * nb + (lane & 7)) * RS + 16 * ks + 8 * (lane >> 3));
                    mma_f16(sc[nb], qf[ks], b[0], b[1]);
                    mma_f16(sc[nb], qf[ks + 1], b[2], b[3]);
                }
            // Scale and mask: element e of block nb is row r[e>>1], key t0+8nb+2t+(e&1).
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int nb = 0; nb < 2; nb++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int i = e >> 1, key = t0 + 8 * nb + 2 * t + (e & 1);
                    bool ok = slot[i] == s && key <= pos[i];
                    sc[nb][e] = ok ? sc[nb][e] * scale : -INFINITY;
                    mx[i] = fmaxf(mx[i], sc[nb][e]);
                }
            float alpha[2], sum[2] = {0.f, 0.f};
#pragma unroll
            for (int i = 0; i < 2; i++) {
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
                float mn = fmaxf(m[i], mx[i]);
                alpha[i] = mn == -INFINITY ? 1.f : expf(m[i] - mn);
                m[i] = mn;
            }
#pragma unroll
            for (int nb = 0; nb < 2; nb++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int i = e >> 1;
                    sc[nb][e] = sc[nb][e] == -INFINITY ? 0.f : expf(sc[nb][e] - m[i]);
                    sum[i] += sc[nb][e];
                }
#pragma unroll
            for (int i = 0; i < 2; i++) {
                sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 1);
                sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 2);
                l[i] = l[i] * alpha[i] + sum[i];
            }
#pragma unroll
            for (int nb = 0; nb < NB; nb++) o[nb][0] *= alpha[0], o[nb][1] *= alpha[0], o[nb][2] *= alpha[1], o[nb][3] *= alpha[1];
            // P as the A fragment of P·V: keys 2t.. of block 0, then of block 1.
            u32 pa[4] = {pack_f16(sc[0][0], sc[0][1]), pack_f16(sc[0][2], sc[0][3]), pack_f16(sc[1][0], sc[1][1]),
                pack_f16(sc[1][2], sc[1][3])};
            // V's B fragments, two 8-wide column blocks at a time: keys 0-7
            // and 8-15 of each, transposed.
#pragma unroll
            for (int nb = 0; nb < NB; nb += 2) {
                u32 b[4];
                ldsm4t(b, vt + (8 * ((lane >> 3) & 1) + (lane & 7)) * RS + 8 * (nb + (lane >> 4)));
                mma_f16(o[nb], pa, b[0], b[1]);
                mma_f16(o[nb + 1], pa, b[2], b[3]);
            }
        }
        done = s;
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (!live[i]) continue;
        float inv = l[i] != 0.f ? 1.f / l[i] : 0.f;
        float* out = y + ((size_t)r[i] * n_head + h) * D;
#pragma unroll
        for (int nb = 0; nb < NB; nb++) *(float2*)(out + 8 * nb + 2 * t) = make_float2(o[nb][2 * i] * inv, o[nb][2 * i + 1] * inv);
    }
}

extern "C" __global__ void __launch_bounds__(32 * FAT_WARPS) CAT(NAME, _tile)(const float* q, const u8* kv, const u32* io,
    float* y, u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 scale_bits) {
    dep_sync();
    int h = blockIdx.x, row0 = (blockIdx.y * FAT_WARPS + (threadIdx.x >> 5)) * 16;
    if (row0 >= (int)io[IO_ROWS] || h >= (int)n_head) return;
    __shared__ __align__(16) __half kt[FAT_WARPS][KV_PAGE_TOKENS * (128 + 8)], vt[FAT_WARPS][KV_PAGE_TOKENS * (128 + 8)];
    int w = threadIdx.x >> 5;
    float scale = __uint_as_float(scale_bits);
    if (head_dim == 64) fat_warp<64>(q, kv, io, y, row0, layer, n_layer, n_head, n_head_kv, scale, h, kt[w], vt[w]);
    else if (head_dim == 128) fat_warp<128>(q, kv, io, y, row0, layer, n_layer, n_head, n_head_kv, scale, h, kt[w], vt[w]);
}
#endif
