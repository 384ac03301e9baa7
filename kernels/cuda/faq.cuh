// faq.cuh: decode attention over a quantized (Q8_0 or FP8) cache, the body of
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

// The staged walk (faq_warp_staged) of heads of 128 and 256 copies each
// chunk's K and V rows into the warp's stages past faq_smem's layout
// (from faq_stage_at, 16-byte aligned): FAQ_STAGE bytes a stage, 2·(32/P2)
// rows of 68·P2 bytes. The kernel takes as many stages a warp (1 to 4,
// else 0: the register walk) as its dynamic shared memory holds
// (faq_block), so launch.go alone decides (faqStaged).
#define FAQ_STAGE 4352
__host__ __device__ constexpr int faq_stage_at(int G, int W, int D) { return (faq_smem(G, W, D) + 15) & ~15; }
__host__ __device__ constexpr bool faq_staged(int D) { return D == 128 || D == 256; }

struct FaqArgs : FaKeys { // FaKeys' offsets in bytes
    size_t rb;       // a row's bytes
    const int* qq;   // the query's quants ([G][D/4], shared)
    const float* qd; // its block scales ([G][D/32], shared)
    const float* qf; // the query in F32 ([G][D], shared; an FP8 cache's walk)
    __device__ __forceinline__ const u8* row(int t) const {
        return kv + (size_t)ptab[t / KV_PAGE_TOKENS] * page_bytes + head_ofs + (size_t)(t % KV_PAGE_TOKENS) * rb;
    }
};

#ifdef KV_FP8
// Over an FP8 cache (kv.cuh's KV_FP8) the arithmetic is T-CPU's
// attendQuant with FP8 rows (dotFP8Rows, madFP8Rows), which is zrt's own
// and the reference: the query stays F32, and each V value is decoded to
// T-CPU's F32 value (code · scale: kv.cuh's e4m3x2, times 256·scale) and
// accumulated in F32. A key's score is the sum of each block's products of
// the query with the codes' values over 256 (exact), fused, times the
// block's 256·scale: T-CPU's products of the decoded values, summed in
// another order and rounded otherwise (about 1e-7 of the score). The
// blocks of a key are summed in block order by shuffle (T-CPU: one pass
// over the head), and the softmax is fa.cuh's online one per warp,
// merged. The geometry is fa.cuh's; a head is P2 blocks, so a key's K
// row is P2 lanes (NK = 32/P2 keys a chunk, one pass), and a lane's V
// dimension pairs 64·i + 2·lane are in block i.

// faf_chunk scores the chunk's nk keys and adds their values: row(j) is
// key j's K row of the head (4-byte aligned), its V row vofs bytes past.
// A head of D < 64·P2 (192 in the lanes of 256) leaves lanes and pairs
// of the blocks past its nb without work.
template <int P2, int G, typename Row>
__device__ __forceinline__ void faf_chunk(const FaqArgs& a, int nk, float* m, float* l, float2 (*acc)[P2], Row row, size_t vofs) {
    constexpr int NK = 32 / P2, LP = P2;
    const int lane = threadIdx.x & 31, part = lane % LP, kq = lane / LP, D = a.D, nb = D / 64;
    const bool live = lane < nk;
    float pr[G];
#pragma unroll
    for (int g = 0; g < G; g++) pr[g] = 0.f;
    if (kq < nk && part < nb) {
        // This lane's block part of key kq: its scale and 16 words of codes.
        const u32* w = (const u32*)(row(kq) + (size_t)part * KVQ_BB);
        u32 c[17];
#pragma unroll
        for (int i = 0; i < 17; i++) c[i] = w[i];
#pragma unroll
        for (int i = 0; i < 16; i++) {
            const float2 lo = e4m3x2(c[1 + i], 0x4140), hi = e4m3x2(c[1 + i], 0x4342);
#pragma unroll
            for (int g = 0; g < G; g++) {
                const float4 qv = *(const float4*)(a.qf + g * D + 64 * part + 4 * i); // 16-byte aligned: D is whole blocks
                pr[g] = __fmaf_rn(qv.x, lo.x, pr[g]), pr[g] = __fmaf_rn(qv.y, lo.y, pr[g]);
                pr[g] = __fmaf_rn(qv.z, hi.x, pr[g]), pr[g] = __fmaf_rn(qv.w, hi.y, pr[g]);
            }
        }
        const float sc256 = __fmul_rn(__uint_as_float(c[0]), 256.f);
#pragma unroll
        for (int g = 0; g < G; g++) pr[g] = __fmul_rn(pr[g], sc256);
    }
    // A key's blocks summed in order; lane j takes key j's score.
    float dot[G];
#pragma unroll
    for (int g = 0; g < G; g++) {
        float t = 0.f;
#pragma unroll
        for (int b = 0; b < LP; b++) {
            if (b >= nb) break;
            t = t + __shfl_sync(0xffffffffu, pr[g], (lane % NK) * LP + b);
        }
        dot[g] = t;
    }
    float p[G];
    fa_weigh<P2, G>(dot, live, a.scale, a.softcap, m, l, acc, p);
#pragma unroll
    for (int j = 0; j < NK; j++) {
        if (j >= nk) break;
        const u8* vp = row(j) + vofs;
        float2 v[P2];
#pragma unroll
        for (int i = 0; i < P2; i++) {
            v[i] = make_float2(0.f, 0.f);
            if (i >= nb) continue;
            const u8* blk = vp + (size_t)i * KVQ_BB;
            const float sc256 = __fmul_rn(*(const float*)blk, 256.f);
            const float2 f = e4m3x2(*(const unsigned short*)(blk + 4 + 2 * lane), 0x4140);
            v[i].x = __fmul_rn(f.x, sc256);
            v[i].y = __fmul_rn(f.y, sc256);
        }
        fa_add_v<P2, G>(acc, p, j, v);
    }
}

// fa_warp over an FP8 cache (fa_warps calls it for FaqArgs): for heads of
// 128 and 256 with stages, the chunks' rows copied into the warp's stages
// (fa_stage_walk, as faq_warp_staged: an FP8 row of a head is as many
// bytes as a Q8_0 one, 68·P2, so the stages and launch.go's sizes are the
// Q8_0 cache's), else read from the cache; the same arithmetic (the same
// bits) either way.
template <int P2, int G, int S = 1>
__device__ __forceinline__ void fa_warp(const FaqArgs& a, float* pm, float* pl, float2 (*acc)[P2]) {
    constexpr int NK = 32 / P2, R = P2 * KVQ_BB;
    const int warp = threadIdx.x >> 5;
    float m[G], l[G];
    const int ch = min(NK, fa_start<P2, G>(a, m, l, acc)); // chunks of ch ≤ NK keys
    bool staged = false;
    if constexpr (P2 == 2 || P2 == 4) {
        static_assert(2 * NK * R == FAQ_STAGE, "a chunk's rows fill a stage");
        if (a.D == 64 * P2 && a.nst > 0) {
            staged = true;
            auto fetch = [&](int base, u8* st) {
                fa_stage_copy<NK, R, 8>(a, a.head_ofs, a.rb, a.vofs, base, min(ch, a.pos + 1 - base), st,
                    [&](int r, int c) { return 8 * (r * (R / 8) + c); });
            };
            fa_stage_walk<FAQ_STAGE>(a, ch, fetch, [&](int base, int nk, const u8* st) {
                faf_chunk<P2, G>(a, nk, m, l, acc, [&](int j) { return st + (size_t)j * R; }, (size_t)NK * R);
            });
        }
    }
    if (!staged)
        for (int base = a.first + warp * ch; base <= a.pos; base += a.W * ch)
            faf_chunk<P2, G>(a, min(ch, a.pos + 1 - base), m, l, acc, [&](int j) { return a.row(base + j); }, a.vofs);
#pragma unroll
    for (int g = 0; g < G; g++) pm[g] = m[g], pl[g] = l[g];
}
#else
// q8_block_raw loads the Q8_0 block at p as the 9 aligned words that
// cover it, and q8_block_unpack returns its scale and its 32 quants as 8
// words in w: blocks are 34 bytes, so p is only 2-byte aligned, and the
// quants are shifted into place (the last load may read 2 bytes past the
// block, within the slack the tier leaves past each region). Apart, so
// that a warp issues all its loads before it waits on any.
__device__ __forceinline__ void q8_block_raw(const u8* p, u32* x) {
    const u32* a = (const u32*)((size_t)p & ~(size_t)3);
#pragma unroll
    for (int i = 0; i < 9; i++) x[i] = a[i];
}
__device__ __forceinline__ float q8_block_unpack(const u8* p, const u32* x, int* w) {
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

// fa_warp over a Q8_0 cache runs one warp's online softmax over its keys
// (the F16 fa_warp's chunks, of at most NK = 32/P2 keys) for the G query
// heads the block serves; P2 dimension pairs a lane. fa_warps calls it
// for FaqArgs. Every load of a chunk is issued
// before any is used (one memory round trip a chunk, as fa_warp's): its
// K rows, LP = 2·P2 lanes a key, a lane a Q8_0 block (a head of at most
// 64·P2 has at most 2·P2), in two passes of 32/LP keys; and its V rows,
// each lane its dimension pairs, a pair's scale and quants packed in a
// word. A key's score is its blocks' products summed in block order by
// shuffle (T-CPU's order: the bits of a lane walking its key's blocks,
// which made four round trips a chunk for K and one a key for V, and
// held the llama 7B shape's q8_0 decode at depth 32768 to 60% of its F16
// speed). The V rows come in S batches, as fa_warp's (fa_batches). Each
// lane finds the cache row of the chunk's key lane once and hands it to
// the others by shuffle.
template <int P2, int G, int S = 1>
__device__ __forceinline__ void faq_warp_regs(const FaqArgs& a, float* pm, float* pl, float2 (*acc)[P2]) {
    constexpr int NK = 32 / P2, LP = 2 * P2, KPP = 32 / LP, NP = NK / KPP, VB = NK / S;
    static_assert(NP * KPP == NK && NK <= 32 && NK % S == 0, "a chunk's keys are a warp's lanes");
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int D = a.D, nb = D / 32;
    float m[G], l[G];
    const int ch = min(NK, fa_start<P2, G>(a, m, l, acc)); // chunks of ch ≤ NK keys
    const int part = lane % LP, kq = lane / LP; // this lane's block of key kq of each pass
    for (int base = a.first + warp * ch; base <= a.pos; base += a.W * ch) {
        const int nk = min(ch, a.pos + 1 - base);
        const bool live = lane < nk;
        const size_t ko = (size_t)(a.row(base + min(lane, nk - 1)) - a.kv); // key lane's K row
        const u32 klo = (u32)ko, khi = (u32)(ko >> 32);
        // rowof is key j's K row (every lane calls it: a shuffle).
        auto rowof = [&](int j) {
            return a.kv + ((size_t)__shfl_sync(0xffffffffu, klo, j) | ((size_t)__shfl_sync(0xffffffffu, khi, j) << 32));
        };
        // The chunk's loads: block part of key KPP·pp + kq, each pass pp …
        u32 kr[NP][9];
        const u8* kb[NP];
#pragma unroll
        for (int pp = 0; pp < NP; pp++) {
            kb[pp] = rowof(KPP * pp + kq) + (size_t)part * Q8_BYTES;
            if (KPP * pp + kq < nk && part < nb) q8_block_raw(kb[pp], kr[pp]);
        }
        // … and the V rows' dimension pairs (batch 0 now, the others of
        // S after the scores): the scale in the low half of a word, the
        // two quants in the high; rows past the chunk's last key (stale
        // bytes, NaN scales perhaps) are not read.
        u32 vr[VB][P2];
        auto vload = [&](int b) {
#pragma unroll
            for (int u = 0; u < VB; u++) {
                const int j = VB * b + u;
                const u8* vp = rowof(j) + a.vofs;
#pragma unroll
                for (int i = 0; i < P2; i++) {
                    const int d = 64 * i + 2 * lane;
                    vr[u][i] = 0;
                    if (j >= nk || d >= D) continue;
                    const u8* blk = vp + (size_t)(d / 32) * Q8_BYTES;
                    vr[u][i] = (u32)*(const unsigned short*)blk | (u32)*(const unsigned short*)(blk + 2 + d % 32) << 16;
                }
            }
        };
        vload(0);
        float dot[G];
#pragma unroll
        for (int g = 0; g < G; g++) dot[g] = 0.f;
#pragma unroll
        for (int pp = 0; pp < NP; pp++) {
            // This lane's block's product for each head: the exact
            // integer sum (dp4a) times the two blocks' scales …
            float pr[G];
#pragma unroll
            for (int g = 0; g < G; g++) pr[g] = 0.f;
            if (KPP * pp + kq < nk && part < nb) {
                int kw[8];
                const float dk = q8_block_unpack(kb[pp], kr[pp], kw);
#pragma unroll
                for (int g = 0; g < G; g++) {
                    const int* qw = a.qq + (g * D + 32 * part) / 4;
                    int s = 0;
#pragma unroll
                    for (int j = 0; j < 8; j++) s = __dp4a(kw[j], qw[j], s);
                    pr[g] = (float)s * (a.qd[g * nb + part] * dk);
                }
            }
            // … summed over the key's blocks in order, which lane j of
            // the pass's keys takes.
#pragma unroll
            for (int g = 0; g < G; g++) {
                float t = 0.f;
#pragma unroll
                for (int b = 0; b < LP; b++) {
                    if (b >= nb) break;
                    t = t + __shfl_sync(0xffffffffu, pr[g], (lane % KPP) * LP + b);
                }
                if (lane / KPP == pp) dot[g] = t;
            }
        }
        float p[G];
        fa_weigh<P2, G>(dot, live, a.scale, a.softcap, m, l, acc, p);
        // Each V row dequantized (dequantize_row_q8_0: int8 × scale) and
        // accumulated in F32.
#pragma unroll
        for (int b = 0; b < S; b++) {
            if (VB * b >= nk) break;
            if (b > 0) vload(b);
#pragma unroll
            for (int u = 0; u < VB; u++) {
                const int j = VB * b + u;
                if (j >= nk) break;
                float2 v[P2];
#pragma unroll
                for (int i = 0; i < P2; i++) {
                    const float dv = __half2float(__ushort_as_half((unsigned short)(vr[u][i] & 0xffffu)));
                    v[i].x = (float)(signed char)((vr[u][i] >> 16) & 0xff) * dv;
                    v[i].y = (float)(signed char)(vr[u][i] >> 24) * dv;
                }
                fa_add_v<P2, G>(acc, p, j, v);
            }
        }
    }
#pragma unroll
    for (int g = 0; g < G; g++) pm[g] = m[g], pl[g] = l[g];
}

// q8_i2f is the int8 quant in byte sel & 3 of w as a float, exactly
// (float)(signed char): the byte plus 128 set into the mantissa of 2^23,
// less 2^23 + 128 (a byte permute and an add, where the conversion
// instruction runs at a fraction of their rate). sel is a __byte_perm
// selector: the byte, two zero bytes, then 0x4b.
__device__ __forceinline__ float q8_i2f(u32 w, u32 sel) {
    return __int_as_float((int)__byte_perm(w ^ 0x8080u, 0x4b000000u, sel)) - 8388736.f;
}

// faq_warp_staged is fa_warp over a Q8_0 cache for heads of D = 64·P2
// (128 or 256: rows of 68·P2 bytes, 8-byte aligned), with the register
// walk's arithmetic in the same order (the same bits) but its loads made
// otherwise: the warp copies a chunk's K rows and V rows into its stage in
// shared memory with cp.async, 8 bytes a lane, consecutive lanes taking
// consecutive pieces (each copy instruction covers 256 bytes of one or two
// rows: fa_stage_copy, in fa.cuh's fa_stage_walk), and reads the blocks
// and the value pairs from there. The
// register walk's loads of 4 and 2 bytes, each warp instruction touching
// eight keys' rows, made about 80 load instructions a chunk against the
// 17 copies here; and with more than one stage the copies of the chunks
// ahead go out before this chunk's arithmetic (fa_stage_walk's ring). A
// chunk's ≤ NK ≤ 16 keys lie in at most two pages. K row j is at j·R of
// the stage, V row j at (NK + j)·R.
template <int P2, int G>
__device__ __forceinline__ void faq_warp_staged(const FaqArgs& a, float* pm, float* pl, float2 (*acc)[P2]) {
    constexpr int NK = 32 / P2, LP = 2 * P2, KPP = 32 / LP, NP = NK / KPP;
    constexpr int D = 64 * P2, NB = D / 32, R = NB * Q8_BYTES;
    static_assert(P2 == 2 || P2 == 4, "heads of 128 or 256");
    static_assert(NP * KPP == NK && LP == NB && 2 * NK * R == FAQ_STAGE, "a chunk's rows fill a stage");
    const int lane = threadIdx.x & 31;
    float m[G], l[G];
    const int ch = min(NK, fa_start<P2, G>(a, m, l, acc)); // chunks of ch ≤ NK keys
    const int part = lane % LP, kq = lane / LP; // this lane's block of key kq of each pass
    auto fetch = [&](int base, u8* st) {
        fa_stage_copy<NK, R, 8>(a, a.head_ofs, a.rb, a.vofs, base, min(ch, a.pos + 1 - base), st,
            [&](int r, int c) { return 8 * (r * (R / 8) + c); });
    };
    fa_stage_walk<FAQ_STAGE>(a, ch, fetch, [&](int base, int nk, const u8* st) {
        const bool live = lane < nk;
        float dot[G];
#pragma unroll
        for (int g = 0; g < G; g++) dot[g] = 0.f;
#pragma unroll
        for (int pp = 0; pp < NP; pp++) {
            // The register walk's products and sums (same order, same bits).
            float pr[G];
#pragma unroll
            for (int g = 0; g < G; g++) pr[g] = 0.f;
            if (KPP * pp + kq < nk) {
                const u8* kb = st + (KPP * pp + kq) * R + part * Q8_BYTES;
                u32 kr[9];
                int kw[8];
                q8_block_raw(kb, kr);
                const float dk = q8_block_unpack(kb, kr, kw);
#pragma unroll
                for (int g = 0; g < G; g++) {
                    const int* qw = a.qq + (g * D + 32 * part) / 4;
                    int sum = 0;
#pragma unroll
                    for (int j = 0; j < 8; j++) sum = __dp4a(kw[j], qw[j], sum);
                    pr[g] = (float)sum * (a.qd[g * NB + part] * dk);
                }
            }
#pragma unroll
            for (int g = 0; g < G; g++) {
                float t = 0.f;
#pragma unroll
                for (int b = 0; b < LP; b++) t = t + __shfl_sync(0xffffffffu, pr[g], (lane % KPP) * LP + b);
                if (lane / KPP == pp) dot[g] = t;
            }
        }
        float p[G];
        fa_weigh<P2, G>(dot, live, a.scale, a.softcap, m, l, acc, p);
#pragma unroll
        for (int j = 0; j < NK; j++) {
            if (j >= nk) break;
            const u8* vp = st + (NK + j) * R;
            float2 v[P2];
#pragma unroll
            for (int i = 0; i < P2; i++) {
                const int d = 64 * i + 2 * lane;
                const u8* blk = vp + (d / 32) * Q8_BYTES;
                const float dv = __half2float(__ushort_as_half(*(const unsigned short*)blk));
                const u32 qv = *(const unsigned short*)(blk + 2 + d % 32);
                v[i].x = q8_i2f(qv, 0x7440) * dv;
                v[i].y = q8_i2f(qv, 0x7441) * dv;
            }
            fa_add_v<P2, G>(acc, p, j, v);
        }
    });
#pragma unroll
    for (int g = 0; g < G; g++) pm[g] = m[g], pl[g] = l[g];
}

// fa_warp over a Q8_0 cache (fa_warps calls it for FaqArgs): the staged
// walk where the head's rows suit it and the block has stages, else the
// register walk.
template <int P2, int G, int S = 1>
__device__ __forceinline__ void fa_warp(const FaqArgs& a, float* pm, float* pl, float2 (*acc)[P2]) {
    if constexpr (P2 == 2 || P2 == 4) {
        if (a.D == 64 * P2 && a.nst > 0) {
            faq_warp_staged<P2, G>(a, pm, pl, acc);
            return;
        }
    }
    faq_warp_regs<P2, G, S>(a, pm, pl, acc);
}

#endif // KV_FP8

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
    float* ws = qd + G * nb;              // the warps' states (fa_merge's)
    int row = blockIdx.y, h0 = blockIdx.x * G, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int rows = io[IO_ROWS];
    int pos = io_row(io, row, ROW_POS), slot = io_row(io, row, ROW_SLOT);
    u32 pt = io[IO_PAGE_TABLE], mp = io[IO_MAX_PAGES];
    dep_sync();
    if (row >= rows || h0 >= (int)n_head || D > FA_MAX_D || D % kvq_run(0) != 0 || D % kvq_run(1) != 0 || W > FA_MAX_WARPS) return;
    FaqArgs a;
    const int nch = fa_keys(a, kv, io + pt + (size_t)slot * mp, D, W, scale, softcap, window, pos, stg); // the row's ranges
    if (nch == 0) return;
    // The query, rotated by K's runs (T-CPU's bits) …
    const float* qrow = q + ((size_t)row * n_head + h0) * D;
    const float hk = KV_RK > 0 ? hadamard_scale(KV_RK) : 0.f;
    for (int i = tid; i < G * D; i += blockDim.x) {
        const int d = i % D;
        const float* qh = qrow + (size_t)(i / D) * D;
        qr[i] = KV_RK > 0 ? hadamard_out(qh + d / kvq_run(0) * kvq_run(0), d % kvq_run(0), KV_RK, hk) : qh[d];
    }
    __syncthreads();
#ifndef KV_FP8
    // … and quantized to Q8_0 blocks (T-CPU's bits), a warp a block (an
    // FP8 cache's walk reads the query in F32, as T-CPU).
    for (int b = warp; b < G * nb; b += W) {
        float v = qr[32 * b + lane];
        float amax = warp_max(fabsf(v));
        float id = amax != 0.f ? 127.f / amax : 0.f;
        ((signed char*)qq)[32 * b + lane] = (signed char)__float2int_rn(v * id);
        if (lane == 0) qd[b] = __half2float(__float2half_rn(amax / 127.f));
    }
    __syncthreads();
#endif
    const u32 kv_dim = n_head_kv * head_dim;
    const int kvh = h0 / (n_head / n_head_kv);
    a.rb = kvq_row_bytes(kv_dim);
    a.page_bytes = kvq_page_bytes(n_layer, kv_dim);
    a.head_ofs = (size_t)(layer * 2) * KV_PAGE_TOKENS * a.rb + (size_t)kvh * kvq_row_bytes(head_dim);
    a.vofs = (size_t)KV_PAGE_TOKENS * a.rb;
    a.qq = qq;
    a.qd = qd;
    a.qf = qr;
    // The warps' stages: as many as the block's shared memory holds
    // (launch.go's faqStaged), past faq_smem's layout.
    fa_stages<FAQ_STAGE>(a, (u8*)sm, faq_stage_at(G, W, D), faq_staged(D));
    fa_warps<G, FA_P2>(a, ws);
    // The merge, as fa_block's; a range of a split row stores its state
    // for fa_split_merge, and only the last range's block goes on.
    float* yr = y + ((size_t)row * n_head + h0) * D; // the group's outputs, head g's at g·D
    auto out = [&](int i, float o) {
        if (KV_RV > 0) qr[i] = o;
        else yr[i] = o;
    };
    if (!fa_merge<G>(ws, W, D, sinks, h0, stg, row, nch, out)) return;
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
    fa_grouped(n_head, n_head_kv, head_dim, [&](auto grp) {
        faq_block<decltype(grp)::G>(fa_sm, q, kv, sinks, io, y, layer, n_layer, n_head, n_head_kv, head_dim, scale, softcap, window, stg);
    });
}
