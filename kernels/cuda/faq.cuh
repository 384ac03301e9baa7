// faq.cuh: decode attention over a quantized (Q8_0) cache, the body of
// flash_attn's and flash_attn_ext's instances for one (kv.cuh's
// KV_QUANT; family/flash_attn.cuh, family/flash_attn_ext.cuh).
#pragma once
#include "common.cuh"
#include "kv.cuh"
#include "fa.cuh"

// The arithmetic is T-CPU's attendQuant (ggml's one_chunk over a Q8_0
// cache, kernels/cpu/fattn_quant.go): the query is rotated by K's
// Walsh-Hadamard runs (KV_RK) and quantized to Q8_0 blocks, both with
// T-CPU's bits (kv.cuh's hadamard_out, and kvq_block's expressions); a
// score is the exact integer sum of each block's products (dp4a) times
// the two blocks' F16 scales, summed over the blocks in order
// (ggml_vec_dot_q8_0_q8_0's scalar form); a value row is dequantized as
// dequantize_row_q8_0 (int8 × scale) and accumulated in F32 (T-CPU's
// VKQ32). What differs from T-CPU is the order of the softmax's sums:
// each warp keeps an online softmax over its keys and the warps' states
// are merged, as in fa.cuh, where T-CPU takes the keys in one pass. The
// output is rotated back by V's runs (KV_RV) with T-CPU's arithmetic.
// The geometry is fa.cuh's (fa_group heads a block, W warps splitting the
// keys; the _split entries' ranges of a long row over blocks, merged as
// fa_block merges them), in faq_smem's shared memory.

// faq_smem is the shared memory of G heads a block, W warps and heads of
// D: [G][D] the rotated query, later the output before its rotation;
// [G][D/4] the query's Q8_0 quants, four a word; [G][D/32] its block
// scales; [G][W] each warp's maximum, sum and merge weight; [G][W][D] each
// warp's accumulators; [G] 1/sum. launch.go's faqShared is the same.
__host__ __device__ constexpr int faq_smem(int G, int W, int D) { return 4 * G * (D + D / 4 + D / 32 + 3 * W + W * D + 1); }

struct FaqArgs {
    const u8* kv;
    const u32* ptab; // the slot's page table
    size_t page_bytes, head_ofs, vofs, rb; // bytes: a page, the head's K in its page, K row to V row, a row
    int D, pos, W, first;
    float scale, softcap;
    const int* qq;   // the query's quants ([G][D/4], shared)
    const float* qd; // its block scales ([G][D/32], shared)
    __device__ __forceinline__ const u8* row(int t) const {
        return kv + (size_t)ptab[t / KV_PAGE_TOKENS] * page_bytes + head_ofs + (size_t)(t % KV_PAGE_TOKENS) * rb;
    }
};

// q8_block_load returns the scale of the Q8_0 block at p and its 32
// quants as 8 words in w. Blocks are 34 bytes, so p is only 2-byte
// aligned: 9 aligned word loads cover the block and the quants are
// shifted into place (the last load may read 2 bytes past the block,
// within the slack the tier leaves past each region).
__device__ __forceinline__ float q8_block_load(const u8* p, int* w) {
    const u32* a = (const u32*)((size_t)p & ~(size_t)3);
    u32 x[9];
#pragma unroll
    for (int i = 0; i < 9; i++) x[i] = a[i];
    u32 d;
    if (((size_t)p & 2) == 0) {
        d = x[0] & 0xffffu;
#pragma unroll
        for (int j = 0; j < 8; j++) w[j] = (int)__funnelshift_r(x[j], x[j + 1], 16);
    } else {
        d = x[0] >> 16;
#pragma unroll
        for (int j = 0; j < 8; j++) w[j] = (int)x[j + 1];
    }
    return __half2float(__ushort_as_half((unsigned short)d));
}

// faq_warp runs one warp's online softmax over its keys (fa_warp's
// chunks: ch ≤ 32 keys a chunk, a lane a key) for the G query heads the
// block serves; P2 dimension pairs a lane. A lane scores its key against
// every head; then each key's V row (its address handed round by
// shuffle) is dequantized, each lane its dimension pairs.
template <int P2, int G>
__device__ __forceinline__ void faq_warp(const FaqArgs& a, float* pm, float* pl, float2 (*acc)[P2]) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int D = a.D, nb = D / 32;
    float m[G], l[G];
#pragma unroll
    for (int g = 0; g < G; g++) {
        m[g] = -INFINITY, l[g] = 0.f;
#pragma unroll
        for (int i = 0; i < P2; i++) acc[g][i] = make_float2(0.f, 0.f);
    }
    const int ch = min(32, (a.pos - a.first + a.W) / a.W);
    for (int base = a.first + warp * ch; base <= a.pos; base += a.W * ch) {
        int t = base + lane;
        bool live = lane < ch && t <= a.pos;
        const u8* kp = a.row(min(t, a.pos));
        const int nk = min(ch, a.pos + 1 - base);
        float dot[G];
#pragma unroll
        for (int g = 0; g < G; g++) dot[g] = 0.f;
        if (live) {
            for (int b = 0; b < nb; b++) {
                int kw[8];
                float dk = q8_block_load(kp + (size_t)b * Q8_BYTES, kw);
#pragma unroll
                for (int g = 0; g < G; g++) {
                    const int* qw = a.qq + (g * D + 32 * b) / 4;
                    int s = 0;
#pragma unroll
                    for (int j = 0; j < 8; j++) s = __dp4a(kw[j], qw[j], s);
                    dot[g] = dot[g] + (float)s * (a.qd[g * nb + b] * dk);
                }
            }
        }
        float p[G];
#pragma unroll
        for (int g = 0; g < G; g++) {
            float s = -INFINITY;
            if (live) {
                s = dot[g] * a.scale;
                if (a.softcap != 0.f) s = a.softcap * (float)tanh((double)s);
            }
            float mn = fmaxf(m[g], warp_max(s)); // finite: key base ≤ pos is live
            float alpha = expf(m[g] - mn);
            p[g] = live ? expf(s - mn) : 0.f;
            l[g] = l[g] * alpha + warp_sum(p[g]);
#pragma unroll
            for (int i = 0; i < P2; i++) acc[g][i].x *= alpha, acc[g][i].y *= alpha;
            m[g] = mn;
        }
        const size_t vo = (size_t)(kp - a.kv) + a.vofs; // this lane's V row
        const u32 vlo = (u32)vo, vhi = (u32)(vo >> 32);
        for (int j = 0; j < nk; j++) {
            const u8* vp = a.kv + ((size_t)__shfl_sync(0xffffffffu, vlo, j) | ((size_t)__shfl_sync(0xffffffffu, vhi, j) << 32));
            float2 v[P2];
#pragma unroll
            for (int i = 0; i < P2; i++) {
                const int d = 64 * i + 2 * lane;
                v[i] = make_float2(0.f, 0.f);
                if (d < D) {
                    const u8* blk = vp + (size_t)(d / 32) * Q8_BYTES;
                    float dv = __half2float(__ushort_as_half(*(const unsigned short*)blk));
                    unsigned short qv = *(const unsigned short*)(blk + 2 + d % 32);
                    v[i].x = (float)(signed char)(qv & 0xff) * dv;
                    v[i].y = (float)(signed char)(qv >> 8) * dv;
                }
            }
#pragma unroll
            for (int g = 0; g < G; g++) {
                float pj = __shfl_sync(0xffffffffu, p[g], j);
#pragma unroll
                for (int i = 0; i < P2; i++) acc[g][i].x += pj * v[i].x, acc[g][i].y += pj * v[i].y;
            }
        }
    }
#pragma unroll
    for (int g = 0; g < G; g++) pm[g] = m[g], pl[g] = l[g];
}

// faq_block is the kernels' body for G query heads a block (blockIdx.x is
// the group, blockIdx.y the row, blockIdx.z the range of a split row);
// flash_attn passes softcap 0, window 0 and no sinks, every entry but
// _split no staging buffer stg (no split). Heads must be whole Q8_0
// blocks and rotation runs, at most FA_MAX_D wide (zrtc builds no other).
template <int G>
__device__ __forceinline__ void faq_block(float* sm, const float* q, const u8* kv, const float* sinks, const u32* io,
    float* y, u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, float scale, float softcap, u32 window,
    u8* stg) {
    const int W = blockDim.x >> 5, D = head_dim, nb = D / 32;
    float* qr = sm;                       // [G][D]
    int* qq = (int*)(qr + G * D);         // [G][D/4]
    float* qd = (float*)(qq + G * D / 4); // [G][D/32]
    float* wm = qd + G * nb;              // [G][W] each warp's maximum,
    float* wl = wm + G * W;               // its sum,
    float* wf = wl + G * W;               // and its weight in the merge
    float* wacc = wf + G * W;             // [G][W][D]
    float* winv = wacc + G * W * D;       // [G] 1 / the merged sum
    int row = blockIdx.y, h0 = blockIdx.x * G, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int rows = io[IO_ROWS];
    int pos = io_row(io, row, ROW_POS), slot = io_row(io, row, ROW_SLOT);
    u32 pt = io[IO_PAGE_TABLE], mp = io[IO_MAX_PAGES];
    dep_sync();
    if (row >= rows || h0 >= (int)n_head || D > FA_MAX_D || D % kvq_run(0) != 0 || D % kvq_run(1) != 0 || W > FA_MAX_WARPS) return;
    int first = window != 0 && pos + 1 > (int)window ? pos + 1 - (int)window : 0, hi = pos;
    int nch = 1; // the row's ranges (fa_split_range)
    if (stg) {
        nch = fa_split_range(first, hi, blockIdx.z, gridDim.z);
        if (nch == 0) return;
    }
    // The query, rotated by K's runs (T-CPU's bits) …
    const float* qrow = q + ((size_t)row * n_head + h0) * D;
    const float hk = KV_RK > 0 ? hadamard_scale(KV_RK) : 0.f;
    for (int i = tid; i < G * D; i += blockDim.x) {
        const int d = i % D;
        const float* qh = qrow + (size_t)(i / D) * D;
        qr[i] = KV_RK > 0 ? hadamard_out(qh + d / kvq_run(0) * kvq_run(0), d % kvq_run(0), KV_RK, hk) : qh[d];
    }
    __syncthreads();
    // … and quantized to Q8_0 blocks (T-CPU's bits), a warp a block.
    for (int b = warp; b < G * nb; b += W) {
        float v = qr[32 * b + lane];
        float amax = warp_max(fabsf(v));
        float id = amax != 0.f ? 127.f / amax : 0.f;
        ((signed char*)qq)[32 * b + lane] = (signed char)__float2int_rn(v * id);
        if (lane == 0) qd[b] = __half2float(__float2half_rn(amax / 127.f));
    }
    __syncthreads();
    FaqArgs a;
    a.kv = kv;
    a.D = D;
    a.W = W;
    a.pos = hi;
    a.scale = scale;
    a.softcap = softcap;
    a.first = first;
    const u32 kv_dim = n_head_kv * head_dim;
    const int kvh = h0 / (n_head / n_head_kv);
    a.rb = kvq_row_bytes(kv_dim);
    a.page_bytes = kvq_page_bytes(n_layer, kv_dim);
    a.ptab = io + pt + (size_t)slot * mp;
    a.head_ofs = (size_t)(layer * 2) * KV_PAGE_TOKENS * a.rb + (size_t)kvh * kvq_row_bytes(head_dim);
    a.vofs = (size_t)KV_PAGE_TOKENS * a.rb;
    a.qq = qq;
    a.qd = qd;
    float m[G], l[G];
    int p2 = (D + 63) / 64;
    if (p2 <= 1) {
        float2 acc[G][1];
        faq_warp<1, G>(a, m, l, acc);
        fa_keep<1, G>(acc, wacc, W, D);
    } else if (p2 == 2) {
        float2 acc[G][2];
        faq_warp<2, G>(a, m, l, acc);
        fa_keep<2, G>(acc, wacc, W, D);
    } else if constexpr (G <= 2) { // fa_group: wider heads come in groups of at most 2
        float2 acc[G][FA_P2];
        faq_warp<FA_P2, G>(a, m, l, acc);
        fa_keep<FA_P2, G>(acc, wacc, W, D);
    }
#pragma unroll
    for (int g = 0; g < G; g++)
        if (lane == 0) wm[g * W + warp] = m[g], wl[g * W + warp] = l[g];
    __syncthreads();
    // The merge, as fa_block's: each warp's state weighs exp(its maximum −
    // the overall one), the sink's too; a range of a split row stores its
    // state for fa_split_merge, as fa_block's.
    float* part = nch > 1 ? fa_part(stg, row, blockIdx.z, G, D) : nullptr;
    if (warp < G) {
        const int g = warp;
        float mw = lane < W ? wm[g * W + lane] : -INFINITY;
        float M = warp_max(mw);
        if (sinks && !part) M = fmaxf(M, sinks[h0 + g]);
        float f = mw == -INFINITY ? 0.f : expf(mw - M);
        if (lane < W) wf[g * W + lane] = f;
        float L = warp_sum(lane < W ? wl[g * W + lane] * f : 0.f);
        if (sinks && !part) L += expf(sinks[h0 + g] - M);
        if (lane == 0) winv[g] = L != 0.f ? 1.f / L : 0.f;
        if (lane == 0 && part) part[g] = M, part[G + g] = L;
    }
    __syncthreads();
    float* yr = y + ((size_t)row * n_head + h0) * D; // the group's outputs, head g's at g·D
    for (int i = tid; i < G * D; i += blockDim.x) {
        const int g = i / D, d = i % D;
        const float* f = wf + g * W;
        const float* acc = wacc + (size_t)g * W * D + d;
        float o = 0.f;
#pragma unroll 8
        for (int w = 0; w < W; w++)
            if (f[w] != 0.f) o += acc[(size_t)w * D] * f[w];
        if (part) {
            part[2 * G + i] = o;
            continue;
        }
        o = o * winv[g];
        if (KV_RV > 0) qr[i] = o;
        else yr[i] = o;
    }
    if (part) {
        if (!fa_split_last(stg, row, nch)) return;
        fa_split_merge<G>(stg, row, nch, D, sinks, h0, wacc, [&](int i, float o) {
            if (KV_RV > 0) qr[i] = o;
            else yr[i] = o;
        });
    }
    if (KV_RV > 0) {
        // The output rotated back by V's runs (T-CPU's arithmetic).
        __syncthreads();
        const float hv = hadamard_scale(kvq_run(1));
        for (int i = tid; i < G * D; i += blockDim.x) {
            const int g = i / D, d = i % D;
            y[((size_t)row * n_head + h0 + g) * D + d] = hadamard_out(qr + g * D + d / kvq_run(1) * kvq_run(1), d % kvq_run(1), kvq_run(1), hv);
        }
    }
}

// faq_run is the kernels' body: blocks of fa_group query heads, W warps
// each, in faq_smem's dynamic shared memory; stg is the _split entries'
// staging buffer (nullptr: no split).
__device__ __forceinline__ void faq_run(const float* q, const u8* kv, const float* sinks, const u32* io, float* y,
    u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, float scale, float softcap, u32 window, u8* stg) {
    extern __shared__ __align__(16) float fa_sm[];
    switch (fa_group(n_head, n_head_kv, head_dim)) {
    case 4: faq_block<4>(fa_sm, q, kv, sinks, io, y, layer, n_layer, n_head, n_head_kv, head_dim, scale, softcap, window, stg); break;
    case 3: faq_block<3>(fa_sm, q, kv, sinks, io, y, layer, n_layer, n_head, n_head_kv, head_dim, scale, softcap, window, stg); break;
    case 2: faq_block<2>(fa_sm, q, kv, sinks, io, y, layer, n_layer, n_head, n_head_kv, head_dim, scale, softcap, window, stg); break;
    default: faq_block<1>(fa_sm, q, kv, sinks, io, y, layer, n_layer, n_head, n_head_kv, head_dim, scale, softcap, window, stg);
    }
}
